"""Units: what users type -> ns, bytes/s, (rows, cols), and back with explicit units."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cimsplit.compiler.units import format_bandwidth, format_time_ns, parse_bandwidth, parse_crossbar_size, parse_time_ns
from cimsplit.errors import CimsplitError


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("50ns", 50.0),
        ("0.05us", 50.0),  # 0.05 * 1e3
        ("0.05µs", 50.0),
        ("1ms", 1e6),
        ("2s", 2e9),
        ("50", 50.0),  # a bare number is ns
        (" 100 ns ", 100.0),
        ("1e3ns", 1000.0),
        (75, 75.0),
        (12.5, 12.5),
        ("-5ns", -5.0),  # the form is fine; Hardware validation refuses it
    ],
)
def test_parse_time_ns(text, ns):
    assert parse_time_ns(text) == pytest.approx(ns)


@pytest.mark.parametrize("text", ["fast", "50 nanoseconds", "50ps", "ns", "5e", "inf", "", "1.2.3us", "50NS"])
def test_parse_time_ns_refuses_with_the_value_and_the_form(text):
    with pytest.raises(CimsplitError) as info:
        parse_time_ns(text)
    message = info.value.one_line()
    assert repr(text) in message
    assert "ns" in message and "\n" not in message


@pytest.mark.parametrize(
    ("text", "bytes_per_s"),
    [
        ("20.48GB/s", 20.48e9),  # GB = 1e9 bytes
        ("10240MB/s", 10.24e9),  # 10240 * 1e6
        ("2e10B/s", 2e10),
        ("16GiB/s", 16 * 2**30),  # binary prefix only when written
        ("1 kB/s", 1e3),
        ("3TB/s", 3e12),
    ],
)
def test_parse_bandwidth(text, bytes_per_s):
    assert parse_bandwidth(text) == pytest.approx(bytes_per_s)


@pytest.mark.parametrize("text", ["20.48", "20.48Gb/s", "20.48 GB", "fast", "GB/s", "1e999GB/s", 20.48])
def test_parse_bandwidth_refuses(text):
    with pytest.raises(CimsplitError) as info:
        parse_bandwidth(text)
    assert str(text) in info.value.one_line()
    assert "GB/s" in info.value.one_line()


def test_parse_crossbar_size():
    assert parse_crossbar_size("256x256") == (256, 256)
    assert parse_crossbar_size("128X64") == (128, 64)
    for bad in ("256", "256x", "axb", "256x256x2", "-1x4"):
        with pytest.raises(CimsplitError, match="ROWSxCOLS"):
            parse_crossbar_size(bad)


def test_formatters_print_units():
    assert format_time_ns(50.0) == "50 ns"
    assert format_time_ns(3200.0) == "3.2 us"
    assert format_time_ns(1.5e6) == "1.5 ms"
    assert format_time_ns(2e9) == "2 s"
    assert format_bandwidth(20.48e9) == "20.48 GB/s"
    assert format_bandwidth(10.24e9) == "10.24 GB/s"
    assert format_bandwidth(5e5) == "500 kB/s"


def test_round_trip_through_the_formatters():
    for ns in (50.0, 12_345.0, 7.5e6):
        assert parse_time_ns(format_time_ns(ns).replace(" ", "")) == pytest.approx(ns, rel=1e-3)
    assert parse_bandwidth(format_bandwidth(20.48e9).replace(" ", "")) == pytest.approx(20.48e9)


_POSITIVE = st.floats(min_value=1e-3, max_value=1e12, allow_nan=False, allow_infinity=False)


@given(_POSITIVE, st.sampled_from([("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)]))
def test_every_time_unit_scales_by_its_factor(value, unit):
    name, scale = unit
    assert parse_time_ns(f"{value!r}{name}") == pytest.approx(value * scale, rel=1e-12)


@given(_POSITIVE)
def test_formatted_times_and_bandwidths_read_back(value):
    assert parse_time_ns(format_time_ns(value).replace(" ", "")) == pytest.approx(value, rel=1e-3)  # 4 significant digits
    assert parse_bandwidth(format_bandwidth(value).replace(" ", "")) == pytest.approx(value, rel=1e-5)  # 6 digits
