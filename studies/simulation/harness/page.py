"""What every study's page shares beyond `reports.pages` (the style, frame and embedded figures):
the data the services replay, named as the study read it, and the label of a policy setting."""
from __future__ import annotations

SOURCES = ("Traces: Cloud Cluster Capacity Dataset (Apache-2.0), Donut sample KPIs (MIT), Numenta Anomaly "
           "Benchmark (MIT), WorldCup98 and NASA-KSC 1995 request logs (ITA); see ../shared/data/*/SOURCE.md.")


def replaying(history: dict | None, traces: int) -> str:
    """What the services replay, for a page's header: the public traces, or the workloads of the
    history file the study read (`history`: `harness.history.summary`, None for the traces)."""
    if history is None:
        return f"replaying {traces} real traces"
    return f"replaying {history['workloads']} workloads of the history {history['file']}"


def data_note(history: dict | None) -> str:
    """The sentence naming the data: the traces' sources, or the history file with what was read from it."""
    if history is None:
        return SOURCES
    left_out = f"; left out, too short for the simulated days: {', '.join(history['skipped'])}" \
        if history["skipped"] else ""
    return (f"History: {history['file']} at {history['step']}, {history['workloads']} workloads as "
            f"{history['pods']} pods, requests read from the file for {history['requests_from_file']} of them"
            f"{left_out}.")


def family(label: str) -> str:
    """A setting's policy: `tidewise@margin=0.1` -> `tidewise`."""
    return label.split("@")[0]


def is_default(label: str) -> bool:
    """Whether a setting is its policy's default (not a sweep point)."""
    return "@" not in label
