import os
import shutil

import pytest

from node_enforcer.collect.topology import read_topology
from node_enforcer.model.topology import format_cpulist, parse_cpulist
from predictor.errors import InputError
from tests.node_enforcer.conftest import FOUR_NUMA, TWO_SOCKET


@pytest.mark.parametrize("text,cpus", [("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}), ("", set()), ("5", {5}),
                                       ("0-1,\n", {0, 1})])
def test_parse_cpulist(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("bad", ["a", "3-1", "1-2-3", "-1"])
def test_parse_cpulist_rejects(bad):
    with pytest.raises(ValueError):
        parse_cpulist(bad)


def test_format_round_trip():
    assert format_cpulist({0, 1, 2, 3, 8, 16, 17}) == "0-3,8,16-17"
    assert format_cpulist([]) == ""
    assert parse_cpulist(format_cpulist(range(0, 64, 3))) == set(range(0, 64, 3))


def test_two_socket_fixture():
    t = read_topology(TWO_SOCKET)
    assert len(t.cpus) == 32 and len(t.cores) == 16 and t.threads_per_core == 2
    assert t.numa_cpus == {0: parse_cpulist("0-7,16-23"), 1: parse_cpulist("8-15,24-31")}
    core = t.core_of(17)
    assert core.cpus == (1, 17) and core.socket == 0 and core.numa == 0
    assert t.core_of(8).socket == 1 and t.numa_of(24) == 1
    # core ids restart per socket: (socket, core_id) distinguishes cores, not core_id alone
    assert t.core_of(8).core_id == t.core_of(0).core_id == 0
    assert t.numa_memory_bytes[0] == 64 * 2**30


def test_four_numa_fixture():
    t = read_topology(FOUR_NUMA)
    assert len(t.cpus) == 128 and len(t.cores) == 64 and t.numa_nodes == (0, 1, 2, 3)
    assert all(len(c) == 32 for c in t.numa_cpus.values())
    assert {t.core_of(c).socket for c in t.numa_cpus[2]} == {1}
    assert t.core_of(100).cpus == (36, 100)


def test_real_sysfs():
    t = read_topology("/sys")
    assert t.cpus == frozenset(os.sched_getaffinity(0)) | t.cpus  # every cpu we may run on is known
    assert len(t.cpus) == os.cpu_count()
    assert set().union(*t.numa_cpus.values()) == t.cpus


def test_offline_cpus_are_left_out(tmp_path):
    root = tmp_path / "sys"
    shutil.copytree(TWO_SOCKET + "/devices", root / "devices")
    (root / "devices/system/cpu/online").write_text("0-30\n")
    t = read_topology(str(root))
    assert 31 not in t.cpus and t.core_of(15).cpus == (15,)


def test_missing_root_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="devices/system/cpu"):
        read_topology(str(tmp_path))


def test_a_topology_from_counts_numbers_cpus_as_the_fixture_machine_does():
    """`Topology.uniform` (the demo's nodes, which have no sysfs) lays cpus, cores and NUMA nodes out as
    the two-socket machine's sysfs does; counts that do not divide are refused."""
    from node_enforcer.model.topology import Topology

    real, made = read_topology(TWO_SOCKET), Topology.uniform(32, 2, 2)
    assert made.cores == real.cores and made.numa_cpus == real.numa_cpus and made.summary() == real.summary()
    with pytest.raises(ValueError, match="do not split"):
        Topology.uniform(30, 4)
