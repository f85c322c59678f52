"""Fitting a placement into a crossbar budget and putting what it leaves to use: a segment solve's warm start."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cimsplit.passes.placement.heuristics.sequencing import best_list_schedule
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.slicing import WHOLE, expand, parts_schedule, sliced_crossbars

__all__ = ["shrink_to_budget"]


def shrink_to_budget(problem: PlacementProblem, on_host: Sequence[bool], slicing: Sequence[int], budget: int,
                     *, polish: bool = True) -> Schedule:
    """A schedule within ``budget`` crossbars from the placement (``on_host``, ``slicing``: -1 whole, else the
    option): operators holding crossbars moved whole to the host one at a time, each time the one whose best
    list schedule (:func:`.sequencing.best_list_schedule` on the expansion) is shortest, until they fit; then,
    with ``polish``, the best change of one operator's mode (host, CIM, a slicing option) that fits and shortens
    the list schedule, round after round while one does.

    The greedy part is not optimal: a (host 10, CIM 2, 3 crossbars) and b (host 6, CIM 1, 2 crossbars) side by
    side, both on the CIM, at a budget of 2: b moves first (span 6, not 10), then a (16); the polish then puts b
    back on the CIM (10, the optimum there).  Each move frees at least one crossbar and each polish round
    shortens the span, so both end."""
    def listed(on_host: list[bool], slicing: list[int]) -> Schedule:
        expansion = expand(problem, on_host, slicing)
        return parts_schedule(problem, expansion, best_list_schedule(expansion.problem, expansion.on_host), slicing)

    def held(v: int) -> int:
        if slicing[v] != WHOLE:
            return problem.slicings[v][slicing[v]].crossbars
        return 0 if on_host[v] else problem.crossbars[v]

    def modes(v: int) -> list[tuple[bool, int]]:
        options = range(len(problem.slicings[v])) if problem.slicings else ()
        return [(True, WHOLE), *([(False, WHOLE)] if problem.capable(v) else []), *((True, k) for k in options)]

    def shortest(trials: Iterable[tuple[list[bool], list[int]]]) -> tuple[Schedule, tuple[list[bool], list[int]]] | None:
        return min(((listed(*trial), trial) for trial in trials), key=lambda timed: timed[0].makespan_ns, default=None)

    on_host, slicing = list(on_host), list(slicing)
    best = None
    while sliced_crossbars(problem, on_host, slicing) > budget:  # some operator holds a crossbar: trials exist
        best, (on_host, slicing) = shortest(([*on_host[:v], True, *on_host[v + 1:]], [*slicing[:v], WHOLE, *slicing[v + 1:]])
                                            for v in range(problem.n) if held(v) > 0)
    best = best or listed(on_host, slicing)
    while polish:
        trials = (([*on_host[:v], h, *on_host[v + 1:]], [*slicing[:v], k, *slicing[v + 1:]])
                  for v in range(problem.n) for h, k in modes(v) if (h, k) != (on_host[v], slicing[v]))
        found = shortest(trial for trial in trials if sliced_crossbars(problem, *trial) <= budget)
        polish = found is not None and found[0].makespan_ns < best.makespan_ns * (1.0 - 1e-9)
        if polish:
            best, (on_host, slicing) = found
    return best
