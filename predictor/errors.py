"""Errors that the predictor raises for bad input; the command line prints them as one clear line.

The classes live in `contracts.errors` (standard library only, so the node agent shares them
without importing the predictor); they are re-exported here under their historical names.
"""
from contracts.errors import InputError, SourceError, TidewiseError

__all__ = ["InputError", "SourceError", "TidewiseError"]
