"""serve's registry metrics (issue 25): a refused registry version increments
tidewise_registry_refused_total{reason}, and tidewise_registry_version_info names the version served.
The loop runs in process with real registry versions on disk and serve's real metrics."""
from __future__ import annotations

import ast
import datetime as dt
import hashlib
import json
import os
import pathlib

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.input.registry import RegistryReader
from autoscaler.metrics import REGISTRY_REFUSALS, Metrics
from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.loop import OK, ServingLoop
from tests.autoscaler.conftest import StaticCluster, fast_settings, source_of

registry = pytest.importorskip("predictor.registry")
QS = (0.5, 0.9, 0.95, 0.99)
WINDOW = ("2026-10-24T00:00:00Z", "2026-11-02T00:00:00Z")


def write(reg_dir, series, minute, key=None):
    return registry.write_version(str(reg_dir), quantiles=QS, series=series, step_seconds=300, data_window=WINDOW,
                                  now=dt.datetime(2026, 11, 2, 0, minute, tzinfo=dt.timezone.utc), key=key)


def scraped(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def refused(metrics: Metrics, reason: str) -> float:
    return scraped(metrics)[("tidewise_registry_refused_total", (("reason", reason),))]


def versions(metrics: Metrics) -> dict[str, float]:
    return {dict(labels)["version"]: v for (name, labels), v in scraped(metrics).items()
            if name == "tidewise_registry_version_info"}


def test_a_refused_version_is_counted_and_the_version_served_is_named(objects, history, tmp_path):
    series = {k: {"model": "seasonal_naive_daily", "shifts": [0.0] * len(QS)} for k in history.series}
    v1 = write(tmp_path, series, 0)
    metrics = Metrics(CollectorRegistry())
    s = fast_settings()
    s.loop.forecast_refresh = None
    loop = ServingLoop(s, source_of(history), StaticCluster(objects), DryRunSink(), registry_dir=str(tmp_path),
                       metrics=metrics)
    assert loop.run_once().outcome == OK
    assert versions(metrics) == {v1: 1} and all(refused(metrics, r) == 0 for r in REGISTRY_REFUSALS)
    v2 = write(tmp_path, series, 5)
    with open(os.path.join(tmp_path, v2, "series.json"), "a") as fh:
        fh.write(" ")  # the new version fails its checksum: refused, v1 keeps serving
    rep = loop.run_once()
    assert rep.outcome == OK and rep.registry == v1
    assert refused(metrics, "digest") == 1 and versions(metrics) == {v1: 1}
    loop.run_once()  # `latest` still names the refused version: verified, and refused, again
    assert refused(metrics, "digest") == 2
    v3 = write(tmp_path, series, 10)
    loop.run_once()
    assert versions(metrics) == {v3: 1} and refused(metrics, "digest") == 2


class Events:
    def __init__(self) -> None:
        self.refused: list[str] = []
        self.loaded: list[str] = []

    def registry_refused(self, reason: str) -> None:
        self.refused.append(reason)

    def registry_loaded(self, version: str) -> None:
        self.loaded.append(version)


def test_each_refusal_gets_its_reason(tmp_path):
    key = tmp_path / "key"
    key.write_bytes(b"k" * 32)
    reg = tmp_path / "reg"
    unsigned = write(reg, {}, 0)
    ev = Events()
    with pytest.raises(registry.RegistryError):
        RegistryReader(str(key), ev)(str(reg))  # the only version is not signed, but a key is given
    assert ev.refused == ["signature"] and ev.loaded == []
    signed = write(reg, {}, 5, key=b"k" * 32)
    assert RegistryReader(str(key), ev)(str(reg)).version == signed and ev.loaded == [signed]
    assert ev.refused == ["signature"]  # `latest` verified first: the unsigned one was not tried

    ev = Events()
    with pytest.raises(registry.RegistryError):
        RegistryReader(None, ev)(str(tmp_path / "nothing"))
    assert ev.refused == ["missing"]
    key.unlink()
    with pytest.raises(registry.RegistryError):
        RegistryReader(str(key), ev)(str(reg))  # the key file (a Secret) vanished
    assert ev.refused == ["missing", "key"]

    manifest = reg / unsigned / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["schema_version"] = 999
    manifest.write_text(json.dumps(doc))
    ev = Events()
    os.remove(reg / "latest")
    os.symlink(unsigned, reg / "latest")
    RegistryReader(None, ev)(str(reg))  # latest's manifest no longer matches its digest; the signed one loads
    assert ev.refused == ["digest"] and ev.loaded == [signed]


def resealed(version_dir, **changes) -> None:
    """The version's manifest with `changes`, its digest rewritten to match (a checksum-valid edit)."""
    manifest = version_dir / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), **changes}))
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()
    (version_dir / "manifest.sha256").write_text(f"{digest}  manifest.json\n")


@pytest.mark.parametrize("changes,reason", [
    ({"schema_version": 999}, "schema"),  # a manifest of another tidewise, checksums intact
    ({"artifacts": {}}, "schema"),
    ({"artifacts": {"../outside.json": "0" * 64}}, "schema"),
])
def test_schema_refusals_carry_their_reason(tmp_path, changes, reason):
    reg = tmp_path / "reg"
    v = write(reg, {}, 0)
    resealed(reg / v, **changes)
    ev = Events()
    with pytest.raises(registry.RegistryError, match="no version that verifies"):
        RegistryReader(None, ev)(str(reg))
    assert ev.refused == [reason]  # the version's own refusal; the "none verifies" after it is not counted again


def test_every_reason_the_registry_raises_is_a_metric_label():
    """Each `reason=` a RegistryError is raised with in predictor/registry is a label value of
    tidewise_registry_refused_total, so no refusal is counted under a label the alert does not know."""
    root = pathlib.Path(registry.__file__).parent
    raised = {kw.value.value for f in root.glob("*.py") for node in ast.walk(ast.parse(f.read_text()))
              if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("RegistryError", "UnloadableVersion")
              for kw in node.keywords if kw.arg == "reason"}
    assert {"missing", "digest", "signature", "schema", "load"} <= raised <= set(REGISTRY_REFUSALS)
