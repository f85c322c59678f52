"""How a sliced solve spends its time: the sliced bottleneck segments, then the sliced model with their bound.

The stages of :mod:`.staged`, for the problem with slicing options:

1. If the chain of bottlenecks without slicing options splits the graph into
   at least two segments of at most :data:`~.staged.LARGEST_SEGMENT` operators,
   the sliced decomposition (:func:`.sliced_segments.solve_sliced_by_segments`,
   exact when its skip-edge rule holds, a lower bound always), from the
   caller's warm start: ResNet-50's segments between its Add/Relu block outputs
   hold 1-4 convolutions.  Its segment solves run on CP-SAT's deterministic
   time, so a proven answer is the same on every run and every machine load.
2. If time is left and the gap is open, the sliced model (:func:`.sliced.solve_sliced`)
   with the best schedule as hint and the best bound as a row.  Without useful
   segments (small, linear or ``plain``), this one model is the whole solve.

There was a stage before the segments: the sliced model alone for 1 s of deterministic time.
It proved a few points the segments prove too, but 1 s of CP-SAT's deterministic time was 2-12 s
of wall time on the zoo's sliced models (ResNet-50 int8: 6.7 s per point, 70 % of its sweep),
while the segments prove ResNet-50's and MobileNetV2's points in 0.4-2.5 s; and its bound and
schedule were dropped when the segments closed the gap (their answer depends on the wall clock).
``bench/results/sweep_fast.txt`` has the before/after.

Every stage's bound is a proven lower bound on the sliced optimum, so the largest
is; the schedule is the best found (the earlier on ties).  The status follows the
final gap (:func:`.sliced.gap_status`).
"""

from __future__ import annotations

import dataclasses
import logging
import time

from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import host_order_by_start
from cimsplit.passes.placement.solvers.cpsat.sliced import SlicedOutcome, gap_status, solve_sliced
from cimsplit.passes.placement.solvers.cpsat.sliced_segments import SegmentMemo, solve_sliced_by_segments
from cimsplit.passes.placement.solvers.cpsat.sliced_split import split_sliced
from cimsplit.passes.placement.solvers.cpsat.staged import LARGEST_SEGMENT

__all__ = ["solve_sliced_staged"]

log = logging.getLogger(__name__)


def _order(schedule: Schedule) -> tuple[int, ...]:
    """The host order a schedule ran (over the expanded operators when it slices)."""
    return tuple(host_order_by_start(schedule.parts if schedule.parts is not None else schedule))


def solve_sliced_staged(problem: PlacementProblem, options: SolveOptions, warm_start: Schedule,
                        memo: SegmentMemo | None = None) -> tuple[SlicedOutcome, str]:
    """The stages above within ``options.time_limit_s``; the outcome (times from the call) and a line
    naming the stages that ran.  ``memo``: segment solves shared with the other budgets of a chain
    (:mod:`.sliced_segments`)."""
    begin = time.perf_counter()
    limit_s = options.time_limit_s

    def clock() -> float:
        return time.perf_counter() - begin

    def limited(seconds: float) -> SolveOptions:
        return dataclasses.replace(options, time_limit_s=max(seconds, 0.05))

    seg = split_sliced(problem)
    # ``plain`` (the formulation as written) is one sliced model, as before the stages existed.
    useful = len([m for m in seg.members if m]) >= 2 and seg.largest <= LARGEST_SEGMENT and not options.plain
    if not useful:
        only = solve_sliced(problem, limited(limit_s), warm_start)
        best, order = warm_start, _order(warm_start)
        if only.schedule is not None and only.schedule.makespan_ns < best.makespan_ns:
            best, order = only.schedule, only.host_order  # type: ignore[assignment]
        return (_outcome(best, order, only.bound_ns, options, clock(), (only.n_variables, only.n_constraints),
                         only.finished), "sliced model")
    best, order, stages, size = warm_start, _order(warm_start), [], (0, 0)
    parts = solve_sliced_by_segments(problem, time_limit_s=limit_s - clock(), gap=options.effective_mip_gap,
                                     threads=options.threads or 1, seed=options.seed, warm_start=warm_start,
                                     memo=memo)
    if parts.schedule.makespan_ns <= best.makespan_ns:
        best, order = parts.schedule, _order(parts.schedule)
    bound = parts.bound_ns
    stages.append(f"sliced bottleneck segments ({len(seg.bottlenecks) - 2} bottlenecks without slicing options, "
                  f"largest segment {seg.largest} operators, {'exact' if seg.exact else 'a bound'})")
    log.info("cp-sat sliced: %d segment solves in %.2f s", parts.solves, parts.time_s)
    gap = options.effective_mip_gap
    if best.makespan_ns - bound > gap * best.makespan_ns and limit_s - clock() > 0.5:
        last = solve_sliced(problem, limited(limit_s - clock()), best, lower_bound_ns=bound)
        bound = max(bound, last.bound_ns)
        if last.schedule is not None and last.schedule.makespan_ns < best.makespan_ns:
            best, order = last.schedule, last.host_order  # type: ignore[assignment]
        size = (last.n_variables, last.n_constraints)
        stages.append("sliced model with their bound")
    return _outcome(best, order, bound, options, clock(), size, False), ", then ".join(stages)


def _outcome(best: Schedule, order: tuple[int, ...], bound_ns: float, options: SolveOptions, time_s: float,
             size: tuple[int, int], finished: bool) -> SlicedOutcome:
    bound_ns = min(bound_ns, best.makespan_ns)
    status = gap_status(best.makespan_ns, bound_ns, options)
    return SlicedOutcome(status, best, order, bound_ns, time_s, size[0], size[1], finished)
