"""The HTB tree of `policy.network` on the uplink, through the `tc` command (iproute2).

Read (`tc qdisc show`, `tc class show`, `tc filter show`), compare, and run only the commands that
differ, each logged old -> new and recorded as a `Change` (path `tc:<device>`), so a second pass
runs nothing. The root qdisc is replaced only when it is not already `htb` with handle 1: and
default 1:10 (replacing it drops every class); classes are `tc class replace`d. Commands are argv
lists (never a shell); the runner is injectable (tests record, dry-run prints). A missing device is
reported, never fatal.

The tree is read again only every `check_every` passes while the plan stays the same (12: once a
minute at the 5 s interval). Each read forks `tc` twice — about 2 ms on an idle node, 12 ms each on
a loaded one, most of a no-op pass — and unlike cgroup files, which the kubelet rewrites, only root
on the node changes a qdisc; a changed plan or a failed command is acted on at the next pass.
"""
from __future__ import annotations

import json
import logging
import re
import subprocess
from typing import Any, Callable, Sequence

from node_enforcer.enforce.files import Change
from node_enforcer.policy.network import HANDLE, NetPlan

log = logging.getLogger(__name__)
Runner = Callable[[Sequence[str]], str]
_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


class TcError(Exception):
    pass


def run_tc(argv: Sequence[str]) -> str:
    """Run one `tc` command; its stdout, or TcError with its stderr."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TcError(f"{' '.join(argv)}: {exc}") from exc
    if done.returncode != 0:
        raise TcError(f"{' '.join(argv)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def parse_rate(text: str) -> int:
    """`8Mbit`, `1Gbit`, `900Kbit`, `12bit` (tc's SI units) -> bit/s."""
    m = re.fullmatch(r"([0-9.]+)([KMGT]?)bit", text)
    if not m:
        raise ValueError(f"tc rate {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def parse_classes(text: str) -> dict[str, dict[str, object]]:
    """`tc class show` text -> {classid: {parent, rate, ceil, prio}} for htb classes."""
    out: dict[str, dict[str, object]] = {}
    for line in text.splitlines():
        tok = line.split()
        if len(tok) < 3 or tok[:2] != ["class", "htb"]:
            continue
        info: dict[str, object] = {"parent": f"{HANDLE}:" if "root" in tok else None, "prio": None}
        for key in ("parent", "prio", "rate", "ceil"):
            if key in tok and tok.index(key) + 1 < len(tok):
                val = tok[tok.index(key) + 1]
                info[key] = int(val) if key == "prio" else parse_rate(val) if key in ("rate", "ceil") else val
        out[tok[2]] = info
    return out


def _close(a: object, b: int) -> bool:
    """tc prints rates rounded to 3-4 digits: equal within 1%."""
    return isinstance(a, int) and abs(a - b) <= b // 100


class Tc:
    def __init__(self, run: Runner = run_tc, dry_run: bool = False, tc: Sequence[str] = ("tc",),
                 check_every: int = 12) -> None:
        self.run, self.dry_run, self.tc = run, dry_run, list(tc)  # tc may be ["ip", "netns", "exec", NS, "tc"]
        self.check_every = max(1, check_every)
        self._checked: NetPlan | None = None  # the plan the tree was last found (or made) to match
        self._skipped = 0

    def _cmd(self, changes: list[Change], dev: str, old: str, args: list[str]) -> None:
        argv = self.tc + args
        change = Change(f"tc:{dev}", old, " ".join(args))
        log.info("%s%s", "dry-run: " if self.dry_run else "", change, extra={"device": dev})
        if not self.dry_run:
            self.run(argv)
        changes.append(change)

    def ensure(self, plan: NetPlan) -> tuple[list[Change], list[str]]:
        """(changes made or, in dry-run, to make; problems such as a missing device)."""
        if plan == self._checked and self._skipped + 1 < self.check_every:
            self._skipped += 1
            return [], []
        self._checked, self._skipped = None, 0
        changes, problems = self._ensure(plan)
        if not problems and not self.dry_run:
            self._checked = plan
        return changes, problems

    def _ensure(self, plan: NetPlan) -> tuple[list[Change], list[str]]:
        dev, changes = plan.device, list[Change]()
        try:
            qdiscs = json.loads(self.run(self.tc + ["-j", "qdisc", "show", "dev", dev]) or "[]")
        except TcError as exc:
            return [], [f"network device {dev}: {exc}; egress not shaped"]
        root: dict[str, Any] = next((q for q in qdiscs if q.get("root")), {})
        default = f"0x{plan.default_minor:x}"
        replaced = not (root.get("kind") == "htb" and root.get("handle") == f"{HANDLE}:"
                        and (root.get("options") or {}).get("default") == default)
        if replaced:
            self._cmd(changes, dev, f"root {root.get('kind', '?')} {root.get('handle', '')}",
                      ["qdisc", "replace", "dev", dev, "root", "handle", f"{HANDLE}:", "htb",
                       "default", f"{plan.default_minor:x}"])
            have: dict[str, dict[str, object]] = {}
        else:
            have = parse_classes(self.run(self.tc + ["class", "show", "dev", dev]))
        for c in plan.classes:
            cur = have.get(c.classid)
            leaf = c.classid != f"{HANDLE}:1"
            if cur and cur.get("parent") == c.parent and _close(cur.get("rate"), c.rate) and \
                    _close(cur.get("ceil"), c.ceil) and (not leaf or cur.get("prio") == c.prio):
                continue
            old = "(none)" if not cur else f"rate {cur.get('rate')}bit ceil {cur.get('ceil')}bit prio {cur.get('prio')}"
            self._cmd(changes, dev, f"class {c.classid} {old}",
                      ["class", "replace", "dev", dev, "parent", c.parent, "classid", c.classid, "htb",
                       "rate", f"{c.rate}bit", "ceil", f"{c.ceil}bit"] + (["prio", str(c.prio)] if leaf else []))
        if plan.classifier == "classid":
            filters = [] if replaced else json.loads(
                self.run(self.tc + ["-j", "filter", "show", "dev", dev, "parent", f"{HANDLE}:"]) or "[]")
            if not any(f.get("kind") == "cgroup" for f in filters):
                self._cmd(changes, dev, "filter (none)", ["filter", "add", "dev", dev, "parent", f"{HANDLE}:",
                                                          "protocol", "all", "prio", "10", "cgroup"])
        return changes, []
