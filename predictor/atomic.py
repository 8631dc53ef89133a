"""Atomic file writes: write to a temporary file in the same folder, fsync, then rename.

A crash or an error mid-write leaves the previous file (or no file) in place, never half of one.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temp path next to `path`; on success it replaces `path`, on error it is removed."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(folder, exist_ok=True)
    base = os.path.basename(path)
    # keep the suffix so that writers that pick a format by extension still work
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=f".tmp{os.path.splitext(base)[1]}", dir=folder)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; the final file gets the usual mode
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str, text: str) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
