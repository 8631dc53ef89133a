"""The filesystem port: every cgroup (and /proc) file the agent reads or writes goes through one.

The drivers read through it (does a controller file exist, which container folders, which pids),
`enforce.apply` writes through it (`ensure`: read, compare, write only what differs, log old -> new),
and every change made is recorded in `changes`. Three implementations:

- `HostFiles`: the real files; every write is logged old -> new.
- `DryRunFiles`: reads the real files, keeps writes in an overlay (so a later read sees them, as
  it would after a real write) and records them as the diff that `--dry-run` prints.
- `MemoryFiles`: an in-memory file tree that records every write, for unit tests.

Values are compared in a normal form (`normalise`), so that `0-3` equals `0,1,2,3` and a v1 memory
limit of -1 equals the kernel's 9223372036854771712.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Mapping

from node_enforcer.model.topology import format_cpulist, parse_cpulist

log = logging.getLogger(__name__)

PAGE = 4096
V1_UNLIMITED = 2**62  # v1 reports "no limit" as LONG_MAX rounded down to a page; anything this big is unlimited


@dataclass(frozen=True)
class Change:
    path: str
    old: str | None  # None: the file could not be read
    new: str

    def __str__(self) -> str:
        return f"{self.path}: {self.old if self.old is not None else '?'} -> {self.new}"


def normalise(path: str, text: str | None) -> str | None:
    """The canonical form of a value for `path`'s file name (None stays None)."""
    if text is None:
        return None
    name = os.path.basename(path)
    t = text.strip()
    try:
        if name in ("cpuset.cpus", "cpuset.mems"):
            return format_cpulist(parse_cpulist(t))
        if name in ("memory.limit_in_bytes", "memory.soft_limit_in_bytes"):
            v = int(t)
            return "-1" if v < 0 or v >= V1_UNLIMITED else str(v // PAGE * PAGE)
        if name in ("memory.max", "memory.high"):
            return "max" if t == "max" else str(int(t) // PAGE * PAGE)
        if name == "cpu.max":
            parts = t.split()
            quota = parts[0]
            period = parts[1] if len(parts) > 1 else "100000"
            return f"{'max' if quota == 'max' else int(quota)} {int(period)}"
        if name in ("cpu.cfs_quota_us", "cpu.shares", "cpu.weight", "cpu.idle", "oom_score_adj"):
            v = int(t)
            return "-1" if name == "cpu.cfs_quota_us" and v < 0 else str(v)
    except ValueError:
        return t
    return t


IO_MAX_KEYS = ("rbps", "wbps", "riops", "wiops")


def line_value(text: str, key: str) -> str | None:
    """The rest of the line of a keyed file (`254:0 1048576`, `eth0 5`) that starts with `key`."""
    for line in text.splitlines():
        parts = line.split(None, 1)
        if parts and parts[0] == key:
            return parts[1].strip() if len(parts) > 1 else ""
    return None


def normalise_keyed(path: str, value: str | None) -> str:
    """A keyed file's value in normal form; an absent line is the kernel's "no limit" (0 or max)."""
    name = os.path.basename(path)
    v = (value or "").strip()
    if name == "io.max":
        got = dict(tok.split("=", 1) for tok in v.split() if "=" in tok)
        return " ".join(f"{k}={got.get(k, 'max')}" for k in IO_MAX_KEYS)
    if name.startswith("blkio.throttle.") or name == "net_prio.ifpriomap":
        try:
            return str(int(v or "0"))
        except ValueError:
            return v
    return v


class FilePort:
    """read / list / write one file; `changes` holds what this port wrote since it was made."""

    dry_run = False

    def __init__(self) -> None:
        self.changes: list[Change] = []

    def read(self, path: str) -> str | None:
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def listdir(self, path: str) -> list[str]:
        """Sub-directories of `path` (sorted), [] when it does not exist."""
        raise NotImplementedError

    def _store(self, path: str, value: str) -> None:
        raise NotImplementedError

    def _store_line(self, path: str, key: str, line: str) -> None:
        """A keyed file takes one `key value` line per write; the kernel merges it into the rest."""
        self._store(path, line)

    def ensure_line(self, path: str, key: str, value: str, text: str | None = None) -> Change | None:
        """`ensure` for keyed files (blkio.throttle.*, io.max, io.weight, net_prio.ifpriomap): only
        the line of `key` is compared and written. `text`: the file as just read, to save a read."""
        text = self.read(path) if text is None else text
        old = None if text is None else line_value(text, key)
        if text is not None and normalise_keyed(path, old) == normalise_keyed(path, value):
            return None
        line = f"{key} {value}"
        self._store_line(path, key, line)
        change = Change(path, None if text is None else f"{key} {old if old is not None else '(none)'}", line)
        self.changes.append(change)
        log.info("%s%s", "dry-run: " if self.dry_run else "", change, extra={"path": path, "old": old, "new": line})
        return change

    def ensure(self, path: str, value: str) -> Change | None:
        """Read, compare, write only if it differs; returns the change made (or None)."""
        old = self.read(path)
        if normalise(path, old) == normalise(path, value):
            return None
        self._store(path, value)
        change = Change(path, None if old is None else old.strip(), value)
        self.changes.append(change)
        log.info("%s%s", "dry-run: " if self.dry_run else "", change, extra={"path": path, "old": old, "new": value})
        return change


class HostFiles(FilePort):
    def read(self, path: str) -> str | None:
        # os.open/os.read rather than open(): a no-op pass reads hundreds of small kernfs files,
        # and skipping the buffered text layer about halves the cost of each
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
        except OSError:
            return None
        finally:
            os.close(fd)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(path) if e.is_dir(follow_symlinks=False))
        except OSError:
            return []

    def _store(self, path: str, value: str) -> None:
        # cgroup files take one value per write(2); no temp file, no truncation games
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(value)


class DryRunFiles(HostFiles):
    dry_run = True

    def __init__(self) -> None:
        super().__init__()
        self.overlay: dict[str, str] = {}

    def read(self, path: str) -> str | None:
        return self.overlay[path] if path in self.overlay else super().read(path)

    def _store(self, path: str, value: str) -> None:
        self.overlay[path] = value

    def _store_line(self, path: str, key: str, line: str) -> None:
        self.overlay[path] = _merged(self.read(path), key, line)


class MemoryFiles(FilePort):
    """An in-memory tree of files (path -> content); directories are implied by the paths."""

    def __init__(self, files: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.files: dict[str, str] = dict(files or {})

    def read(self, path: str) -> str | None:
        return self.files.get(path)

    def exists(self, path: str) -> bool:
        return path in self.files or any(p.startswith(path.rstrip("/") + "/") for p in self.files)

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix):].split("/", 1)[0] for p in self.files
                       if p.startswith(prefix) and "/" in p[len(prefix):]})

    def _store(self, path: str, value: str) -> None:
        self.files[path] = value

    def _store_line(self, path: str, key: str, line: str) -> None:
        self.files[path] = _merged(self.read(path), key, line)


def _merged(text: str | None, key: str, line: str) -> str:
    """What the kernel shows after a keyed write: the other keys' lines and this one."""
    kept = [ln for ln in (text or "").splitlines() if ln.split(None, 1)[:1] != [key]]
    return "\n".join(sorted(kept + [line])) + "\n"
