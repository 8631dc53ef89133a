"""The `tidewise` command line: parsing, settings, progress and output formatting only."""

__version__ = "0.1.0"
