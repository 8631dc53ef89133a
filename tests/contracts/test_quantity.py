"""Exact units: millicpu integers and bytes, parsed and printed without float drift."""
import pytest

from contracts.quantity import (cores_to_millicpu, format_bytes, format_millicpu, parse_cpu_millis,
                                parse_memory_bytes, parse_quantity, to_bytes, to_millicpu)


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


# The node agent's reading of pod specs goes through the same exact parser (it used `float` before).

@pytest.mark.parametrize("q,m", [("500m", 500), ("1", 1000), ("1.5", 1500), ("0.1", 100), ("250000u", 250),
                                 ("2", 2000), (3, 3000), ("1e0", 1000), ("1001u", 2)])
def test_pod_cpu_quantities(q, m):
    assert parse_cpu_millis(q) == m


@pytest.mark.parametrize("q,b", [("512Mi", 512 * 2**20), ("1Gi", 2**30), ("1G", 10**9), ("1e9", 10**9),
                                 ("1000", 1000), ("128k", 128000), ("1.5Ki", 1536)])
def test_pod_memory_quantities(q, b):
    assert parse_memory_bytes(q) == b


def test_pod_quantities_are_exact_where_float_drifted():
    # float: 2.007 * 1000 = 2007.0000000000002, which the float reader rounded up to 2008
    assert parse_cpu_millis("2.007") == 2007 and parse_cpu_millis("1100n") == 1
    # a fractional byte count rounds up (the float reader truncated it: "1.5" bytes was 1)
    assert parse_memory_bytes("1.5") == 2
    assert parse_memory_bytes("1.1Gi") == 1181116007  # 1181116006.4 bytes, truncated before
    assert parse_memory_bytes("9007199254740993") == 2**53 + 1  # beyond a float's 53 bits


@pytest.mark.parametrize("bad", ["", "one", "1Gi", "-1", "1x", "3k", True])
def test_pod_cpu_refuses_what_is_not_a_cpu_amount(bad):
    with pytest.raises(ValueError, match="CPU quantity"):
        parse_cpu_millis(bad)


@pytest.mark.parametrize("bad", ["", "1.2.3", "-1Mi", "100m", "5u", "1Xi"])
def test_pod_memory_refuses_negative_and_sub_byte_units(bad):
    with pytest.raises(ValueError, match="memory quantity"):
        parse_memory_bytes(bad)


def test_the_binary_size_constants_are_what_the_suffixes_name():
    from contracts.quantity import GIB, KIB, MIB, format_bytes, parse_quantity

    assert (parse_quantity("1Ki"), parse_quantity("1Mi"), parse_quantity("1Gi")) == (KIB, MIB, GIB)
    assert (format_bytes(3 * GIB), format_bytes(5 * MIB)) == ("3Gi", "5Mi")


def test_a_text_read_again_gives_the_same_amount_and_a_bad_one_fails_every_time():
    from contracts.quantity import parse_quantity, to_bytes, to_millicpu

    for _ in range(2):  # the second reading comes from the cache of texts
        assert to_millicpu("250m") == 250 and to_bytes("1Gi") == 2**30 and parse_quantity("1e-1") == parse_quantity("100m")
        with pytest.raises(ValueError, match="does not parse"):
            parse_quantity("12 cores")
        with pytest.raises(ValueError, match="boolean"):
            parse_quantity(True)  # type: ignore[arg-type]  # never read as the text or number 1
        with pytest.raises(ValueError, match="does not parse"):
            parse_quantity(["1"])  # type: ignore[arg-type]  # a malformed object: ValueError, not TypeError
