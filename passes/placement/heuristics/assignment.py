"""Start assignments for the local search: greedy offloading and an exact 0/1 knapsack (eq. 14)."""

from __future__ import annotations

from cimsplit.passes.placement.problem import PlacementProblem

__all__ = ["fits_alone", "greedy_assignment", "knapsack_assignment"]


def fits_alone(problem: PlacementProblem, v: int) -> bool:
    """v is CIM-capable and needs no more crossbars than the whole budget."""
    return problem.capable(v) and problem.crossbars[v] <= problem.budget



def greedy_assignment(problem: PlacementProblem, key: str = "ratio") -> list[bool]:
    """Offload by host time saved (per crossbar for ``ratio``) while the budget (eq. 14) allows."""
    gain = {v: problem.t_host_ns[v] - problem.t_cim_ns[v] for v in range(problem.n) if fits_alone(problem, v)}  # type: ignore[operator]
    cand = [v for v, g in gain.items() if g > 0]
    if key == "ratio":
        cand.sort(key=lambda v: (-gain[v] / max(1, problem.crossbars[v]), v))
    else:
        cand.sort(key=lambda v: (-gain[v], v))
    on_host, used = [True] * problem.n, 0
    for v in cand:
        if used + problem.crossbars[v] <= problem.budget:
            on_host[v] = False
            used += problem.crossbars[v]
    return on_host



def knapsack_assignment(problem: PlacementProblem, use_saving: bool = True) -> list[bool]:
    """Exact 0/1 knapsack: offload the set that saves most host time within the budget.

    With ``use_saving`` the value is T_host - T_acc, otherwise T_host (host load only).
    Zero-crossbar operators with a positive value are always offloaded.
    """
    on_host = [True] * problem.n
    items = []
    for v in range(problem.n):
        if not fits_alone(problem, v):
            continue
        value = problem.t_host_ns[v] - (problem.t_cim_ns[v] if use_saving else 0.0)  # type: ignore[operator]
        if value <= 0:
            continue
        if problem.crossbars[v] == 0:
            on_host[v] = False
        else:
            items.append((v, problem.crossbars[v], value))
    cap = problem.budget
    if not items or cap * len(items) > 5_000_000:
        return greedy_assignment(problem) if items else on_host
    best = [0.0] * (cap + 1)
    take = [[False] * (cap + 1) for _ in items]
    for i, (_, w, val) in enumerate(items):
        row = take[i]
        for c in range(cap, w - 1, -1):
            cand = best[c - w] + val
            if cand > best[c]:
                best[c] = cand
                row[c] = True
    c = cap
    for i in range(len(items) - 1, -1, -1):
        if take[i][c]:
            on_host[items[i][0]] = False
            c -= items[i][1]
    return on_host

