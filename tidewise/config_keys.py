"""The keys each section of the settings file may hold, read from the settings dataclasses' source
with `ast` instead of importing them: every command checks every section of the file (a typo in
`prometheus:` is refused by `forecast` too), and `tidewise enforce` on a node checks a shared file's
`serve:` and `prometheus:` sections without loading the serving loop, pandas or numpy.

A field whose type is another dataclass (`serve: vpa:`, `enforcer: policy:`) is a nested section.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import os
from dataclasses import dataclass

# section -> (module, dataclass) its keys are the fields of
ROOTS = {
    "enforcer": ("node_enforcer.settings", "EnforcerSettings"),
    "prometheus": ("predictor.sources.prometheus", "PrometheusSettings"),
    "serve": ("autoscaler.settings.serve", "ServeSettings"),
}
# keys a section also takes: older `enforcer:` files put the policy's and the eviction's keys flat,
# and `evict: true|false` (node_enforcer/settings.py, nest_section)
FLAT_FROM = {"enforcer": ("policy", "eviction")}
ALSO = {"enforcer": ("evict",)}


@dataclass(frozen=True)
class Keys:
    """A section's keys: key -> its nested section's Keys, or None for a value."""

    fields: dict[str, "Keys | None"]

    def known(self, section: str) -> dict[str, "Keys | None"]:
        """Every key the section takes, the flat and extra ones included (as values)."""
        out: dict[str, Keys | None] = dict(self.fields)
        for name in FLAT_FROM.get(section, ()):
            nested = self.fields.get(name)
            out.update({k: None for k in (nested.fields if nested else {}) if k not in out})
        out.update({k: None for k in ALSO.get(section, ())})
        return out


def section_keys(section: str) -> Keys | None:
    """The keys of a top-level section (None: its settings module's source cannot be read)."""
    module, name = ROOTS[section]
    return _class_keys(module, name)


def _source_path(module: str) -> str | None:
    """The .py file of `module`, found without importing it or its packages (their `__init__` may
    import pandas)."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return None
    base = os.path.join(list(spec.submodule_search_locations)[0], *rest)
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


@functools.lru_cache(maxsize=None)
def _tree(module: str) -> ast.Module | None:
    path = _source_path(module)
    if path is None:
        return None
    with open(path, encoding="utf-8") as fh:
        return ast.parse(fh.read(), path)


@functools.lru_cache(maxsize=None)
def _class_keys(module: str, name: str) -> Keys | None:
    """The fields of dataclass `name` in `module` (its dataclass bases' first), nested ones resolved."""
    tree = _tree(module)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None) if tree else None
    if cls is None or not _is_dataclass(cls):
        return None
    fields: dict[str, Keys | None] = {}
    for base in cls.bases:
        found = _resolve(module, base)
        fields.update(found.fields if found else {})
    for stmt in cls.body:
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and not _is_classvar(stmt.annotation) and not _not_init(stmt.value)):
            fields[stmt.target.id] = _resolve(module, stmt.annotation)
    return Keys(fields)


def _resolve(module: str, annotation: ast.expr) -> Keys | None:
    """The Keys of a field typed as a dataclass (`PolicySettings`, `X | None`), else None."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [s for s in (annotation.left, annotation.right) if not _is_none(s)]
        return _resolve(module, sides[0]) if len(sides) == 1 else None
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str) and annotation.value.isidentifier():
        annotation = ast.Name(annotation.value)
    if not isinstance(annotation, ast.Name):
        return None
    tree = _tree(module)
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == annotation.id:
            return _class_keys(module, node.name)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == annotation.id:
                    return _class_keys(node.module, alias.name)
    return None


def _is_dataclass(cls: ast.ClassDef) -> bool:
    def name(d: ast.expr) -> str:
        d = d.func if isinstance(d, ast.Call) else d
        return d.attr if isinstance(d, ast.Attribute) else d.id if isinstance(d, ast.Name) else ""
    return any(name(d) == "dataclass" for d in cls.decorator_list)


def _is_classvar(annotation: ast.expr) -> bool:
    node = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return (isinstance(node, ast.Name) and node.id == "ClassVar") or (
        isinstance(node, ast.Attribute) and node.attr == "ClassVar")


def _not_init(value: ast.expr | None) -> bool:
    """`field(init=False)`: state the dataclass sets itself (`parsed_`), not a setting."""
    return isinstance(value, ast.Call) and any(
        k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False for k in value.keywords)


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None
