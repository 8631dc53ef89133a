"""The command line where people type: options on either side of a subcommand (`tidewise replay vpa
--choose-by-cost` as the README writes it, `tidewise serve --config FILE`), every command form the
README and docs show, and an empty path refused before any work by every path option of every
command."""
from __future__ import annotations

import argparse
import glob
import os
import re
import shlex

import pytest

from tests.conftest import ROOT, run_cli, run_main
from tests.tidewise.test_bad_inputs import history_csv, one_line_error
from tests.tidewise.test_replay_cli import MODEL, tidal_frame
from tidewise.arguments import path_kind, subparsers
from tidewise.cli import COMMANDS, build_parser

# replay's options of both kinds, each with a value to give it (None: a flag)
REPLAY_SHARED = {"--decision-model": "day-ahead", "--choose-by-cost": None, "--cost-window": "1d",
                 "--violation-budget": "0.1", "--violation-weight": "3", "--change-weight": "0.02"}
IO = ["--input", "in.csv", "--output", "out.csv"]


def leaves(parser: argparse.ArgumentParser, chain: tuple[str, ...] = ()):
    """(the subcommand words, the parser) of every command, at every depth."""
    yield chain, parser
    for name, sub in subparsers(parser):
        yield from leaves(sub, chain + (name,))


def namespace(argv: list[str]) -> dict:
    args = vars(build_parser().parse_args(argv))
    return {k: v for k, v in args.items() if k != "func"}


@pytest.mark.parametrize("kind", ["vpa", "hpa"])
@pytest.mark.parametrize("option", sorted(REPLAY_SHARED))
def test_every_replay_option_works_after_the_kind_as_before_it(kind, option):
    given = [option] + ([REPLAY_SHARED[option]] if REPLAY_SHARED[option] else [])
    before = namespace(["replay", *given, kind, *IO])
    after = namespace(["replay", kind, *given, *IO])
    assert after == before
    assert after != namespace(["replay", kind, *IO])  # the option was read, not dropped


def test_replay_options_given_on_both_sides_take_the_later():
    assert namespace(["replay", "--violation-budget", "0.1", "vpa", "--violation-budget", "0.2", *IO])[
        "violation_budget"] == 0.2


def test_the_global_options_work_after_every_command_at_every_depth():
    from tidewise.arguments import count

    commands = [chain for chain, parser in leaves(build_parser()) if chain and not any(subparsers(parser))]
    assert len(commands) == len(COMMANDS) - 2 + 2 + 3  # replay vpa|hpa, simulate colocation|tide|rebalance
    for chain in commands:
        args = structural(build_parser()).parse_args([*chain, "--config", "x.yaml", "-vv"])
        assert (args.config, count(args, "verbose")) == ("x.yaml", 2), chain
    args = build_parser().parse_args(["-v", "replay", "-v", "vpa", "-v", *IO])
    assert count(args, "verbose") == 3  # -v adds up wherever it is given
    assert build_parser().parse_args(["--config", "a.yaml", "replay", "vpa", *IO]).config == "a.yaml"


def test_the_help_of_a_kind_lists_the_options_it_accepts():
    r = run_main("replay", "vpa", "--help")
    assert r.returncode == 0
    for option in [*REPLAY_SHARED, "--config", "--verbose"]:
        assert option in r.stdout, option


def test_replay_vpa_runs_with_its_options_after_vpa(tmp_path):
    inp = tmp_path / "in.csv"
    tidal_frame(series=("web/cpu",)).to_csv(inp, index=False)
    outs = {}
    for where in ("before", "after"):
        out = tmp_path / f"{where}.csv"
        given = ["--decision-model", "day-ahead", "--choose-by-cost"]
        argv = ["replay", *given, "vpa"] if where == "before" else ["replay", "vpa", *given]
        r = run_main(*argv, "--input", str(inp), "--output", str(out), *MODEL)
        assert r.returncode == 0, r.stderr
        outs[where] = out.read_text()
    assert outs["after"] == outs["before"]


# --- every command form the README and docs show -----------------------------------------------

def command_forms(text: str) -> list[str]:
    """Every `tidewise COMMAND ...` of inline code and of sh/bash code blocks (lines joined over `\\`),
    and every inline `KIND --option` of a command's subcommand (`vpa --hold 8h`: `tidewise replay vpa
    --hold 8h`)."""
    text = text.replace("\\\n", " ")
    blocks = re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, flags=re.S)
    lines = [line.strip() for b in blocks for line in b.splitlines() if line.strip().startswith("tidewise ")]
    parent = {name: chain[0] for chain, p in leaves(build_parser()) if len(chain) == 2 for name in chain[1:]
              if name not in COMMANDS}
    kinds = [f"tidewise {parent[m[0]]} {m[0]}{m[1]}" for m in re.findall(r"`([a-z]+)( --[^`]*)`", text) if m[0] in parent]
    return re.findall(r"`(tidewise [^`]+)`", text) + lines + kinds


def variants(form: str):
    """The argv of a form with every optional part given ([...] kept) and each a|b alternative in turn."""
    form = re.split(r" (?:#|>|\|) ", form)[0]  # a comment, a redirection, a pipe
    words = shlex.split(re.sub(r"[\[\]]|…|\.\.\.", " ", form))[1:]
    for k in range(max([w.count("|") + 1 for w in words] + [1])):
        yield [w.split("|")[min(k, w.count("|"))] for w in words]


def command_word(argv: list[str]) -> str | None:
    """The word after the global options (`--config FILE`, `-v`)."""
    i = 0
    while i < len(argv) and argv[i] in ("--config", "-v", "-vv", "--verbose"):
        i += 2 if argv[i] == "--config" else 1
    return argv[i] if i < len(argv) else None


def structural(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser checking only where each option may stand: no value types, choices or required
    options (the docs write placeholders: N, FILE), and errors raised rather than exiting."""
    def error(message: str):
        raise ValueError(message)

    for action in parser._actions:
        if action.option_strings:
            action.type, action.choices, action.required = None, None, False
    parser.error = error  # type: ignore[method-assign]
    for _, sub in subparsers(parser):
        structural(sub)
    return parser


def test_every_command_form_in_the_readme_and_docs_parses():
    parser = structural(build_parser())
    checked, wrong = 0, []
    for path in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        for form in command_forms(open(path, encoding="utf-8").read()):
            for argv in variants(form):
                if command_word(argv) not in COMMANDS:
                    continue  # `tidewise [--config FILE] [-v] COMMAND ...`: the grammar, not a command
                try:
                    parser.parse_args(argv)
                    checked += 1
                except ValueError as exc:  # a flag named in prose without its value is no misplaced option
                    if "unrecognized arguments" in str(exc) or "invalid choice" in str(exc):
                        wrong.append(f"{os.path.basename(path)}: {' '.join(argv)}: {exc}")
    assert not wrong, "\n".join(wrong)
    assert checked > 100  # the extraction found the forms


def test_the_readme_forms_that_failed_now_parse():
    parser = structural(build_parser())
    for argv in (["replay", "vpa", "--decision-model", "day-ahead", *IO], ["replay", "vpa", "--choose-by-cost", *IO],
                 ["serve", "--once", "--config", "x.yaml"], ["simulate", "tide", "-v", "--nodes", "8"]):
        parser.parse_args(argv)


# --- an empty path, refused before any work -------------------------------------------------------

def path_options():
    """(subcommand words, option, file|folder, the command's required options) of every path option."""
    for chain, parser in leaves(build_parser()):
        if not chain or any(subparsers(parser)):
            continue  # their options are copied into each command below them (tidewise.arguments)
        required = [a for a in parser._actions if a.option_strings and a.required]
        for action in parser._actions:
            if path_kind(action):
                yield chain, action.option_strings[-1], path_kind(action), required


def test_every_option_naming_a_file_or_folder_is_a_path_option():
    """A path option is known by its metavar (tidewise.arguments.PATH_METAVARS): one added without it
    would escape the empty-path check, so an option whose name or help says file, folder or registry
    must carry one."""
    words = re.compile(r"\b(file|folder|registry|kubeconfig)\b|-file$|-dir$", re.I)
    missed = []
    for chain, parser in leaves(build_parser()):
        for a in parser._actions:
            if not a.option_strings or a.nargs == 0 or a.choices or path_kind(a):
                continue
            name = a.option_strings[-1]
            says = words.search(name) or words.search((a.help or "").split(";")[0].split("(")[0])
            if says and not re.search(r"\bfile\b sink|--sink|--source|--what|--step", f"{name} {a.help}"):
                missed.append(f"{' '.join(chain)} {name}: {a.help}")
    assert not missed, "\n".join(missed)


@pytest.mark.parametrize("chain,option,kind,required",
                         [pytest.param(*p, id=" ".join((*p[0], p[1]))) for p in path_options()])
def test_an_empty_path_is_refused_in_one_line_before_any_work(tmp_path, chain, option, kind, required):
    argv, given = [*chain], history_csv(tmp_path / "h.csv", days=0.1)
    for a in required:  # the command's other required options, given well
        if a.option_strings[-1] != option:
            argv += [a.option_strings[-1], given if path_kind(a) else "1"]
    for empty in ("", "  "):
        r = run_main(*argv, option, empty)
        assert r.returncode == 2, (argv, option, r.stderr)
        assert r.stderr.strip().splitlines() == [f"tidewise {chain[0]}: error: {option}: empty path; give a {kind} name"]
    assert os.listdir(tmp_path) == ["h.csv"]  # nothing made


def test_train_with_an_empty_registry_is_refused_before_training(tmp_path):
    """It trained for the whole history, then failed to write with a traceback."""
    inp = history_csv(tmp_path / "h.csv")
    one_line_error(run_cli("train", "--input", inp, "--registry", ""), 2,
                   "tidewise train: error: --registry: empty path; give a folder name")
