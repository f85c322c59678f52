"""Sweep grid: lists, inclusive ranges, units, deterministic order."""

from __future__ import annotations

import pytest

from cimsplit.errors import CimsplitError
from cimsplit.passes.sweep.grid import SweepGrid, SweepPoint, parse_int_values, parse_time_values


def test_crossbar_list_is_sorted_and_deduplicated() -> None:
    assert parse_int_values("25,50,100,200") == (25, 50, 100, 200)
    assert parse_int_values("200, 25,25,100") == (25, 100, 200)


def test_crossbar_range_includes_both_ends() -> None:
    # 0:400:25 -> 0, 25, ..., 400: (400 - 0) / 25 + 1 = 17 values.
    values = parse_int_values("0:400:25")
    assert values == tuple(range(0, 401, 25)) and len(values) == 17
    # STOP is kept only when it lands on the grid: 0:390:25 ends at 375.
    assert parse_int_values("0:390:25")[-1] == 375
    assert parse_int_values("10:10:5") == (10,)
    assert parse_int_values("0:50:25,200") == (0, 25, 50, 200)


@pytest.mark.parametrize("text", ["", "25,,50", "a", "1:2", "50:0:25", "0:100:0", "-25", "2.5", "1:2:3:4"])
def test_bad_crossbar_values_are_user_errors(text: str) -> None:
    with pytest.raises(CimsplitError):
        parse_int_values(text)


def test_time_list_takes_one_trailing_unit() -> None:
    assert parse_time_values("50,100,500,1000ns") == (50.0, 100.0, 500.0, 1000.0)
    assert parse_time_values("0.05,1us") == (50.0, 1000.0)  # 0.05 us = 50 ns
    assert parse_time_values("1us,50") == (50.0, 1000.0)  # bare number: ns
    assert parse_time_values("100ns,0.5us,1000") == (100.0, 500.0, 1000.0)


def test_time_range_with_unit() -> None:
    # 50:1000:50ns -> 50, 100, ..., 1000: (1000 - 50) / 50 + 1 = 20 values.
    values = parse_time_values("50:1000:50ns")
    assert values == tuple(float(v) for v in range(50, 1001, 50))
    # Float steps keep STOP: 0.05:0.2:0.05us = 50, 100, 150, 200 ns.
    assert parse_time_values("0.05:0.2:0.05us") == (50.0, 100.0, 150.0, 200.0)


@pytest.mark.parametrize("text", ["50parsec", "0ns", "-50ns", "50:10:5ns", "ns"])
def test_bad_times_are_user_errors(text: str) -> None:
    with pytest.raises(CimsplitError):
        parse_time_values(text)


def test_grid_order_is_model_host_crossbars_latency() -> None:
    grid = SweepGrid(("a", "b"), ("x86", "arm"), (25, 50), (50.0, 100.0))
    points = grid.points()
    assert len(points) == len(grid) == 16
    assert points[0] == SweepPoint("a", "x86", 25, 50.0)
    assert points[1] == SweepPoint("a", "x86", 25, 100.0)
    assert points[2] == SweepPoint("a", "x86", 50, 50.0)
    assert points[4] == SweepPoint("a", "arm", 25, 50.0)
    assert points[8] == SweepPoint("b", "x86", 25, 50.0)
    assert points[-1].key == ("b", "arm", 50, 100.0)
