"""The tide study (issue 17): whole nodes lent to batch and handed back (docs/tide-simulator.md)."""
