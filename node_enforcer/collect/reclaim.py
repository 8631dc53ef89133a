"""The reclaim plan the serving loop publishes for this node, read every pass.

Two sources. In a cluster (`--reclaim-plan-from api`, what deploy/enforcer-daemonset.yaml runs):
`tidewise serve --apply` writes it to the node's own `tidewise.io/reclaim-plan` annotation and the
agent reads it with a `get` of its Node. Offline (`--reclaim-plan FILE`): a JSON or YAML file
holding that annotation's own JSON, or the Node carrying it (what `serve --sink file` and `tidewise
demo` write under recommendations/node/). The plan, its annotation schema and its checks live in `contracts.reclaim`,
shared with the publisher (standard library only: the per-node agent must not pay for numpy and
pandas, about 120 MiB of resident memory against its 80 MiB budget).

A plan the agent cannot trust — missing, malformed, another schema, another node's, not yet valid
(generated in the future) or past its `valid_until`, from the annotation or a file alike — is refused and replaced by `zero_plan` (reclaim nothing beyond the
pool's floor): the agent fails closed instead of lending the online pods' room on stale numbers.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
from typing import Callable, Mapping

from contracts.errors import InputError, TidewiseError
from contracts.reclaim import (PLAN_ANNOTATION, ReclaimPlan, check_plan_in_force, document_in, plan_from_annotation,
                               plan_from_document, zero_plan)

log = logging.getLogger(__name__)


def load_reclaim_plan(path: str, node: str | None = None) -> ReclaimPlan:
    """The plan in the file at `path` (the annotation's document, or a Node carrying it), for `node`
    (any node when None); its window is not checked against a clock here. InputError names the file."""
    what = f"--reclaim-plan {path}"
    if not os.path.isfile(path):
        raise InputError(f"{what}: no such file" if not os.path.exists(path) else f"{what}: not a file")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise InputError(f"{what}: not text ({exc.reason}); give the {PLAN_ANNOTATION} annotation's JSON") from None
    except ValueError:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InputError(f"{what}: neither JSON nor YAML ({str(exc).splitlines()[0]}); give the "
                             f"{PLAN_ANNOTATION} annotation's JSON or the Node carrying it") from None
    return plan_from_document(document_in(data, what), node or None, what)


def reclaim_loader(path: str | None, node: str,
                   now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
                   annotations: Callable[[], Mapping[str, str]] | None = None,
                   ) -> Callable[[], ReclaimPlan | None]:
    """Re-read the plan every pass (the publisher rewrites it): from the node's annotation when
    `annotations` is given (it returns this Node's annotations), else from the file at `path`.

    Fails closed: a plan that is missing, unreadable, malformed, another node's or expired is
    refused with a warning (once per distinct reason) and replaced by `zero_plan` — the reclaim pool
    keeps only its floor. No source at all (no path, no annotations) means no plan: None."""
    last: list[str] = [""]

    def warn(msg: str) -> None:  # once per distinct problem, not every pass
        log.log(logging.DEBUG if msg == last[0] else logging.WARNING, msg)
        last[0] = msg

    def read(at: dt.datetime) -> ReclaimPlan:
        if annotations is not None:
            return plan_from_annotation(annotations().get(PLAN_ANNOTATION), node, at)
        p = load_reclaim_plan(path or "", node or None)
        # the annotation's checks: not expired, not generated in the future
        check_plan_in_force(p, at, f"--reclaim-plan {path}", start_key="generated_at")
        return p

    def load() -> ReclaimPlan | None:
        if annotations is None and not path:
            return None
        at = now()
        try:
            p = read(at)
        except TidewiseError as exc:
            warn(f"reclaim plan refused, reclaiming nothing beyond the floor: {exc}")
            return zero_plan(node, at)
        last[0] = ""
        return p

    return load
