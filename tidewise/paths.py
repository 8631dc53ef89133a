"""Checks of the paths given on the command line, made before any work so that a typo costs
nothing: outputs (see `predictor.atomic`), output folders and model registries."""
from __future__ import annotations

import os

from contracts.errors import InputError
from predictor.atomic import check_folder_to_fill, check_output_path, prepare_output_dir

__all__ = ["check_output_path", "prepare_output_dir", "input_file", "existing_registry", "registry_to_write"]


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


def registry_to_write(path: str, flag: str = "--registry") -> str:
    """A registry to write: an existing folder, or a new name whose parent exists (created by
    training once it has something to store, so a failed first run leaves nothing behind)."""
    check_folder_to_fill(path, what=flag)
    return path
