"""The mode bound (solvers/cpsat/mode_bound.py): hand-computed on a tiny graph, never above the
brute-force optimum, never below the cheap bounds, and the sliced decomposition that uses it still
agrees with the brute force."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from _brute import brute_force_optimum, brute_force_sliced, random_chained_sliced_problem, random_problem, random_sliced_problem

from cimsplit.passes.placement import PlacementProblem
from cimsplit.passes.placement.problem import SliceOption
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.placement.sliced_bound import sliced_lower_bound_ns
from cimsplit.passes.placement.slicing import WHOLE, sliced_crossbars
from cimsplit.passes.placement.solvers.cpsat import sliced_segments
from cimsplit.passes.placement.solvers.cpsat.mode_bound import MARGIN, mode_bound, mode_bound_ns, mode_schedule


def _two_branches(budget: int) -> PlacementProblem:
    """u, w (host 10 / CIM 4 on 1 crossbar each) feed the host-only p, q (3 each), no transfers."""
    return PlacementProblem(names=("u", "w", "p", "q"), t_host_ns=(10.0, 10.0, 3.0, 3.0),
                            t_cim_ns=(4.0, 4.0, None, None), crossbars=(1, 1, 0, 0),
                            edges=((0, 2, 0.0), (1, 3, 0.0)), budget=budget)


def test_the_pair_row_sees_two_branches_waiting_for_the_cim():
    """Budget 2: u, w on the CIM end at 4, then p and q run one after the other: 10.  Each single row
    gives 7 (f_u + load of u's descendants = 4 + 3, the path 4 + 3, the host load 6); the pair row
    min(f_u, f_w) + load(p, q) = 4 + 6 = 10.  Budget 1: one of u, w on the host, so the host runs
    10 + 3 + 3 = 16, which the host-load row gives."""
    problem = _two_branches(2)
    assert brute_force_optimum(problem) == 10.0
    assert sliced_lower_bound_ns(problem) == 7.0
    assert mode_bound_ns(problem) == pytest.approx(10.0 * (1 - MARGIN), rel=1e-12)
    assert brute_force_optimum(_two_branches(1)) == 16.0
    assert mode_bound_ns(_two_branches(1)) == pytest.approx(16.0 * (1 - MARGIN), rel=1e-12)


def test_the_time_limit_covers_every_round_and_a_cut_off_bound_is_not_cached():
    """No time left: no round runs, the bound is the trivial 0 (still a lower bound), and it is not
    cached, so the next call with time solves the MILP (10 on the two branches above, whose third
    crossbar changes nothing; a budget no other test uses, so nothing is cached before)."""
    problem = _two_branches(3)
    assert mode_bound(problem, time_limit_s=0.0).bound_ns == 0.0
    assert mode_bound_ns(problem) == pytest.approx(10.0 * (1 - MARGIN), rel=1e-12)


def test_the_transfer_rows_charge_the_hand_over_of_the_mode_chosen():
    """u (host 10, CIM 2 on 1 crossbar) -> v (host 3), transfer 4: u on the CIM ends at 2, its output
    crosses (4), v runs 3: 9 (u on the host: 13).  Without the transfer rows the path gave 2 + 3 = 5."""
    whole = PlacementProblem(names=("u", "v"), t_host_ns=(10.0, 3.0), t_cim_ns=(2.0, None), crossbars=(1, 0),
                             edges=((0, 1, 4.0),), budget=1)
    assert brute_force_optimum(whole) == 9.0
    assert mode_bound_ns(whole) == pytest.approx(9.0 * (1 - MARGIN), rel=1e-12)
    # u (host 5) -> v sliced: host part 6, CIM part 2 after reading u's output over the bus (6), back 1,
    # join 1: the CIM part runs 11-13, its output is back at 14, the join ends at 15 (v whole on the
    # host: 5 + 20).  The path of shortest durations gave 5 + 1 + max(6, 2 + 1) = 12.
    option = SliceOption(kind="ks", split=1, t_host_ns=6.0, t_cim_ns=2.0, crossbars=1, t_join_ns=1.0, t_back_ns=1.0,
                         in_cim_ns=((0, 6.0),), in_host_ns=((0, 0.0),))
    sliced = PlacementProblem(names=("u", "v"), t_host_ns=(5.0, 20.0), t_cim_ns=(None, 1.0), crossbars=(0, 4),
                              edges=((0, 1, 0.0),), budget=1, slicings=((), (option,)))
    assert brute_force_sliced(sliced) == 15.0
    assert mode_bound_ns(sliced) == pytest.approx(15.0 * (1 - MARGIN), rel=1e-12)


def test_the_mode_bound_s_modes_are_a_schedule_within_the_budget():
    """The last MILP solution's modes, list-scheduled (:func:`mode_bound.mode_schedule`): within the
    budget, never shorter than the optimum, and the optimum itself on most small problems."""
    optimal = 0
    for seed in range(80):
        problem = random_sliced_problem(random.Random(9000 + seed), max_ops=6)
        found = mode_bound(problem)
        schedule = mode_schedule(problem, found)
        assert schedule is not None
        slicing = schedule.slicing or (WHOLE,) * problem.n
        assert sliced_crossbars(problem, schedule.on_host, slicing) <= problem.budget
        optimum = brute_force_sliced(problem)
        assert schedule.makespan_ns >= optimum - 1e-9 >= found.bound_ns - 1e-9
        optimal += schedule.makespan_ns <= optimum + 1e-9
    assert optimal >= 70  # 78 of 80 when written


def test_the_mode_bound_never_exceeds_the_brute_force_optimum_and_is_tight_on_some():
    tight = 0
    for seed in range(150):
        rng = random.Random(5000 + seed)
        problem = random_sliced_problem(rng, max_ops=6)
        for budget in sorted({problem.budget, problem.budget // 2, 0}):
            at = replace(problem, budget=budget)
            optimum = brute_force_sliced(at)
            bound = mode_bound_ns(at)
            assert bound <= optimum + 1e-9, at
            assert bound >= sliced_lower_bound_ns(at) * (1 - 2 * MARGIN) - 1e-9, at  # host load and path inside
            tight += bound >= optimum * (1 - 2 * MARGIN)
    assert tight >= 100


def test_the_mode_bound_of_whole_operator_problems():
    for seed in range(150):
        problem = random_problem(random.Random(8000 + seed), max_ops=7)
        assert mode_bound_ns(problem) <= brute_force_optimum(problem) + 1e-9, problem


def test_the_sliced_decomposition_with_the_mode_bound_on_every_segment_agrees_with_brute_force(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sliced_segments, "MODE_BOUND_OPERATORS", 1)
    escalated = []
    escalate = sliced_segments._SlicedDecomposition.escalate

    def counted(self, key):
        escalated.append(key not in self.escalated)
        escalate(self, key)

    monkeypatch.setattr(sliced_segments._SlicedDecomposition, "escalate", counted)
    for seed in range(60):
        problem = random_chained_sliced_problem(random.Random(6000 + seed))
        optimum = brute_force_sliced(problem)
        run = sliced_segments.solve_sliced_by_segments(problem, time_limit_s=20.0, threads=1,
                                                       warm_start=simulate(problem, [True] * problem.n))
        assert run.bound_ns <= optimum + 1e-9, problem
        if sliced_segments.split_sliced(problem).exact:
            assert run.schedule.makespan_ns == pytest.approx(optimum, abs=1e-9), problem
            assert run.bound_ns == pytest.approx(optimum, rel=1e-5)
    assert sum(escalated) >= 5  # the lazy loop did target segments, which then got the mode bound


def test_the_mode_bound_after_another_highs_instance_chose_the_thread_count():
    """HiGHS's scheduler is per process: a solve asking for another thread count than the first
    instance's stopped with an error, and the bound was 0 (seen after the MILP backend had run)."""
    import highspy

    other = highspy.Highs()
    other.setOptionValue("output_flag", False)
    other.setOptionValue("threads", 2)
    a, b = other.addBinary(), other.addBinary()
    other.addConstr(a + b >= 1)
    other.minimize(a + 2 * b)
    problem = replace(_two_branches(2), names=("u2", "w2", "p2", "q2"))  # not in the cache
    assert mode_bound_ns(problem) == pytest.approx(10.0 * (1 - MARGIN), rel=1e-12)
