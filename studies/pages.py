"""Self-contained HTML pages for the autoscaler's reports (replay, simulation): a shared style and
matplotlib figures embedded as base64 PNG, so that a page opens with nothing fetched."""
from __future__ import annotations

import base64
import io
from typing import Any

CSS = """
body { font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 1.5em; color: #222; max-width: 1100px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th { background: #f0f0f0; } td.k { text-align: left; font-family: monospace; }
.good { color: #1a7f37; } .bad { color: #b42318; } .meta { color: #666; font-size: 0.85em; }
.plot { display: inline-block; margin: 0.4em; } .plot p { font-size: 0.8em; font-family: monospace; margin: 0.2em 0; }
"""


def figure_png(fig: Any, dpi: int = 72) -> str:
    """A matplotlib figure as base64 PNG text, for `<img src="data:image/png;base64,...">`."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")
