"""What a study writes: `results.json` (the fixed contract), `details.json` (what the report shows,
machine-readable) and `report.html`, each written atomically, non-finite numbers as null."""
from __future__ import annotations

import json
import os
from typing import Any

from contracts.atomic import write_text_atomic
from predictor.types import finite_or_none


def write_json(path: str, data: Any) -> None:
    write_text_atomic(path, json.dumps(finite_or_none(data), indent=2) + "\n")


def write_outputs(out_dir: str, results: dict, details: dict, page: str) -> dict[str, str]:
    """results.json, details.json and report.html in out_dir; their paths by name."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, f) for k, f in
             (("results", "results.json"), ("details", "details.json"), ("report", "report.html"))}
    write_json(paths["results"], results)
    write_json(paths["details"], details)
    write_text_atomic(paths["report"], page)
    return paths
