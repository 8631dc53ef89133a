"""Edits that make a registry version malformed, its checksums fixed up after, as a writer of the
volume without the signing key can: a LightGBM text model edited (`tamper`, with or without
`tree_sizes` recomputed) or a manifest field or stored history spoiled (`damage`). Imports no
Tidewise code that reads a registry, so the tests using it run against any version of it."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

# how -> (key, index of the value in the first tree with 3+ leaves, new value from the old one)
EDITS: dict[str, tuple[str, int, Callable[[str], str]]] = {
    "split_feature 99999": ("split_feature", 0, lambda v: "99999"),
    "negative split_feature": ("split_feature", 0, lambda v: "-1"),
    "left child out of range": ("left_child", 0, lambda v: "1000"),
    "leaf index out of range": ("left_child", 0, lambda v: "-1000"),
    "child back to the root": ("right_child", -1, lambda v: "0"),
    "NaN threshold": ("threshold", 0, lambda v: "nan"),
    "infinite leaf value": ("leaf_value", 0, lambda v: "inf"),
    "categorical split": ("decision_type", 0, lambda v: "1"),
    "num_leaves one more": ("num_leaves", 0, lambda v: str(int(v) + 1)),
    "a number that is not one": ("threshold", 0, lambda v: "1_0"),
}
# the same edit by hand (tree_sizes left as it was), truncations, and header edits
OTHER = ("split_feature 99999, tree_sizes left", "truncated", "no end of trees", "max_feature_idx 99", "two classes",
         "unknown tree key", "tree_sizes of 10 trees")
HEADER = {"max_feature_idx 99": ("max_feature_idx", "99"), "two classes": ("num_class", "2"),
          "tree_sizes of 10 trees": ("tree_sizes", " ".join(["100"] * 10))}
QS = (0.5, 0.9, 0.95, 0.99)


def resized(text: str) -> str:
    """`text` with tree_sizes recomputed from its trees, as a careful editor would leave it."""
    head, body = text.split("\n\nTree=0\n", 1)
    body, tail = ("Tree=0\n" + body).split("end of trees", 1)
    sizes = [len(block) for block in re.split(r"(?=^Tree=\d+$)", body, flags=re.M) if block]
    head = re.sub(r"tree_sizes=.*", "tree_sizes=" + " ".join(map(str, sizes)), head)
    return head + "\n\n" + body + "end of trees" + tail


def tamper(text: str, how: str) -> str:
    """LightGBM model `text` edited as `how` says (an EDITS or OTHER key)."""
    if how == "truncated":
        return text[: len(text) // 2]
    if how == "no end of trees":
        return text[: text.index("end of trees")]
    if how in HEADER:
        key, value = HEADER[how]
        return re.sub(rf"^{key}=.*$", f"{key}={value}", text, count=1, flags=re.M)
    if how == "unknown tree key":
        return resized(text.replace("\nshrinkage=", "\nlinear_coeff=1\nshrinkage=", 1))
    key, index, new = EDITS[how.replace(", tree_sizes left", "")]
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("num_leaves=") and int(line[11:]) >= 3)
    k = next(i for i in range(at, len(lines)) if lines[i].startswith(key + "="))
    values = lines[k][len(key) + 1:].split(" ")
    values[index] = new(values[index])
    lines[k] = f"{key}={' '.join(values)}"
    edited = "\n".join(lines)
    return edited if how.endswith("tree_sizes left") else resized(edited)


def write(reg_dir: Path, history, decision_models: dict, minute: int = 0, global_model=None) -> str:
    """A version of `history` (seasonal naive choices, its recent window stored) with these models."""
    from predictor.registry import write_version

    series = {k: {"model": "seasonal_naive_daily", "shifts": [0.0] * len(QS)} for k in history.series}
    return write_version(str(reg_dir), quantiles=QS, series=series, step_seconds=300, global_model=global_model,
                         data_window=((history.end - pd.Timedelta("8D")).isoformat(), history.end.isoformat()),
                         decision_models=decision_models, recent=history.to_long(), extra={"recent_step_seconds": 300},
                         now=dt.datetime(2026, 11, 2, 0, minute, tzinfo=dt.timezone.utc))


def damage(folder: str | Path, how: str, artifact: str = "decision_time_vpa.json") -> None:
    """Make a version malformed as `how` says, then fix its checksums: a `tamper` edit of the first
    LightGBM model of `artifact` (a decision-time model's JSON or global_gbm.npz), or a negative
    `recent_step_seconds` or `step_seconds`, quantiles as strings, a `recent.parquet` that is CSV."""
    folder = Path(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    if how == "negative recent_step_seconds":
        manifest["recent_step_seconds"] = -300
    elif how == "negative step_seconds":
        manifest["step_seconds"] = -300
    elif how == "quantiles not numbers":
        manifest["quantiles"] = [str(q) for q in manifest["quantiles"]]
    elif how == "recent.parquet not Parquet":
        (folder / "recent.parquet").write_text("series,timestamp,value\n")
    elif artifact == "global_gbm.npz":
        with np.load(folder / artifact, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        text = tamper(arrays["q0.lightgbm"].tobytes().decode("utf-8"), how)
        arrays["q0.lightgbm"] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        np.savez_compressed(folder / artifact, allow_pickle=False, **arrays)
    else:
        meta = json.loads((folder / artifact).read_text())
        meta["lightgbm_models"][0] = tamper(meta["lightgbm_models"][0], how)
        (folder / artifact).write_text(json.dumps(meta))
    for name in manifest["artifacts"]:
        manifest["artifacts"][name]["sha256"] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    body = json.dumps(manifest, indent=1).encode()
    (folder / "manifest.json").write_bytes(body)
    (folder / "manifest.sha256").write_text(f"{hashlib.sha256(body).hexdigest()}  manifest.json\n")
