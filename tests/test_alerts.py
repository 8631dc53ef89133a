"""deploy/alerts.yaml and deploy/alerts.rules.yaml: the same rules twice, valid for promtool and the
PrometheusRule CRD, every alert unit-tested firing and not firing (tests/alerts/alerts_test.yaml),
written only on metrics the code exports, each with its runbook section in docs/alerts.md at an
absolute address (one base, set once in deploy/kustomization.yaml)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import urllib.parse
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from autoscaler.metrics import REGISTRY_REFUSALS, Metrics
from autoscaler.output import sinks
from autoscaler.routines.context import FROZEN, KILLED, OK
from extender.metrics import ExtenderMetrics
from node_enforcer.metrics import EVICTION_REASONS, STAGES, EnforcerMetrics
from tests.conftest import ROOT

RULE_FILE = os.path.join(ROOT, "deploy", "alerts.rules.yaml")
UNIT_TESTS = os.path.join(ROOT, "tests", "alerts", "alerts_test.yaml")
RUNBOOK = os.path.join(ROOT, "docs", "alerts.md")
SCRAPE_LABELS = {"job", "instance", "pod", "namespace"}  # added by Prometheus, not by the code
# the packages whose processes serve /metrics; a metric defined anywhere else is exported by nothing
METRIC_PACKAGES = ("autoscaler", "extender", "node_enforcer", "tidewise", "contracts", "predictor")


def _load(path: str) -> Any:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


RULE = _load(os.path.join(ROOT, "deploy", "alerts.yaml"))
RULES = _load(RULE_FILE)
ALERTS = [r for g in RULES["groups"] for r in g["rules"] if "alert" in r]
# the runbooks' base: one literal of deploy/kustomization.yaml, the default of the plain files
[RUNBOOK_BASE] = [lit.split("=", 1)[1] for g in _load(os.path.join(ROOT, "deploy", "kustomization.yaml"))["configMapGenerator"]
                  if g["name"] == "tidewise-runbooks" for lit in g["literals"] if lit.startswith("base=")]


def _anchor(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading: lower case, spaces to hyphens,
    punctuation but hyphens and underscores dropped."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _check_runbook_urls(alerts: list[dict[str, Any]], base: str) -> None:
    """Every alert's runbook_url is `base` + `#` + the anchor of its own section of docs/alerts.md,
    and absolute: Alertmanager and the pages it feeds open it as it is, from anywhere."""
    anchors = {_anchor(h) for h in _runbook_sections()}
    for a in alerts:
        url = a["annotations"]["runbook_url"]
        parts = urllib.parse.urlsplit(url)
        assert parts.scheme == "https" and parts.netloc and parts.path.endswith("/docs/alerts.md"), url
        assert url == f"{base}#{a['alert'].lower()}" and parts.fragment in anchors, url


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not on PATH: install Debian's `prometheus` package (make test's system-deps "
                    "line does, `apt-get install prometheus`); the alerts are checked with it, it is not optional")
    return path


def _promtool_run(*args: str, cwd: str = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


SUFFIXES = {"counter": {"_total": set(), "_created": set()}, "gauge": {"": set()},
            "histogram": {"_bucket": {"le"}, "_count": set(), "_sum": set(), "_created": set()}}


def _families() -> list[tuple[str, str, set[str]]]:
    """(name, type, label names) of every metric in serve's, the extender's and the node agent's real registries."""
    out = []
    for owner in (Metrics(CollectorRegistry()), ExtenderMetrics(CollectorRegistry()),
                  EnforcerMetrics("node-1", CollectorRegistry())):
        for m in vars(owner).values():
            if isinstance(m, MetricWrapperBase):
                (family,) = m.describe()
                # prometheus-client shows label names in collect() only once a child exists
                out.append((family.name, family.type, set(m._labelnames)))
    return out


def exported_metrics() -> dict[str, set[str]]:
    """Sample name (a counter's `_total`, a histogram's `_bucket`...) -> its label names."""
    return {name + suffix: labels | extra for name, kind, labels in _families()
            for suffix, extra in SUFFIXES[kind].items()}


def _defined_metric_names() -> set[str]:
    """Every `Counter("name"`, `Gauge("name"`, `Histogram("name"`, `Summary("name"` in the packages."""
    pattern = re.compile(r"\b(?:Counter|Gauge|Histogram|Summary)\(\s*\"([a-zA-Z_:][a-zA-Z0-9_:]*)\"")
    names: set[str] = set()
    for package in METRIC_PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for f in files:
                if f.endswith(".py"):
                    with open(os.path.join(folder, f), encoding="utf-8") as fh:
                        names.update(pattern.findall(fh.read()))
    return names


KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers left once strings, label matchers,
    ranges, grouping clauses and offsets are taken out, other than functions and keywords."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\boffset\s+[0-9a-z]+", " ", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        if e[m.end():].lstrip().startswith("(") or m.group(0).lower() in KEYWORDS:
            continue  # a function or an aggregation, or an operator
        names.add(m.group(0))
    return names


def _runbook_sections() -> dict[str, str]:
    text = open(RUNBOOK, encoding="utf-8").read()
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


# the two files -------------------------------------------------------------------------------------
def test_the_prometheus_rule_holds_the_same_groups_as_the_rules_file():
    assert RULE["spec"]["groups"] == RULES["groups"]
    assert set(RULES) == {"groups"}


def test_the_prometheus_rule_has_the_fields_its_crd_requires():
    assert RULE["apiVersion"] == "monitoring.coreos.com/v1" and RULE["kind"] == "PrometheusRule"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", RULE["metadata"]["name"])
    groups = RULE["spec"]["groups"]
    assert groups and len({g["name"] for g in groups}) == len(groups)
    duration = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$")
    for g in groups:
        assert isinstance(g["name"], str) and g["name"] and g["rules"], g
        for r in g["rules"]:
            assert ("alert" in r) != ("record" in r), r  # exactly one of the two
            assert isinstance(r["expr"], str) and r["expr"].strip(), r
            assert "for" not in r or duration.match(r["for"]), r
            assert all(isinstance(v, str) for v in {**r.get("labels", {}), **r.get("annotations", {})}.values()), r


def test_every_alert_has_a_for_a_severity_a_summary_a_description_and_its_runbook_url():
    assert len(ALERTS) >= 10
    names = [a["alert"] for a in ALERTS]
    assert len(set(names)) == len(names), "alert names repeat"
    for a in ALERTS:
        assert a.get("for"), a["alert"]
        assert a["labels"]["severity"] in ("critical", "warning", "info"), a["alert"]
        assert {"summary", "description", "runbook_url"} <= set(a["annotations"]), a["alert"]
    _check_runbook_urls(ALERTS, RUNBOOK_BASE)


def test_the_runbook_base_is_set_once_in_kustomize(tmp_path):
    """deploy/alerts.yaml added to the base's resources, with another base in the tidewise-runbooks
    literal: every rendered runbook_url carries it, anchors kept; the generator itself is not applied."""
    from tests.test_kustomize import render

    copied = shutil.copytree(os.path.join(ROOT, "deploy"), tmp_path / "deploy")
    k = _load(str(copied / "kustomization.yaml"))
    k["resources"].append("alerts.yaml")
    (copied / "kustomization.yaml").write_text(yaml.safe_dump(k))
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in render(str(copied))}
    rule = rendered[("PrometheusRule", "tidewise")]
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) == len(ALERTS)
    _check_runbook_urls(alerts, RUNBOOK_BASE)  # the shipped base, as the plain files have it
    elsewhere = "https://runbooks.example.com/platform/tidewise/docs/alerts.md"
    for g in k["configMapGenerator"]:
        if g["name"] == "tidewise-runbooks":
            g["literals"] = [f"base={elsewhere}"]
    (copied / "kustomization.yaml").write_text(yaml.safe_dump(k))
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in render(str(copied))}
    rule = rendered[("PrometheusRule", "tidewise")]
    _check_runbook_urls([r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r], elsewhere)
    assert not [key for key in rendered if key[1].startswith("tidewise-runbooks")]


def test_every_alert_has_its_runbook_section_and_every_section_an_alert():
    sections = _runbook_sections()
    names = {a["alert"] for a in ALERTS}
    for name in names:
        assert name in sections, f"docs/alerts.md has no `## {name}`"
        body = sections[name]
        for part in ("**What it means.**", "**Check first.**", "**Fix or silence.**"):
            assert part in body, f"docs/alerts.md, {name}: no {part}"
    stale = {s for s in sections if s.startswith("Tidewise")} - names
    assert not stale, f"docs/alerts.md has runbooks of alerts that do not exist: {stale}"


# promtool -------------------------------------------------------------------------------------------
def test_promtool_checks_the_rules_file():
    res = _promtool_run("check", "rules", RULE_FILE)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in RULES['groups'])} rules found" in res.stdout


def test_promtool_unit_tests_pass():
    res = _promtool_run("test", "rules", os.path.basename(UNIT_TESTS), cwd=os.path.dirname(UNIT_TESTS))
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr


def test_the_unit_tests_read_the_shipped_rules_file():
    tests = _load(UNIT_TESTS)
    files = [os.path.normpath(os.path.join(os.path.dirname(UNIT_TESTS), f)) for f in tests["rule_files"]]
    assert files == [RULE_FILE]


def test_every_alert_is_unit_tested_firing_and_not_firing():
    cases: dict[str, set[bool]] = {}
    for t in _load(UNIT_TESTS)["tests"]:
        for case in t.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    missing = {a["alert"]: sorted({True, False} - cases.get(a["alert"], set())) for a in ALERTS
               if cases.get(a["alert"]) != {True, False}}
    assert not missing, f"alerts without a firing (True) or a not-firing (False) case: {missing}"
    assert set(cases) <= {a["alert"] for a in ALERTS}, "unit tests of alerts that do not exist"


# the metrics ----------------------------------------------------------------------------------------
def test_the_expression_parser_finds_the_metric_names():
    expr = ('(time() - max without (instance, pod) (tidewise_last_success_timestamp_seconds) > 900) and '
            'sum by (le) (rate(tidewise_runs_total{outcome="frozen", x=~"a|b"}[15m] offset 1h)) unless on() up')
    assert metric_names(expr) == {"tidewise_last_success_timestamp_seconds", "tidewise_runs_total", "up"}


def test_the_registries_are_every_metric_the_code_defines():
    """A metric defined outside the three registries must be added to `_families` to alert on it."""
    assert _defined_metric_names() == {name for name, _, _ in _families()}


def test_every_metric_an_expression_reads_is_exported():
    exported = exported_metrics()
    for a in ALERTS:
        used = metric_names(a["expr"])
        assert used, a["alert"]
        assert used <= set(exported), f"{a['alert']}: {sorted(used - set(exported))} are not exported by the code"


def test_every_label_an_expression_matches_is_exported_with_values_the_code_writes():
    exported = exported_metrics()
    outcomes = {"tidewise_runs_total": {OK, FROZEN, KILLED},
                "tidewise_writes_total": {sinks.WRITTEN, sinks.DRY_RUN, sinks.NOT_FOUND, sinks.FORBIDDEN,
                                          sinks.THROTTLED, sinks.CONFLICT, sinks.FAILED}}
    for a in ALERTS:
        for name, matchers in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}", a["expr"]):
            for label, op, value in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', matchers):
                assert label in exported[name], f"{a['alert']}: {name} has no label {label}"
                if label == "outcome":
                    assert set(value.split("|")) <= outcomes[name], f"{a['alert']}: {value}"


def test_the_synthetic_series_are_named_and_labelled_as_the_code_exports_them():
    exported = exported_metrics()
    for t in _load(UNIT_TESTS)["tests"]:
        for s in t["input_series"]:
            name, labels = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}", s["series"]).groups()
            keys = set(re.findall(r'(\w+)="', labels))
            assert name in exported, f"{s['series']}: not a metric the code exports"
            # a label of the metric's own that a scrape label shadows is stored as exported_<label>
            own = {k for k in keys if not k.startswith("exported_")} - SCRAPE_LABELS
            own |= {k[len("exported_"):] for k in keys if k.startswith("exported_")}
            assert own == exported[name], f"{s['series']}: labels {keys} vs {exported[name]}"


def test_the_synthetic_series_carry_label_values_the_code_writes():
    values = {("tidewise_enforcer_errors_total", "stage"): set(STAGES),
              ("tidewise_enforcer_evictions_total", "reason"): set(EVICTION_REASONS),
              ("tidewise_registry_refused_total", "reason"): set(REGISTRY_REFUSALS)}
    seen = set()
    for t in _load(UNIT_TESTS)["tests"]:
        for s in t["input_series"]:
            name, labels = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}", s["series"]).groups()
            for label, value in re.findall(r'(\w+)="([^"]*)"', labels):
                if (name, label) in values:
                    assert value in values[name, label], f"{s['series']}: {label}={value!r} is never written"
                    seen.add((name, label))
    assert seen == set(values)
