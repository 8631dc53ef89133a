"""Errors that the predictor raises for bad input; the command line prints them as one clear line."""


class TidewiseError(Exception):
    """Base class: a problem the user can fix; the message says what was wrong and what to do."""


class InputError(TidewiseError):
    """An input file, flag or frame is malformed (names the input, the row and the fix)."""


class SourceError(TidewiseError):
    """A history source (Prometheus, file) could not be read."""
