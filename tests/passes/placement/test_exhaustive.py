"""Exact fronts by enumeration (solvers/exhaustive.py): hand-computed on two operators, and the brute force's
optimum at every budget of random problems, with and without slicing options."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from _brute import brute_force_optimum, brute_force_sliced, random_problem, random_sliced_problem

from cimsplit.passes.placement.problem import PlacementProblem, SliceOption
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.placement.slicing import WHOLE, expand
from cimsplit.passes.placement.solvers.exhaustive import best_within, crossbar_front


def a_then_b() -> PlacementProblem:
    """a (host 10, CIM 4 on 2 crossbars) -> b (host 20, CIM 5 on 3), 3 ns on the edge; b may also be
    sliced: a CIM part of 2 ns on 1 crossbar, a host part of 8, a join of 1, 2 ns back, 3 ns either way in."""
    option = SliceOption(kind="ks", split=4, t_host_ns=8.0, t_cim_ns=2.0, crossbars=1, t_join_ns=1.0, t_back_ns=2.0,
                         in_cim_ns=((0, 3.0),), in_host_ns=((0, 3.0),))
    return PlacementProblem(names=("a", "b"), t_host_ns=(10.0, 20.0), t_cim_ns=(4.0, 5.0), crossbars=(2, 3),
                            edges=((0, 1, 3.0),), budget=0, slicings=((), (option,)))


def steps(front) -> list[tuple[int, float]]:
    return [(p.crossbars, p.schedule.makespan_ns) for p in front]


def test_two_operators_front_by_hand():
    """0 crossbars: 10 + 20 = 30.  b sliced (1): its CIM part 10 + 3 + 2, back 2 -> 17, its host part
    10 + 8 = 18, join 19.  a on the CIM (2): 4 + 3 + 20 = 27, no step.  a on the CIM and b sliced (3):
    CIM part 4 + 2, back 2 -> 8, host part 4 + 3 + 8 = 15, join 16; b whole on the CIM instead (3):
    10 + 3 + 5 = 18, longer.  Both on the CIM (5): 4 + 5 = 9."""
    front = crossbar_front(a_then_b())
    assert steps(front) == [(0, 30.0), (1, 19.0), (3, 16.0), (5, 9.0)]
    point = best_within(front, 4)
    assert point.schedule.on_host[0] is False and point.schedule.slicing == (WHOLE, 0)
    expansion = expand(a_then_b(), point.schedule.on_host, point.schedule.slicing)
    assert simulate(expansion.problem, expansion.on_host, point.host_order).makespan_ns == 16.0
    assert best_within(front, 0).schedule.makespan_ns == 30.0 and best_within(front, 99).crossbars == 5


def test_fixed_devices_and_giving_up():
    """a fixed on the host: b's choices alone (30, sliced 19, whole 18).  Six choices, or one search step: none."""
    assert steps(crossbar_front(a_then_b(), {0: True})) == [(0, 30.0), (1, 19.0), (3, 18.0)]
    assert crossbar_front(a_then_b(), max_choices=5) is None
    assert crossbar_front(a_then_b(), max_steps=1) is None
    with pytest.raises(ValueError, match="no schedule within"):
        best_within(crossbar_front(a_then_b(), {0: False}), 1)


@pytest.mark.parametrize("sliced", [False, True])
def test_front_is_the_brute_force_optimum_at_every_budget(sliced: bool):
    checked = 0
    for seed in range(40):
        rng = random.Random(4100 + seed)
        problem = random_sliced_problem(rng, max_ops=5) if sliced else random_problem(rng, max_ops=6)
        front = crossbar_front(problem)
        assert front is not None
        spans = [p.schedule.makespan_ns for p in front]
        assert spans == sorted(spans, reverse=True) and len(set(spans)) == len(spans)  # steps: each one shorter
        for budget in range(sum(problem.crossbars) + 1):
            at = replace(problem, budget=budget)
            optimum = brute_force_sliced(at) if sliced else brute_force_optimum(at)
            point = best_within(front, budget)
            assert point.schedule.makespan_ns == pytest.approx(optimum, abs=1e-9), (problem, budget)
            slicing = point.schedule.slicing or (WHOLE,) * problem.n
            expansion = expand(problem, point.schedule.on_host, slicing)
            held = sum(c for c, h in zip(expansion.problem.crossbars, expansion.on_host) if not h)
            assert held == point.crossbars <= budget
            checked += 1
    assert checked >= 200
