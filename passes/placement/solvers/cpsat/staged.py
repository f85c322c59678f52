"""How ``--solver cpsat`` spends its time limit: whole graph, bottleneck segments, whole graph again.

1. The whole-graph model (:func:`solve_cpsat`) for a short slice,
   :data:`SLICE_S` or half the limit (heuristic included): CNNs and
   Inception-style graphs are proven there.
2. If not proven and the graph splits at bottlenecks into segments that
   :func:`decomposes` accepts (all of at most :data:`LARGEST_SEGMENT` operators,
   or the larger ones holding at most :data:`LARGE_SHARE` of the operators), the
   bottleneck decomposition (:func:`solve_by_segments`, exact): YOLOv5n at
   every point of the paper's grid is proven there (the whole-graph model
   stops at 1.5-3.7 % gaps after 30 s), and so are most random detector DAGs of
   250-400 operators, whose 84-154-operator tails keep their knapsack floor.  It starts from the caller's warm start (not from
   the slice's incumbent, which depends on the wall clock), so a proven answer
   is the same on every run.
3. If time is left and the gap is not closed, the whole-graph model again,
   with the best schedule as hint and the segments' bound as a row.

Each stage's bound is a proven lower bound on the same optimum, so the
largest is; the schedule is the best found (earlier stage on ties).
:class:`CpSatBackend` is ``--solver cpsat``: these stages, or the plain model alone.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from cimsplit.passes.placement.heuristics import best_heuristic, heuristic_budget_s
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import host_order_by_start
from cimsplit.passes.placement.solvers.backend import (
    STATUS_GAP_LIMIT,
    STATUS_OPTIMAL,
    STATUS_TIME_LIMIT,
    BackendOutcome,
)
from cimsplit.passes.placement.solvers.cpsat.model import time_unit_ns
from cimsplit.passes.placement.solvers.cpsat.segments import (
    LARGEST_SEGMENT,
    Segments,
    solve_by_segments,
    split_at_bottlenecks,
)
from cimsplit.passes.placement.solvers.cpsat.solve import CpSatOptions, CpSatRun, solve_cpsat

__all__ = ["LARGEST_SEGMENT", "LARGE_SHARE", "SLICE_S", "CpSatBackend", "decomposes", "solve_staged"]

log = logging.getLogger(__name__)

SLICE_S = 1.0
"""The whole-graph slice (stage 1), at most half the time limit.  YOLOv5n's whole-graph
bound (1.5-4.5 %) is there after 0.5 s: with short limits, before the segments' bound
has converged, it is the better one."""
LARGE_SHARE = 0.5
"""The decomposition runs when the segments larger than :data:`LARGEST_SEGMENT` hold at most this
share of the operators.  Random detector DAGs: 34-38 % in the tail, whose front is within 0.1-0.2 %
of its knapsack floor, while the whole-graph model's bound misses the host idle time of the small
early segments (their big CIM convs: 4 ms of detector-400's 8 ms idle in one 20-operator segment):
the whole-graph model alone stops at 0.6-0.8 % after 30 s, the decomposition at <= 0.3 %."""


def decomposes(seg: Segments) -> bool:
    """Whether the bottleneck decomposition is worth running: two segments or more, and the
    segments that do not descend their fronts hold at most :data:`LARGE_SHARE` of the operators."""
    if len([m for m in seg.members if m]) < 2:
        return False
    large = sum(len(m) for m in seg.members if len(m) > LARGEST_SEGMENT)
    return large <= LARGE_SHARE * (seg.augmented.n - 2)


def solve_staged(problem: PlacementProblem, options: CpSatOptions = CpSatOptions(),  # noqa: B008 (frozen)
                 *, warm_start: Schedule | None = None, slice_s: float | None = None,
                 lower_bound_ns: float = 0.0) -> tuple[CpSatRun, str]:
    """The three stages above; returns the run (times from the call) and a line naming the stages
    that ran ("" when the whole-graph model alone settled it; no times, so plan.json stays the same).

    ``options.time_limit_s`` is the limit of all stages together; the whole-graph solves run
    with ``options`` otherwise.  ``slice_s`` overrides stage 1's time (0 skips it), for tests
    and benchmarks.  ``lower_bound_ns``: a proven lower bound from elsewhere, given to the
    whole-graph solves as a row (and the least bound reported).
    """
    begin = time.perf_counter()
    time_limit_s, gap = options.time_limit_s, options.gap_limit
    seg = split_at_bottlenecks(problem)
    if not decomposes(seg):
        return solve_cpsat(problem, options, warm_start=warm_start, lower_bound_ns=lower_bound_ns), ""

    if warm_start is None:  # one heuristic run for every stage, as the placement driver runs it
        warm_start = best_heuristic(problem, heuristic_budget_s(problem, time_limit_s), options.seed)
    warm_at = (time.perf_counter() - begin, warm_start.makespan_ns)
    incumbents: list[tuple[float, float]] = []

    def clock() -> float:
        return time.perf_counter() - begin

    def limited(seconds: float) -> CpSatOptions:
        return dataclasses.replace(options, time_limit_s=seconds)

    if slice_s is None:
        slice_s = min(SLICE_S, 0.5 * time_limit_s) - clock()
    best, bound, stages, size = warm_start, lower_bound_ns, [], (0, 0)
    if slice_s > 0:
        offset = clock()
        first = solve_cpsat(problem, limited(slice_s), warm_start=warm_start, lower_bound_ns=lower_bound_ns)
        if first.outcome.status != STATUS_TIME_LIMIT:  # proven: stage 1 is the answer
            outcome = dataclasses.replace(first.outcome, time_s=clock())
            moved = [(offset + t, v) for t, v in first.incumbents]
            return dataclasses.replace(first, outcome=outcome, incumbents=moved, warm_start=warm_at), ""
        incumbents += [(offset + t, v) for t, v in first.incumbents]
        best, bound = first.schedule or warm_start, max(bound, first.outcome.bound_ns)
        size = (first.outcome.n_variables, first.outcome.n_constraints)
        stages.append("whole graph not proven in its slice")
    offset = clock()
    parts = solve_by_segments(problem, time_limit_s=time_limit_s - offset, gap=gap, threads=options.threads,
                              seed=options.seed, warm_start=warm_start)
    incumbents += [(offset + t, v) for t, v in parts.incumbents]
    bound = max(bound, parts.bound_ns)
    if parts.schedule.makespan_ns <= best.makespan_ns:
        best = parts.schedule  # (on ties: the deterministic one)
    stages.append(f"bottleneck segments ({len(seg.bottlenecks) - 2} bottlenecks, largest segment {seg.largest} "
                  "operators)")
    log.info("cp-sat: %d segment solves in %.2f s", parts.solves, parts.time_s)
    offset = clock()
    if best.makespan_ns - bound > gap * best.makespan_ns and time_limit_s - offset > 0.5:
        last = solve_cpsat(problem, limited(time_limit_s - offset), warm_start=best, lower_bound_ns=bound)
        incumbents += [(offset + t, v) for t, v in last.incumbents]
        bound = max(bound, last.outcome.bound_ns)
        if last.schedule is not None and last.schedule.makespan_ns < best.makespan_ns:
            best = last.schedule
        size = (last.outcome.n_variables, last.outcome.n_constraints)
        stages.append("whole graph with their bound")
    bound = min(bound, best.makespan_ns)
    real_gap = (best.makespan_ns - bound) / best.makespan_ns if best.makespan_ns > 0 else 0.0
    if real_gap > gap:
        status = STATUS_TIME_LIMIT
    else:
        status = STATUS_OPTIMAL if options.mip_gap is None or real_gap <= 1e-9 else STATUS_GAP_LIMIT
    outcome = BackendOutcome(
        solver="cpsat", status=status, on_host=best.on_host, start_ns=best.start_ns,
        host_order=tuple(host_order_by_start(best)), objective_ns=best.makespan_ns, bound_ns=bound,
        time_s=clock(), n_variables=size[0], n_constraints=size[1])
    how = ", then ".join(stages)
    log.info("cp-sat: %s", how)
    unit, exact = time_unit_ns(problem)
    return CpSatRun(outcome, best, unit, exact, incumbents if options.record else [], warm_at), how


class CpSatBackend:
    """``--solver cpsat``: ignores the MILP and builds the scheduling model of
    :mod:`~cimsplit.passes.placement.solvers.cpsat.model`.

    ``options.plain`` selects the model without cuts, bounds or hints; otherwise
    the time limit is spent as :func:`solve_staged` says (whole graph, bottleneck
    segments, whole graph again).
    """

    name = "cpsat"

    def solve(self, problem: PlacementProblem, formulation: object, options: SolveOptions,
              warm_start: Schedule | None) -> BackendOutcome:
        cpsat_options = CpSatOptions.from_solve_options(options)
        if options.plain:
            return solve_cpsat(problem, cpsat_options, warm_start=warm_start).outcome
        run, how = solve_staged(problem, cpsat_options, warm_start=warm_start, lower_bound_ns=options.lower_bound_ns)
        return dataclasses.replace(run.outcome, detail=how)
