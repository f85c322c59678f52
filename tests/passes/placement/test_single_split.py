"""single_split schedules each distinct placement once and finds the same best split as trying every k."""

from __future__ import annotations

import pytest

from cimsplit.passes.placement.baselines import cpu_only, list_schedule, single_split
from cimsplit.passes.placement.testing import random_problem


def _every_split_point(problem):
    """The definition: both directions at every k, each list-scheduled."""
    n = problem.n
    best = cpu_only(problem)
    for cim_prefix in (True, False):
        for k in range(1, n + 1) if cim_prefix else range(0, n):
            cim_side = set(range(0, k) if cim_prefix else range(k, n))
            on_host = [not (v in cim_side and problem.capable(v)) for v in range(n)]
            used = sum(problem.crossbars[v] for v in range(n) if not on_host[v])
            if used > problem.budget or all(on_host):
                continue
            schedule = list_schedule(problem, on_host)
            if schedule.makespan_ns < best.makespan_ns:
                best = schedule
    return best


@pytest.mark.parametrize("style", ["detector", "inception", "layered"])
@pytest.mark.parametrize("budget_fraction", [0.1, 0.5, 1.0])
def test_single_split_equals_every_split_point(style, budget_fraction) -> None:
    for seed in range(1):
        problem = random_problem(100, seed=seed, style=style, budget_fraction=budget_fraction)
        want, got = _every_split_point(problem), single_split(problem)
        assert (got.makespan_ns, got.on_host) == (want.makespan_ns, want.on_host)
