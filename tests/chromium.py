"""Open a page in headless Debian Chromium (installed by `make test`), read its console, and
check that a screenshot shows rendered plots."""
from __future__ import annotations

import os
import shutil
import subprocess

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def screenshot(url: str, shot: str, profile: str) -> str:
    """Render `url` to the PNG `shot`; returns Chromium's stderr (console messages included)."""
    if not os.path.exists(CHROMIUM):
        raise RuntimeError("Debian chromium is not installed: `make test` installs it (make system-deps)")
    r = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         "--enable-logging=stderr", "--v=0", "--window-size=1280,2400", f"--screenshot={shot}", url],
        capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stderr


def console_errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "CONSOLE" in ln or "Failed to load resource" in ln]


def plot_pixels(shot: str) -> tuple[float, int]:
    """(share of non-white pixels, count of clearly blue pixels) of a screenshot."""
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)[:, :, :3]
    non_white = float((img < 0.95).any(axis=2).mean())
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    return non_white, int(((b > r + 0.15) & (b > g + 0.05)).sum())
