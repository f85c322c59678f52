"""The throughput objective on hand-computed graphs: period, frame schedule S, validator."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cimsplit.errors import CimsplitError
from cimsplit.passes.placement import PlacementProblem, SolveOptions, place
from cimsplit.passes.placement.stream.construct import modulo_schedule
from cimsplit.passes.placement.stream.validate import validate_stream
from cimsplit.passes.placement.validate import InternalError


def _chain(budget: int) -> PlacementProblem:
    """a -> b -> c, all CIM-capable, one crossbar each; edges carry 2 ns.

        a (host 10 / cim 4) --2--> b (host 10 / cim 6) --2--> c (host 10 / cim 4)
    """
    return PlacementProblem(names=("a", "b", "c"), t_host_ns=(10.0, 10.0, 10.0), t_cim_ns=(4.0, 6.0, 4.0),
                            crossbars=(1, 1, 1), edges=((0, 1, 2.0), (1, 2, 2.0)), budget=budget)


def _tasks(result) -> list[tuple[str, str, float, float]]:
    return [(t.name, t.unit, t.start_ns, t.duration_ns) for t in result.stream.tasks]


def test_all_on_cim_period_is_the_slowest_cim_operator() -> None:
    # budget 3: everything on the CIM, no transfer; P = max(4, 6, 4) = 6, S back to back, L = 14
    result = place(_chain(3), SolveOptions(objective="throughput", solver="highs"))
    assert result.objective == "throughput" and result.schedule.on_host == (False, False, False)
    assert result.stream.period_ns == 6.0 and result.stream.latency_ns == 14.0
    assert result.stream.frames_in_flight == 3  # ceil(14 / 6)
    assert _tasks(result) == [("a", "cim:a", 0.0, 4.0), ("b", "cim:b", 4.0, 6.0), ("c", "cim:c", 10.0, 4.0)]
    assert result.solver.objective_ns == 6.0 and result.solver.status == "optimal"


def test_budget_two_by_hand() -> None:
    # budget 2: one operator on the host.  c on the host: host 10, bus 2 (b's tensor), CIM max 6 -> P = 10.
    # a on the host: host 10, bus 2, CIM 6 -> P = 10 as well; b on the host: P = max(10, 2 + 2, 4) = 10.
    # Every one-host placement has P = 10; S of the solver's (a, b on CIM, c on host):
    #   a [0, 4) cim, b [4, 10) cim, b's tensor [10, 12) bus, c [12, 22) host: L = 22, 3 frames in flight
    result = place(_chain(2), SolveOptions(objective="throughput", solver="highs"))
    assert result.stream.period_ns == 10.0 and sum(result.schedule.on_host) == 1
    assert result.stream.latency_ns == 22.0 and result.stream.frames_in_flight == 3
    if result.schedule.on_host == (False, False, True):
        assert _tasks(result) == [("a", "cim:a", 0.0, 4.0), ("b", "cim:b", 4.0, 6.0), ("b:c->host", "bus", 10.0, 2.0),
                                  ("c", "host", 12.0, 10.0)]


def test_max_latency_below_every_frame_is_a_user_error() -> None:
    # every placement within budget 2 needs >= 22 ns for one frame (CPU-only 30 ns)
    ok = place(_chain(2), SolveOptions(objective="throughput", solver="highs", max_latency_ns=22.0))
    assert ok.stream.latency_ns <= 22.0 and ok.stream.period_ns == 10.0
    with pytest.raises(CimsplitError, match="max-latency"):
        place(_chain(2), SolveOptions(objective="throughput", solver="highs", max_latency_ns=20.0))


def test_host_bound_chain_needs_the_bounded_model() -> None:
    """Host-bound: x (host 5) -> y (cim 1) -> z (host 5), no transfer cost.

    Unbounded: P = 10 (host).  Packed modulo: x [0,5), y [5,6), z must sit at offset 5 mod 10 -> [15, 20): L = 20.
    With --max-latency 11: z right after y at [6, 11) overlaps x's next copy [10, 15) mod 10 unless P >= 11;
    at P = 11: x [0,5), y [5,6), z [6,11) fits (host busy 10 of 11).  So the optimum is P = 11, L = 11.
    """
    problem = PlacementProblem(names=("x", "y", "z"), t_host_ns=(5.0, 50.0, 5.0), t_cim_ns=(None, 1.0, None),
                               crossbars=(0, 1, 0), edges=((0, 1, 0.0), (1, 2, 0.0)), budget=1)
    free = place(problem, SolveOptions(objective="throughput", solver="highs"))
    assert free.stream.period_ns == 10.0 and free.stream.latency_ns == 20.0
    bounded = place(problem, SolveOptions(objective="throughput", solver="highs", max_latency_ns=11.0))
    assert bounded.stream.period_ns == pytest.approx(11.0, rel=1e-7)
    assert bounded.stream.latency_ns == pytest.approx(11.0, rel=1e-7)
    k1 = place(problem, SolveOptions(objective="throughput", solver="highs", frames_in_flight=1))
    assert k1.stream.period_ns == pytest.approx(11.0, rel=1e-7)


def test_latency_plan_reports_its_period() -> None:
    result = place(_chain(2), SolveOptions(solver="highs"))
    assert result.objective == "latency" and result.stream is not None
    assert result.stream.period_ns == 10.0  # the same one-host placement class


def test_validator_refuses_a_double_booked_host() -> None:
    problem = _chain(0)  # CPU-only: host busy 30 per frame
    good = modulo_schedule(problem, (True, True, True), 30.0)
    assert good.latency_ns == 30.0
    with pytest.raises(InternalError, match="double-booked"):
        validate_stream(problem, replace(good, period_ns=20.0))
    moved = replace(good, tasks=(good.tasks[0], replace(good.tasks[1], start_ns=5.0), good.tasks[2]))
    with pytest.raises(InternalError, match="before"):
        validate_stream(problem, moved)


def test_bounds_need_the_throughput_objective() -> None:
    with pytest.raises(CimsplitError, match="objective throughput"):
        place(_chain(2), SolveOptions(max_latency_ns=30.0))
