"""Checks of the paths given on the command line, made before any work so that a typo costs
nothing: outputs (see `contracts.atomic`), output folders (removed again when a refused run
leaves them empty) and model registries."""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

from contracts.atomic import check_output_path, check_writable_folder
from contracts.errors import InputError

__all__ = ["check_output_path", "prepare_output_dir", "new_folders", "input_file", "existing_registry", "registry_to_write"]


def input_file(path: str, flag: str = "--input") -> str:
    """An input that is a readable regular file (not a folder, not missing)."""
    if os.path.isdir(path):
        raise InputError(f"{flag} {path} is a folder; give a file (CSV, CSV.gz or Parquet)")
    if not os.path.exists(path):
        raise InputError(f"{flag} {path}: no such file")
    return path


def existing_registry(path: str, flag: str = "--registry") -> str:
    """A registry to read: a folder that `tidewise train` wrote."""
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise InputError(f"{flag} {path} is a file, not a registry folder; give the folder that "
                         "`tidewise train --registry DIR` wrote")
    raise InputError(f"{flag} {path}: no such folder; run `tidewise train --registry {path}` first")


def check_folder_to_fill(path: str, *, what: str = "--out") -> bool:
    """True when `path` is an existing folder, False when it is a new name in an existing folder;
    an InputError for anything else (a file there, a missing parent: never a chain of folders)."""
    if os.path.isdir(path):
        check_writable_folder(path, path, what)
        return True
    if os.path.lexists(path):
        raise InputError(f"{what} {path} exists and is not a folder; give a folder name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InputError(f"{what} {path}: folder {parent} does not exist; create it first "
                         "(only the last folder is created)")
    check_writable_folder(parent, path, what)
    return False


class NewFolders:
    """The output folders this run of a command created (`prepare_output_dir`): a run refused after
    creating one (serve's --out, then a malformed --cluster-state) removes it again if it is still
    empty, so exit 2 leaves nothing behind. A folder that existed before the run is never removed."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def remove_empty(self) -> list[str]:
        """Remove the folders created by this run that hold no file (only empty folders: serve's file
        sink makes one per kind, and a refused run lands none of its files); the removed ones."""
        removed = []
        for path in reversed(self.paths):
            for folder, _, _ in os.walk(path, topdown=False):  # the deepest first
                with contextlib.suppress(OSError):  # not empty (the run wrote there) or already gone: kept
                    os.rmdir(folder)
            if not os.path.lexists(path):
                removed.append(path)
        self.paths.clear()
        return removed


_new_folders: NewFolders | None = None  # the command line's current run (`tidewise.cli.main`); None: no run


@contextlib.contextmanager
def new_folders() -> Iterator[NewFolders]:
    """The folders `prepare_output_dir` creates while the block runs (one command-line run)."""
    global _new_folders
    outer, _new_folders = _new_folders, NewFolders()
    try:
        yield _new_folders
    finally:
        _new_folders = outer


def prepare_output_dir(path: str, *, what: str = "--out") -> str:
    """An output folder that the command fills: used if it exists, created if only its last
    component is missing; a file there or a missing parent is an InputError. A folder created
    here is removed again, when still empty, if the command then exits 2 (see `NewFolders`)."""
    path = os.fspath(path)
    if check_folder_to_fill(path, what=what):
        return path
    try:
        os.mkdir(path)
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot create it ({exc.strerror})") from None
    if _new_folders is not None:
        _new_folders.paths.append(os.path.abspath(path))
    return path


def registry_to_write(path: str, flag: str = "--registry") -> str:
    """A registry to write: an existing folder, or a new name whose parent exists (created by
    training once it has something to store, so a failed first run leaves nothing behind)."""
    check_folder_to_fill(path, what=flag)
    return path
