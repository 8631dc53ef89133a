"""What every study's page shares beyond `reports.pages` (the style, frame and embedded figures):
the traces' sources and the label of a policy setting."""
from __future__ import annotations

SOURCES = ("Traces: Cloud Cluster Capacity Dataset (Apache-2.0), Donut sample KPIs (MIT), Numenta Anomaly "
           "Benchmark (MIT), WorldCup98 and NASA-KSC 1995 request logs (ITA); see ../shared/data/*/SOURCE.md.")


def family(label: str) -> str:
    """A setting's policy: `tidewise@margin=0.1` -> `tidewise`."""
    return label.split("@")[0]


def is_default(label: str) -> bool:
    """Whether a setting is its policy's default (not a sweep point)."""
    return "@" not in label
