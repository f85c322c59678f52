"""How a sliced solve spends its time: the sliced model, the sliced bottleneck segments, the model again.

The stages of :mod:`.staged`, for the problem with slicing options:

1. The sliced CP-SAT model (:func:`.sliced.solve_sliced`) for a short slice of
   deterministic time, :data:`SLICE_S` or a quarter of the limit, warm-started from the caller's
   schedule (the whole-operator optimum: feasible for the sliced problem).
   Small and linear graphs are proven there.
2. If not proven and the chain of bottlenecks without slicing options splits the
   graph into segments of at most :data:`~.staged.LARGEST_SEGMENT` operators, the
   sliced decomposition (:func:`.sliced_segments.solve_sliced_by_segments`, exact
   when its skip-edge rule holds, a lower bound always): ResNet-50's segments
   between its Add/Relu block outputs hold 1-4 convolutions.  It starts from the
   caller's warm start, not from stage 1's incumbent (which depends on the wall
   clock), so a proven answer is the same on every run.
3. If time is left and the gap is open, the sliced model again with the best
   schedule as hint and the best bound as a row.

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
from cimsplit.passes.placement.solvers.backend import STATUS_GAP_LIMIT, STATUS_OPTIMAL
from cimsplit.passes.placement.solvers.cpsat.sliced import SlicedOutcome, gap_status, solve_sliced
from cimsplit.passes.placement.solvers.cpsat.sliced_segments import solve_sliced_by_segments, split_sliced
from cimsplit.passes.placement.solvers.cpsat.staged import LARGEST_SEGMENT

__all__ = ["SLICE_S", "solve_sliced_staged"]

log = logging.getLogger(__name__)

SLICE_S = 1.0
"""Stage 1's deterministic time (CP-SAT's ``max_deterministic_time``), at most a quarter of the limit;
its wall-clock limit, only a guard for a machine under heavy load, is half the limit (at least 4x that)."""


def _order(schedule: Schedule) -> tuple[int, ...]:
    """The host order a schedule ran (over the expanded operators when it slices)."""
    return tuple(host_order_by_start(schedule.parts if schedule.parts is not None else schedule))


def solve_sliced_staged(problem: PlacementProblem, options: SolveOptions, warm_start: Schedule,
                        *, slice_s: float | None = None) -> tuple[SlicedOutcome, str]:
    """The stages above within ``options.time_limit_s``; the outcome (times from the call) and a line
    naming the stages that ran.  ``slice_s`` overrides stage 1's time (0 skips it), for tests."""
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
        slice_s = limit_s
    elif slice_s is None:
        slice_s = min(SLICE_S, 0.25 * limit_s)
    best, order, bound, stages, size = warm_start, _order(warm_start), 0.0, [], (0, 0)
    if slice_s > 0:  # deterministic time when the segments follow: proven or not, the same on every run
        first = solve_sliced(problem, limited(max(4 * slice_s, 0.5 * limit_s) if useful else slice_s), warm_start,
                             work_limit_s=slice_s if useful else None)
        size = (first.n_variables, first.n_constraints)
        if first.schedule is not None and first.schedule.makespan_ns < best.makespan_ns:
            best, order = first.schedule, first.host_order  # type: ignore[assignment]
        bound = first.bound_ns
        if first.status in (STATUS_OPTIMAL, STATUS_GAP_LIMIT) or not useful:
            stages.append("sliced model")
            return _outcome(best, order, bound, options, clock(), size, first.finished), ", ".join(stages)
        stages.append("sliced model not proven in its slice")
    parts = solve_sliced_by_segments(problem, time_limit_s=limit_s - clock(), gap=options.effective_mip_gap,
                                     threads=options.threads or 1, seed=options.seed, warm_start=warm_start)
    if parts.schedule.makespan_ns <= best.makespan_ns:
        best, order = parts.schedule, _order(parts.schedule)
    closed = parts.schedule.makespan_ns - parts.bound_ns <= options.effective_mip_gap * parts.schedule.makespan_ns
    # Closed by the segments: their bound alone, so that a proven answer is the same on every run
    # (stage 1's bound depends on the wall clock).
    bound = parts.bound_ns if closed and best is parts.schedule else max(bound, parts.bound_ns)
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
