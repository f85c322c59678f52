"""The exact makespan at every crossbar budget from 0 to saturation (budget sensitivity).

The optimum T*(C) never increases with C (a larger budget only adds options).
If the optimum at budget ``b`` uses ``u <= b`` crossbars, its schedule is
feasible at every budget in ``[u, b]``, so ``T*(b') = T*(b)`` there: one
solve covers the whole interval.  Starting from the plan (which covers
``[used, C]``) and the top of the range, :func:`budget_curve` solves at the
highest budget not yet covered and repeats -- one solve per placement change,
not one per budget.

Saturation is the smallest budget whose optimum equals the optimum with every
capable operator allowed on the CIM: beyond it nothing changes.  A solve cut
short by its time limit gives an incumbent and a bound; the curve keeps the
incumbents monotone (a schedule feasible at ``b`` is feasible at ``b + 1``) and
the bounds too (a bound at ``b`` holds at every smaller budget).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import PlacementResult
from cimsplit.passes.placement.whatif import REL_TOL, Solve

__all__ = ["BudgetCurve", "BudgetPoint", "budget_curve"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BudgetPoint:
    crossbars: int
    """The budget C."""
    makespan_ns: float
    bound_ns: float
    """Proven lower bound on T*(C) (equal to the makespan when every solve proved optimality)."""
    cim_operators: tuple[str, ...]
    """The placement chosen at this budget: operators on the CIM."""
    solved: bool
    """A solve ran at exactly this budget (the others are covered by one)."""


@dataclass(frozen=True)
class BudgetCurve:
    points: tuple[BudgetPoint, ...]
    """One point per budget 0, 1, ..., saturation."""
    solves: int

    @property
    def saturation(self) -> int:
        return self.points[-1].crossbars

    def marginal_ns(self, crossbars: int) -> float | None:
        """What one more crossbar is worth at ``crossbars``: T*(C) - T*(C + 1) (``None`` at saturation)."""
        if crossbars >= self.saturation:
            return 0.0 if crossbars > self.saturation else None
        return self.points[crossbars].makespan_ns - self.points[crossbars + 1].makespan_ns

    @property
    def placement_changes(self) -> tuple[int, ...]:
        """Budgets whose placement differs from the one at one crossbar fewer."""
        return tuple(p.crossbars for prev, p in zip(self.points, self.points[1:])
                     if p.cim_operators != prev.cim_operators)

    @property
    def makespan_changes(self) -> tuple[int, ...]:
        """Budgets whose makespan is lower than at one crossbar fewer."""
        return tuple(p.crossbars for prev, p in zip(self.points, self.points[1:])
                     if p.makespan_ns < prev.makespan_ns - REL_TOL * max(1.0, prev.makespan_ns))


def _cim(problem: PlacementProblem, on_host: tuple[bool, ...]) -> tuple[str, ...]:
    return tuple(name for name, h in zip(problem.names, on_host) if not h)


def budget_curve(plan: PlacementResult, solve: Solve) -> BudgetCurve:
    """T*(C) for every C from 0 to saturation, re-solving ``plan.problem`` at other budgets."""
    problem = plan.problem
    top = sum(c for v, c in enumerate(problem.crossbars) if problem.capable(v))
    # budget -> (makespan, bound, cim operators, solved here)
    known: dict[int, tuple[float, float, tuple[str, ...], bool]] = {}
    solves = 0

    def cover(budget: int, result: PlacementResult) -> None:
        used = result.crossbars_used
        if used > budget:
            raise ValueError(f"a schedule for budget {budget} uses {used} crossbars")
        entry = (result.schedule.makespan_ns, result.solver.bound_ns, _cim(problem, result.schedule.on_host))
        for b in range(used, min(budget, top) + 1):
            known.setdefault(b, (*entry, b == budget))

    cover(problem.budget, plan)
    while len(known) < top + 1:
        budget = max(b for b in range(top + 1) if b not in known)
        solves += 1
        log.info("budget curve: solving at %d crossbars", budget)
        cover(budget, solve(replace(problem, budget=budget)))

    entries = [known[b] for b in range(top + 1)]
    for b in range(1, top + 1):  # a schedule feasible at b - 1 is feasible at b
        if entries[b - 1][0] < entries[b][0]:
            entries[b] = (*entries[b - 1][:3], entries[b][3])
    bound = [e[1] for e in entries]
    for b in range(top - 1, -1, -1):  # T*(b) >= T*(b + 1) >= its bound
        bound[b] = max(bound[b], bound[b + 1])
    best = entries[top][0]
    saturation = next(b for b in range(top + 1) if entries[b][0] <= best + REL_TOL * max(1.0, best))
    points = tuple(BudgetPoint(b, entries[b][0], min(bound[b], entries[b][0]), entries[b][2], entries[b][3])
                   for b in range(saturation + 1))
    return BudgetCurve(points, solves)
