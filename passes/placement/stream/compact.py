"""A shorter frame for a stream at the same placement and period: search over the busiest unit's cycle.

The modulo construction (:mod:`~cimsplit.passes.placement.stream.construct`)
proves a period achievable, but its frame can span dozens of periods: a host
task that waits for a CIM result waits for its offset's next turn, once per
round trip.  A frame of latency L keeps ceil(L / P) frames in flight: their
tensors in memory, and each result arriving L after its input.

In a stream whose busiest serial unit (the host, or the bus) is nearly always
busy, that unit runs every one of its tasks once per period, back to back in
some cyclic order.  :func:`compact_stream` searches that order: given it, the
unit's tasks sit at the order's packed offsets (prefix sums), every task
starts at the first turn of its offset after its inputs are ready
(:func:`~cimsplit.passes.placement.stream.construct.stage_start`), the other
serial unit takes its tasks first fit modulo P and a CIM operator starts when
its inputs are ready -- a shifted-copies schedule of period P by construction
(the module docstring of ``construct`` says why).  The search starts from the
topological order and from the one-frame list schedule wrapped onto the
period (every rotation), then moves one task at a time to a nearby position
while the frame gets shorter (ties: smaller sum of start times), within a
fixed number of evaluations, so the result does not depend on the machine.
The best frame is tightened by the earliest-start replay of its orders and
validated independently; the given schedule is kept unless that is shorter.
A heuristic: the period stays the proven one, the frame is shorter, not
proven shortest.
"""

from __future__ import annotations

import logging

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.stream.construct import first_fit, schedule_from_starts, stage_start, tighten
from cimsplit.passes.placement.stream.tasks import BUS, HOST, PeriodicSchedule, TaskSpec, specs_of
from cimsplit.passes.placement.stream.validate import validate_stream
from cimsplit.passes.placement.validate import InternalError

__all__ = ["compact_stream", "EVALUATIONS", "WINDOW"]

log = logging.getLogger(__name__)

EVALUATIONS = 2000
"""Frames evaluated per compaction (each is linear in the tasks: about a millisecond on the zoo models)."""
WINDOW = 12
"""A move takes a task at most this many positions along the cycle."""

_Score = tuple[float, float]


def _packed(specs: list[TaskSpec], order: list[int]) -> dict[int, float]:
    """Offsets of ``order``'s tasks back to back from 0."""
    offset: dict[int, float] = {}
    cursor = 0.0
    for i in order:
        offset[i] = cursor
        cursor += specs[i].duration_ns
    return offset


def _frame(specs: list[TaskSpec], offset: dict[int, float], period: float) -> tuple[_Score, list[float]] | None:
    """(latency, sum of starts) and the starts of one frame whose busiest unit runs its tasks at ``offset``."""
    table: list[tuple[float, float]] = []
    start = [0.0] * len(specs)
    for i, spec in enumerate(specs):
        ready = max((start[j] + specs[j].duration_ns for j in spec.after), default=0.0)
        if i in offset:
            start[i] = stage_start(ready, offset[i], period)
        elif spec.unit in (HOST, BUS) and spec.duration_ns > 0:
            fitted = first_fit(table, ready, spec.duration_ns, period)
            if fitted is None:
                return None
            start[i] = fitted
        else:
            start[i] = ready
    return (max((s + t.duration_ns for s, t in zip(start, specs)), default=0.0), sum(start)), start


def _wrapped(specs: list[TaskSpec], circle: list[int], period: float) -> list[int]:
    """``circle`` ordered by where the one-frame list schedule (serial units in task order) runs them, modulo P."""
    start = [0.0] * len(specs)
    free = {HOST: 0.0, BUS: 0.0}
    for i, spec in enumerate(specs):
        ready = max((start[j] + specs[j].duration_ns for j in spec.after), default=0.0)
        if spec.unit in free and spec.duration_ns > 0:
            ready = max(ready, free[spec.unit])
            free[spec.unit] = ready + spec.duration_ns
        start[i] = ready
    return sorted(circle, key=lambda i: (start[i] % period, start[i]))


def _search(specs: list[TaskSpec], circle_unit: str, period: float, evaluations: int) -> list[float] | None:
    circle = [i for i, t in enumerate(specs) if t.unit == circle_unit and t.duration_ns > 0]
    best: tuple[_Score, list[int], list[float]] | None = None
    left = evaluations

    def improves(order: list[int]) -> bool:
        """Evaluate ``order``; keep it when its frame is the best so far."""
        nonlocal best, left
        left -= 1
        found = _frame(specs, _packed(specs, order), period)
        if found is None or (best is not None and found[0] >= best[0]):
            return False
        best = (found[0], order, found[1])
        return True

    def moved(order: list[int], a: int, b: int) -> list[int]:
        out = order[:a] + order[a + 1:]
        out.insert(b, order[a])
        return out

    wrapped = _wrapped(specs, circle, period)
    for order in [circle, *(wrapped[r:] + wrapped[:r] for r in range(len(wrapped)))]:
        if left <= 0:
            break
        improves(order)
    improved = best is not None
    while improved and left > 0:  # first improvement, then start over from the new order
        assert best is not None
        order = best[1]
        pairs = ((a, b) for a in range(len(order))
                 for b in range(max(0, a - WINDOW), min(len(order), a + WINDOW + 1)) if a != b)
        improved = any(left > 0 and improves(moved(order, a, b)) for a, b in pairs)
    return None if best is None else best[2]


def compact_stream(problem: PlacementProblem, schedule: PeriodicSchedule,
                   evaluations: int = EVALUATIONS) -> PeriodicSchedule:
    """``schedule``'s placement and period with a frame no longer, usually far shorter (module docstring)."""
    period = schedule.period_ns
    if period <= 0 or schedule.frames_in_flight <= 1:
        return schedule
    specs = specs_of(schedule)
    load = {unit: sum(t.duration_ns for t in specs if t.unit == unit) for unit in (HOST, BUS)}
    starts = _search(specs, max((HOST, BUS), key=lambda u: load[u]), period, evaluations)
    if starts is None:
        return schedule
    raw = schedule_from_starts(problem, schedule.on_host, specs, starts, period)
    try:
        candidate = validate_stream(problem, tighten(problem, raw), source="compacted stream", slack_free=False)
    except InternalError as exc:  # not expected: the search's frames are shifted copies by construction
        log.warning("stream compaction kept the constructed schedule: %s", exc)
        return schedule
    if candidate.latency_ns >= schedule.latency_ns * (1 - 1e-9):
        return schedule
    log.info("stream frame compacted from %.6g ns (%d in flight) to %.6g ns (%d)", schedule.latency_ns,
             schedule.frames_in_flight, candidate.latency_ns, candidate.frames_in_flight)
    return candidate
