"""Safe output paths and atomic file writes (temp file in the same folder, fsync, rename).

A crash or an error mid-write leaves the previous file (or no file) in place, never half of one.
Rename replaces whatever sits at the path, so it is used only where that is a regular file or
nothing: `--output /dev/full` run as root once replaced the device node with a CSV. Everything
else (folder, device, fifo, socket, a symlink to one of them) is refused with the fix.
A missing parent folder is refused too ("create it first"): a typo must not leave a new folder
tree behind, least of all at `/`.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from typing import Iterator

from predictor.errors import InputError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_output_path(path: str, *, what: str = "output", create_folder: bool = False) -> str:
    """The real path to write `path` through (a symlink to a regular file is followed, so the link
    stays), or InputError when the path is not a regular file or a new name in an existing folder.

    `create_folder` creates the one missing last folder (for paths the program owns, such as the
    node agent's checkpoint under /var/lib/tidewise), never a chain of them."""
    if not str(path).strip():
        raise InputError(f"{what}: empty path; give a file name")
    path = os.fspath(path)
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
        return os.path.realpath(path)
    if os.path.islink(path):
        raise InputError(f"{what} {path} is a symlink to a missing target; remove it or give another file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        if os.path.exists(folder):
            raise InputError(f"{what} {path}: {folder} is not a folder")
        if not (create_folder and os.path.isdir(os.path.dirname(folder))):
            raise InputError(f"{what} {path}: folder {folder} does not exist; create it first")
        os.makedirs(folder, exist_ok=True)
    return os.path.abspath(path)


def check_folder_to_fill(path: str, *, what: str = "--out") -> bool:
    """True when `path` is an existing folder, False when it is a new name in an existing folder;
    an InputError for anything else (a file there, a missing parent: never a chain of folders)."""
    if os.path.isdir(path):
        return True
    if os.path.lexists(path):
        raise InputError(f"{what} {path} exists and is not a folder; give a folder name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InputError(f"{what} {path}: folder {parent} does not exist; create it first "
                         "(only the last folder is created)")
    return False


def prepare_output_dir(path: str, *, what: str = "--out") -> str:
    """An output folder that the command fills: used if it exists, created if only its last
    component is missing; a file there or a missing parent is an InputError."""
    path = os.fspath(path)
    if check_folder_to_fill(path, what=what):
        return path
    try:
        os.mkdir(path)
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot create it ({exc.strerror})") from None
    return path


@contextlib.contextmanager
def atomic_path(path: str, *, what: str = "output", create_folder: bool = False) -> Iterator[str]:
    """Yield a temp path next to `path`; on success it replaces `path`, on error it is removed.
    `path` must pass `check_output_path` (checked before anything is written)."""
    target = check_output_path(path, what=what, create_folder=create_folder)
    folder = os.path.dirname(target)
    base = os.path.basename(target)
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
        # checked again just before the rename: the path may have become something else meanwhile
        check_output_path(target, what=what)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str, text: str, *, what: str = "output", create_folder: bool = False) -> None:
    with atomic_path(path, what=what, create_folder=create_folder) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
