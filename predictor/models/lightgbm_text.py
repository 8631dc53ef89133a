"""LightGBM's text model format, checked in Python before LightGBM's own parser reads it.

LightGBM's loader trusts its input. It follows the `tree_sizes` offsets without a bound, aborts the
process (SIGABRT, from inside an OpenMP loop) when an array does not hold the count it expects,
reads a truncated text past its end (SIGSEGV), and at prediction reads out of bounds for a split
feature or a child index out of range. A registry's model text is data someone else wrote, so
`checked_model_text` parses all of it first, in the layout `Booster.model_to_string()` writes:
the header (one class, the quantile objective, `max_feature_idx` = the features Tidewise computes,
`tree_sizes` matching each tree's bytes), then every tree (known keys only, each array of numbers
of the length `num_leaves` sets, leaf values finite, numerical splits on a feature in range,
children that form one tree from the root), then `end of trees`. It returns that part, and only that part is
given to LightGBM: the feature importances and parameters after it change no prediction.
"""
from __future__ import annotations

import math
import re

MAX_LEAVES = 131072  # LightGBM's own bound on num_leaves
END = "end of trees"
_HEADER_KEYS = {"version", "num_class", "num_tree_per_iteration", "label_index", "max_feature_idx", "objective",
                "feature_names", "feature_infos", "tree_sizes", "monotone_constraints"}
_HEADER_REQUIRED = _HEADER_KEYS - {"monotone_constraints"}
# a tree's arrays: per inner node (num_leaves - 1 values) or per leaf (num_leaves values), int or float
_INNER_INT = ("split_feature", "decision_type", "left_child", "right_child", "internal_count")
_INNER_FLOAT = ("split_gain", "threshold", "internal_value", "internal_weight")
_LEAF_INT = ("leaf_count",)
_LEAF_FLOAT = ("leaf_value", "leaf_weight")
_TREE_KEYS = {"num_leaves", "num_cat", "is_linear", "shrinkage", *_INNER_INT, *_INNER_FLOAT, *_LEAF_INT, *_LEAF_FLOAT}
_READ = {"split_feature", "decision_type", "left_child", "right_child", "leaf_value"}  # what prediction reads
_TREE_REQUIRED = {"num_leaves", "num_cat", "leaf_value", "left_child", "right_child", "split_feature", "threshold"}
# numerical splits only: bit 0 (categorical) clear, bit 1 default-left, bits 2-3 the missing type (none, zero, NaN)
_DECISION_TYPES = {0, 2, 4, 6, 8, 10}
_NUM = r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?"  # a JSON number, as LightGBM writes them
_BOUND = rf"(?:{_NUM}|-?inf)"  # LightGBM writes an infinite threshold (a split that sends only NaN right)
_INT = r"-?\d{1,10}"
_FLOATS = re.compile(rf"(?:{_BOUND}(?: {_BOUND})*)?")
_INTS = re.compile(rf"(?:{_INT}(?: {_INT})*)?")
_NAME = re.compile(r"[A-Za-z0-9_]+")
_INFO = re.compile(rf"none|\[{_BOUND}:{_BOUND}\]")


class ModelTextError(ValueError):
    """A LightGBM text model that is not what `model_to_string` writes for a Tidewise model."""


def checked_model_text(text: str, n_features: int) -> str:
    """The part of `text` LightGBM may parse (header and trees, through `end of trees`), after
    checking all of it; ModelTextError says what is wrong."""
    if not isinstance(text, str) or not text.isascii() or "\r" in text or "\0" in text:
        raise ModelTextError("not a LightGBM text model (it must be ASCII text with \\n line ends)")
    lines = text.split("\n")
    if lines[0] != "tree":
        raise ModelTextError("not a LightGBM text model (it must start with 'tree')")
    sizes, at = _header(lines, n_features)
    for i, size in enumerate(sizes):
        at = _tree(lines, at, i, size, n_features)
    if at >= len(lines) or lines[at] != END:
        raise ModelTextError(f"the text holds {len(sizes)} tree(s) but does not end them with '{END}' (truncated?)")
    return "\n".join(lines[:at + 1]) + "\n"


def _fields(lines: list[str], at: int, what: str) -> tuple[dict[str, str], int]:
    """key=value lines from `at` up to the next empty line (key -> value; each key once)."""
    out: dict[str, str] = {}
    while at < len(lines) and lines[at]:
        key, sep, value = lines[at].partition("=")
        if not sep or "=" in value or key in out:
            raise ModelTextError(f"{what}: line {at + 1} is not one key=value ({lines[at][:60]!r})")
        out[key] = value
        at += 1
    if at >= len(lines):
        raise ModelTextError(f"{what} is cut short (truncated text)")
    return out, at


def _header(lines: list[str], n_features: int) -> tuple[list[int], int]:
    """Check the header; returns tree_sizes and the line of the first tree."""
    fields, at = _fields(lines, 1, "the model's header")
    unknown, missing = set(fields) - _HEADER_KEYS, _HEADER_REQUIRED - set(fields)
    if unknown or missing:
        raise ModelTextError(f"the model's header has unknown key(s) {sorted(unknown)} or lacks {sorted(missing)}")
    expect = {"version": ("v3", "v4"), "num_class": ("1",), "num_tree_per_iteration": ("1",), "label_index": ("0",),
              "max_feature_idx": (str(n_features - 1),), "objective": ("quantile",)}
    for key, allowed in expect.items():
        if fields[key] not in allowed:
            raise ModelTextError(f"the model's {key} is {fields[key][:40]!r}; a Tidewise model has {allowed[0]!r}")
    names, infos = fields["feature_names"].split(" "), fields["feature_infos"].split(" ")
    if len(names) != n_features or not all(_NAME.fullmatch(n) for n in names):
        raise ModelTextError(f"the model's feature_names are not {n_features} plain names")
    if len(infos) != n_features or not all(_INFO.fullmatch(i) for i in infos):
        raise ModelTextError(f"the model's feature_infos are not {n_features} numeric ranges")
    constraints = fields.get("monotone_constraints", " ".join(["0"] * n_features)).split(" ")
    if len(constraints) != n_features or set(constraints) - {"-1", "0", "1"}:
        raise ModelTextError(f"the model's monotone_constraints are not {n_features} of -1, 0, 1")
    sizes = _ints(fields["tree_sizes"], "tree_sizes")
    if not sizes or min(sizes) < 1:
        raise ModelTextError("the model's tree_sizes name no tree, or a tree of no bytes")
    return sizes, at + 1


def _tree(lines: list[str], at: int, i: int, size: int, n_features: int) -> int:
    """Check tree `i`, starting at line `at`; returns the line after it (and its blank line)."""
    what = f"tree {i}"
    if at >= len(lines) or lines[at] != f"Tree={i}":
        raise ModelTextError(f"{what} is missing (expected 'Tree={i}' at line {at + 1}; truncated text?)")
    fields, end = _fields(lines, at + 1, what)
    # model_to_string writes each tree as its lines, an empty line and one more (tree_sizes counts both)
    if end + 1 >= len(lines) or lines[end + 1] != "":
        raise ModelTextError(f"{what} is cut short (truncated text)")
    if sum(len(line) + 1 for line in lines[at:end + 2]) != size:
        raise ModelTextError(f"{what} does not hold the {size} bytes tree_sizes gives it (the text was edited)")
    unknown, missing = set(fields) - _TREE_KEYS, _TREE_REQUIRED - set(fields)
    if unknown or missing:
        raise ModelTextError(f"{what} has unknown key(s) {sorted(unknown)} or lacks {sorted(missing)}")
    if fields["num_cat"] != "0" or fields.get("is_linear", "0") != "0":
        raise ModelTextError(f"{what} has categorical splits or linear leaves, which no Tidewise model has")
    leaves = _ints(fields["num_leaves"], "num_leaves", what)
    if len(leaves) != 1 or not 1 <= leaves[0] <= MAX_LEAVES:
        raise ModelTextError(f"{what}: num_leaves {fields['num_leaves'][:20]!r} is not within 1..{MAX_LEAVES}")
    n = leaves[0]
    arrays = _arrays(fields, n, what)
    shrinkage = _floats(fields.get("shrinkage", "1"), "shrinkage", what)
    if len(shrinkage) != 1 or not math.isfinite(shrinkage[0]):
        raise ModelTextError(f"{what}: shrinkage is not one finite number")
    if n > 1:
        _check_splits(arrays, n, n_features, what)
    return end + 2


def _arrays(fields: dict[str, str], n: int, what: str) -> dict[str, list]:
    """The arrays prediction reads (split features, decision types, children, leaf values), after
    checking that every array holds numbers, as many as `num_leaves` sets (a one-leaf tree writes
    its inner arrays empty and may leave leaf_weight empty: LightGBM reads only its leaf value and
    count there), and that the leaf values are finite (a threshold may be infinite, never NaN)."""
    out: dict[str, list] = {}
    for keys, length, pattern in ((_INNER_INT, n - 1, _INTS), (_INNER_FLOAT, n - 1, _FLOATS),
                                  (_LEAF_INT, n, _INTS), (_LEAF_FLOAT, n, _FLOATS)):
        for key in keys:
            value = fields.get(key)
            if value is None:
                continue
            if not pattern.fullmatch(value):
                raise ModelTextError(f"{what}: {key} is not a list of numbers")
            count = value.count(" ") + 1 if value else 0
            if count != length and not (n == 1 and key == "leaf_weight" and count == 0):
                raise ModelTextError(f"{what}: {key} holds {count} value(s), num_leaves {n} needs {length}")
            if key in _READ:
                out[key] = [(int if pattern is _INTS else float)(v) for v in value.split(" ")] if value else []
    if not all(map(math.isfinite, out["leaf_value"])):
        raise ModelTextError(f"{what}: leaf_value holds a value that is not finite")
    return out


def _check_splits(arrays: dict[str, list], n: int, n_features: int, what: str) -> None:
    if not all(0 <= f < n_features for f in arrays["split_feature"]):
        raise ModelTextError(f"{what}: a split_feature lies outside 0..{n_features - 1}")
    if not set(arrays.get("decision_type", ())) <= _DECISION_TYPES:
        raise ModelTextError(f"{what}: a decision_type is not a numerical split")
    # inner nodes are 0..n-2 and leaf j is written ~j (-j-1): every one but the root is some node's
    # child exactly once, and all are reached from the root (no cycle, nothing apart)
    left, right = arrays["left_child"], arrays["right_child"]
    if sorted(left + right) != list(range(-n, 0)) + list(range(1, n - 1)):
        raise ModelTextError(f"{what}: the children do not name each of its {n - 1} nodes and {n} leaves once")
    reached, stack = 0, [0]
    while stack:
        node = stack.pop()
        reached += 1
        stack.extend(c for c in (left[node], right[node]) if c > 0)
    if reached != n - 1:
        raise ModelTextError(f"{what}: {n - 1 - reached} of its nodes cannot be reached from the root")


def _ints(value: str, key: str, what: str = "the model's header") -> list[int]:
    if not _INTS.fullmatch(value):
        raise ModelTextError(f"{what}: {key} is not a list of integers")
    return [int(v) for v in value.split(" ")] if value else []


def _floats(value: str, key: str, what: str) -> list[float]:
    if not _FLOATS.fullmatch(value):
        raise ModelTextError(f"{what}: {key} is not a list of numbers")
    return [float(v) for v in value.split(" ")] if value else []
