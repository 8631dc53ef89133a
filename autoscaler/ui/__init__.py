"""The live page of `tidewise serve --ui` (docs/serve-ui.md): what the latest completed run decided,
per namespace and workload, read-only over HTTP. `snapshot.py` turns a run into the page's data
(also served as /decisions.json), `charts.py` draws a workload's forecast, `pages.py` writes the
HTML and `server.py` serves it from a thread."""
