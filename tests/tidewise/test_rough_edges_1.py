"""Rough edges a new user met (issue 25, item 7): a second, unchanged `train` reports the fleet's
decision-time backtest; no empty output folder on exit 2; every command refuses unknown keys in
every config section; `--help` points to docs a pip user has, and the example prices file ships."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from predictor.registry import load_version
from predictor.types import GLOBAL
from tidewise.cli import main
from training.decision_time import summary_lines
from training.pipeline import train

from tests.training.conftest import small_history
from tests.training.test_decision_time_training import settings as quick_settings


# --- a second, unchanged `train` -----------------------------------------------------------------

def test_a_second_unchanged_train_reports_the_fleets_decision_time_backtest(tmp_path):
    """The second run carries every series and the global model; its decision-time backtest still
    scores every series (the day-ahead side of a series choosing the global GBM needs a global model
    fitted before the held-out days: without one it dropped out, "(3 series)" of 4 here)."""
    hist = small_history(workloads=4, days=10, seed=3)
    told: list[str] = []

    class Told:  # the command line's advance: counts series, `note` tells of the fleet's long steps
        done = 0

        def __call__(self, n: int = 1) -> None:
            self.done += n

        def note(self, text: str) -> None:
            told.append(text)

    first = train(hist, str(tmp_path), quick_settings(), progress=Told())
    assert told == ["fitting the global model", "fitting and backtesting the decision-time models on the fleet"]
    chosen = [e["model"] for e in load_version(str(tmp_path)).series.values()]
    assert GLOBAL in chosen, chosen  # the premise: a series chooses the global GBM
    told.clear()
    second = train(hist, str(tmp_path), quick_settings(), progress=Told())
    # no series to train, yet the run is not silent: it says where its time goes
    assert told == ["global model carried", "fitting and backtesting the decision-time models on the fleet"]
    assert sorted(second.carried) == sorted(hist.series) and not second.refitted and not second.global_refit
    for kind in ("vpa", "hpa"):
        bt1, bt2 = first.decision_time[kind]["backtest"], second.decision_time[kind]["backtest"]
        assert bt1["series"] == bt2["series"] == len(hist.series)
        for name in ("decision_time", "day_ahead"):
            assert bt2["coverage"][name] == pytest.approx(bt1["coverage"][name], abs=0.01)
            assert min(bt2["coverage"][name]) > 0
    stored = load_version(str(tmp_path)).manifest["training"]["decision_time"]["vpa"]["backtest"]
    assert stored["series"] == len(hist.series)
    assert all(f"({len(hist.series)} series)" in line for line in summary_lines(second.decision_time))


# --- unknown keys in any config section, whatever the command ------------------------------------

COMMANDS = {
    "forecast": ["forecast", "--input", "{tmp}/h.csv", "--output", "{tmp}/f.csv"],
    "profile": ["profile", "--input", "{tmp}/h.csv"],
    "fetch": ["fetch", "--output", "{tmp}/h.csv"],
    "replay": ["replay", "vpa", "--input", "{tmp}/h.csv", "--output", "{tmp}/r.csv"],
    "serve": ["serve", "--once", "--source", "synthetic", "--sink", "file", "--out", "{tmp}/recs"],
    "enforce": ["enforce", "--once", "--dry-run", "--node", "n1"],
    "simulate": ["simulate", "colocation", "--out", "{tmp}/sim"],
}
TYPOS = [  # (file, the section named, the key named, the suggestion)
    ("prometheus:\n  urll: http://x\n", "'prometheus'", "['urll']", "did you mean 'url'"),
    ("serve:\n  vpa:\n    violation_budgte: 0.05\n", "'serve.vpa'", "['violation_budgte']", "'violation_budget'"),
    ("serve:\n  select:\n    hpa: {nmespaces: [shop]}\n", "'serve.select.hpa'", "['nmespaces']", "'namespaces'"),
    ("enforcer:\n  policy: {reserved_cpu: 2}\n", "'enforcer.policy'", "['reserved_cpu']", "'reserved_cpus'"),
    ("enforcer:\n  io: {read_bsp: 1}\n", "'enforcer.io'", "['read_bsp']", "'read_bps'"),
]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("text,section,key,hint", TYPOS, ids=[t[1].strip("'") for t in TYPOS])
def test_every_command_refuses_an_unknown_key_in_every_section(tmp_path, capsys, command, text, section, key, hint):
    cfg = tmp_path / "tw.yaml"
    cfg.write_text(text)
    argv = [a.format(tmp=tmp_path) for a in COMMANDS[command]]
    assert main(["--config", str(cfg), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    for needle in (str(cfg), f"section {section}", f"unknown key(s) {key}", hint, "valid: "):
        assert needle in err[0], (needle, err[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tw.yaml"]  # refused before anything was written


def test_a_nested_section_that_is_not_a_mapping_is_refused_by_any_command(tmp_path, capsys):
    cfg = tmp_path / "tw.yaml"
    cfg.write_text("serve:\n  loop: 30s\n")
    assert main(["--config", str(cfg), *[a.format(tmp=tmp_path) for a in COMMANDS["profile"]]]) == 2
    assert "section 'serve': loop must be a mapping of keys, not str" in capsys.readouterr().err


def _fields(cls) -> dict:
    """The real dataclass's settable fields, nested dataclasses as dicts (what the ast reader must find)."""
    import typing

    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.init:
            kind = hints[f.name]
            out[f.name] = _fields(kind) if dataclasses.is_dataclass(kind) else None
    return out


def _as_dict(keys) -> dict:
    return {k: None if v is None else _as_dict(v) for k, v in keys.fields.items()}


@pytest.mark.parametrize("section", ["enforcer", "prometheus", "serve"])
def test_the_keys_read_from_source_are_the_settings_dataclasses_fields(section):
    import importlib

    from tidewise.config_keys import ROOTS, section_keys

    module, name = ROOTS[section]
    real = _fields(getattr(importlib.import_module(module), name))
    assert _as_dict(section_keys(section)) == real
    assert real and (section == "prometheus" or any(real.values()))  # serve's and enforcer's nested sections found


def test_a_full_valid_file_loads_without_importing_the_serving_loop_or_pandas(tmp_path):
    """The node agent reads a shared file with every section: checking `serve:` and `prometheus:`
    costs it no import of autoscaler, predictor, numpy or pandas."""
    cfg = tmp_path / "tw.yaml"
    cfg.write_text("prometheus:\n  url: http://prometheus:9090\n  queries: {cpu: 'sum(x)'}\n"
                   "serve:\n  vpa: {violation_budget: 0.05}\n  loop: {interval: 30s}\n  select: {hpa: {all: true}}\n"
                   "enforcer:\n  reserved_cpus: 2\n  evict: false\n  policy: {reserved_cpus: 2}\n  io: {read_bps: 1}\n")
    code = ("import sys; from tidewise.config import load_config\n"
            f"assert set(load_config({str(cfg)!r})) == {{'prometheus', 'serve', 'enforcer'}}\n"
            "print(sorted(m for m in ('pandas', 'numpy', 'autoscaler', 'predictor', 'node_enforcer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


# --- no empty output folder on exit 2 ------------------------------------------------------------

@pytest.mark.parametrize("bad", ["cluster-state", "input"])
def test_serve_refused_after_checking_out_leaves_no_folder(tmp_path, capsys, bad):
    """`serve --sink file --out DIR` creates DIR while checking its paths; an input refused after
    that (a malformed --cluster-state, a missing --input) exits 2 and DIR is gone again."""
    (tmp_path / "bad.yaml").write_text("items: [unclosed\n")
    (tmp_path / "ok.yaml").write_text("items: []\n")
    state, source = (("bad.yaml", ["--source", "synthetic"]) if bad == "cluster-state"
                     else ("ok.yaml", ["--source", "file", "--input", str(tmp_path / "missing.csv")]))
    argv = ["serve", "--once", "--cluster-state", str(tmp_path / state), *source, "--sink", "file",
            "--out", str(tmp_path / "recs")]
    assert main(argv) == 2
    assert "error: --" in capsys.readouterr().err
    assert not (tmp_path / "recs").exists()
    (tmp_path / "recs").mkdir()  # a folder the user made is theirs: kept, empty or not
    assert main(argv) == 2 and (tmp_path / "recs").is_dir()


def test_only_empty_folders_this_run_created_are_removed(tmp_path):
    from tidewise.paths import new_folders, prepare_output_dir

    (tmp_path / "theirs").mkdir()
    with new_folders() as made:
        for name in ("theirs", "empty", "written"):
            prepare_output_dir(str(tmp_path / name))
        (tmp_path / "written" / "a.yaml").write_text("x")
        assert made.paths == [str(tmp_path / "empty"), str(tmp_path / "written")]
        assert made.remove_empty() == [str(tmp_path / "empty")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs", "written"]
    prepare_output_dir(str(tmp_path / "outside"))  # outside a command-line run: nothing tracked, nothing removed
    assert (tmp_path / "outside").is_dir()


# --- the docs and the example prices file, installed -----------------------------------------------

def test_help_points_to_the_installed_docs_not_to_a_readme_a_pip_user_lacks(capsys):
    from tests.conftest import ROOT
    from tidewise.commands.docs import docs_folder

    assert docs_folder() == os.path.join(ROOT, "docs")  # from a checkout: its own docs, always current
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "README.md" not in out and f"Docs: `tidewise docs` (in {docs_folder()})" in out


def test_docs_lists_prints_and_locates_each_topic(capsys):
    from studies.cost.prices import load_prices
    from tests.conftest import ROOT

    assert main(["docs"]) == 0
    listed = capsys.readouterr().out
    for topic in ("readme", "serve-vpa", "cost-report", "prices.example.yaml"):
        assert topic in listed
    assert main(["docs", "prices.example.yaml"]) == 0
    assert capsys.readouterr().out == open(os.path.join(ROOT, "docs", "prices.example.yaml")).read()
    assert main(["docs", "--path", "prices.example.yaml"]) == 0
    assert load_prices(capsys.readouterr().out.strip()).currency  # the example is a valid prices file
    assert main(["docs", "--path", "README"]) == 0 and capsys.readouterr().out.strip() == os.path.join(ROOT, "README.md")
    assert main(["docs", "cost-reprt"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'cost-report'" in err and len(err.strip().splitlines()) == 1


def test_every_doc_and_the_prices_example_are_in_the_installed_files():
    """pyproject's data-files lay out in <prefix>/share/tidewise what `tidewise docs` reads, as in the
    checkout: every docs/*.md (a new page ships without a pyproject edit) and the prices example in
    docs/, the README beside it, and every file of deploy/ a doc links to (the manifests, dashboards
    and kustomize overlays), each in the folder of its checkout path."""
    import glob
    import tomllib

    from tests.conftest import ROOT
    from tidewise.commands.docs import INSTALLED

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        data_files = tomllib.load(fh)["tool"]["setuptools"]["data-files"]
    share = os.path.dirname(INSTALLED).replace(os.sep, "/")
    shipped = set()
    for folder, patterns in data_files.items():
        for f in (os.path.relpath(f, ROOT) for p in patterns for f in glob.glob(os.path.join(ROOT, p))):
            assert os.path.join(share, os.path.dirname(f)).rstrip("/") == folder, (f, folder)  # the checkout's layout
            shipped.add(f)
    wanted = {os.path.relpath(f, ROOT) for f in glob.glob(os.path.join(ROOT, "docs", "*.md"))}
    folders = [d for top in ("deploy", "kustomize") for d, _, _ in os.walk(os.path.join(ROOT, top))]  # every level
    wanted |= {os.path.relpath(f, ROOT) for d in folders for f in glob.glob(os.path.join(d, "*")) if os.path.isfile(f)}
    assert wanted | {"README.md", os.path.join("docs", "prices.example.yaml")} <= shipped, wanted - shipped


def test_the_cost_reports_help_says_where_the_prices_example_is(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "`tidewise docs prices.example.yaml > prices.yaml`" in out and "docs/prices.example.yaml" not in out
