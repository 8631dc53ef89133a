"""Replay benchmark (issue 7): `tidewise replay vpa|hpa` scored by the reference scorer.

Runs ../shared/eval/bench_decisions.py on the `dev` suite with `--project "<venv>/tidewise replay"`:
the scorer writes each series' history with its `start`, calls the command, and scores the output
CSVs against its own stock-VPA and reactive-HPA references, so these numbers are the outside
evaluator's. The same scores appear in the command's `--report`.

    python -m benchmarks.run --only replay
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVAL = os.environ.get("SHARED_EVAL", os.path.join(ROOT, "..", "shared", "eval"))


def run(quick: bool) -> str:
    if not os.path.isdir(EVAL):
        raise RuntimeError(f"the reference scorers are expected at {EVAL}")
    exe = os.path.join(os.path.dirname(sys.executable), "tidewise")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "decisions.json")
        cmd = [sys.executable, "bench_decisions.py", "dev", "--project", f"{exe} replay", "--json", out]
        if quick:
            cmd += ["--max-series", "4"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=EVAL, capture_output=True, text=True)
        took = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(f"bench_decisions failed: {r.stderr[-2000:]}")
        with open(out) as fh:
            rep = json.load(fh)
    p = rep["policies"]
    vpa, ref_vpa = p.get("project_vpa", {}), p["vpa_default"]
    hpa, ref_hpa = p.get("project_hpa", {}), p["hpa_reactive"]
    slack_ratio = vpa["slack"] / ref_vpa["slack"] if vpa else float("nan")
    over_ratio = hpa["over_target"] / ref_hpa["over_target"] if hpa else float("nan")
    rep_ratio = hpa["mean_replicas"] / ref_hpa["mean_replicas"] if hpa else float("nan")
    vpa_ok = slack_ratio <= 0.8 and vpa["violation"] <= ref_vpa["violation"]
    hpa_ok = over_ratio <= 0.3 and rep_ratio <= 1.05
    lines = [
        "## Replay: `tidewise replay vpa|hpa` scored by the reference scorer (issue 7)",
        "",
        f"Reproduce: `cd ../shared/eval && python bench_decisions.py dev --project \"tidewise replay\"` "
        f"(or `python -m benchmarks.run --only replay`). {rep['series']} series of the `dev` suite (non-negative "
        f"ones; data: ../shared/data, see each folder's SOURCE.md), each replayed over its last min(7, days − 6) "
        f"days from the past only; {took:.0f} s for both commands. Missing outputs: {rep['missing'] or 'none'}.",
        "",
        "| VPA | relative slack | violation rate | slack / reference | target (<= 0.8x slack, violation <= reference) |",
        "|---|---|---|---|---|",
        f"| stock VPA (decaying histogram, 24 h half-life, p90 + 15%) | {ref_vpa['slack']:.3f} | {ref_vpa['violation']:.4f} | 1.00 | — |",
        f"| tidewise replay vpa | {vpa.get('slack', float('nan')):.3f} | {vpa.get('violation', float('nan')):.4f} | "
        f"{slack_ratio:.2f} | {'met' if vpa_ok else 'missed'} |",
        "",
        "| HPA | mean serving replicas | over-target share | replicas / reactive | over-target / reactive | target (<= 0.3x over-target at <= 1.05x replicas) |",
        "|---|---|---|---|---|---|",
        f"| reactive HPA (tolerance 0.1, 5 min stabilisation, 2 min start-up) | {ref_hpa['mean_replicas']:.2f} | {ref_hpa['over_target']:.4f} | 1.00 | 1.00 | — |",
        f"| tidewise replay hpa | {hpa.get('mean_replicas', float('nan')):.2f} | {hpa.get('over_target', float('nan')):.4f} | "
        f"{rep_ratio:.3f} | {over_ratio:.2f} | {'met' if hpa_ok else 'missed'} |",
        "",
        "The decisions are the serving loop's (`studies/replay/decisions.py` over `autoscaler/logic`, the code of the serving section's "
        "quality tables, with the VPA guardrails and bounds on). Where a target is missed, the serving section above "
        "explains why and shows the quantile/margin trade-off.",
        "",
    ]
    return "\n".join(lines)
