"""Kubernetes label selectors in their string form (`kubectl -l`, `labelSelector=`): equality
(`app=web`, `app==web`, `tier!=db`), set-based (`tier in (a,b)`, `env notin (dev)`) and existence
(`canary`, `!canary`) requirements, joined by commas; every requirement must hold.

Shared vocabulary (serve's opt-in selection reads it from the config), so stdlib only. Parsed once
when the settings are read: `parse_selector` raises ValueError naming the bad part; `matches` is cheap.
`has_labels` is the equality-map form (`matchLabels`, a node selector) the serving side matches with.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

# a label key is an optional DNS-subdomain prefix and a name of at most 63 characters; a value is
# empty or at most 63 alphanumerics, '-', '_' or '.', beginning and ending alphanumeric
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")
_SET = re.compile(r"^(?P<key>[^\s!=()]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQ = re.compile(r"^(?P<key>[^\s!=()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=()]*)$")
_EXISTS = re.compile(r"^(?P<neg>!?)\s*(?P<key>[^\s!=()]+)$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "in", "notin", "exists", "!exists" (equality is "in"/"notin" of one value)
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        if self.op == "exists":
            return has
        if self.op == "!exists":
            return not has
        if self.op == "in":
            return has and labels[self.key] in self.values
        return not has or labels[self.key] not in self.values  # notin, != : absent keys match (as in Kubernetes)


@dataclass(frozen=True)
class Selector:
    text: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Every requirement holds for these labels (an empty selector matches everything)."""
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


def has_labels(want: Mapping[str, object], labels: Mapping[str, object] | None) -> bool:
    """Every `key: value` of an equality map (a `matchLabels`, a node selector) is among these labels;
    an empty map holds for any labels (callers that want "selects nothing" check emptiness first)."""
    labels = labels or {}
    return all(labels.get(k) == v for k, v in want.items())


def _split(text: str) -> list[str]:
    """Top-level comma-separated parts (commas inside `( )` belong to a value set)."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"label selector {text!r}: ')' without '('")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ValueError(f"label selector {text!r}: '(' without ')'")
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _key(key: str, text: str) -> str:
    if not _KEY.match(key):
        raise ValueError(f"label selector {text!r}: {key!r} is not a label key (name or prefix/name, at most 63 "
                         "alphanumerics, '-', '_', '.')")
    return key


def _values(values: list[str], text: str) -> frozenset[str]:
    for v in values:
        if not _VALUE.match(v):
            raise ValueError(f"label selector {text!r}: {v!r} is not a label value (at most 63 alphanumerics, "
                             "'-', '_', '.', starting and ending alphanumeric)")
    return frozenset(values)


def _requirement(part: str, text: str) -> Requirement:
    m = _SET.match(part)
    if m:
        values = [v.strip() for v in m["values"].split(",")]
        if values == [""]:
            raise ValueError(f"label selector {text!r}: {part!r} needs at least one value in its ( )")
        return Requirement(_key(m["key"], text), m["op"], _values(values, text))
    m = _EQ.match(part)
    if m:
        return Requirement(_key(m["key"], text), "notin" if m["op"] == "!=" else "in", _values([m["value"]], text))
    m = _EXISTS.match(part)
    if m:
        return Requirement(_key(m["key"], text), "!exists" if m["neg"] else "exists")
    raise ValueError(f"label selector {text!r}: cannot read {part!r}; use key=value, key!=value, "
                     "key in (a,b), key notin (a,b), key or !key, joined by commas")


def parse_selector(text: str) -> Selector:
    """`app=web,tier in (a,b),!canary` -> a Selector; ValueError (one line, naming the part) otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"label selector {text!r}: give it as text, e.g. 'app=web,tier in (a,b),!canary'")
    if not text.strip():
        return Selector(text, ())
    parts = _split(text)
    if any(not p for p in parts):
        raise ValueError(f"label selector {text!r}: empty requirement (two commas, or a comma at an end)")
    return Selector(text, tuple(_requirement(p, text) for p in parts))
