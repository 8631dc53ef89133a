"""The `enforcer:` section: policy and eviction settings nested, older flat keys still read."""
import pytest
import yaml

from node_enforcer.policy.allocation import PolicySettings
from node_enforcer.policy.eviction import EvictionSettings
from predictor.errors import InputError
from tidewise.commands.enforce import read_settings


def _read(section, evict=None):
    return read_settings(section, evict=evict)


def test_flat_keys_of_older_files_and_nested_keys_read_the_same():
    flat = yaml.safe_load("node: n1\nreserved_cpus: 0\nshare_headroom: 0.2\nmax_evictions: 3\nevict: true\n")
    nested = yaml.safe_load("node: n1\npolicy: {reserved_cpus: 0, share_headroom: 0.2}\n"
                            "eviction: {max_evictions: 3, dry_run: false}\n")
    a, b = _read(flat), _read(nested)
    assert a == b
    assert a.policy == PolicySettings(reserved_cpus=0, share_headroom=0.2)
    assert a.eviction == EvictionSettings(max_evictions=3, dry_run=False)


def test_defaults_are_the_policy_and_eviction_defaults_not_copies():
    s = _read(None)
    assert s.policy == PolicySettings() and s.eviction == EvictionSettings() and s.eviction.dry_run


def test_the_evict_flag_wins_over_the_file_and_nested_wins_over_flat():
    assert _read({"eviction": {"dry_run": True}}, evict=True).eviction.dry_run is False
    assert _read({"reserved_cpus": 4, "policy": {"reserved_cpus": 6}}).policy.reserved_cpus == 6


def test_unknown_nested_key_and_non_mapping_are_refused_in_one_line():
    with pytest.raises(InputError, match=r"config section 'enforcer.policy': unknown key\(s\) \['reserved_cpu'\] "
                                         r"\(did you mean 'reserved_cpus'\?\)"):
        _read({"policy": {"reserved_cpu": 1}})
    with pytest.raises(InputError, match="policy must be a mapping"):
        _read({"policy": 3})
