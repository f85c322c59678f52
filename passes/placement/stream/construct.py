"""Build a shifted-copies schedule for a placement and a period: the modulo construction.

Why the unbounded optimum is achievable.  Let P be at least the host's busy
time per frame, the bus's busy time per frame and every CIM operator's latency
(:func:`~cimsplit.passes.placement.stream.tasks.resource_bound_ns`).  Give
every task an offset in [0, P): on the host and on the bus, pack the tasks
back to back in a topological order (offsets 0, d_1, d_1 + d_2, ...: they fit
because their durations sum to at most P); a CIM operator is alone on its
resource, offset 0.  Then, in topological order, start each task at the
smallest k * P + offset (k >= 0 its stage) that is no earlier than every
predecessor's finish -- such a k always exists.  Frame f runs task i at
f * P + k_i * P + offset_i, so on every resource the busy intervals of all
frames sit at their disjoint offsets modulo P (and a CIM operator, d <= P,
never overlaps its own next copy): no resource is double-booked, precedence
holds by construction, and the stream has period P.  Hence the minimum of P
over placements (the MILP of :mod:`~cimsplit.passes.placement.stream.milp`)
is the minimum period over the shifted-copies class.

:func:`modulo_schedule` also tries a first-fit variant (each task at the
earliest instant after its predecessors whose interval is free modulo P on its
resource), which usually gives a shorter frame latency, and keeps the shorter
of the two.  Both are then tightened (:func:`tighten`): the earliest-start
replay of the stream in the schedule's resource orders reaches a periodic
steady state whose frame is no longer; that frame, re-validated, is returned.
"""

from __future__ import annotations

import logging

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.stream.tasks import BUS, HOST, PeriodicSchedule, TaskSpec, specs_of, task_graph, with_starts
from cimsplit.passes.placement.stream.validate import replay_frames, validate_stream
from cimsplit.passes.placement.validate import InternalError

__all__ = ["bounded_heuristic", "first_fit", "modulo_schedule", "schedule_from_starts", "stage_start", "tighten"]

log = logging.getLogger(__name__)

_SERIAL = (HOST, BUS)


def stage_start(ready: float, offset: float, period: float) -> float:
    """The smallest k * period + offset >= ready, k >= 0 (offset in [0, period))."""
    if period <= 0:
        return max(ready, offset)
    k = max(0, -(-(ready - offset) // period))  # ceil, >= 0
    start = k * period + offset
    while start < ready:  # float rounding of the division
        start += period
    return start


def _packed_starts(specs: list[TaskSpec], period: float) -> list[float]:
    cursor = {unit: 0.0 for unit in _SERIAL}
    start: list[float] = []
    for spec in specs:
        ready = max((start[j] + specs[j].duration_ns for j in spec.after), default=0.0)
        if spec.unit in cursor:
            offset = cursor[spec.unit]
            cursor[spec.unit] += spec.duration_ns
            start.append(stage_start(ready, offset, period))
        else:
            start.append(ready)
    return start


def _free(busy: list[tuple[float, float]], begin: float, duration: float, period: float) -> bool:
    """Whether [begin, begin + duration) modulo ``period`` misses every interval of ``busy`` (residues)."""
    if duration <= 0:
        return True
    b = begin % period
    pieces = [(b, min(b + duration, period))]
    if b + duration > period:
        pieces.append((0.0, b + duration - period))
    return all(e <= s0 or s1 <= s for s, e in busy for s0, s1 in pieces)


def _first_fit_starts(specs: list[TaskSpec], period: float) -> list[float] | None:
    busy: dict[str, list[tuple[float, float]]] = {unit: [] for unit in _SERIAL}
    start: list[float] = []
    for spec in specs:
        ready = max((start[j] + specs[j].duration_ns for j in spec.after), default=0.0)
        if spec.unit not in busy or spec.duration_ns <= 0:
            start.append(ready)
            continue
        chosen = first_fit(busy[spec.unit], ready, spec.duration_ns, period)
        if chosen is None:
            return None
        start.append(chosen)
    return start


def first_fit(table: list[tuple[float, float]], ready: float, duration: float, period: float) -> float | None:
    """The earliest start >= ``ready`` whose interval is free modulo ``period`` in ``table`` (then booked), or None."""
    r = ready % period
    candidates = sorted({0.0, *((e - r) % period for _, e in table)})
    chosen = next((ready + c for c in candidates if _free(table, ready + c, duration, period)), None)
    if chosen is None:
        return None
    b = chosen % period
    if b + duration > period:
        table += [(b, period), (0.0, b + duration - period)]
    else:
        table.append((b, b + duration))
    return chosen


def schedule_from_starts(problem: PlacementProblem, on_host: tuple[bool, ...], specs: list[TaskSpec],
                         start_ns: list[float], period_ns: float) -> PeriodicSchedule:
    """A schedule from start times (precedence repaired forward against float noise)."""
    start = list(start_ns)
    for i, spec in enumerate(specs):
        start[i] = max([max(0.0, start[i]), *(start[j] + specs[j].duration_ns for j in spec.after)])
    tasks = with_starts(specs, start)
    latency = max((t.finish_ns for t in tasks), default=0.0)
    return PeriodicSchedule(tuple(on_host), float(period_ns), float(latency), tasks)


def tighten(problem: PlacementProblem, schedule: PeriodicSchedule, frames: int = 0) -> PeriodicSchedule:
    """The steady-state frame of the schedule's earliest-start replay (never longer), validated.

    Returns ``schedule`` itself when the replay does not settle into the period within
    ``frames`` frames or its frame does not validate.
    """
    period = schedule.period_ns
    frames = frames or max(24, 4 * schedule.frames_in_flight + 4)
    try:
        start = replay_frames(schedule.tasks, period, frames + 2 * schedule.frames_in_flight + 2)
    except InternalError:
        return schedule
    last = frames - 1
    frame = [s - last * period for s in start[last]]
    specs = specs_of(schedule)
    candidate = schedule_from_starts(problem, schedule.on_host, specs, frame, period)
    if candidate.latency_ns > schedule.latency_ns:
        return schedule
    try:
        return validate_stream(problem, candidate, source="tightened stream")
    except InternalError as exc:
        log.debug("tightening kept the constructed schedule: %s", exc)
        return schedule


def modulo_schedule(problem: PlacementProblem, on_host: tuple[bool, ...], period_ns: float) -> PeriodicSchedule:
    """A validated shifted-copies schedule of ``on_host`` with period ``period_ns`` (>= the resource bound)."""
    specs = task_graph(problem, tuple(on_host))
    options = [_packed_starts(specs, period_ns)]
    if period_ns > 0:
        fitted = _first_fit_starts(specs, period_ns)
        if fitted is not None:
            options.append(fitted)
    best: PeriodicSchedule | None = None
    for start in options:
        candidate = tighten(problem, schedule_from_starts(problem, on_host, specs, start, period_ns))
        try:
            candidate = validate_stream(problem, candidate, source="modulo construction",
                                        slack_free=start is not options[0])
        except InternalError:
            if start is options[0]:
                raise
            continue
        if best is None or candidate.latency_ns < best.latency_ns:
            best = candidate
    assert best is not None
    return best


def bounded_heuristic(problem: PlacementProblem, placements: list[tuple[bool, ...]], max_latency_ns: float | None,
                      frames_in_flight: int | None, steps: int = 48, growth: float = 1.04) -> PeriodicSchedule | None:
    """A feasible stream under the bounds, or None: first-fit at periods growing from each placement's bound.

    For each placement, periods rb * (1 + 0.0025 i) for i <= 11 (a fully busy resource leaves
    first fit no gap at rb itself), rb * growth**i (i < ``steps``) and finally the frame of a
    list schedule (first fit with one frame in flight, period = its latency) are tried; the
    shortest period whose first-fit frame meets the bounds wins (tightened, validated).  An
    incumbent and upper bound for the bounded MILP, not an optimum.
    """
    def meets(latency: float, period: float) -> bool:
        tol = 1e-9 * max(1.0, latency)
        return (max_latency_ns is None or latency <= max_latency_ns + tol) and \
            (frames_in_flight is None or latency <= frames_in_flight * period + tol)

    best: PeriodicSchedule | None = None
    for on_host in dict.fromkeys(placements):
        specs = task_graph(problem, on_host)
        bound = max(sum(t.duration_ns for t in specs if t.unit == unit) for unit in _SERIAL)
        bound = max([bound, *(t.duration_ns for t in specs if t.unit not in _SERIAL)])
        if bound <= 0 or (best is not None and bound >= best.period_ns):
            continue
        horizon = sum(t.duration_ns for t in specs) + bound
        single = _first_fit_starts(specs, horizon)  # nothing wraps: a list schedule of one frame
        periods = [bound * (1 + 0.0025 * i) for i in range(1, 12)] + [bound * growth ** i for i in range(steps)]
        if single is not None:
            periods.append(max(bound, max(st + t.duration_ns for st, t in zip(single, specs))))
        for period in sorted(periods):
            if best is not None and period >= best.period_ns:
                break
            start = _first_fit_starts(specs, period)
            if start is None:
                continue
            latency = max((st + t.duration_ns for st, t in zip(start, specs)), default=0.0)
            if not meets(latency, period):
                continue
            candidate = tighten(problem, schedule_from_starts(problem, on_host, specs, start, period))
            try:
                best = validate_stream(problem, candidate, source="bounded heuristic", slack_free=False)
            except InternalError:
                continue
            break
    return best
