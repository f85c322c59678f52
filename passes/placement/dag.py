"""Graph facts the formulation and the heuristics share: closure, release and tail bounds.

All functions take a :class:`PlacementProblem` whose operators are indexed in a
topological order (every edge goes from a lower to a higher index).
"""

from __future__ import annotations

import numpy as np

from cimsplit.passes.placement.problem import PlacementProblem

__all__ = [
    "ancestors",
    "descendants",
    "incomparable_pairs",
    "bit_matrix",
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
    """The set P of eq. 10: pairs u < v with no path between them in either direction (row-major order)."""
    n = problem.n
    if n < 2:
        return []
    related = bit_matrix(ancestors(problem), n) | bit_matrix(descendants(problem), n)
    free = ~related & np.triu(np.ones((n, n), dtype=bool), k=1)
    return [(int(u), int(v)) for u, v in np.argwhere(free)]


def bit_matrix(bitsets: list[int], n: int) -> np.ndarray:
    """Bitsets (Python ints over n bits) as an n x n bool matrix: row i, column j is bit j of bitsets[i].

    One C-speed conversion per row instead of a Python loop per bit: the closure
    of a 5,000-operator chain has 12.5 million bits.
    """
    width = (n + 7) // 8
    data = b"".join(bits.to_bytes(width, "little") for bits in bitsets)
    packed = np.frombuffer(data, dtype=np.uint8).reshape(len(bitsets), width)
    return np.unpackbits(packed, axis=1, count=n, bitorder="little").astype(bool)


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
