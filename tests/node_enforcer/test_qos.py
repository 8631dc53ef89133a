import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.qos import CPU_ENHANCEMENT, MEMORY_ENHANCEMENT, QOS_ANNOTATION, QosLevel
from node_enforcer.collect.qos import QosResolver
from node_enforcer.model.qos import parse_qos
from tests.node_enforcer.conftest import make_pod


@pytest.mark.parametrize("level", [q.value for q in QosLevel])
def test_levels(level):
    spec = parse_qos({QOS_ANNOTATION: level})
    assert spec.level.value == level and spec.problem is None


def test_default_is_shared():
    spec = parse_qos({})
    assert spec.level is QosLevel.SHARED and spec.problem is None and not spec.numa_binding


def test_enhancements_katalyst_strings_and_booleans():
    spec = parse_qos({QOS_ANNOTATION: "dedicated_cores",
                      MEMORY_ENHANCEMENT: '{"numa_binding": "true", "numa_exclusive": "true"}',
                      CPU_ENHANCEMENT: '{"numa_binding": true}'})
    assert spec.level is QosLevel.DEDICATED and spec.numa_binding and spec.numa_exclusive
    spec = parse_qos({MEMORY_ENHANCEMENT: '{"oom_priority": "-100"}', CPU_ENHANCEMENT: '{"cpuset_pool": "flink"}'})
    assert spec.oom_priority == -100 and spec.cpuset_pool == "flink"


MALFORMED = [
    ({QOS_ANNOTATION: "gold"}, "is not one of"),
    ({QOS_ANNOTATION: ""}, "is not one of"),
    ({QOS_ANNOTATION: "dedicated-cores"}, "is not one of"),
    ({QOS_ANNOTATION: 7}, "is not one of"),
    ({CPU_ENHANCEMENT: "{numa_binding: true}"}, "not JSON"),
    ({MEMORY_ENHANCEMENT: '["numa_binding"]'}, "JSON object"),
    ({MEMORY_ENHANCEMENT: '"true"'}, "JSON object"),
    ({MEMORY_ENHANCEMENT: "42"}, "JSON object"),
    ({MEMORY_ENHANCEMENT: "null"}, "JSON object"),
    ({QOS_ANNOTATION: "dedicated_cores", MEMORY_ENHANCEMENT: '{"numa_binding": "yes"}'}, "true or false"),
    ({MEMORY_ENHANCEMENT: '{"oom_priority": "high"}'}, "integer"),
    ({MEMORY_ENHANCEMENT: '{"oom_priority": 1.5}'}, "integer"),
    ({MEMORY_ENHANCEMENT: '{"oom_priority": true}'}, "integer"),
    ({MEMORY_ENHANCEMENT: '{"oom_priority": 5000}'}, "outside"),
    ({CPU_ENHANCEMENT: '{"numa_bind": true}'}, "unknown key"),
    ({CPU_ENHANCEMENT: '{"cpuset_pool": 7}'}, "cpuset_pool"),
    ({CPU_ENHANCEMENT: '{"cpuset_pool": "Has Spaces"}'}, "cpuset_pool"),
    ({QOS_ANNOTATION: "dedicated_cores", MEMORY_ENHANCEMENT: '{"numa_exclusive": true}'}, "needs numa_binding"),
    ({QOS_ANNOTATION: "reclaimed_cores", MEMORY_ENHANCEMENT: '{"numa_binding": true}'}, "not reclaimed_cores"),
    ({QOS_ANNOTATION: "dedicated_cores", CPU_ENHANCEMENT: '{"numa_binding": true}',
      MEMORY_ENHANCEMENT: '{"numa_binding": false}'}, "differs"),
    ({QOS_ANNOTATION: "shared_cores", MEMORY_ENHANCEMENT: '{"numa_binding": true, "numa_exclusive": true}'},
     "dedicated_cores only"),
    ({MEMORY_ENHANCEMENT: "[" * 5000 + "]" * 5000}, ""),  # deep nesting: RecursionError in json
]


@pytest.mark.parametrize("annotations,message", MALFORMED)
def test_malformed_keeps_the_declared_level_without_enhancements(annotations, message):
    """Fail closed: an unknown level reads as shared_cores; a malformed enhancement drops every
    enhancement and reads the lesser of the level and shared (a reclaimed pod stays reclaimed)."""
    spec = parse_qos(annotations)
    declared = annotations.get(QOS_ANNOTATION)
    assert spec.level is (QosLevel.RECLAIMED if declared == "reclaimed_cores" else QosLevel.SHARED)
    assert not spec.numa_binding and not spec.numa_exclusive and spec.oom_priority is None
    assert spec.cpuset_pool is None and spec.problem and message in spec.problem


@pytest.mark.parametrize("written,level", [("dedicated_cores ", QosLevel.DEDICATED), ("System_Cores\n", QosLevel.SYSTEM),
                                           ("\tRECLAIMED_CORES", QosLevel.RECLAIMED), (" shared_cores ", QosLevel.SHARED)])
def test_padded_and_wrong_case_names_are_the_level(written, level):
    spec = parse_qos({QOS_ANNOTATION: written})
    assert spec.level is level and spec.problem is None


def test_malformed_logged_once_per_pod_with_its_name(caplog):
    pod = make_pod("cart", qos="platinum")
    other = make_pod("cart2", qos="platinum")
    resolver = QosResolver()
    with caplog.at_level(logging.WARNING, logger="node_enforcer.collect.qos"):
        for _ in range(5):
            assert resolver.resolve(pod).level is QosLevel.SHARED
        resolver.resolve(other)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "default/cart:" in lines[0] and "platinum" in lines[0] and "default/cart2" in lines[1]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=15), inner, max_size=4),
    max_leaves=12,
)
enh_keys = st.sampled_from(["numa_binding", "numa_exclusive", "cpuset_pool", "oom_priority", "other", ""])
enhancement = st.one_of(
    st.text(max_size=40),  # any string at all, mostly not JSON
    json_values.map(json.dumps),
    st.dictionaries(enh_keys, json_values, max_size=4).map(json.dumps),
)
levels = st.one_of(st.sampled_from([q.value for q in QosLevel]), st.text(max_size=20))


@settings(max_examples=300, deadline=None)
@given(level=st.none() | levels, cpu=st.none() | enhancement, mem=st.none() | enhancement)
def test_any_annotation_never_crashes_and_problems_mean_shared(level, cpu, mem):
    ann = {k: v for k, v in ((QOS_ANNOTATION, level), (CPU_ENHANCEMENT, cpu), (MEMORY_ENHANCEMENT, mem))
           if v is not None}
    spec = parse_qos(ann)
    if spec.problem:
        declared = level.strip().lower() if level is not None else "shared_cores"
        assert spec.level is (QosLevel.RECLAIMED if declared == "reclaimed_cores" else QosLevel.SHARED)
        assert spec.oom_priority is None and not spec.numa_binding and spec.cpuset_pool is None
    else:
        # a clean parse is internally consistent
        assert not spec.numa_exclusive or (spec.numa_binding and spec.level is QosLevel.DEDICATED)
        assert spec.oom_priority is None or -1000 <= spec.oom_priority <= 1000
        assert spec.cpuset_pool is None or spec.level is QosLevel.SHARED


@settings(max_examples=100, deadline=None)
@given(level=levels, cpu=st.none() | enhancement)
def test_policy_never_crashes_on_any_annotation(level, cpu):
    from node_enforcer.collect.topology import read_topology
    from node_enforcer.policy.plan import plan
    from tests.node_enforcer.conftest import TWO_SOCKET

    topo = _TOPO.get("t") or _TOPO.setdefault("t", read_topology(TWO_SOCKET))
    pod = make_pod("p", qos=level, cpu="2", cpu_enh=cpu if cpu is not None else None)
    alloc = plan(topo, [pod])
    assert alloc.pod("default/p").cpus  # placed somewhere, whatever the annotation


_TOPO: dict = {}
