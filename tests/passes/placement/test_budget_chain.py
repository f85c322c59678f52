"""Budget chains (:mod:`cimsplit.passes.placement.budget_chain`): a hand-computed chain, and facts 1-4
brute-forced on random small problems with real solvers."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from _brute import brute_force_optimum, brute_force_sliced, random_problem, random_sliced_problem

from cimsplit.passes.placement.budget_chain import solve_chain
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.validate import validate


def two_convs(budget: int) -> PlacementProblem:
    """
      a (host 10 / CIM 4, 2 crossbars)      b (host 10 / CIM 4, 3 crossbars)      (independent, no transfers)

    Budget 0: both on the host, serialized: 10 + 10 = 20.  Budget 2..4: one on the CIM (4, in
    parallel), the other on the host: 10.  Budget >= 5: both on the CIM: 4, using u = 5 crossbars.
    """
    return PlacementProblem(names=("a", "b"), t_host_ns=(10.0, 10.0), t_cim_ns=(4.0, 4.0), crossbars=(2, 3),
                            edges=(), budget=budget, t_in_ns=(0.0, 0.0), t_out_ns=(0.0, 0.0),
                            writes_output=(True, True))


def settle(problems, options, known=None):
    """The last (point, result) per index."""
    last = {}
    for i, point, result in solve_chain(problems, options, known):
        last[i] = (point, result)
    return [last[i] for i in range(len(problems))]


@pytest.mark.parametrize("solver", ["cpsat", "highs"])
def test_the_largest_budgets_proof_covers_every_budget_down_to_the_crossbars_it_uses(solver):
    budgets = (0, 2, 5, 8)
    out = settle([two_convs(c) for c in budgets], SolveOptions(solver=solver, threads=1))
    assert [r.schedule.makespan_ns for _, r in out] == [20.0, 10.0, 4.0, 4.0]
    assert [r.crossbars_used for _, r in out] == [0, 2, 5, 5]
    assert [p.reused_from for p, _ in out] == [None, None, 8, None]
    assert all(r.solver.status == "optimal" and r.solver.gap == 0.0 for _, r in out)
    # Budget 5 ran no solve: no whole-operator step, the schedule of budget 8 re-validated at 5.
    assert out[2][0].whole is None and out[2][1].problem.budget == 5
    # Budget 8's bound (4) is a bound at 2 and 0 too (fact 3), passed to their solves.
    assert out[1][1].solver.bound_ns == 10.0 and out[0][1].solver.bound_ns == 20.0


def test_a_worse_schedule_at_a_larger_budget_is_replaced_by_the_smaller_budgets():
    """Fact 4: settle budget 2 from a resumed chain whose budget 5 was only given 20 ns (a time-limited
    incumbent); budget 2's 10 ns schedule fits 5 and replaces it there."""
    from cimsplit.passes.placement.budget_chain import ChainPoint, Found

    slow = Found(on_host=(True, True), host_order=(0, 1), slicing=(), makespan_ns=20.0, bound_ns=4.0,
                 status="time_limit", solver="cpsat", n_variables=9, n_constraints=9, crossbars_used=0, budget=5)
    known = {1: ChainPoint(5, slow, slow, 60.0)}
    out = settle([two_convs(2), two_convs(5)], SolveOptions(solver="highs", threads=1), known)
    assert out[0][1].schedule.makespan_ns == 10.0 and out[0][0].reused_from is None
    point, result = out[1]
    assert result.schedule.makespan_ns == 10.0 and point.reused_from == 2
    assert result.solver.status == "time_limit" and result.solver.bound_ns == 4.0  # 5's own bound
    assert result.solver.gap == pytest.approx(0.6) and result.solver.time_s == 60.0


def _budgets(problem: PlacementProblem) -> list[int]:
    total = sum(problem.crossbars)
    return sorted({0, total // 3, (2 * total) // 3, total})


def _check_chain(problem: PlacementProblem, options: SolveOptions, brute) -> None:
    budgets = _budgets(problem)
    problems = [replace(problem, budget=c) for c in budgets]
    optimum = [brute(p) for p in problems]
    # Fact 1: the optimum never increases with the budget.
    assert all(a >= b - 1e-9 for a, b in zip(optimum, optimum[1:])), (optimum, problem)
    out = settle(problems, options)
    for k, (point, result) in enumerate(out):
        assert result.schedule.makespan_ns == pytest.approx(optimum[k], abs=1e-6), (k, problem)
        assert result.solver.status == "optimal" and result.solver.bound_ns <= optimum[k] + 1e-6
        # Fact 3: the bound at budgets[k] is one at every smaller budget.
        assert all(result.solver.bound_ns <= optimum[j] + 1e-6 for j in range(k + 1))
        # Fact 2: the schedule is feasible at every budget >= the crossbars it uses, optimal at those up to here.
        u = result.crossbars_used
        for j, c in enumerate(budgets):
            if c >= u:
                level = result.problem if not result.schedule.slicing else replace(result.problem, budget=c)
                again = validate(replace(level, budget=c), result.schedule.on_host, slicing=result.schedule.slicing,
                                 start_ns=(result.schedule.parts or result.schedule).start_ns)
                assert again.makespan_ns == pytest.approx(result.schedule.makespan_ns, abs=1e-6)
                if j <= k:
                    assert optimum[j] == pytest.approx(result.schedule.makespan_ns, abs=1e-6)
        if point.reused_from is not None:
            assert point.reused_from in budgets and u <= budgets[k]


WHOLE_SAMPLE = [random_problem(random.Random(500 + seed), max_ops=7) for seed in range(50)]
SLICED_SAMPLE = [random_sliced_problem(random.Random(700 + seed), max_ops=5) for seed in range(12)]


@pytest.mark.parametrize("solver", ["highs", "cpsat"])
def test_facts_on_50_random_problems(solver):
    options = SolveOptions(solver=solver, threads=1, time_limit_s=20)
    for problem in WHOLE_SAMPLE[:25] if solver == "cpsat" else WHOLE_SAMPLE:
        _check_chain(problem, options, brute_force_optimum)


def test_facts_on_random_sliced_problems():
    options = SolveOptions(solver="cpsat", threads=1, time_limit_s=20, slicing="all")
    for problem in SLICED_SAMPLE:
        _check_chain(problem, options, brute_force_sliced)


def test_reuse_happens_on_the_sample():
    reused = 0
    for problem in WHOLE_SAMPLE[:20]:
        out = settle([replace(problem, budget=c) for c in _budgets(problem)], SolveOptions(solver="highs", threads=1))
        reused += sum(1 for p, _ in out if p.reused_from is not None)
    assert reused >= 5


def test_a_whole_operator_bound_bounds_nothing_at_the_sliced_level():
    """At budget 8 the whole-operator step proved 6 ns and the sliced final result 5 ns.  At budget 4
    of a chain with slicing options only the final 5 ns holds (a sliced schedule at 4 may beat the
    whole-operator optimum at 8); without slicing options the whole-operator 6 ns holds too."""
    from cimsplit.passes.placement.budget_chain import ChainPoint, Found, _bound

    def found(makespan_ns: float, slicing: tuple[int, ...]) -> Found:
        return Found(on_host=(False, True), host_order=(1,), slicing=slicing, makespan_ns=makespan_ns,
                     bound_ns=makespan_ns, status="optimal", solver="cpsat", n_variables=1, n_constraints=1,
                     crossbars_used=3, budget=8)

    points = {0: ChainPoint(8, found(6.0, ()), found(5.0, (0, -1)), 0.1)}
    assert _bound(points, 4, sliced=True) == 5.0
    assert _bound(points, 4, sliced=False) == 6.0
    assert _bound(points, 9, sliced=False) == 0.0  # budget 8 bounds nothing at a larger budget
    # A final result that kept the whole-operator schedule is still bounded at the sliced level.
    points = {0: ChainPoint(8, found(6.0, ()), found(6.0, (-1, -1)), 0.1)}
    points[0] = replace(points[0], final=replace(points[0].final, bound_ns=5.5))
    assert _bound(points, 4, sliced=True) == 5.5
