"""Shrinking a placement to a crossbar budget, for a warm start where no known solution fits."""

from __future__ import annotations

from collections.abc import Sequence

from cimsplit.passes.placement.heuristics.sequencing import best_list_schedule
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.slicing import WHOLE, expand, parts_schedule, sliced_crossbars

__all__ = ["shrink_to_budget"]


def shrink_to_budget(problem: PlacementProblem, on_host: Sequence[bool], slicing: Sequence[int], budget: int) -> Schedule:
    """A schedule within ``budget`` crossbars from the placement (``on_host``, ``slicing``: -1 whole, else the
    option): operators holding crossbars moved whole to the host one at a time, each time the one whose best
    list schedule (:func:`.sequencing.best_list_schedule` on the expansion) is shortest, until they fit.

    Greedy, not optimal: a (host 10, CIM 2, 3 crossbars) and b (host 6, CIM 1, 2 crossbars) side by side, both
    on the CIM, at a budget of 2: b moves first (span 6, not 10), then a (16), where a alone on the host (10)
    would have fit.  Each move frees at least one crossbar, so it ends."""
    def listed(on_host: list[bool], slicing: list[int]) -> Schedule:
        expansion = expand(problem, on_host, slicing)
        return parts_schedule(problem, expansion, best_list_schedule(expansion.problem, expansion.on_host), slicing)

    def held(v: int) -> int:
        if slicing[v] != WHOLE:
            return problem.slicings[v][slicing[v]].crossbars
        return 0 if on_host[v] else problem.crossbars[v]

    on_host, slicing = list(on_host), list(slicing)
    while sliced_crossbars(problem, on_host, slicing) > budget:
        trials = [([*on_host[:v], True, *on_host[v + 1:]], [*slicing[:v], WHOLE, *slicing[v + 1:]])
                  for v in range(problem.n) if held(v) > 0]
        on_host, slicing = min(trials, key=lambda trial: listed(*trial).makespan_ns)
    return listed(on_host, slicing)
