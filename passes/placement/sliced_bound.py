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

Without slicing options they are the whole-operator problem's host-load and
critical-path bounds.
"""

from __future__ import annotations

import numpy as np

from cimsplit.passes.placement.problem import PlacementProblem

__all__ = ["critical_path_bound_ns", "host_load_bound_ns", "host_load_by_budget_ns", "modes",
           "sliced_lower_bound_ns"]


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
    cap = min(problem.budget, sum(max(x for _, x, _ in m) for m in table))
    best = np.zeros(cap + 1)
    for options in table:
        new = np.full(cap + 1, np.inf)
        for host_ns, xbars, _ in options:
            if xbars <= cap:
                shifted = np.full(cap + 1, np.inf)
                shifted[xbars:] = best[:cap + 1 - xbars]
                np.minimum(new, shifted + host_ns, out=new)
        best = new
    return [float(b) for b in best]


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
