"""`make bench`: run every benchmark section and write BENCHMARKS.md.

Each module in SECTIONS has `run(quick: bool) -> str`, returning a Markdown section (a heading,
the commands to reproduce, a table). `python -m benchmarks.run --only forecast` runs one section.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib
import platform
import sys
import time

SECTIONS = [
    "forecast",
    "enforcer",
    "colocation",
    "serving",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", help="comma-separated section modules to run")
    ap.add_argument("--quick", action="store_true", help="smaller suites, for a smoke run")
    ap.add_argument("--out", default="BENCHMARKS.md")
    a = ap.parse_args(argv)
    names = a.only.split(",") if a.only else SECTIONS
    parts = [
        "# Tidewise benchmarks\n",
        f"Measured by `make bench` on {dt.date.today()} ({platform.machine()}, {platform.python_version()}, "
        "2 cores / 24 GiB). Each section says how to reproduce it.\n",
    ]
    for name in names:
        t = time.perf_counter()
        print(f"benchmark {name} ...", file=sys.stderr, flush=True)
        parts.append(importlib.import_module(f"benchmarks.{name}").run(a.quick))
        print(f"benchmark {name}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    from predictor.atomic import write_text_atomic

    write_text_atomic(a.out, "\n".join(parts))
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
