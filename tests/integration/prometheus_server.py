"""Start a real Prometheus on 127.0.0.1 with history backfilled by promtool (DESIGN.md).

`backfill(openmetrics_path, data_dir)` runs `promtool tsdb create-blocks-from openmetrics`;
`PrometheusServer(data_dir)` runs `prometheus` as a child process on a free port and always stops it.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request


def require(binary: str) -> str:
    path = shutil.which(binary)
    if not path:
        raise RuntimeError(f"{binary} is not installed: `make test` installs the Debian package prometheus "
                           "(apt-get install prometheus)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backfill(openmetrics_path: str, data_dir: str) -> None:
    os.makedirs(data_dir, exist_ok=True)
    done = subprocess.run([require("promtool"), "tsdb", "create-blocks-from", "openmetrics",
                           "--max-block-duration=72h", openmetrics_path, data_dir],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        # promtool's own words ("duplicate sample", "out of order") say what is wrong with the
        # generated history; a bare CalledProcessError would hide them
        raise RuntimeError(f"promtool backfill of {openmetrics_path} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")


class PrometheusServer:
    def __init__(self, data_dir: str, port: int | None = None):
        self.data_dir = data_dir
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> "PrometheusServer":
        config = os.path.join(self.data_dir, "..", "prometheus.yml")
        with open(config, "w") as fh:
            fh.write("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
        self.log = open(os.path.join(self.data_dir, "..", "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            [require("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={self.data_dir}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=36500d",
             "--web.enable-lifecycle"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"prometheus on {self.url} was not ready within {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "log", None):
            self.log.close()

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
