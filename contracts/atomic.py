"""Safe output paths and atomic file writes (temp file in the same folder, fsync, rename), standard
library only: serve's outputs, the predictor's history and forecast files, the studies and the node
agent's checkpoint all write through here (the agent without loading numpy or pandas).

A crash or an error mid-write leaves the previous file (or no file) in place, never half of one.
Inside `all_or_none()` a command's outputs land together or not at all: each is produced in a temp
file beside its target, and all are renamed into place only once every one is produced (a report
that fails after the decisions CSV leaves the previous CSV untouched).
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
import threading
from typing import Iterable, Iterator, Mapping

from contracts.errors import InputError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_output_path(path: str, *, what: str = "output", create_folder: bool = False,
                      inputs: Iterable[tuple[str, str | None]] = (),
                      outputs: Iterable[tuple[str, str | None]] = ()) -> str:
    """The real path to write `path` through (a symlink to a regular file is followed, so the link
    stays), or InputError when the path is not a regular file or a new name in a writable folder,
    names a folder (`newdir/`), or is one of `inputs` ((flag, path) pairs: the same file reached
    by another name or a symlink counts too, since writing it would overwrite the input) or of the
    command's other `outputs` (one would replace the other).

    `create_folder` creates the one missing last folder (for paths the program owns, such as the
    node agent's checkpoint under /var/lib/tidewise), never a chain of them."""
    if not str(path).strip():
        raise InputError(f"{what}: empty path; give a file name")
    path = os.fspath(path)
    _check_not_an_input(path, what, inputs, "give another output name (writing it would overwrite the input)")
    _check_not_an_input(path, what, outputs, "give each output its own name")
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


def _check_not_an_input(path: str, what: str, inputs: Iterable[tuple[str, str | None]], fix: str) -> None:
    for flag, given in inputs:
        if not given:
            continue
        with contextlib.suppress(OSError):
            # a new name is compared by its real path: two outputs of one command may both be new
            same = os.path.samefile(path, given) if os.path.exists(given) and os.path.exists(path) else \
                os.path.realpath(path) == os.path.realpath(given)
            if same:
                raise InputError(f"{what} {path} is the same file as {flag} {given}; {fix}")


def check_writable_folder(folder: str, path: str, what: str) -> None:
    """Refused before any work: the temp file and the rename both need to write `folder` (InputError
    naming `what` and `path` when they cannot)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{what} {path}: folder {folder} is not writable (read-only or no permission); "
                         "give a path in a writable folder")


def write_failed(exc: OSError, path: str, what: str) -> InputError:
    """A write that failed midway (disk full, read-only, quota) as one line naming the path (and,
    inside `all_or_none`, the outputs left as they were with it)."""
    why = os.strerror(exc.errno) if exc.errno else str(exc)
    return InputError(f"{what} {path}: writing failed ({why}); nothing was written{_left(_staged, path)}: "
                      "free space or give a file in a writable folder")


class _Staged:
    """The outputs of one `all_or_none` block produced so far: target -> (temp file, what, path as given)."""

    def __init__(self, names: dict[str, str]) -> None:
        self.files: dict[str, tuple[str, str, str]] = {}
        self.names = names  # real path -> the flag that named it (--output), for the messages
        self.lock = threading.Lock()  # serve's file sink writes from several threads

    def shown(self, path: str, what: str) -> str:
        """`what` as the messages name it: the command's flag for a path it declared."""
        return self.names.get(os.path.realpath(path), what)

    def add(self, target: str, tmp: str, what: str, path: str) -> None:
        with self.lock:
            earlier = self.files.get(target)
            if earlier and earlier[1] != what:  # two different outputs of the command: one would be lost
                raise InputError(f"{self.shown(path, what)} {path} is the same file as "
                                 f"{self.shown(earlier[2], earlier[1])} {earlier[2]}; give each output its own name")
            if earlier and earlier[0] != tmp:  # one output written twice in the block: the later wins
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(earlier[0])
            self.files[target] = (tmp, what, path)

    def discard(self) -> None:
        for tmp, _, _ in self.files.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self.files.clear()

    def commit(self) -> None:
        """Every target checked again (it may have become a folder meanwhile), then every rename."""
        for target, (_, what, path) in self.files.items():
            try:
                check_output_path(target, what=self.shown(path, what))
            except InputError as exc:
                raise InputError(f"{exc}; nothing was written{_left(self, path)}") from None
        done: list[tuple[str, str]] = []
        for target, (tmp, what, path) in list(self.files.items()):
            try:
                os.replace(tmp, target)
            except OSError as exc:  # after every check passed: the folder's disk or permissions changed
                rest = [(self.shown(p, w), p) for _, w, p in self.files.values() if (self.shown(p, w), p) not in done]
                raise InputError(f"{self.shown(path, what)} {path}: renaming it into place failed "
                                 f"({exc.strerror or exc}); written: {_names(done) or 'nothing'}; not written: "
                                 f"{_names(rest)}") from None
            done.append((self.shown(path, what), path))
        self.files.clear()


_staged: _Staged | None = None  # the running `all_or_none` block; None: each output lands when written


@contextlib.contextmanager
def all_or_none(outputs: Mapping[str, str | None] | None = None) -> Iterator[None]:
    """Every output written through this module inside the block (`atomic_path`, `write_text_atomic`,
    `replace_or_stage`) lands when the block ends without an error, all together, or none does: each
    is produced in a temp file beside its target and renamed into place once all are produced.
    `outputs` (flag -> path, e.g. {"--output": "v.csv"}) names them in messages as the user did (two
    flags naming one file are refused). A block inside another one adds to it."""
    global _staged
    if _staged is not None:
        yield
        return
    names: dict[str, str] = {}
    for flag, path in (outputs or {}).items():
        if path:
            other = names.setdefault(os.path.realpath(path), flag)
            if other != flag:
                raise InputError(f"{flag} {path} is the same file as {other}; give each output its own name")
    _staged = staged = _Staged(names)
    try:
        yield
    except BaseException as exc:
        _staged = None
        # whatever stopped the block, none of its outputs landed: the line says so
        left = _left(staged, None) if isinstance(exc, InputError) and "nothing was written" not in str(exc) else ""
        staged.discard()
        if left:
            raise InputError(f"{exc}; nothing was written{left}") from None
        raise
    _staged = None
    try:
        staged.commit()
    finally:
        staged.discard()  # what a failed commit left as temp files


def replace_or_stage(tmp: str, target: str, *, what: str = "output", path: str | None = None) -> None:
    """`os.replace(tmp, target)`, or inside `all_or_none` the rename kept for the block's end."""
    if _staged is not None:
        _staged.add(target, tmp, what, path or target)
    else:
        os.replace(tmp, target)


def _left(staged: _Staged | None, failed: str | None) -> str:
    """` (--output v.csv left as it was)`: the outputs `all_or_none` staged, but the one that failed."""
    if staged is None:
        return ""
    left = [(staged.shown(p, w), p) for _, w, p in staged.files.values() if p != failed]
    return f" ({_names(left)} left as {'it was' if len(left) == 1 else 'they were'})" if left else ""


def _names(outputs: list[tuple[str, str]]) -> str:
    """`--output v.csv, 11 file sink outputs under recs`: one output by its flag and path, several
    of one kind by their count and folder."""
    kinds: dict[str, list[str]] = {}
    for what, path in outputs:
        kinds.setdefault(what, []).append(path)
    return ", ".join(f"{what} {paths[0]}" if len(paths) == 1 else f"{len(paths)} {what}s under {_folder(paths)}"
                     for what, paths in kinds.items())


def _folder(paths: list[str]) -> str:
    try:
        return os.path.commonpath([os.path.dirname(p) for p in paths]) or "."
    except ValueError:  # absolute and relative paths mixed
        return os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths])


@contextlib.contextmanager
def atomic_path(path: str, *, what: str = "output", create_folder: bool = False) -> Iterator[str]:
    """Yield a temp path next to `path`; on success it replaces `path`, on error it is removed.
    `path` must pass `check_output_path` (checked before anything is written)."""
    given = what  # inside all_or_none: the output's identity; `what` is then its flag, for the messages
    what = _staged.shown(path, what) if _staged is not None else what
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
        if _staged is not None:  # renamed with the block's other outputs (all_or_none)
            _staged.add(target, tmp, given, path)
            return
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
