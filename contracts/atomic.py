"""Safe output paths and atomic file writes (temp file in the same folder, fsync, rename), standard
library only: serve's outputs, the predictor's history and forecast files, the studies and the node
agent's checkpoint all write through here (the agent without loading numpy or pandas).

A crash or an error mid-write leaves the previous file (or no file) in place, never half of one.
Rename replaces whatever sits at the path, so it is used only where that is a regular file or
nothing: `--output /dev/full` run as root once replaced the device node with a CSV. Everything
else (folder, device, fifo, socket, a symlink to one of them) is refused with the fix.
A missing parent folder is refused too ("create it first"): a typo must not leave a new folder
tree behind, least of all at `/`. So are a folder that cannot be written (read-only), a name
ending in `/` (a folder, not a file) and an output that is one of the command's inputs. A write
that fails midway (disk full) is one line naming the path, and leaves nothing behind.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from typing import Iterable, Iterator

from contracts.errors import InputError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_output_path(path: str, *, what: str = "output", create_folder: bool = False,
                      inputs: Iterable[tuple[str, str | None]] = ()) -> str:
    """The real path to write `path` through (a symlink to a regular file is followed, so the link
    stays), or InputError when the path is not a regular file or a new name in a writable folder,
    names a folder (`newdir/`), or is one of `inputs` ((flag, path) pairs: the same file reached
    by another name or a symlink counts too, since writing it would overwrite the input).

    `create_folder` creates the one missing last folder (for paths the program owns, such as the
    node agent's checkpoint under /var/lib/tidewise), never a chain of them."""
    if not str(path).strip():
        raise InputError(f"{what}: empty path; give a file name")
    path = os.fspath(path)
    _check_not_an_input(path, what, inputs)
    if path.endswith(("/", os.sep)) and not os.path.isdir(path):
        raise InputError(f"{what} {path} ends with '/', a folder name, and no such folder exists; give a "
                         f"file name (e.g. {path}out.csv once the folder is created)")
    try:
        st = os.stat(path)  # follows symlinks: what a write would reach
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot be used ({exc.strerror}); give a file in a writable folder") from None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what} {path} is {_kind(st.st_mode)}, not a regular file; give a file name "
                             "(outputs are written through a temporary file and a rename)")
        real = os.path.realpath(path)
        check_writable_folder(os.path.dirname(real), path, what)
        return real
    if os.path.islink(path):
        raise InputError(f"{what} {path} is a symlink to a missing target; remove it or give another file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        if os.path.exists(folder):
            raise InputError(f"{what} {path}: {folder} is not a folder")
        if not (create_folder and os.path.isdir(os.path.dirname(folder))):
            raise InputError(f"{what} {path}: folder {folder} does not exist; create it first")
        os.makedirs(folder, exist_ok=True)
    check_writable_folder(folder, path, what)
    return os.path.abspath(path)


def _check_not_an_input(path: str, what: str, inputs: Iterable[tuple[str, str | None]]) -> None:
    for flag, given in inputs:
        if not given or not os.path.exists(given) or not os.path.exists(path):
            continue
        with contextlib.suppress(OSError):
            if os.path.samefile(path, given):
                raise InputError(f"{what} {path} is the same file as {flag} {given}; give another output "
                                 "name (writing it would overwrite the input)")


def check_writable_folder(folder: str, path: str, what: str) -> None:
    """Refused before any work: the temp file and the rename both need to write `folder` (InputError
    naming `what` and `path` when they cannot)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{what} {path}: folder {folder} is not writable (read-only or no permission); "
                         "give a path in a writable folder")


def write_failed(exc: OSError, path: str, what: str) -> InputError:
    """A write that failed midway (disk full, read-only, quota) as one line naming the path."""
    why = os.strerror(exc.errno) if exc.errno else str(exc)
    return InputError(f"{what} {path}: writing failed ({why}); nothing was written: free space or give "
                      "a file in a writable folder")


@contextlib.contextmanager
def atomic_path(path: str, *, what: str = "output", create_folder: bool = False) -> Iterator[str]:
    """Yield a temp path next to `path`; on success it replaces `path`, on error it is removed.
    `path` must pass `check_output_path` (checked before anything is written)."""
    target = check_output_path(path, what=what, create_folder=create_folder)
    folder = os.path.dirname(target)
    base = os.path.basename(target)
    # keep the suffix so that writers that pick a format by extension still work
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=f".tmp{os.path.splitext(base)[1]}", dir=folder)
    except OSError as exc:
        raise write_failed(exc, path, what) from None
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; the final file gets the usual mode
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        # checked again just before the rename: the path may have become something else meanwhile
        check_output_path(target, what=what)
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):  # disk full, quota, read-only remount: one line, not a traceback
            raise write_failed(exc, path, what) from None
        raise


def write_text_atomic(path: str, text: str, *, what: str = "output", create_folder: bool = False) -> None:
    with atomic_path(path, what=what, create_folder=create_folder) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
