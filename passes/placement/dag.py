"""Graph facts the formulation and the heuristics share: closure, release and tail bounds.

All functions take a :class:`PlacementProblem` whose operators are indexed in a
topological order (every edge goes from a lower to a higher index).
"""

from __future__ import annotations

from cimsplit.passes.placement.problem import PlacementProblem

__all__ = [
    "ancestors",
    "descendants",
    "incomparable_pairs",
    "min_duration_ns",
    "release_ns",
    "tail_ns",
    "sinks",
]


def ancestors(problem: PlacementProblem) -> list[int]:
    """Bitset (Python int) of the strict ancestors of every operator (transitive closure G+)."""
    anc = [0] * problem.n
    for u, v, _ in sorted(problem.edges, key=lambda e: e[1]):
        anc[v] |= anc[u] | (1 << u)
    return anc


def descendants(problem: PlacementProblem) -> list[int]:
    """Bitset of the strict descendants of every operator."""
    desc = [0] * problem.n
    for u, v, _ in sorted(problem.edges, key=lambda e: -e[0]):
        desc[u] |= desc[v] | (1 << v)
    return desc


def incomparable_pairs(problem: PlacementProblem) -> list[tuple[int, int]]:
    """The set P of eq. 10: pairs u < v with no path between them in either direction."""
    anc = ancestors(problem)
    desc = descendants(problem)
    pairs = []
    for u in range(problem.n):
        related = anc[u] | desc[u]
        for v in range(u + 1, problem.n):
            if not (related >> v) & 1:
                pairs.append((u, v))
    return pairs


def min_duration_ns(problem: PlacementProblem, v: int) -> float:
    """Shortest possible run time of v: min(T_host, T_acc) if CIM-capable, else T_host."""
    t_cim = problem.t_cim_ns[v]
    return problem.t_host_ns[v] if t_cim is None else min(problem.t_host_ns[v], t_cim)


def release_ns(problem: PlacementProblem) -> list[float]:
    """Lower bound on every start time s_v: longest path of minimal durations into v.

    Valid for every feasible schedule: s_v >= f_u >= s_u + min_duration(u) for
    each predecessor u (eq. 7-8 with transfers >= 0).
    """
    release = [0.0] * problem.n
    for u, v, _ in sorted(problem.edges, key=lambda e: e[1]):
        release[v] = max(release[v], release[u] + min_duration_ns(problem, u))
    return release


def tail_ns(problem: PlacementProblem) -> list[float]:
    """Lower bound on T - f_v: longest path of minimal durations strictly after v.

    Valid for every feasible schedule: for a successor w, T >= f_w >= s_w +
    min_duration(w) >= f_v + min_duration(w), and so on down to a sink (eq. 6-8).
    """
    tail = [0.0] * problem.n
    for u, v, _ in sorted(problem.edges, key=lambda e: -e[0]):
        tail[u] = max(tail[u], tail[v] + min_duration_ns(problem, v))
    return tail


def sinks(problem: PlacementProblem) -> list[int]:
    """Operators without successors (the terminal nodes of eq. 6)."""
    has_succ = [False] * problem.n
    for u, _, _ in problem.edges:
        has_succ[u] = True
    return [v for v in range(problem.n) if not has_succ[v]]
