"""Exact units: millicpu integers and bytes, parsed and printed without float drift."""
import pytest

from autoscaler.quantity import (cores_to_millicpu, format_bytes, format_millicpu, parse_quantity, to_bytes,
                                 to_millicpu)


@pytest.mark.parametrize("text,milli", [("100m", 100), ("0.1", 100), ("1e-1", 100), ("2", 2000), (2, 2000),
                                        ("1.5", 1500), ("250m", 250), ("1001u", 2), ("3k", 3_000_000)])
def test_cpu_quantities_to_millicpu(text, milli):
    assert to_millicpu(text) == milli


@pytest.mark.parametrize("text,n", [("1Gi", 2**30), ("512Mi", 512 * 2**20), ("1G", 10**9), ("1.5Ki", 1536),
                                    ("123456789", 123456789), ("1e3", 1000)])
def test_memory_quantities_to_bytes(text, n):
    assert to_bytes(text) == n


def test_float_noise_does_not_round_up_a_request():
    assert cores_to_millicpu(0.1 * 3) == 300  # 300.00000000000006 in floats
    assert cores_to_millicpu(0.3001) == 301  # a real excess still rounds up


def test_formatting_is_exact_and_round_trips():
    for m in (1, 25, 999, 1000, 1500, 32000):
        assert to_millicpu(format_millicpu(m)) == m
    assert format_millicpu(2000) == "2" and format_millicpu(250) == "250m"
    for b in (1, 1023, 1024, 2**30, 3 * 2**20 + 1):
        assert to_bytes(format_bytes(b)) == b
    assert format_bytes(2**30) == "1Gi" and format_bytes(1000) == "1000"


@pytest.mark.parametrize("bad", ["", "1.2.3", "10 Mi", "abc", "1Xi", True, float("nan")])
def test_malformed_quantities_are_refused(bad):
    with pytest.raises(ValueError):
        parse_quantity(bad)
