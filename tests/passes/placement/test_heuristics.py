"""Primal heuristics: list scheduling by hand, valid schedules, determinism, warm-start quality."""

from __future__ import annotations

import pytest

from cimsplit.passes.placement.heuristics import (
    RULES,
    Sequencer,
    best_heuristic,
    best_list_schedule,
    greedy_assignment,
    knapsack_assignment,
)
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.simulate import host_order_by_start, simulate
from cimsplit.passes.placement.testing import random_problem


def fork() -> PlacementProblem:
    r"""
            s            host-only, 1 ns
          / | \
         a  b  c         a: host 10; b: host 2; c: host 4 / CIM 1 ns (3 crossbars)
         |     |
         t     u         t: host-only 30 (long tail behind a); u: host-only 1
    """
    return PlacementProblem(
        names=("s", "a", "b", "c", "t", "u"),
        t_host_ns=(1.0, 10.0, 2.0, 4.0, 30.0, 1.0),
        t_cim_ns=(None, None, None, 1.0, None, None),
        crossbars=(0, 0, 0, 3, 0, 0),
        edges=((0, 1, 0.0), (0, 2, 0.0), (0, 3, 0.5), (1, 4, 0.0), (3, 5, 0.5)),
        budget=3,
    )


def test_bottom_level_rule_runs_the_long_tail_first():
    p = fork()
    all_host = [True] * p.n
    makespan, order = Sequencer(p).run(all_host, "bottom")
    # bottom levels: a = 10 + 30 = 40, t = 30, c = 4 + 1 = 5, b = 2, u = 1: whenever the host
    # is free it takes the released operator of highest bottom level
    assert order == [0, 1, 4, 3, 2, 5]
    assert makespan == 1 + 10 + 2 + 4 + 30 + 1  # all host, no idle: the sum of T_host


def test_best_list_schedule_equals_simulate_on_its_order():
    p = fork()
    on_host = [True, True, True, False, True, True]
    # c on the CIM: s 0..1, c starts 1.5 (transfer 0.5), ends 2.5, u released at 3.0
    sched = best_list_schedule(p, on_host)
    assert sched.start_ns[3] == 1.5 and sched.finish_ns[3] == 2.5
    again = simulate(p, on_host, host_order_by_start(sched))
    assert again.makespan_ns == sched.makespan_ns
    # host work 1 + 10 + 2 + 30 + 1 = 44 with no forced idle: the optimum for this placement
    assert sched.makespan_ns == 44.0


@pytest.mark.parametrize("style", ["detector", "inception", "layered"])
def test_every_rule_matches_simulate(style: str):
    p = random_problem(120 if style != "detector" else 100, seed=2, style=style)
    seq = Sequencer(p)
    x = greedy_assignment(p)
    for rule in RULES:
        makespan, order = seq.run(x, rule)
        assert makespan == pytest.approx(simulate(p, x, order).makespan_ns, rel=1e-12)
    assert seq.best_makespan(x, RULES) == min(seq.run(x, rule)[0] for rule in RULES)


def test_a_cim_output_write_counts_in_the_bottom_level_and_the_makespan():
    p = fork()
    p = PlacementProblem(**{**p.__dict__, "t_out_ns": (0.0, 0.0, 0.0, 50.0, 0.0, 0.0),
                            "writes_output": (False, False, False, True, False, False)})
    on_host = [True, True, True, False, True, True]
    seq = Sequencer(p)
    # c on the CIM: 1 (its duration) + max(50 (writing its output), 0.5 + 1 (u on the host)) = 51
    assert seq.bottom_levels(on_host, seq.durations(on_host))[3] == 51.0
    # c starts at 1.5 (s, then the transfer) and its output is written by 1.5 + 1 + 50, after the host's 44 ns
    assert seq.best_makespan(on_host, RULES) == 52.5


def test_start_points_respect_the_budget():
    p = random_problem(150, seed=5, style="inception")
    for x in (greedy_assignment(p, "ratio"), greedy_assignment(p, "saving"), knapsack_assignment(p),
              knapsack_assignment(p, use_saving=False)):
        assert sum(c for c, h in zip(p.crossbars, x) if not h) <= p.budget
        assert all(h or p.capable(v) for v, h in enumerate(x))


def test_knapsack_is_optimal_for_host_load():
    r"""Three independent capable ops, budget 4: the best host-time saving is {a, c} (4 crossbars).

    a: 3 xbars saves 10; b: 2 xbars saves 6; c: 1 xbar saves 5 -> {a, c} = 15 > {b, c} = 11.
    """
    p = PlacementProblem(("a", "b", "c"), (10.0, 6.0, 5.0), (0.0, 0.0, 0.0), (3, 2, 1), (), 4)
    x = knapsack_assignment(p, use_saving=False)
    assert x == [False, True, False]


def test_best_heuristic_is_deterministic_and_beats_greedy():
    p = random_problem(100, seed=4, style="detector")
    a = best_heuristic(p, time_budget_s=0.3, seed=1)
    b = best_heuristic(p, time_budget_s=0.3, seed=1)
    assert a == b
    greedy = best_list_schedule(p, greedy_assignment(p))
    assert a.makespan_ns <= greedy.makespan_ns
    assert sum(c for c, h in zip(p.crossbars, a.on_host) if not h) <= p.budget
    assert simulate(p, a.on_host, host_order_by_start(a)).makespan_ns == pytest.approx(a.makespan_ns, rel=1e-12)


def test_nothing_capable_means_cpu_only():
    p = PlacementProblem(("a", "b"), (3.0, 4.0), (None, None), (0, 0), ((0, 1, 1.0),), 10)
    s = best_heuristic(p, time_budget_s=0.05)
    assert s.on_host == (True, True) and s.makespan_ns == 7.0
