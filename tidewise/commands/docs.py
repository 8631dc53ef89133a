"""`tidewise docs` — the documentation and the example prices file, as installed with the package
(a pip user has no checkout: pyproject's data-files lay README.md, docs/, deploy/, kustomize/ and
schemas/k8s/ out in <prefix>/share/tidewise as in the checkout, so that the README's links resolve)."""
from __future__ import annotations

import argparse
import os
import sys
import sysconfig

HELP = """\
Without TOPIC: where the docs are and the topics. With TOPIC (a doc's name, e.g. cost-report, or
prices.example.yaml): print it. --path prints the file's path instead, e.g.

  tidewise docs prices.example.yaml > prices.yaml     # then: tidewise report --cost prices.yaml ...
  less $(tidewise docs --path serve-vpa)
"""
INSTALLED = os.path.join("share", "tidewise", "docs")  # pyproject.toml [tool.setuptools.data-files]
PRICES_EXAMPLE = "prices.example.yaml"


def docs_folder() -> str | None:
    """The docs folder: the checkout's `docs/` when running from one (an editable install: always
    current), else the installed copy under the environment's or the user's data prefix."""
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = []
    if os.path.isfile(os.path.join(package_parent, "pyproject.toml")):
        candidates.append(os.path.join(package_parent, "docs"))
    for data in (sysconfig.get_path("data"), sysconfig.get_path("data", sysconfig.get_preferred_scheme("user"))):
        candidates.append(os.path.join(data, INSTALLED))
    return next((c for c in candidates if os.path.isfile(os.path.join(c, PRICES_EXAMPLE))), None)


def where() -> str:
    """One phrase for --help texts: where the docs are."""
    folder = docs_folder()
    return f"`tidewise docs` (in {folder})" if folder else "`tidewise docs`"


def topics(folder: str) -> dict[str, str]:
    """topic -> file: each doc by its name without .md (README.md as readme), and the prices example."""
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".md"):
            out[name[:-3].lower()] = name
        elif name == PRICES_EXAMPLE:
            out[name] = name
    if "readme" not in out:  # the checkout's README sits beside docs/, not in it
        readme = os.path.join(os.path.dirname(folder), "README.md")
        if os.path.isfile(readme) and os.path.basename(folder) == "docs":
            out["readme"] = os.path.join("..", "README.md")
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("docs", help="the documentation and the example prices file, as installed",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topic", nargs="?", metavar="TOPIC", help="a doc's name (e.g. serve-vpa, cost-report, readme) "
                                                             f"or {PRICES_EXAMPLE}")
    p.add_argument("--path", action="store_true", help="print the file's path, not its text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from contracts.errors import InputError, TidewiseError
    from tidewise.config import unknown_key_message

    folder = docs_folder()
    if folder is None:
        raise TidewiseError("the docs are not installed with this tidewise (no share/tidewise/docs in "
                            f"{sysconfig.get_path('data')}); reinstall it with pip")
    known = topics(folder)
    if not args.topic:
        print(f"docs in {folder}: {', '.join(known)}")
        print("tidewise docs TOPIC prints one (--path: its path)")
        return 0
    topic = args.topic.lower().removesuffix(".md")
    if topic not in known:
        raise InputError(unknown_key_message(f"docs {args.topic}", [args.topic], list(known), what="topic"))
    path = os.path.normpath(os.path.join(folder, known[topic]))
    if args.path:
        print(path)
        return 0
    with open(path, encoding="utf-8") as fh:
        sys.stdout.write(fh.read())
    return 0
