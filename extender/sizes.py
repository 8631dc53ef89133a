"""`deep_size(obj)`: the bytes an object and what it holds take (sys.getsizeof over dicts, lists,
tuples, sets, dataclasses and plain objects, each object counted once), so that the extender's
memories are bounded by what they hold, not by how many entries."""
from __future__ import annotations

import sys
from typing import Any

_ATOMS = (str, bytes, int, float, bool, type(None))


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    seen = set() if seen is None else seen
    total, stack = 0, [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, _ATOMS):
            continue
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        else:
            d = getattr(o, "__dict__", None)
            if d is not None:
                stack.append(d)
            for slot in getattr(type(o), "__slots__", ()):
                if hasattr(o, slot):
                    stack.append(getattr(o, slot))
    return total
