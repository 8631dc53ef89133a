"""The project is complete on its own: documentation links stay inside the repository, and the
vendored CRD schemas are the published ones."""
from __future__ import annotations

import filecmp
import glob
import os
import re

import pytest

from tests.conftest import ROOT, SHARED

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _docs() -> list[str]:
    return [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))),
            os.path.join(ROOT, "schemas", "k8s", "README.md")]


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: os.path.relpath(p, ROOT))
def test_relative_links_resolve_inside_the_repository(doc):
    text = open(doc, encoding="utf-8").read()
    bad = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path = os.path.normpath(os.path.join(os.path.dirname(doc), target))
        if os.path.commonpath([path, ROOT]) != ROOT:
            bad.append(f"{target} (outside the repository)")
        elif not os.path.exists(path):
            bad.append(f"{target} (missing)")
    assert not bad, f"{os.path.relpath(doc, ROOT)}: {bad}"


def test_vendored_schemas_come_with_their_licences():
    folder = os.path.join(ROOT, "schemas", "k8s")
    names = set(os.listdir(folder))
    assert {"LICENSE-kubernetes-autoscaler", "LICENSE-katalyst-api", "README.md", "vpa-v1-crd.yaml"} <= names
    assert any(n.startswith("katalyst-node.") for n in names)


def test_vendored_schemas_match_the_published_ones():
    published = os.path.join(SHARED, "k8s")
    if not os.path.isdir(published):
        pytest.skip(f"needs the published schemas in {published} (../shared/k8s beside the checkout) to compare")
    vendored = os.path.join(ROOT, "schemas", "k8s")
    yamls = sorted(n for n in os.listdir(published) if n.endswith(".yaml") or n.startswith("LICENSE"))
    assert yamls
    differ = [n for n in yamls if not os.path.exists(os.path.join(vendored, n))
              or not filecmp.cmp(os.path.join(published, n), os.path.join(vendored, n), shallow=False)]
    assert not differ, f"schemas/k8s is out of date with ../shared/k8s: {differ}"
