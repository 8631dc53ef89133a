"""What the command line's parsers share beyond one subcommand: options that work on either side
of a subcommand, and the one check that no path option is empty.

argparse reads an option of an outer parser only before the subcommand (`tidewise replay
--choose-by-cost vpa`): after it (`tidewise replay vpa --choose-by-cost`, as the README writes it)
the subcommand's parser does not know it. `accept_after` gives every subcommand, at any depth, a
copy of the outer options with no default of its own, so a value given before is kept and one given
after is read; given on both sides, the later wins (a count such as `-v` adds up).

A path option is one whose metavar names a path (`PATH_METAVARS`); an empty value for one is
refused before any work (`empty_path`), whichever command it belongs to.
"""
from __future__ import annotations

import argparse
import copy
from typing import Iterator

PATH_METAVARS = {"FILE": "file", "PATH": "file", "FILE.html": "file", "PRICES.yaml": "file", "DIR": "folder"}


def subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(name, parser) of each direct subcommand of `parser`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def accept_after(parser: argparse.ArgumentParser, actions: list[argparse.Action], depth: int = 1) -> None:
    """Copy `actions` (options of `parser`) into each of its subcommands, recursively, with the default
    suppressed: argparse copies a subcommand's namespace over the outer one, so a default there would
    undo a value given before the subcommand. A subcommand defining the option itself keeps its own."""
    for _, sub in subparsers(parser):
        copies = []
        for action in actions:
            if any(o in sub._option_string_actions for o in action.option_strings):
                continue
            twin = copy.copy(action)
            twin.default, twin.required = argparse.SUPPRESS, False
            if isinstance(action, argparse._CountAction):  # counted per level, added up by `count`
                twin.dest = f"{action.dest.split('__')[0]}__{depth}"
            _group_like(parser, action, sub)._add_action(twin)
            copies.append(twin)
        accept_after(sub, copies, depth + 1)


def _group_like(parser: argparse.ArgumentParser, action: argparse.Action,
                sub: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The group of `sub` titled as `action`'s group in `parser` (made if missing): its --help shows
    the copied option under the same heading."""
    title = next((g.title for g in parser._action_groups if action in g._group_actions), None)
    for group in sub._action_groups:
        if group.title == title:
            return group
    return sub.add_argument_group(title)


def count(args: argparse.Namespace, dest: str) -> int:
    """A counted option (`-v`) added up over every level it was given at (`accept_after`)."""
    return sum(int(v or 0) for k, v in vars(args).items() if k == dest or k.startswith(f"{dest}__"))


def chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Iterator[argparse.ArgumentParser]:
    """`parser` and the subcommand parsers `args` went through, outermost first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if name in action.choices:
                yield from chosen(action.choices[name], args)


def path_kind(action: argparse.Action) -> str | None:
    """file or folder for a path option (by its metavar; a PATH its help calls a folder is one), None
    for any other."""
    if not (isinstance(action.metavar, str) and action.option_strings):
        return None
    kind = PATH_METAVARS.get(action.metavar)
    return "folder" if kind and action.metavar == "PATH" and (action.help or "").startswith("folder") else kind


def empty_path(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The error line for the first path option given as '' (or blanks) on this command line, else None."""
    for p in chosen(parser, args):
        for action in p._actions:
            kind = path_kind(action)
            value = getattr(args, action.dest, None)
            if kind and isinstance(value, str) and not value.strip():
                return f"{action.option_strings[-1]}: empty path; give a {kind} name"
    return None
