"""Replay the plan's modeled schedule (DESIGN §6): busy time per device, bus time, makespan.

The rule is the partitioner's re-timer, applied to the plain numbers in
plan.json's ``timeline`` section (so the runtime needs no solver and no
cost model): host operators one at a time in order of their modeled start,
CIM operators as soon as their inputs are there, a crossing edge delays its
consumer by its transfer latency (eq. 4), a CIM operator that reads graph
inputs starts no earlier than their transfer, and one that writes graph
outputs finishes the makespan only after their transfer back.  Replaying the
validated schedule reproduces its makespan exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cimsplit.runtime.plan import PlanTimeline

__all__ = ["Timeline", "replay"]


@dataclass(frozen=True)
class Timeline:
    busy_ns: dict[str, float]
    """Device -> summed operator durations."""
    bus_ns: float
    """Summed transfer latencies (crossing edges and graph input/output transfers)."""
    makespan_ns: float
    start_ns: dict[str, float]
    finish_ns: dict[str, float]
    crossings: int
    """Number of modeled bus transfers."""


def replay(section: PlanTimeline | Mapping[str, Any]) -> Timeline:
    """Earliest-start replay of plan.json's ``timeline`` section (typed, or its JSON mapping)."""
    timeline = section if isinstance(section, PlanTimeline) else PlanTimeline.from_json(section)
    ops = timeline.operators
    index = {op.name: i for i, op in enumerate(ops)}
    n = len(ops)
    host = [op.device == "host" for op in ops]
    succs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    indegree = [0] * n
    bus_ns = 0.0
    crossings = 0
    for edge in timeline.edges:
        u, v = index[edge.src], index[edge.dst]
        delay = edge.latency_ns if host[u] != host[v] else 0.0
        if host[u] != host[v]:
            bus_ns += delay
            crossings += 1
        succs[u].append((v, delay))
        indegree[v] += 1
    order = sorted((v for v in range(n) if host[v]), key=lambda v: (ops[v].start_ns, ops[v].finish_ns, v))
    for a, b in zip(order, order[1:]):
        succs[a].append((b, 0.0))
        indegree[b] += 1

    start = [op.input_transfer_ns for op in ops]
    finish = [0.0] * n
    queue = [v for v in range(n) if indegree[v] == 0]
    seen = 0
    while queue:
        u = queue.pop()
        seen += 1
        finish[u] = start[u] + ops[u].duration_ns
        for v, delay in succs[u]:
            start[v] = max(start[v], finish[u] + delay)
            indegree[v] -= 1
            if indegree[v] == 0:
                queue.append(v)
    if seen != n:
        raise ValueError("the plan's timeline is not a valid schedule (cyclic order)")

    busy: dict[str, float] = {"host": 0.0, "cim": 0.0}
    makespan = 0.0
    for v, op in enumerate(ops):
        busy[op.device] = busy.get(op.device, 0.0) + op.duration_ns
        for transfer_ns in (op.input_transfer_ns, op.output_transfer_ns):
            if transfer_ns > 0:
                bus_ns += transfer_ns
                crossings += 1
        makespan = max(makespan, finish[v] + op.output_transfer_ns)
    names = [op.name for op in ops]
    return Timeline(busy, bus_ns, makespan, dict(zip(names, start)), dict(zip(names, finish)), crossings)
