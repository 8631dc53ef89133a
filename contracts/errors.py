"""Errors a user can fix; the command line prints them as one clear line (exit 2), never a traceback.

Defined here rather than in `predictor` so that the node agent and the Kubernetes error classes can
subclass them without importing the predictor; `predictor.errors` re-exports them.
"""


class TidewiseError(Exception):
    """Base class: a problem the user can fix; the message says what was wrong and what to do."""


class InputError(TidewiseError):
    """An input file, flag or frame is malformed (names the input, the row and the fix)."""


class SourceError(TidewiseError):
    """A history source (Prometheus, file) could not be read."""
