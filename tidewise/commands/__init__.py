"""One module per subcommand: `register(subparsers)` adds its parser and sets `func`."""
