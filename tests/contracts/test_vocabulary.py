"""The shared vocabulary: one error tree, one QoS enum, one reclaim plan, importable without numpy."""
import datetime as dt
import json
import pytest

from contracts.errors import InputError, TidewiseError
from contracts.kube_errors import Conflict, Forbidden, KubeError, NotFound, TooManyRequests, error_for_status
from contracts.qos import QOS_ANNOTATION, QosLevel, is_reclaimed, qos_level
from contracts.reclaim import NumaReclaim, ReclaimPlan, plan_document, plan_from_annotation, plan_from_dict

AT = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone.utc)


def test_the_predictor_names_are_the_contract_classes():
    from predictor import errors, types
    assert errors.TidewiseError is TidewiseError and errors.InputError is InputError
    assert types.ReclaimPlan is ReclaimPlan and types.NumaReclaim is NumaReclaim


@pytest.mark.parametrize("status,cls", [(404, NotFound), (409, Conflict), (429, TooManyRequests),
                                        (403, Forbidden), (500, KubeError), (0, KubeError)])
def test_status_maps_to_one_class(status, cls):
    err = error_for_status(status, "get x")
    assert type(err) is cls and err.status == status and isinstance(err, TidewiseError)


def test_kube_errors_keep_their_status_and_retry_after():
    assert NotFound("gone").status == 404 and KubeError("x").status == 0
    slow = error_for_status(429, "patch", retry_after=2.5)
    assert isinstance(slow, TooManyRequests) and slow.retry_after == 2.5
    assert TooManyRequests("pdb").retry_after is None and TooManyRequests("pdb").status == 429


def test_qos_level_is_read_as_katalyst_writes_it():
    assert QosLevel.SHARED == "shared_cores" and QosLevel("reclaimed_cores") is QosLevel.RECLAIMED
    assert qos_level(None) is QosLevel.SHARED and qos_level({QOS_ANNOTATION: "dedicated_cores"}) is QosLevel.DEDICATED
    assert is_reclaimed({QOS_ANNOTATION: "reclaimed_cores"}) and not is_reclaimed({})
    assert is_reclaimed({"x/qos": "reclaimed_cores"}, key="x/qos")


def _plan():
    return ReclaimPlan("n1", "2026-12-01T08:45:00Z", 3600, 3600, 4 * 2**30, 2000,
                       numa={0: NumaReclaim(2800, 2**30), 1: NumaReclaim(800, 2**30)}, reasons=["r"])


def test_plan_round_trips_through_dict_and_annotation():
    p = _plan()
    assert ReclaimPlan.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    back = plan_from_dict(p.to_dict())
    assert (back.numa, back.shared_demand_millicpu, back.reasons) == (p.numa, 2000, [])
    doc = plan_document(p)
    assert doc["valid_until"] == "2026-12-01T09:45:00Z" and doc["numa_layout"] == "known"
    got = plan_from_annotation(json.dumps(doc), "n1", AT)
    assert (got.reclaimed_millicpu, got.reclaimed_memory_bytes, got.numa) == (3600, 4 * 2**30, p.numa)
    assert not got.expired(AT) and got.expired(AT + dt.timedelta(minutes=45))


@pytest.mark.parametrize("bad", [{}, {"node": "n1"}, dict(_plan().to_dict(), window_start="soon"),
                                 dict(_plan().to_dict(), reclaimed_millicpu=-1),
                                 dict(_plan().to_dict(), numa={"x": {"millicpu": 1, "memory_bytes": 1}})])
def test_outside_plan_input_is_refused_with_one_named_error(bad):
    with pytest.raises(InputError, match="^plan.json: "):
        plan_from_dict(bad, "plan.json")


def test_has_labels_is_every_pair_of_the_map_among_the_labels():
    from contracts.selector import has_labels

    assert has_labels({"app": "web", "tier": "fe"}, {"app": "web", "tier": "fe", "x": "1"})
    assert not has_labels({"app": "web", "tier": "fe"}, {"app": "web"})  # a missing key
    assert not has_labels({"app": "web"}, {"app": "db"})  # a different value
    assert has_labels({}, None) and not has_labels({"app": "web"}, None)
