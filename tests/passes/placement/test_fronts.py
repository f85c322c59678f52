"""Segment fronts by parametric descent: by hand, and against brute force on random small segments.

The DP over the fronts (the whole decomposition, descent included) is brute-forced against
exhaustive enumeration in ``test_segments.py`` (``test_segments_match_brute_force``)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from _brute import brute_force_optimum
from test_segments import CHAINS, two_blocks

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.placement.solvers.cpsat.fronts import descend, host_floor, useful_budgets
from cimsplit.passes.placement.solvers.cpsat.segments import (
    _Decomposition,
    _segment_problem,
    split_at_bottlenecks,
)
from cimsplit.passes.placement.solvers.cpsat.solve import CpSatOptions, solve_fewest_crossbars


def _descended(problem: PlacementProblem, pool: ThreadPoolExecutor, incumbent_ns: float = math.inf) -> _Decomposition:
    """Every key's front after the descent alone (no start solves), against a fixed incumbent."""
    dec = _Decomposition(problem, split_at_bottlenecks(problem), 1e-6, 0, None, time.perf_counter() + 60.0, pool)
    descend(dec, lambda: incumbent_ns, 5.0)
    return dec


def test_two_blocks_fronts_by_hand():
    """Block 1 (b, c: 40 ns on the host, 10 on the CIM, 1 ns transfers): F = 80, 40, 12 for 0, 1, 2
    crossbars; block 2 (e, f: 30 ns): 60, 30, 12.  One span solve per point, no second phase
    (the host floor, 80 - 40 = 40 > 12 and 80 > 40, shows no shorter schedule uses fewer crossbars)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        dec = _descended(two_blocks(budget=4), pool)
    assert host_floor(dec, 1) == pytest.approx([80.0, 40.0, 0.0], abs=1e-9)
    for key, expected in (((1, True, True), [80.0, 40.0, 12.0]), ((2, True, True), [60.0, 30.0, 12.0])):
        front = dec.fronts[key]
        assert [front.lower(b) for b in range(3)] == pytest.approx(expected, rel=1e-9)
        assert [front.upper(b).span_ns for b in range(3)] == expected
        assert sorted(s.limit for s in front.solves) == [0, 1, 2]


def test_a_segment_larger_than_the_limit_keeps_its_floor_and_does_not_descend():
    """Both blocks of two_blocks have 2 members: with ``largest=1`` neither descends, and each front
    is its knapsack floor (80 - 40 per crossbar, 0 at two), a bound below the by-hand F = 80, 40, 12."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        dec = _Decomposition(two_blocks(budget=4), split_at_bottlenecks(two_blocks(budget=4)), 1e-6, 0, None,
                             time.perf_counter() + 60.0, pool)
        descend(dec, lambda: math.inf, 5.0, largest=1)
    front = dec.fronts[(1, True, True)]
    assert front.solves == []
    assert [front.lower(b) for b in range(3)] == pytest.approx([80.0, 40.0, 0.0], abs=1e-9)


def test_fewest_crossbars_keeps_the_span():
    """d (1 crossbar) runs 30 ns on the CIM (100 on the host) beside b (2 crossbars, 10 ns on the
    host, 2 on the CIM): span 30 with b on either device, so the second phase moves b to the host."""
    p = PlacementProblem(names=("a", "b", "d", "e"), t_host_ns=(0.0, 10.0, 100.0, 0.0),
                         t_cim_ns=(None, 2.0, 30.0, None), crossbars=(0, 2, 1, 0),
                         edges=((0, 1, 0.0), (0, 2, 0.0), (1, 3, 0.0), (2, 3, 0.0)), budget=3)
    both = simulate(p, (True, False, False, True), [0, 3])
    assert both.makespan_ns == 30.0
    few = solve_fewest_crossbars(p, CpSatOptions(time_limit_s=10.0, threads=1), both)
    assert (few.used, few.proven, few.schedule.makespan_ns) == (1, True, 30.0)
    assert few.schedule.on_host == (True, True, False, True)


def _brute_front(seg, key: tuple[int, bool, bool], cap: int) -> list[float]:
    i, h0, h1 = key
    return [brute_force_optimum(_segment_problem(seg, i, h0, h1, b)[0]) for b in range(cap + 1)]


@pytest.mark.parametrize("chunk", range(2))
def test_fronts_match_brute_force(chunk: int):
    """Every key's front after the descent, at every budget: the bound below and the schedule above
    the brute-force F(b), equal where the solves ran to the end; the host floor below it too."""
    checked = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        for p in CHAINS[chunk * 25:(chunk + 1) * 25]:
            dec = _descended(p, pool)
            feasible = useful_budgets(dec, dec.keys, math.inf)  # the budgets the problem's budget leaves
            for key in dec.keys:
                front, cap = dec.fronts[key], dec.caps[key[0]]
                exact = all(s.finished for s in front.solves if s.bound_ns > 0)
                for b, f in enumerate(_brute_front(dec.seg, key, cap)):
                    assert front.floor[b] <= f * (1 + 1e-9) + 1e-9
                    assert front.lower(b) <= f * (1 + 1e-9) + 1e-9
                    top = front.upper(b)
                    assert top is not None or not feasible[key][b]
                    assert top is None or top.span_ns >= f * (1 - 1e-9) - 1e-9
                    if exact and feasible[key][b]:
                        assert top.span_ns == pytest.approx(f, rel=1e-6)
                        assert front.lower(b) == pytest.approx(f, rel=1e-6)
                        checked += 1
    assert checked >= 60


def test_useless_budgets_hold_no_better_allocation():
    """A budget the test calls useless, forced on its segment, gives no schedule better than the
    threshold (brute force over the whole problem with that segment's crossbars capped)."""
    seen = 0
    with ThreadPoolExecutor(max_workers=1) as pool:
        for p in CHAINS[:60]:
            seg = split_at_bottlenecks(p)
            if not seg.exact or sum(1 for m in seg.members if m) < 2:
                continue
            optimum = brute_force_optimum(p)
            dec = _descended(p, pool)
            threshold = optimum * 1.05
            for key, useful in useful_budgets(dec, dec.keys, threshold).items():
                i, h0, h1 = key
                for b in map(int, (~useful).nonzero()[0]):
                    best = _capped_optimum(p, seg, key, b)
                    assert best >= threshold * (1 - 1e-9), (p, key, b)
                    seen += 1
    assert seen >= 20


def _capped_optimum(p: PlacementProblem, seg, key: tuple[int, bool, bool], b: int) -> float:
    """The optimum with the key's bottleneck devices and its segment charged b crossbars (using at
    most b), as the DP charges an allocation (brute force)."""
    i, h0, h1 = key
    members = [v - 1 for v in seg.members[i]]
    fixed = {seg.bottlenecks[j] - 1: h for j, h in ((i, h0), (i + 1, h1)) if 0 < seg.bottlenecks[j] <= p.n}
    best = math.inf
    capable = [v for v in members if p.capable(v)]
    for bits in itertools.product((True, False), repeat=len(capable)):
        used = sum(p.crossbars[v] for v, h in zip(capable, bits) if not h)
        if used <= b <= p.budget:
            charged = dataclasses.replace(p, budget=p.budget - (b - used))
            best = min(best, brute_force_optimum(charged, {**fixed, **dict(zip(capable, bits))}))
    return best
