"""Cheap lower bounds on the optimal makespan of a problem with slicing options (TSO), no solver.

Every operator v runs in one *mode*: whole on the host, whole on the CIM (if it
fits the budget) or one slicing option k that fits.  A mode has

- a host time: ``T_host,v``, 0, or ``host_k + join_k`` (the host part and the
  join both run on the host);
- a crossbar count: 0, ``N_crossbar,v``, or ``crossbars_k``;
- a shortest duration from its last input to its output: ``T_host,v``,
  ``T_acc,v``, or ``join_k + max(host_k, cim_k + back_k)`` (both parts start
  after every input is there, the join waits for both and runs ``join_k``).

Two bounds hold for every feasible schedule, so their maximum does:

1. **Host load** (:func:`host_load_bound_ns`).  Host tasks never overlap and lie
   in [0, T], so T >= the schedule's total host time >= the least total host time
   over mode choices within the crossbar budget (eq. 14): a multiple-choice
   knapsack, solved exactly by a DP over crossbars.
2. **Critical path** (:func:`critical_path_bound_ns`).  With transfers >= 0,
   ``f_v >= f_u + d_v`` on every edge and ``f_v >= d_v``, where ``d_v`` is v's
   shortest duration over its modes; T >= f_v for every v (each reaches a sink).

3. **Ordered load** (:func:`ordered_load_by_budget_ns`), the first two together.
   Every host task of a strict descendant of u starts after u's output is there
   (f_u: its inputs wait for it), and f_u >= the longest path of shortest durations
   into u, u's own included; so T >= that + the least host time of u's descendants.
   Every host task of w and of its ancestors ends by f_w (a part or join of w
   before its output, an ancestor's before w starts), and T >= f_w + the longest
   path of shortest durations after w; so T >= the least host time of w and its
   ancestors + that.  The descendants (ancestors) use at most the crossbars the
   whole schedule does: a knapsack over their modes, at every budget.  (Bound 1 is
   the ancestor form at a sink with all operators for ancestors; bound 2 the
   descendant form without host time.)

Without slicing options they are the whole-operator problem's host-load and
critical-path bounds.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from cimsplit.passes.placement import dag
from cimsplit.passes.placement.problem import PlacementProblem

__all__ = ["critical_path_bound_ns", "host_load_bound_ns", "host_load_by_budget_ns", "modes",
           "ordered_load_by_budget_ns", "sliced_lower_bound_ns"]


def modes(problem: PlacementProblem, v: int) -> list[tuple[float, int, float]]:
    """(host time ns, crossbars, shortest duration ns) of every mode of v that fits the budget: whole on
    the host, whole on the CIM, each slicing option."""
    out = [(problem.t_host_ns[v], 0, problem.t_host_ns[v])]
    t_cim = problem.t_cim_ns[v]
    if t_cim is not None and problem.crossbars[v] <= problem.budget:
        out.append((0.0, problem.crossbars[v], t_cim))
    for o in problem.slicings[v] if problem.slicings else ():
        if o.crossbars <= problem.budget:
            out.append((o.t_host_ns + o.t_join_ns, o.crossbars, o.t_join_ns + max(o.t_host_ns, o.t_cim_ns + o.t_back_ns)))
    return out


def host_load_bound_ns(problem: PlacementProblem) -> float:
    """The least total host time over mode choices within the budget (bound 1 of the module docstring)."""
    return host_load_by_budget_ns(problem)[-1]


def host_load_by_budget_ns(problem: PlacementProblem) -> list[float]:
    """Bound 1 at every budget c = 0..cap: the least total host time over mode choices (of the modes
    that fit ``problem.budget``) using at most c crossbars; cap is the budget, or the most crossbars
    the modes can use together (the value stays the same above it).

    DP over crossbars: ``best[c]`` is the least host time of the operators so far using at
    most c crossbars.
    """
    table = [modes(problem, v) for v in range(problem.n)]
    return [float(b) for b in _least_load(table, range(problem.n), _cap(problem, table))]


def _cap(problem: PlacementProblem, table: list[list[tuple[float, int, float]]]) -> int:
    return min(problem.budget, sum(max(x for _, x, _ in m) for m in table))


def _least_load(table: list[list[tuple[float, int, float]]], members: Iterable[int], cap: int) -> np.ndarray:
    """The least total host time of ``members`` using at most c crossbars, c = 0..cap (DP over crossbars:
    ``best[c]`` for the members so far)."""
    best = np.zeros(cap + 1)
    for v in members:
        new = np.full(cap + 1, np.inf)
        for host_ns, xbars, _ in table[v]:
            if xbars <= cap:
                shifted = np.full(cap + 1, np.inf)
                shifted[xbars:] = best[:cap + 1 - xbars]
                np.minimum(new, shifted + host_ns, out=new)
        best = new
    return best


def ordered_load_by_budget_ns(problem: PlacementProblem) -> list[float]:
    """Bound 3 of the module docstring at every budget c = 0..cap (cap as in :func:`host_load_by_budget_ns`):
    the largest of its descendant and ancestor forms over all operators.  Two knapsacks per operator."""
    table = [modes(problem, v) for v in range(problem.n)]
    cap = _cap(problem, table)
    shortest = [min(d for _, _, d in m) for m in table]
    into, after = list(shortest), [0.0] * problem.n
    for u, v, _ in sorted(problem.edges, key=lambda e: e[1]):
        into[v] = max(into[v], into[u] + shortest[v])
    for u, v, _ in sorted(problem.edges, key=lambda e: -e[0]):
        after[u] = max(after[u], after[v] + shortest[v])
    best = np.zeros(cap + 1)
    for u, (below, above) in enumerate(zip(dag.descendants(problem), dag.ancestors(problem))):
        if below:
            np.maximum(best, into[u] + _least_load(table, _members(below), cap), out=best)
        np.maximum(best, _least_load(table, [*_members(above), u], cap) + after[u], out=best)
    return [float(b) for b in best]


def _members(bits: int) -> list[int]:
    return [v for v in range(bits.bit_length()) if bits >> v & 1]


def critical_path_bound_ns(problem: PlacementProblem) -> float:
    """The longest path of shortest mode durations (bound 2 of the module docstring)."""
    finish = [min(d for _, _, d in modes(problem, v)) for v in range(problem.n)]
    shortest = list(finish)
    for u, v, _ in sorted(problem.edges, key=lambda e: e[1]):
        finish[v] = max(finish[v], finish[u] + shortest[v])
    return max(finish, default=0.0)


def sliced_lower_bound_ns(problem: PlacementProblem) -> float:
    """max(host load, critical path): a lower bound on the sliced (or whole-operator) optimum."""
    return max(host_load_bound_ns(problem), critical_path_bound_ns(problem))
