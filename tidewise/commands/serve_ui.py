"""`tidewise serve --ui`: the flags, settings and start of the live page (autoscaler/ui/,
docs/serve-ui.md), kept beside serve.py. The page runs only with the loop running forever."""
from __future__ import annotations

import argparse
import sys
from typing import Any

DEFAULT = "127.0.0.1:8088"


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ui", action="store_true",
                   help="also serve a read-only live page of the latest run's decisions per namespace and workload "
                        "(docs/serve-ui.md; off by default)")
    p.add_argument("--ui-address", metavar="HOST:PORT",
                   help=f"where the --ui page listens (default {DEFAULT}: this machine only; in a cluster use "
                        f"kubectl port-forward)")


def ui_settings(args: argparse.Namespace, section: dict | None) -> Any:  # -> UiSettings
    from autoscaler.settings import UiSettings
    from tidewise.config import settings_from

    return settings_from(UiSettings, section, "serve.ui", enabled=True if getattr(args, "ui", False) else None,
                         address=getattr(args, "ui_address", None))


def listen_address(args: argparse.Namespace, settings: Any) -> tuple[str, int] | None:
    """(host, port) of the page, or None when it is off; a usage mistake is exit 2 (InputError)."""
    from contracts.errors import InputError
    from contracts.http_endpoint import parse_listen_address

    ui = settings.ui
    if getattr(args, "ui_address", None) and not ui.enabled:
        raise InputError("--ui-address is only used with --ui")
    if not ui.enabled:
        return None
    if getattr(args, "once", False):
        raise InputError("--ui shows the decisions while serve runs: drop --once (or drop --ui)")
    r = ui.refresh_seconds
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise InputError(f"config section 'serve.ui': refresh_seconds {r!r}: a whole number of seconds, at least 1")
    try:
        host, port = parse_listen_address(str(ui.address))
    except ValueError as exc:
        raise InputError(f"--ui-address {exc}") from None
    if port == 0:
        raise InputError(f"--ui-address {ui.address}: port 0 is not a page; give a port (default {DEFAULT})")
    return host, port


def start(args: argparse.Namespace, loop: Any, sink: Any) -> Any:  # -> UiServer | None
    """The page's server, started and told of every run; None when --ui is off."""
    from autoscaler.ui.server import UiServer
    from autoscaler.ui.snapshot import sink_mode
    from contracts.errors import InputError

    where = listen_address(args, loop.settings)
    if where is None:
        return None
    host, port = where
    try:
        server = UiServer(host, port, sink_mode(sink), loop.settings.ui.refresh_seconds).start()
    except OSError as exc:
        raise InputError(f"--ui-address {host}:{port}: cannot listen ({exc.strerror or exc}); "
                         f"use a free port and an address of this machine") from None
    loop.observers.append(server.observe)
    shown = f"[{host}]" if ":" in host else host
    print(f"tidewise serve: live page on http://{shown}:{server.port}/ (read-only)", file=sys.stderr)
    return server
