"""Re-time an assignment by simulation, independently of any solver (DESIGN §4).

Host operators run one at a time in a given order (the paper's single-core
host); CIM operators run as soon as their inputs are there (each holds its own
crossbars, so they never wait for each other); a transfer delays every edge
whose ends sit on different devices (eq. 4), and graph inputs/outputs of CIM
operators cross the bus too.  This is the semantics of eq. 6-12 with the
slack removed: every operator starts as early as its predecessors, its
transfers and (on the host) the previous host operator allow.
"""

from __future__ import annotations

from collections.abc import Sequence

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule


def predecessors(problem: PlacementProblem) -> list[list[tuple[int, float]]]:
    """For every operator, its (predecessor, transfer time) pairs."""
    preds: list[list[tuple[int, float]]] = [[] for _ in range(problem.n)]
    for u, v, t in problem.edges:
        preds[v].append((u, t))
    return preds


def simulate(problem: PlacementProblem, on_host: Sequence[bool], host_order: Sequence[int] | None = None) -> Schedule:
    """Earliest-start schedule of ``on_host`` with host operators in ``host_order``.

    ``host_order`` lists every host operator once, in a precedence-respecting
    order; by default the topological index order.  Raises ``ValueError`` if
    the order is not a permutation of the host operators or breaks precedence.
    """
    n = problem.n
    on_host = tuple(bool(h) for h in on_host)
    if len(on_host) != n:
        raise ValueError("on_host must have one entry per operator")
    for v in range(n):
        if not on_host[v] and not problem.capable(v):
            raise ValueError(f"operator {problem.names[v]!r} is not CIM-capable but was placed on the CIM")
    hosts = [v for v in range(n) if on_host[v]]
    order = list(hosts if host_order is None else host_order)
    if sorted(order) != hosts:
        raise ValueError("host_order must list every host operator exactly once")

    # Earliest start = longest path in the DAG plus the chain of host-order edges;
    # that graph is acyclic exactly when the order respects precedence.
    succs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    indegree = [0] * n
    for u, v, transfer in problem.edges:
        succs[u].append((v, transfer if on_host[u] != on_host[v] else 0.0))
        indegree[v] += 1
    for a, b in zip(order, order[1:]):
        succs[a].append((b, 0.0))
        indegree[b] += 1

    start = [0.0 if on_host[v] else problem.t_in_ns[v] for v in range(n)]
    finish = [0.0] * n
    queue = [v for v in range(n) if indegree[v] == 0]
    visited = 0
    while queue:
        u = queue.pop()
        visited += 1
        finish[u] = start[u] + (problem.t_host_ns[u] if on_host[u] else problem.t_cim_ns[u])  # type: ignore[operator]
        for v, delay in succs[u]:
            start[v] = max(start[v], finish[u] + delay)
            indegree[v] -= 1
            if indegree[v] == 0:
                queue.append(v)
    if visited != n:
        raise ValueError("host_order runs an operator before one of its predecessors")

    makespan = 0.0
    for v in range(n):
        end = finish[v]
        if not on_host[v] and problem.writes_output[v]:
            end += problem.t_out_ns[v]
        makespan = max(makespan, end)
    return Schedule(on_host=on_host, start_ns=tuple(start), finish_ns=tuple(finish), makespan_ns=makespan)


def host_order_by_start(schedule: Schedule) -> list[int]:
    """Host operators sorted by start time, ties by finish, then index: the order ``schedule`` ran them in.

    A zero-length host operator may start at the same instant as a longer one and run first;
    ordering by (start, index) alone would make it wait for the longer one.
    """
    hosts = [v for v, h in enumerate(schedule.on_host) if h]
    return sorted(hosts, key=lambda v: (schedule.start_ns[v], schedule.finish_ns[v], v))
