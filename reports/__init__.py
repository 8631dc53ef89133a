"""Self-contained HTML pages (style, frame, tables, embedded figures): presentation only, shared by
the forecast report (`training`) and the offline studies (`studies`), which import nothing from
each other's side of it (tests/test_layout.py)."""
