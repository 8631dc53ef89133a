"""Issue 24 item 3, serve side: the violation budget (annotation or config) carried into each VPA
decision and its reason, and serve's /metrics reporting it against the achieved rate."""
import numpy as np
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.logic.budget import budget_for, violation_rate
from autoscaler.metrics import Metrics
from autoscaler.model.cluster import container_requests, meta
from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.loop import OK, ServingLoop
from autoscaler.settings import VpaSettings
from contracts.annotations import BUDGET_ANNOTATION
from contracts.quantity import to_units
from tests.autoscaler.conftest import END, StaticCluster, fast_settings, source_of

NOW = pd.Timestamp("2026-11-02T00:00:00Z")


def test_a_well_formed_annotation_sets_the_budget_and_a_malformed_one_never_grants_more():
    assert budget_for("0.02", 0.05) == (0.02, "violation budget 0.02 (annotation)")
    assert budget_for("0.5", 0.05)[0] == 0.5
    assert budget_for(None, 0.05) == (0.05, "violation budget 0.05 (vpa.violation_budget)")
    for bad in ("0.6", "0", "-0.1", "nan", "inf", "lots", "5%", ""):
        budget, why = budget_for(bad, 0.05)
        assert budget == 0.05 and "ignored" in why and "vpa.violation_budget" in why, bad


def test_the_achieved_rate_is_the_share_of_the_last_day_over_the_request():
    idx = pd.date_range(NOW - pd.Timedelta("2D"), NOW, freq="5min", inclusive="right")
    usage = pd.Series(1.0, index=idx)  # 2 replicas x 0.5 core: exactly at a 500m request
    usage[idx > NOW - pd.Timedelta("2h")] = 1.2  # the last 24 steps over it
    usage[idx <= NOW - pd.Timedelta("1D")] = 5.0  # over it too, but more than a day ago
    assert violation_rate(usage, 2, 500, "cpu", NOW) == pytest.approx(24 / 288)
    assert violation_rate(usage, 2, None, "cpu", NOW) is None
    # memory in bytes: 0.5 GiB a pod at the least, over a request one byte under it at every step
    assert violation_rate(usage * 2**30, 2, 2**29 - 1, "memory", NOW) == pytest.approx(1.0)


@pytest.mark.parametrize("value", [0, 0.6, -1, "low"])
def test_a_bad_config_budget_is_refused_with_its_key(value):
    with pytest.raises(ValueError, match="violation_budget"):
        VpaSettings(violation_budget=value).check()


def _gauges(metrics: Metrics, name: str) -> dict[tuple[str, str, str, str], float]:
    fams = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    return {(s.labels["namespace"], s.labels["vpa"], s.labels["container"], s.labels["resource"]): s.value
            for s in fams[name].samples}


def _expected_rate(history, rep, d, container, res, request_units):
    """The achieved rate computed again from the history: the last day's usage per replica over the request."""
    y = history.series[f"{d.namespace}/{d.target_kind}/{d.target_name}/{container}/{res}"]
    day = y[(y.index > rep.now - pd.Timedelta("1D")) & (y.index <= rep.now)].dropna()
    return float(np.mean(day.to_numpy() / d.replicas * (1000 if res == "cpu" else 1) > request_units))


def _owned_by(pod, name):
    return any(r.get("name", "").startswith(f"{name}-") for r in meta(pod).get("ownerReferences") or [])


def test_serve_reports_each_vpa_budget_and_achieved_rate_in_metrics_and_reasons(objects, history):
    vpas = [o for o in objects if o["kind"] == "VerticalPodAutoscaler"]
    meta(vpas[0]).setdefault("annotations", {})[BUDGET_ANNOTATION] = "0.02"
    meta(vpas[1]).setdefault("annotations", {})[BUDGET_ANNOTATION] = "generous"
    first, second, third = (v["spec"]["targetRef"]["name"] for v in vpas[:3])
    for o in objects:  # the first workload's pods run with a request of their own; the third has no pods
        if o["kind"] == "Pod" and _owned_by(o, first):
            for c in o["spec"]["containers"]:
                c["resources"]["requests"]["memory"] = "64Mi"
    objects = [o for o in objects if not (o["kind"] == "Pod" and _owned_by(o, third))]
    metrics = Metrics(CollectorRegistry())
    loop = ServingLoop(fast_settings(), source_of(history), StaticCluster(objects), DryRunSink(), metrics=metrics)
    rep = loop.run_once()
    assert rep.outcome == OK, rep.reason
    budgets, rates = _gauges(metrics, "tidewise_vpa_violation_budget"), _gauges(metrics, "tidewise_vpa_violation_rate")
    names = [meta(v)["name"] for v in vpas[:3]]
    assert {v for k, v in budgets.items() if k[1] == names[0]} == {0.02}
    assert {v for k, v in budgets.items() if k[1] == names[1]} == {0.05}  # malformed: the config's budget
    d = next(d for d in rep.vpa if d.name == names[1])
    assert all("'generous' is not a number in (0, 0.5], ignored" in why for r in d.reasons().values() for why in r.values())
    # pods of the workload: their own requests; none: the template's
    workloads = {meta(o)["name"]: o for o in objects if o["kind"] in ("Deployment", "StatefulSet")}
    for name, target, source in ((names[0], first, "the pods' own requests"), (names[2], third, "the pod template's")):
        d = next(d for d in rep.vpa if d.name == name)
        c = d.containers[0]
        rec = c.resources["memory"]
        request = 64 * 2**20 if name == names[0] else \
            to_units("memory", container_requests(workloads[target])[c.container]["memory"])
        expected = _expected_rate(history, rep, d, c.container, "memory", request)
        assert rates[(d.namespace, d.name, c.container, "memory")] == pytest.approx(expected) == rec.violation_rate
        assert source in rec.reason.summary()
    assert rates[(d.namespace, names[0], c.container, "memory")] > 0.5  # 64Mi is far under the usage
