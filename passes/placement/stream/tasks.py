"""One frame of a stream as tasks on resources, and the periodic schedule record (Pipe-it, DESIGN §8).

Resources of a stream: the host (one core: one task at a time), the bus (one
transfer at a time: every tensor that crosses devices, and the graph
input/output transfers a CIM operator pays) and each CIM operator on its own
(weight-stationary: it owns its crossbars, so it works on one frame at a time
while other CIM operators work on other frames).

A :class:`PeriodicSchedule` is a *shifted-copies* schedule: every frame runs
the same single-frame schedule S (the tasks' ``start_ns``), frame f shifted by
f * ``period_ns``.  It is feasible when no resource's busy intervals overlap
modulo the period and precedence holds inside S.
"""

from __future__ import annotations

from dataclasses import dataclass

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import PeriodicSchedule, StreamTask

__all__ = ["HOST", "BUS", "CIM", "TaskSpec", "StreamTask", "PeriodicSchedule", "task_graph", "resource_bound_ns",
           "specs_of", "with_starts"]

HOST, BUS, CIM = "host", "bus", "cim"


@dataclass(frozen=True)
class TaskSpec:
    """A task of one frame before it is timed: what it is, where it runs, how long, after what."""

    name: str
    kind: str
    """``operator`` or ``transfer``."""
    resource: str
    """``host``, ``bus`` or ``cim``."""
    unit: str
    """The resource instance: ``host``, ``bus`` or ``cim:<operator>`` (each CIM operator is its own)."""
    duration_ns: float
    after: tuple[int, ...]
    """Indices of the tasks that must finish before this one starts."""
    operator: int | None = None
    """The operator index of an operator task."""


def task_graph(problem: PlacementProblem, on_host: tuple[bool, ...]) -> list[TaskSpec]:
    """The tasks of one frame under ``on_host``, in a topological order.

    Per operator v (index order): its graph-input transfer (CIM only, ``t_in_ns``), the
    operator, then its crossing tensors (a tensor crosses once if any reader sits on the
    other device; the readers there wait for it) and its graph-output transfer (CIM only,
    when it writes a graph output).  Zero-length transfers are left out: their readers
    wait for the producer directly.
    """
    tasks: list[TaskSpec] = []
    op_task: dict[int, int] = {}
    waits: dict[int, list[int]] = {v: [] for v in range(problem.n)}  # operator -> transfer tasks it waits for
    preds: dict[int, list[int]] = {v: [] for v in range(problem.n)}
    for u, v, _ in problem.edges:
        preds[v].append(u)
    by_src: dict[int, list[int]] = {}
    for k, tensor in enumerate(problem.tensors):
        by_src.setdefault(tensor.src, []).append(k)
    for v, name in enumerate(problem.names):
        host = on_host[v]
        if not host and problem.t_in_ns[v] > 0:
            tasks.append(TaskSpec(f"{name}:input->{CIM}", "transfer", BUS, BUS, float(problem.t_in_ns[v]), ()))
            waits[v].append(len(tasks) - 1)
        after = tuple(sorted({op_task[u] for u in preds[v]} | set(waits[v])))
        duration = problem.t_host_ns[v] if host else problem.t_cim_ns[v]
        unit = HOST if host else f"{CIM}:{name}"
        tasks.append(TaskSpec(name, "operator", HOST if host else CIM, unit, float(duration), after, v))  # type: ignore[arg-type]
        op_task[v] = len(tasks) - 1
        for k in by_src.get(v, ()):
            tensor = problem.tensors[k]
            readers = [d for d in tensor.dsts if on_host[d] != host]
            if not readers or tensor.t_transfer_ns <= 0:
                continue
            tasks.append(TaskSpec(f"{tensor.name}->{CIM if host else HOST}", "transfer", BUS, BUS,
                                  float(tensor.t_transfer_ns), (op_task[v],)))
            for d in readers:
                waits[d].append(len(tasks) - 1)
        if not host and problem.writes_output[v] and problem.t_out_ns[v] > 0:
            tasks.append(TaskSpec(f"{name}:output->{HOST}", "transfer", BUS, BUS, float(problem.t_out_ns[v]),
                                  (op_task[v],)))
    return tasks


def resource_bound_ns(tasks: list[TaskSpec]) -> float:
    """max(host busy time, bus busy time, the longest CIM operator): no period of these tasks is shorter."""
    host = sum(t.duration_ns for t in tasks if t.unit == HOST)
    bus = sum(t.duration_ns for t in tasks if t.unit == BUS)
    cim = max((t.duration_ns for t in tasks if t.resource == CIM), default=0.0)
    return max(host, bus, cim)


def specs_of(schedule: PeriodicSchedule) -> list[TaskSpec]:
    """The untimed tasks of ``schedule``'s frame (the inverse of :func:`with_starts`)."""
    return [TaskSpec(t.name, t.kind, t.resource, t.unit, t.duration_ns, t.after, t.operator) for t in schedule.tasks]


def with_starts(specs: list[TaskSpec], start_ns: list[float]) -> tuple[StreamTask, ...]:
    return tuple(StreamTask(s.name, s.kind, s.resource, s.unit, float(t), s.duration_ns, s.after, s.operator)
                 for s, t in zip(specs, start_ns))
