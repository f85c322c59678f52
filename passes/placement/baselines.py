"""Baselines reported beside the ILP (DESIGN §4): CPU-only, greedy, best single split.

Every baseline returns a :class:`Schedule` re-timed by :func:`simulate`, so its
makespan is exactly comparable with the ILP's.  They also give the ILP its warm
start and the upper bound that tightens its big-M.
"""

from __future__ import annotations

from collections.abc import Sequence

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import simulate

__all__ = ["cpu_only", "greedy", "single_split", "list_schedule", "all_baselines"]


def cpu_only(problem: PlacementProblem) -> Schedule:
    """Everything on the host in topological order: makespan = sum of T_host."""
    return simulate(problem, (True,) * problem.n)


def _bottom_levels(problem: PlacementProblem, on_host: Sequence[bool]) -> list[float]:
    """Longest path from v's start to the end under this placement (v's own time included)."""
    duration = [problem.t_host_ns[v] if on_host[v] else problem.t_cim_ns[v] for v in range(problem.n)]
    level = [float(d) for d in duration]  # type: ignore[arg-type]
    for u, v, transfer in sorted(problem.edges, key=lambda e: -e[0]):
        delay = transfer if on_host[u] != on_host[v] else 0.0
        level[u] = max(level[u], duration[u] + delay + level[v])  # type: ignore[operator]
    return level


def list_schedule(problem: PlacementProblem, on_host: Sequence[bool]) -> Schedule:
    """Schedule a placement: CIM operators as soon as possible, host operators by list scheduling.

    The host runs next the ready operator that can start earliest; ties go to
    the longest remaining path (bottom level), then the lower index.  Event driven
    (an operator is looked at when its last predecessor finishes), so
    single_split's n list schedules stay fast on long chains.
    """
    n = problem.n
    on_host = tuple(bool(h) for h in on_host)
    succs: list[list[int]] = [[] for _ in range(n)]
    waiting = [0] * n  # predecessors not finished yet
    for u, v, _ in problem.edges:
        succs[u].append(v)
        waiting[v] += 1
    delays: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for u, v, t in problem.edges:
        delays[v].append((u, t if on_host[u] != on_host[v] else 0.0))
    level = _bottom_levels(problem, on_host)
    finish: list[float] = [0.0] * n
    host_free = 0.0
    order: list[int] = []
    ready_host: dict[int, float] = {}  # host operator -> time its inputs are there

    def release(first: int) -> None:
        """All of ``first``'s predecessors are finished: a CIM operator runs at once (and may
        release others in turn), a host operator waits for the host.  A stack, not recursion:
        CIM chains can be longer than Python's recursion limit."""
        stack = [first]
        while stack:
            v = stack.pop()
            ready = 0.0 if on_host[v] else problem.t_in_ns[v]
            for u, delay in delays[v]:
                ready = max(ready, finish[u] + delay)
            if on_host[v]:
                ready_host[v] = ready
                continue
            finish[v] = ready + problem.t_cim_ns[v]  # type: ignore[operator]
            for w in succs[v]:
                waiting[w] -= 1
                if waiting[w] == 0:
                    stack.append(w)

    for v in [v for v in range(n) if waiting[v] == 0]:  # sources, listed before releasing any
        release(v)
    while ready_host:
        start, _, v = min((max(ready, host_free), -level[v], v) for v, ready in ready_host.items())
        del ready_host[v]
        finish[v] = start + problem.t_host_ns[v]
        host_free = finish[v]
        order.append(v)
        for w in succs[v]:
            waiting[w] -= 1
            if waiting[w] == 0:
                release(w)
    return simulate(problem, on_host, order)


def greedy(problem: PlacementProblem) -> Schedule:
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


def single_split(problem: PlacementProblem) -> Schedule:
    """Best Neurosurgeon-style split: a topological prefix on one device, the suffix on the other.

    Both directions are tried at every split point; the CIM side holds only its
    CIM-capable operators (the others stay on the host), and a split whose CIM
    side exceeds the crossbar budget is not a candidate.  k = 0 or n is CPU-only.
    Split points whose CIM side holds the same operators as the previous one
    give the same placement and are scheduled once: the list schedules are one
    per CIM-capable operator, not one per operator (a 5,000-node chain with one
    Conv took minutes).
    """
    n = problem.n
    best = cpu_only(problem)
    capable = [problem.capable(v) for v in range(n)]
    for cim_prefix in (True, False):
        # The CIM side of split point k: operators < k (prefix) or >= k (suffix).  Going from
        # k - 1 to k moves operator k - 1 across, which changes the placement only if it is capable.
        on_host = [True] * n if cim_prefix else [not c for c in capable]
        used = 0 if cim_prefix else sum(problem.crossbars[v] for v in range(n) if capable[v])
        on_cim = 0 if cim_prefix else sum(capable)
        for k in range(1, n + 1) if cim_prefix else range(0, n):
            moved = k - 1
            if moved >= 0:
                if not capable[moved]:
                    continue  # the same placement as split point k - 1
                on_host[moved] = not cim_prefix
                used += problem.crossbars[moved] if cim_prefix else -problem.crossbars[moved]
                on_cim += 1 if cim_prefix else -1
            if used > problem.budget or on_cim == 0:
                continue
            schedule = list_schedule(problem, on_host)
            if schedule.makespan_ns < best.makespan_ns:
                best = schedule
    return best


def all_baselines(problem: PlacementProblem) -> dict[str, Schedule]:
    """The three baselines by name, in report order."""
    return {"cpu_only": cpu_only(problem), "greedy": greedy(problem), "single_split": single_split(problem)}
