"""Baselines reported beside the ILP (DESIGN §4): CPU-only, greedy, best single split.

Every baseline returns a :class:`Schedule` re-timed by :func:`simulate`, so its
makespan is exactly comparable with the ILP's.  They also give the ILP its warm
start and the upper bound that tightens its big-M.
"""

from __future__ import annotations

from collections.abc import Sequence

from cimsplit.passes.problem import PartitionProblem
from cimsplit.passes.result import Schedule
from cimsplit.passes.schedule import simulate

__all__ = ["cpu_only", "greedy", "single_split", "list_schedule", "all_baselines"]


def cpu_only(problem: PartitionProblem) -> Schedule:
    """Everything on the host in topological order: makespan = sum of T_host."""
    return simulate(problem, (True,) * problem.n)


def _bottom_levels(problem: PartitionProblem, on_host: Sequence[bool]) -> list[float]:
    """Longest path from v's start to the end under this placement (v's own time included)."""
    duration = [problem.t_host_ns[v] if on_host[v] else problem.t_cim_ns[v] for v in range(problem.n)]
    level = [float(d) for d in duration]  # type: ignore[arg-type]
    for u, v, transfer in sorted(problem.edges, key=lambda e: -e[0]):
        delay = transfer if on_host[u] != on_host[v] else 0.0
        level[u] = max(level[u], duration[u] + delay + level[v])  # type: ignore[operator]
    return level


def list_schedule(problem: PartitionProblem, on_host: Sequence[bool]) -> Schedule:
    """Schedule a placement: CIM operators as soon as possible, host operators by list scheduling.

    The host runs next the ready operator that can start earliest; ties go to
    the longest remaining path (bottom level), then the lower index.
    """
    n = problem.n
    on_host = tuple(bool(h) for h in on_host)
    preds: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for u, v, t in problem.edges:
        preds[v].append((u, t))
    level = _bottom_levels(problem, on_host)
    finish: list[float | None] = [None] * n
    done = [False] * n
    host_free = 0.0
    order: list[int] = []
    remaining = set(range(n))

    def ready_time(v: int) -> float | None:
        ready = 0.0 if on_host[v] else problem.t_in_ns[v]
        for u, t in preds[v]:
            if finish[u] is None:
                return None
            ready = max(ready, finish[u] + (t if on_host[u] != on_host[v] else 0.0))  # type: ignore[operator]
        return ready

    while remaining:
        progressed = True
        while progressed:  # CIM operators never wait for each other: place every one that is ready
            progressed = False
            for v in sorted(remaining):
                if not on_host[v]:
                    ready = ready_time(v)
                    if ready is not None:
                        finish[v] = ready + problem.t_cim_ns[v]  # type: ignore[operator]
                        remaining.discard(v)
                        progressed = True
        best: tuple[float, float, int] | None = None
        for v in remaining:
            if on_host[v]:
                ready = ready_time(v)
                if ready is not None:
                    key = (max(ready, host_free), -level[v], v)
                    if best is None or key < best:
                        best = key
        if best is None:
            break
        start, _, v = best
        finish[v] = start + problem.t_host_ns[v]
        host_free = finish[v]  # type: ignore[assignment]
        order.append(v)
        remaining.discard(v)
        done[v] = True
    return simulate(problem, on_host, order)


def greedy(problem: PartitionProblem) -> Schedule:
    """Offload by host latency saved per crossbar until the budget is spent, then list-schedule.

    Operators that do not save time (T_acc >= T_host) or no longer fit are skipped.
    """
    candidates = []
    for v in range(problem.n):
        t_cim = problem.t_cim_ns[v]
        if t_cim is None:
            continue
        saved = problem.t_host_ns[v] - t_cim
        if saved > 0:
            per_crossbar = saved / problem.crossbars[v] if problem.crossbars[v] > 0 else float("inf")
            candidates.append((-per_crossbar, v))
    on_host = [True] * problem.n
    left = problem.budget
    for _, v in sorted(candidates):
        if problem.crossbars[v] <= left:
            on_host[v] = False
            left -= problem.crossbars[v]
    return list_schedule(problem, on_host)


def single_split(problem: PartitionProblem) -> Schedule:
    """Best Neurosurgeon-style split: a topological prefix on one device, the suffix on the other.

    Both directions are tried at every split point; the CIM side holds only its
    CIM-capable operators (the others stay on the host), and a split whose CIM
    side exceeds the crossbar budget is not a candidate.  k = 0 or n is CPU-only.
    """
    n = problem.n
    best = cpu_only(problem)
    capable = [problem.capable(v) for v in range(n)]
    for cim_prefix in (True, False):
        for k in range(1, n + 1) if cim_prefix else range(0, n):
            cim_side = range(0, k) if cim_prefix else range(k, n)
            on_host = [True] * n
            used = 0
            for v in cim_side:
                if capable[v]:
                    on_host[v] = False
                    used += problem.crossbars[v]
            if used > problem.budget or all(on_host):
                continue
            schedule = list_schedule(problem, on_host)
            if schedule.makespan_ns < best.makespan_ns:
                best = schedule
    return best


def all_baselines(problem: PartitionProblem) -> dict[str, Schedule]:
    """The three baselines by name, in report order."""
    return {"cpu_only": cpu_only(problem), "greedy": greedy(problem), "single_split": single_split(problem)}
