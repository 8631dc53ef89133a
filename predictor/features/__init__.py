"""See DESIGN.md for what this package owns."""
