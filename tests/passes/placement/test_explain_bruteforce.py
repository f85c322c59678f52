"""Explanations against brute force on random DAGs of up to 8 operators (``_brute.py``).

Every forced move's makespan must equal the brute-force optimum with that
operator fixed on the other device (``None`` exactly when no placement within
the budget has it there), and the budget curve must equal the brute-force
optimum at every budget from 0 to saturation, with nothing changing after it.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from _brute import brute_force_optimum, random_problem

from cimsplit.passes import PlacementProblem, SolveOptions, place
from cimsplit.passes.placement.budget import budget_curve
from cimsplit.passes.placement.explain import REASONS, explain_operators

FAST = range(12)
ALL = range(200)


def _close(got: float, want: float) -> bool:
    return abs(got - want) <= 1e-6 * max(1.0, want)


def check_against_brute_force(problem: PlacementProblem, solver: str) -> list[str]:
    """Assert every forced move and the whole budget curve; return the reasons seen."""
    solve = lambda p: place(p, SolveOptions(solver=solver, time_limit_s=10))  # noqa: E731
    plan = solve(problem)
    reasons = []
    for v, e in enumerate(explain_operators(plan, solve)):
        assert e.reason in REASONS
        reasons.append(e.reason)
        if e.forced is None:
            assert not problem.capable(v) and e.reason == "not_cim_capable"
            continue
        want = brute_force_optimum(problem, {v: not plan.schedule.on_host[v]})
        if want == float("inf"):
            assert e.forced_makespan_ns is None, (problem, v)
        else:
            assert _close(e.forced_makespan_ns, want), (problem, v, e, want)
            assert e.forced.bound_ns <= want * (1 + 1e-6) + 1e-9
            assert e.saving_ns >= -1e-6 * max(1.0, want)
    curve = budget_curve(plan, solve)
    for point in curve.points:
        assert _close(point.makespan_ns, brute_force_optimum(replace(problem, budget=point.crossbars))), (problem, point)
    top = sum(c for v, c in enumerate(problem.crossbars) if problem.capable(v))
    best = brute_force_optimum(replace(problem, budget=top))
    assert _close(curve.points[-1].makespan_ns, best)
    if curve.saturation > 0:
        assert brute_force_optimum(replace(problem, budget=curve.saturation - 1)) > best + 1e-6 * max(1.0, best)
    return reasons


@pytest.mark.parametrize("solver", ["highs", "cpsat"])
def test_explain_matches_brute_force(solver):
    seen = set()
    for seed in FAST:
        seen.update(check_against_brute_force(random_problem(random.Random(seed)), solver))
    assert seen >= {"not_cim_capable", "never_profitable", "on_cim", "crowded_out"}


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["highs", "cpsat"])
def test_explain_matches_brute_force_on_200_dags(solver):
    seen = set()
    for seed in ALL:
        seen.update(check_against_brute_force(random_problem(random.Random(seed)), solver))
    assert seen == set(REASONS)
