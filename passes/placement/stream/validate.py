"""Independent check of a stream's periodic schedule: simulate N frames (issue 14, DESIGN §8).

:func:`validate_stream` re-derives from the problem alone what one frame must
contain under the placement (every operator with its host or CIM latency, every
tensor that crosses devices once per destination device, the graph input/output
transfers of CIM operators), then

1. lays out N frames of the shifted copies (frame f at f * period) and checks
   that no resource is double-booked: the host, the bus, each CIM operator;
2. checks precedence and transfers inside every frame;
3. replays the N frames (and enough frames after them to compete with the last
   ones) as an earliest-start execution (:func:`replay_frames`:
   frame f released at f * period, each resource taking its tasks in the order
   the shifted copies give it) and checks that its steady state has the
   schedule's period and one frame's latency equal to ``latency_ns``.

It shares no code with the solver or the construction that made the schedule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.stream.tasks import PeriodicSchedule, StreamTask
from cimsplit.passes.placement.validate import InternalError

__all__ = ["validate_stream", "replay_frames", "DEFAULT_FRAMES"]

DEFAULT_FRAMES = 20
REL_TOL = 1e-6


def _expected(problem: PlacementProblem, on_host: Sequence[bool]) -> tuple[dict[str, tuple[str, float]], set[tuple[str, str]]]:
    """name -> (unit, duration) of every task one frame must have, and the (before, after) name pairs."""
    tasks: dict[str, tuple[str, float]] = {}
    order: set[tuple[str, str]] = set()
    names = problem.names
    for v, name in enumerate(names):
        if on_host[v]:
            tasks[name] = ("host", problem.t_host_ns[v])
        else:
            if problem.t_cim_ns[v] is None:
                raise InternalError(f"stream: operator {name!r} is not CIM-capable but was placed on the CIM (eq. 5)")
            tasks[name] = (f"cim:{name}", problem.t_cim_ns[v])  # type: ignore[assignment]
            if problem.t_in_ns[v] > 0:
                tasks[f"{name}:input->cim"] = ("bus", problem.t_in_ns[v])
                order.add((f"{name}:input->cim", name))
            if problem.writes_output[v] and problem.t_out_ns[v] > 0:
                tasks[f"{name}:output->host"] = ("bus", problem.t_out_ns[v])
                order.add((name, f"{name}:output->host"))
    for u, v, _ in problem.edges:
        order.add((names[u], names[v]))
    for tensor in problem.tensors:
        crossing = [d for d in tensor.dsts if on_host[d] != on_host[tensor.src]]
        if crossing and tensor.t_transfer_ns > 0:
            name = f"{tensor.name}->{'cim' if on_host[tensor.src] else 'host'}"
            tasks[name] = ("bus", tensor.t_transfer_ns)
            order.add((names[tensor.src], name))
            order.update((name, names[d]) for d in crossing)
    return tasks, order


def replay_frames(tasks: Sequence[StreamTask], period_ns: float, frames: int) -> list[list[float]]:
    """Earliest-start execution of ``frames`` frames: start[f][i] of task i in frame f.

    Frame f is released at f * period; a task waits for its ``after`` tasks of the same
    frame and for the previous task its resource runs, in the order of the shifted copies
    (f * period + start_ns, ties by frame, then by task index); zero-length tasks hold no resource.
    """
    n = len(tasks)
    instances = sorted(((f * period_ns + t.start_ns, f, i) for f in range(frames) for i, t in enumerate(tasks)))
    previous: dict[tuple[int, int], tuple[int, int] | None] = {}
    last: dict[str, tuple[int, int]] = {}
    for _, f, i in instances:  # a zero-length task occupies nothing: it only waits for its predecessors
        unit = tasks[i].unit
        previous[(f, i)] = last.get(unit) if tasks[i].duration_ns > 0 else None
        if tasks[i].duration_ns > 0:
            last[unit] = (f, i)
    start = [[0.0] * n for _ in range(frames)]
    done: set[tuple[int, int]] = set()
    # In the shifted-copies order every predecessor (same frame, earlier start, or the same
    # instant and a lower index: tasks are listed in a topological order) comes first.
    for _, f, i in instances:
        task = tasks[i]
        t = f * period_ns
        for j in task.after:
            if (f, j) not in done:
                raise InternalError(f"stream: task {task.name!r} starts before its predecessor {tasks[j].name!r}")
            t = max(t, start[f][j] + tasks[j].duration_ns)
        prev = previous[(f, i)]
        if prev is not None:
            t = max(t, start[prev[0]][prev[1]] + tasks[prev[1]].duration_ns)
        start[f][i] = t
        done.add((f, i))
    return start


def validate_stream(problem: PlacementProblem, schedule: PeriodicSchedule, *, frames: int | None = None,
                    source: str = "stream", slack_free: bool = True) -> PeriodicSchedule:
    """Check ``schedule`` (see the module docstring); returns it, or raises :class:`InternalError`.

    ``slack_free``: the replay's steady-state frame latency must equal ``latency_ns`` (every
    schedule cimsplit emits is tightened to this); otherwise it may only be shorter.
    """
    period, latency = schedule.period_ns, schedule.latency_ns
    tasks = schedule.tasks
    scale = max(1.0, period, latency)
    tol = REL_TOL * scale
    if not (math.isfinite(period) and period >= 0):
        raise InternalError(f"{source}: period {period!r} is not a finite non-negative time")
    used = sum(c for c, h in zip(problem.crossbars, schedule.on_host) if not h)
    if used > problem.budget:
        raise InternalError(f"{source}: {used} crossbars used, budget is {problem.budget} (eq. 14)")
    expected, order = _expected(problem, schedule.on_host)
    got = {t.name: (t.unit, t.duration_ns) for t in tasks}
    if len(got) != len(tasks) or set(got) != set(expected):
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        raise InternalError(f"{source}: the frame's tasks are wrong (missing {missing[:3]}, unexpected {extra[:3]})")
    for name, (unit, duration) in expected.items():
        if got[name][0] != unit or abs(got[name][1] - duration) > tol:
            raise InternalError(f"{source}: task {name!r} runs on {got[name][0]} for {got[name][1]} ns, "
                                f"the model says {unit} for {duration} ns")
    by_name = {t.name: t for t in tasks}
    for a, b in order:
        if by_name[b].start_ns + tol < by_name[a].finish_ns:
            raise InternalError(f"{source}: {b!r} starts at {by_name[b].start_ns:.6g} ns, before {a!r} finishes "
                                f"({by_name[a].finish_ns:.6g} ns)")
    if any(t.start_ns < -tol for t in tasks):
        raise InternalError(f"{source}: a task starts before its frame is released")
    makespan = max((t.finish_ns for t in tasks), default=0.0)
    if abs(makespan - latency) > tol:
        raise InternalError(f"{source}: the frame's makespan is {makespan:.6g} ns, the schedule says {latency:.6g} ns")
    in_flight = schedule.frames_in_flight
    frames = frames or max(DEFAULT_FRAMES, 3 * in_flight + 3)
    # 1. shifted copies: no resource double-booked
    busy: dict[str, list[tuple[float, float, str]]] = {}
    for f in range(frames):
        for t in tasks:
            if t.duration_ns > 0:
                busy.setdefault(t.unit, []).append((f * period + t.start_ns, f * period + t.finish_ns, f"{t.name}@{f}"))
    for unit, intervals in busy.items():
        intervals.sort()
        for (_, e0, a), (s1, _, b) in zip(intervals, intervals[1:]):
            if s1 + tol < e0:
                raise InternalError(f"{source}: {unit} is double-booked: {a} runs until {e0:.6g} ns, {b} starts at "
                                    f"{s1:.6g} ns (period {period:.6g} ns)")
    # 3. the replay's steady state: period and latency
    start = replay_frames(tasks, period, frames + 2 * in_flight + 2)  # later frames compete with the last checked ones
    finish = [max((start[f][i] + t.duration_ns for i, t in enumerate(tasks)), default=f * period) for f in range(frames)]
    steady = frames - 1 - in_flight
    measured = (finish[-1] - finish[steady]) / (frames - 1 - steady)
    if abs(measured - period) > tol:
        raise InternalError(f"{source}: the replayed stream's steady-state period is {measured:.6g} ns, "
                            f"the schedule says {period:.6g} ns")
    for f in range(frames):
        if finish[f] - f * period > latency + tol:
            raise InternalError(f"{source}: frame {f} of the replay takes {finish[f] - f * period:.6g} ns, more "
                                f"than the schedule's latency {latency:.6g} ns")
    last = frames - 1
    if slack_free and abs(finish[last] - last * period - latency) > tol:
        raise InternalError(f"{source}: the replay's steady-state latency is {finish[last] - last * period:.6g} ns, "
                            f"the schedule says {latency:.6g} ns")
    return schedule
