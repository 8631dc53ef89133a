"""Hand-written inputs of the cost report tests: two namespaces over four hours, two off-peak
(06:00, 07:00 UTC) and two peak (08:00, 09:00), small enough to price by hand."""
from __future__ import annotations

import json

import pandas as pd
import yaml

HOURS = pd.date_range("2026-11-30T06:00:00Z", periods=4, freq="1h")
GIB = 2 ** 30
PRICES = {"currency": "EUR", "timezone": "UTC", "peak_hours": "08:00-22:00",
          "cpu": {"peak": 4, "offpeak": 1}, "memory": {"peak": 0.5, "offpeak": 0.25}}
# per series: usage each hour (two samples an hour, whose mean is the hour's amount)
USAGE = {"shop/Deployment/web/app/cpu": [1, 1, 3, 3],
         "shop/Deployment/web/app/memory": [GIB] * 4,
         "etl/Deployment/nightly/job/cpu": [2, 2, 0, 0],
         "not-a-workload-id": [5, 5, 5, 5]}
TARGETS = {"shop/Deployment/web/app/cpu": [1.5, 1.5, 3.5, 3.5],
           "etl/Deployment/nightly/job/cpu": [2.5, 2.5, 0.5, 0.5]}


def _deployment(ns: str, name: str, container: str, requests: dict, replicas: int) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": container, "image": "x",
                                                           "resources": {"requests": requests}}]}}}}


def _pod(ns: str, name: str, app: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "x"}]},
            "status": {"phase": "Running"}}


def write_inputs(d) -> dict[str, str]:
    """Every input file in folder `d`; returns flag name -> path."""
    rows = []
    for sid, values in USAGE.items():
        for h, v in zip(HOURS, values):
            # 0.8 and 1.2 of the amount: the hour's mean is the amount itself
            rows += [(sid, h.isoformat(), 0.8 * v), (sid, (h + pd.Timedelta(minutes=30)).isoformat(), 1.2 * v)]
    pd.DataFrame(rows, columns=["series", "timestamp", "value"]).to_csv(d / "history.csv", index=False)
    replay = [(sid, h.isoformat(), t, 0.9 * t, 1.5 * t) for sid, ts in TARGETS.items() for h, t in zip(HOURS, ts)]
    pd.DataFrame(replay, columns=["series", "timestamp", "target", "lower_bound", "upper_bound"]) \
        .to_csv(d / "vpa.csv", index=False)
    # shop/web: 2 cores and 1 GiB x 2 running pods; etl/nightly: 2 cores x spec.replicas 1 (no pod)
    state = [_deployment("shop", "web", "app", {"cpu": "2", "memory": "1Gi"}, 3),
             _pod("shop", "web-a", "web"), _pod("shop", "web-b", "web"),
             _deployment("etl", "nightly", "job", {"cpu": "2000m"}, 1)]
    (d / "cluster.yaml").write_text(yaml.safe_dump_all(state))
    (d / "prices.yaml").write_text(yaml.safe_dump(PRICES))
    (d / "colocation.json").write_text(json.dumps({"bursts": "calibrated", "policies": {
        "none": {"batch_core_hours": 0, "goodput_core_hours": 0, "evictions": 0},
        "katalyst": {"batch_core_hours": 80, "goodput_core_hours": 70, "evictions": 9},
        "tidewise": {"batch_core_hours": 120, "goodput_core_hours": 100, "evictions": 2}}}))
    (d / "tide.json").write_text(json.dumps({"policies": {
        "watermark@low=0.3": {"node_hours_lent": 10, "late_minutes": 5, "pods_moved": 3, "goodput_core_hours": 200},
        "tidewise": {"node_hours_lent": 30, "late_minutes": 0, "pods_moved": 2, "goodput_core_hours": 700}}}))
    return {"--cost": str(d / "prices.yaml"), "--history": str(d / "history.csv"),
            "--cluster-state": str(d / "cluster.yaml"), "--vpa-replay": str(d / "vpa.csv"),
            "--colocation": str(d / "colocation.json"), "--tide": str(d / "tide.json")}
