"""`make bench`: run every benchmark section and write BENCHMARKS.md.

Each module in SECTIONS has `run(quick: bool) -> str`, returning a Markdown section (a heading,
the commands to reproduce, a table). `python -m benchmarks.run --only forecast` reruns one
section and replaces just that section in the existing file, keeping the others as measured.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import platform
import re
import sys
import time

SECTIONS = [
    "forecast",
    "enforcer",
    "colocation",
    "serving",
    "extender",
    "tidal",
    "tidal_serve",
    "replay",
    "dask",
    "tide",
    "rebalance",
]
MODULES = {"dask": "dask_scale"}  # section -> module, where the module is not named after its section
MARK = "<!-- section: {} -->"


def split_sections(text: str) -> dict[str, str]:
    """name -> the section's text, from a BENCHMARKS.md written by this runner."""
    found = list(re.finditer(r"<!-- section: (\w+) -->\n", text))
    out = {}
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        out[m.group(1)] = text[m.end():end].rstrip() + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help=f"comma-separated sections to (re)run, of: {', '.join(SECTIONS)}")
    ap.add_argument("--quick", action="store_true", help="smaller suites, for a smoke run")
    ap.add_argument("--out", default="BENCHMARKS.md")
    a = ap.parse_args(argv)
    names = a.only.split(",") if a.only else SECTIONS
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s) {unknown}; choose from {SECTIONS}")
    sections = {}
    if os.path.exists(a.out):
        with open(a.out, encoding="utf-8") as fh:
            sections = split_sections(fh.read())
    for name in names:
        t = time.perf_counter()
        print(f"benchmark {name} ...", file=sys.stderr, flush=True)
        body = importlib.import_module(f"benchmarks.{MODULES.get(name, name)}").run(a.quick)
        took = time.perf_counter() - t
        sections[name] = (body.rstrip() + f"\n\n_Section measured on {dt.date.today()} in {took:.0f} s"
                          f"{' (--quick)' if a.quick else ''}._\n")
        print(f"benchmark {name}: {took:.0f} s", file=sys.stderr, flush=True)
    parts = [
        "# Tidewise benchmarks\n",
        f"Measured by `make bench` ({platform.machine()}, Python {platform.python_version()}, 2 cores / 24 GiB). "
        "Each section says how to reproduce it; `python -m benchmarks.run --only NAME` reruns one.\n",
    ]
    for name in SECTIONS:
        if name in sections:
            parts += [MARK.format(name), sections[name]]
    for name in sections:  # sections measured outside `make bench` (the soak: `make soak`) are kept as they are
        if name not in SECTIONS:
            parts += [MARK.format(name), sections[name]]
    from contracts.atomic import write_text_atomic

    write_text_atomic(a.out, "\n".join(parts))
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
