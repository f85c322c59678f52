"""A lower bound by mode choice alone: a small MILP over modes with host-load and path rows, no host order.

Every operator v runs in one mode m of :func:`~cimsplit.passes.placement.sliced_bound.modes` (whole on
the host, whole on the CIM, a slicing option), one-hot binaries ``x_vm``, with host time
``load_v = sum_m host_m x_vm``, shortest duration ``d_v = sum_m dur_m x_vm`` (from v's last input to
its output) and crossbars within the budget (eq. 14).  ``f_v`` (continuous) is v's output time, T the
makespan.  Rows, each true of every feasible schedule with its modes (so the MILP's optimum R <= the
optimum, at this budget and every smaller one, whose schedules are feasible here too):

- ``f_v >= d_v``, ``f_v >= f_u + d_v`` on every edge (transfers >= 0), ``T >= f_v`` for every v (every
  operator reaches a sink or writes an output, and f does not decrease along edges);
- ``T >= sum_v load_v``: host tasks never overlap and lie in [0, T];
- ``f_v >= sum_{u in anc(v)} load_u + d_v``: every host task of an ancestor ends before v's inputs
  are there, and v takes at least d_v from its last input to its output (a sliced v's parts start
  after its inputs, its join ends at f_v: :mod:`...slicing`); d_v >= load_v in every mode;
- ``T >= f_v + sum_{w in desc(v)} load_w``: every host task of a descendant starts after f_v;
- **transfer rows**, on every edge u -> v with transfer t (``c_u`` the binary of u whole on the CIM,
  0 if u has no such mode: only then is u's output on the CIM): ``f_v >= f_u + d_v + t (c_u + h_v - 1)``
  (v whole on the host reads a CIM output), ``f_v >= f_u + d_v + t (c_v - c_u)`` (v whole on the CIM
  reads a host output), and for slicing option k of v, ``f_v >= f_u + (join + cim + back) y_vk +
  in_cim (y_vk - c_u)`` and ``f_v >= f_u + (join + host) y_vk + in_host (y_vk + c_u - 1)`` (the part
  that reads across the bus starts after the transfer); each is the edge row when its binaries say
  nothing crosses, and below ``f_u`` when the mode is not chosen; graph inputs and outputs likewise
  (``f_v >= d_v + t_in c_v``, ``T >= f_v + t_out c_v``).  Without them a segment between a host and a
  CIM bottleneck missed that hand-over on every budget (YOLOv5n int8's head: ~0.1 ms of 9 ms);
- **pair rows**, for incomparable u, w: ``T >= min(f_u, f_w) + sum_{x in desc(u) | desc(w)} load_x``:
  every host task of a descendant of u or of w starts after its input from u or w is there, so after
  min(f_u, f_w), and they do not overlap.  As a disjunction with one binary z_uw:
  ``T >= f_u + L - M z_uw`` and ``T >= f_w + L - M (1 - z_uw)``, M the sum of every mode's longest
  time (no f or load of a schedule without idle padding exceeds it, and one without padding is
  optimal among those with its modes and host order).

The pair rows are what the CP-SAT model's linear relaxation misses on a detector head: YOLOv8n int8's
41-operator sliced head segment at 60 crossbars / 500 ns: CP-SAT's bound 11.03 ms after 8 s of
deterministic time, this MILP 11.28 ms without the pair rows and 12.03 ms with them (best known
schedule 12.33 ms).  They are generated lazily: solve, find the pair rows the solution violates with
each f at its least value given the modes (the longest path of the other rows), add them, solve
again.  A solution that violates none is feasible for the MILP with every pair row, so the last
solve's optimum is that MILP's optimum; a solve cut off by the time limit gives its dual bound,
still a lower bound of the MILP with the rows added so far, which is a relaxation of the full one.

The last MILP solution is a mode choice within the budget (:class:`ModeBound`): with a host order it
is a schedule (an upper bound), often within a transfer of the bound where a short CP-SAT try is not.

Floating point: HiGHS solves in ms with feasibility and integrality tolerances of 1e-9 (errors of
order rows x 1e-9 ms); the bound returned is the MILP's dual bound less :data:`MARGIN` of it
(1e-6 of a 12 ms segment is 12 ns, many orders above those errors).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import highspy

from cimsplit.passes.placement import dag
from cimsplit.passes.placement.heuristics.sequencing import best_list_schedule
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.sliced_bound import mode_choices, modes
from cimsplit.passes.placement.slicing import WHOLE, expand, parts_schedule
from cimsplit.passes.placement.solvers.highs import _stdout_silenced

__all__ = ["MARGIN", "NODES", "ModeBound", "mode_bound", "mode_bound_ns", "mode_schedule"]

NODES = 5000
"""Branch-and-bound nodes per MILP solve (a limit of 200 gave the same bounds on the 41-operator head above)."""
MARGIN = 1e-6
"""Relative margin taken off the MILP's dual bound (floating-point tolerances; module docstring)."""
_MS = 1e-6


@dataclass(frozen=True)
class ModeBound:
    bound_ns: float
    """R less the margin: a proven lower bound of the optimum."""
    modes: tuple[tuple[bool, int], ...] | None
    """(on the host, slicing option or WHOLE) of every operator in the last MILP solution (within the
    budget), or None if HiGHS returned none."""


_CACHE: dict[tuple[PlacementProblem, int, int], tuple[float | None, ModeBound]] = {}
"""(cap, bound) of the problems whose MILP solves all ended by themselves or at the node limit (not the
wall clock): the same on every run, so the lazy loop's later solves and a budget chain's later points
reuse them.  A bound found with a cap serves every later call (on YOLOv5n int8's 56-operator head a
cap 1-5 % lower gave the same bound every time, and each MILP takes 0.2-2 s there); one found without
a cap only the calls without one."""


def mode_bound_ns(problem: PlacementProblem, upper_ns: float | None = None, nodes: int = NODES, rounds: int = 4,
                  time_limit_s: float = 10.0) -> float:
    """:func:`mode_bound`'s bound."""
    return mode_bound(problem, upper_ns, nodes, rounds, time_limit_s).bound_ns


def mode_bound(problem: PlacementProblem, upper_ns: float | None = None, nodes: int = NODES, rounds: int = 4,
               time_limit_s: float = 10.0) -> ModeBound:
    """R of the module docstring (a proven lower bound on ``problem``'s optimum, sliced or not), with at
    most ``rounds`` rounds of pair-row generation and ``nodes`` branch-and-bound nodes per MILP solve
    (a count, so the bound is the same on every run; ``time_limit_s`` for all the solves together, only as a
    safety net).
    Cached unless the time limit cut a solve off (:data:`_CACHE`): the lazy loop and a budget chain ask
    for the same segment problems again.

    ``upper_ns``: the span of a feasible schedule.  R <= the optimum <= it, so ``T <= upper`` leaves R
    unchanged, and then M = upper suffices in the pair rows (f_u <= T and L <= sum of loads <= T, so
    ``f_u + L - M <= T``): a far tighter relaxation for HiGHS (an infeasible cap, which the argument
    excludes up to rounding, gives the bound 0)."""
    key = (problem, nodes, rounds)
    if key in _CACHE:
        cached_upper, cached = _CACHE[key]
        if upper_ns is None or cached_upper is not None:
            return cached
    found, timed_out = _solve(problem, upper_ns, nodes, rounds, time_limit_s)
    if not timed_out:
        if len(_CACHE) >= 4096:
            _CACHE.clear()
        _CACHE[key] = (upper_ns, found)
    return found


def _solve(problem: PlacementProblem, upper_ns: float | None, nodes: int, rounds: int,
           time_limit_s: float) -> tuple[ModeBound, bool]:
    """(R less the margin and the last solution's modes, whether a solve stopped for another reason
    than its node limit: the wall clock or an error, so that the bound is not to be cached)."""
    end = time.perf_counter() + time_limit_s
    n = problem.n
    if n == 0:
        return ModeBound(0.0, ()), False
    table = [modes(problem, v) for v in range(n)]
    choices = [mode_choices(problem, v) for v in range(n)]
    with _stdout_silenced(True):  # the banner HiGHS prints when an instance is created
        h = highspy.Highs()
    # No "threads": HiGHS's scheduler is per process, and a solve asking for another count than the
    # first instance's (the MILP backend's) stops with an error (the bound was 0 after a HiGHS placement).
    for name, value in (("output_flag", False), ("mip_max_nodes", int(nodes)),
                        ("mip_rel_gap", 0.0), ("mip_abs_gap", 0.0), ("mip_feasibility_tolerance", 1e-9),
                        ("primal_feasibility_tolerance", 1e-9), ("dual_feasibility_tolerance", 1e-9)):
        h.setOptionValue(name, value)
    x = [[h.addBinary() for _ in table[v]] for v in range(n)]
    load = [sum(m[0] * _MS * b for m, b in zip(table[v], x[v])) for v in range(n)]
    dur = [sum(m[2] * _MS * b for m, b in zip(table[v], x[v])) for v in range(n)]
    for v in range(n):
        h.addConstr(sum(x[v]) == 1)
    xbars = [m[1] * b for v in range(n) for m, b in zip(table[v], x[v]) if m[1] > 0]
    if xbars:
        h.addConstr(sum(xbars) <= problem.budget)
    big = sum(max(m[0], m[2]) for options in table for m in options) * _MS + 1.0
    if upper_ns is not None:
        big = min(big, upper_ns * _MS)
    f = [h.addVariable(lb=0.0, ub=big) for _ in range(n)]
    T = h.addVariable(lb=0.0, ub=big)  # noqa: N806 - the paper's T
    h.addConstr(T >= sum(load))
    anc, desc = dag.ancestors(problem), dag.descendants(problem)
    preds: list[list[int]] = [[] for _ in range(n)]
    on_cim = [next((b for b, (host, _) in zip(x[v], choices[v]) if not host), None) for v in range(n)]
    for u, v, t in problem.edges:
        preds[v].append(u)
        h.addConstr(f[v] >= f[u] + dur[v])
        _add_transfer_rows(h, problem, f, dur, x, choices, on_cim, u, v, t)
    for v in range(n):
        h.addConstr(f[v] >= dur[v])
        h.addConstr(T >= f[v])
        if on_cim[v] is not None and problem.t_in_ns[v] > 0:
            h.addConstr(f[v] >= dur[v] + problem.t_in_ns[v] * _MS * on_cim[v])
        if on_cim[v] is not None and problem.writes_output[v] and problem.t_out_ns[v] > 0:
            h.addConstr(T >= f[v] + problem.t_out_ns[v] * _MS * on_cim[v])
        for b, (_, k) in zip(x[v], choices[v]):
            o = problem.slicings[v][k] if k != WHOLE else None
            if o is not None and o.t_graph_in_ns > 0:
                h.addConstr(f[v] >= (o.t_join_ns + o.t_cim_ns + o.t_back_ns + o.t_graph_in_ns) * _MS * b)
        before = [load[u] for u in range(n) if anc[v] >> u & 1]
        if before:
            h.addConstr(f[v] >= sum(before) + dur[v])
        after = [load[w] for w in range(n) if desc[v] >> w & 1]
        if after:
            h.addConstr(T >= f[v] + sum(after))
    pairs = dag.incomparable_pairs(problem)
    added: set[tuple[int, int]] = set()
    bound, found = 0.0, None

    def result(uncached: bool) -> tuple[ModeBound, bool]:
        """The bound so far less the margin (ns) and the last solution's modes."""
        return ModeBound(max(0.0, bound * (1.0 - MARGIN) / _MS), found), uncached

    for _ in range(rounds):
        left = end - time.perf_counter()
        if left <= 0:  # the wall clock: the rows so far gave the bound (not cached)
            return result(True)
        h.setOptionValue("time_limit", left)
        h.minimize(T)
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            return ModeBound(0.0, None), False
        solution = h.getSolution()
        if solution.value_valid:
            values = solution.col_value
            pick = [_chosen([values[b.index] for b in x[v]]) for v in range(n)]
            found = tuple(choices[v][pick[v]] for v in range(n))
        if status != highspy.HighsModelStatus.kOptimal:
            limits = (highspy.HighsModelStatus.kSolutionLimit, highspy.HighsModelStatus.kIterationLimit)
            if status in limits:  # the node limit: the dual bound, the same on every run
                bound = max(bound, h.getInfo().mip_dual_bound)
            return result(status not in limits)  # else: not cached
        bound = max(bound, h.getInfo().mip_dual_bound)
        if not solution.value_valid:  # (HiGHS reports an optimum with its solution; no rows to separate without)
            break
        loads = [table[v][pick[v]][0] * _MS for v in range(n)]
        least = _least_finish(table, pick, loads, preds, anc)
        t_value = h.val(T)
        violated = []
        for u, w in pairs:
            if (u, w) in added:
                continue
            both = desc[u] | desc[w]
            need = min(least[u], least[w]) + sum(loads[k] for k in range(n) if both >> k & 1)
            if need > t_value + 1e-7:
                violated.append((need - t_value, u, w))
        if not violated:
            break
        for _, u, w in sorted(violated, reverse=True)[:64]:
            added.add((u, w))
            both = desc[u] | desc[w]
            rest = sum(load[k] for k in range(n) if both >> k & 1)
            z = h.addBinary()
            h.addConstr(T >= f[u] + rest - big * z)
            h.addConstr(T >= f[w] + rest - big * (1 - z))
    return result(False)


def _add_transfer_rows(h: highspy.Highs, problem: PlacementProblem, f: list, dur: list, x: list, choices: list,
                       on_cim: list, u: int, v: int, t: float) -> None:
    """The transfer rows of edge u -> v (module docstring); none where nothing can cross."""
    c_u = on_cim[u]
    for b, (host, k) in zip(x[v], choices[v]):
        if k == WHOLE and host:
            if c_u is not None and t > 0:
                h.addConstr(f[v] >= f[u] + dur[v] + t * _MS * (c_u + b - 1))
        elif k == WHOLE:
            if t > 0:
                h.addConstr(f[v] >= f[u] + dur[v] + t * _MS * (b - (0 if c_u is None else c_u)))
        else:
            o = problem.slicings[v][k]
            in_cim, in_host = dict(o.in_cim_ns).get(u, t), dict(o.in_host_ns).get(u, t)
            if in_cim > 0:
                h.addConstr(f[v] >= f[u] + (o.t_join_ns + o.t_cim_ns + o.t_back_ns) * _MS * b
                            + in_cim * _MS * (b - (0 if c_u is None else c_u)))
            if c_u is not None and in_host > 0:
                h.addConstr(f[v] >= f[u] + (o.t_join_ns + o.t_host_ns) * _MS * b + in_host * _MS * (b + c_u - 1))


def _chosen(values: list[float]) -> int:
    """The mode whose binary is 1 (the largest value, against tolerances)."""
    return max(range(len(values)), key=values.__getitem__)


def _least_finish(table: list, pick: list[int], loads: list[float], preds: list[list[int]],
                  anc: list[int]) -> list[float]:
    """Each f_v at its least value given the modes ``pick`` under the path and ancestor-load rows (ms)."""
    least: list[float] = []
    for v in range(len(table)):
        d = table[v][pick[v]][2] * _MS
        ready = max([least[u] for u in preds[v]], default=0.0)
        before = sum(loads[u] for u in range(v) if anc[v] >> u & 1)
        least.append(max(ready, before) + d)
    return least


def mode_schedule(sub: PlacementProblem, found: ModeBound) -> Schedule | None:
    """The modes of a mode bound's MILP solution (within the budget: a feasible placement) with the
    best list-scheduled host order (:func:`~...heuristics.sequencing.best_list_schedule`), or None."""
    if not found.modes:
        return None
    on_host, slicing = [h for h, _ in found.modes], [k for _, k in found.modes]
    expansion = expand(sub, on_host, slicing)
    parts = best_list_schedule(expansion.problem, expansion.on_host)
    return parts_schedule(sub, expansion, parts, slicing)
