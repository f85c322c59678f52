"""CP-SAT model of placement with operator slicing (TSO): per operator one mode among host, CIM or a slicing.

The problem is the one :func:`cimsplit.passes.placement.slicing.expand` defines:
for each operator a one-hot choice ``h_v`` (whole on the host), ``c_v`` (whole
on the CIM) or ``y_vk`` (slicing option k); a sliced operator runs a CIM part,
a host part and a join on the host.  Variables and rows (times in integer units):

- ``s_v`` start of the whole operator, ``sc_v`` / ``sh_v`` / ``sj_v`` starts of
  the CIM part, the host part and the join; ``f_v`` the finish of v's output:
  ``f_v = s_v + T_host`` if ``h_v``, ``s_v + T_acc`` if ``c_v``, ``sj_v + join_k``
  if ``y_vk`` (enforced equalities: exactly one holds);
- the host as one ``AddNoOverlap`` of optional intervals: the whole operator
  (present iff ``h_v``), the host part and the join (present iff v is sliced;
  sizes ``sum_k y_vk·host_k`` and ``sum_k y_vk·join_k``);
- on an edge u -> v with transfer T: the output of u is on the CIM iff ``c_u``
  (a sliced operator's output is on the host), so ``h_v => s_v >= f_u + T·c_u``,
  ``c_v => s_v >= f_u + T·(1 - c_u)``, and for option k ``y_vk => sh_v >= f_u +
  in_host_k·c_u`` and ``y_vk => sc_v >= f_u + in_cim_k·(1 - c_u)``;
- graph inputs: ``c_v => s_v >= t_in``, ``y_vk => sc_v >= t_graph_in_k``; joins:
  ``y_vk => sj_v >= sh_v + host_k`` and ``sj_v >= sc_v + cim_k + back_k``;
- ``T >= f_v`` for sinks and output writers, ``T >= f_v + t_out·c_v`` for
  writers; the budget ``sum c_v·N_v + sum y_vk·N_k <= C`` (eq. 14); minimize T.

Exactness.  For a fixed choice of modes these rows are those of the CP-SAT
model of :mod:`.model` on the expanded problem (the same eq. 5-14 with the
placement fixed; absent tasks are unconstrained and carry no time), and the
host order is free, so the optimum over all modes is the optimum of the sliced
problem.  ``plain=False`` adds only rows implied by every schedule with
``T <= UB``: ``T <= UB`` from the warm start (the whole-operator optimum: a
feasible sliced schedule) and the rows of :mod:`.sliced_cuts` (host load and its
ancestor/descendant forms, shortest durations on edges, releases and tails of
shortest modes; each argued there).  Times are floored to units exactly as in
:mod:`.model` (same unit rule), so the bound is a true lower bound; the
solution's modes and host order (start, finish, index in floored units: a
precedence-respecting order, same argument) are re-timed in real ns by the
simulator on the expanded problem, and that makespan is what is reported.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from cimsplit.passes.placement import dag
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.placement.slicing import WHOLE, expand, parts_schedule
from cimsplit.passes.placement.solvers.backend import (
    STATUS_GAP_LIMIT,
    STATUS_NO_SOLUTION,
    STATUS_OPTIMAL,
    STATUS_TIME_LIMIT,
)
from cimsplit.passes.placement.solvers.cpsat.descent import DECISION_SHARE, Descent
from cimsplit.passes.placement.solvers.cpsat.model import floor_units, unit_for
from cimsplit.passes.placement.solvers.cpsat.sliced_cuts import SlicedModel, add_load_rows, add_path_rows
from cimsplit.passes.placement.solvers.cpsat.solve import CpSatOptions, _configure

__all__ = ["SMALL_MODEL_PARAMETERS", "SlicedOutcome", "gap_status", "solve_sliced"]

log = logging.getLogger(__name__)

SMALL_MODEL_PARAMETERS = {"cp_model_probing_level": 0}
"""CP-SAT on a small segment's model: no probing in presolve.  Such a model is proven in a fraction of a
second either way, and probing was a large share of it: YOLOv5n int8 at 50 crossbars / 1000 ns settled
its small segments (36 proofs) in 1.7 s instead of 2.4 s.  (One search instead of the interleaved
portfolio saved more on most, but a 4-operator segment then ran 4.5 s of wall time for 0.23 s of
deterministic time, unproven, where the portfolio proves it in 0.1 s.)"""


@dataclass(frozen=True)
class SlicedOutcome:
    """A sliced solve: the re-timed schedule (operator level, with ``parts``) and the solver's figures."""

    status: str
    schedule: Schedule | None
    host_order: tuple[int, ...] | None
    """Host order over the expanded operators (what the validator re-times)."""
    bound_ns: float
    time_s: float
    n_variables: int
    n_constraints: int
    finished: bool = False
    """CP-SAT proved the optimum of its model (the real gap may still exceed the limit by rounding)."""


def _all_times(problem: PlacementProblem) -> list[float]:
    times = list(problem.t_host_ns) + [t for t in problem.t_cim_ns if t is not None]
    times += list(problem.t_in_ns) + list(problem.t_out_ns) + [t for _, _, t in problem.edges]
    for options in problem.slicings:
        for o in options:
            times += [o.t_host_ns, o.t_cim_ns, o.t_join_ns, o.t_back_ns, o.t_graph_in_ns]
            times += [t for _, t in o.in_cim_ns] + [t for _, t in o.in_host_ns]
    return times


def _horizon_ns(problem: PlacementProblem) -> float:
    """No schedule without idle padding is longer: every task and every transfer once, at its longest."""
    total = 0.0
    for v in range(problem.n):
        whole = max(problem.t_host_ns[v], problem.t_cim_ns[v] or 0.0) + problem.t_in_ns[v] + problem.t_out_ns[v]
        sliced = [o.t_host_ns + o.t_cim_ns + o.t_join_ns + o.t_back_ns + o.t_graph_in_ns
                  for o in (problem.slicings[v] if problem.slicings else ())]
        total += max([whole, *sliced])
    for u, v, t in problem.edges:
        opts = problem.slicings[v] if problem.slicings else ()
        total += max([t, *(dict(o.in_cim_ns).get(u, t) + dict(o.in_host_ns).get(u, t) for o in opts)])
    return total


def solve_sliced(problem: PlacementProblem, options: SolveOptions, warm_start: Schedule | None,
                 *, lower_bound_ns: float = 0.0, work_limit_s: float | None = None,
                 cutoff_ns: float | None = None, small: bool = False) -> SlicedOutcome:
    """Solve the sliced problem; ``warm_start`` (a feasible schedule, sliced or not) is the hint and,
    unless plain, T's UB.  ``lower_bound_ns``: a proven lower bound from elsewhere (the segments),
    entered as ``T >= floor(LB / r) - e`` as in :func:`~.model.build_model` (e = 0 in exact units).
    ``work_limit_s``: CP-SAT's deterministic time limit beside the wall-clock one; on one worker a
    solve it stops ends the same way on every run and every machine load (unless the wall clock,
    ``options.time_limit_s``, stops it first).

    With a UB the time unit is chosen for the UB instead of the horizon (every time of a schedule
    with T <= UB is at most UB), and a time above UB is capped at UB + 1 units: a mode or transfer
    that long cannot occur in such a schedule, capped or not, and every other floored time is
    unchanged, so the bound stays a true lower bound and the rounding error stays below the gap
    (MobileNetV2's depthwise convs on the CIM took seconds: a horizon of 1.2 s for a 5.7 ms
    schedule gave a rounding gap of 2e-6).

    ``cutoff_ns``: seek only schedules up to it (it replaces the warm start's UB when lower, same rows).
    A model then proven infeasible has no schedule with real T <= the cutoff (each would be a floored
    point within the UB), so the outcome has no schedule, ``finished``, and the cutoff as its bound.
    Below the warm start, T is minimized first by decisions (:class:`~.descent.Descent`): a model without an
    objective is proven to have no schedule far sooner (YOLOv5n int8's 56-operator head at 21
    crossbars / 1000 ns: 0.8 s where the minimizing solves took 20 s), then, if they did not finish,
    with CP-SAT's objective (:data:`~.descent.DECISION_SHARE`).

    ``small``: with :data:`SMALL_MODEL_PARAMETERS` (exact either way: they change only how soon).
    """
    begin = time.perf_counter()
    n = problem.n
    bounded_by = warm_start.makespan_ns if warm_start is not None and not options.plain else None
    if cutoff_ns is not None and not options.plain:
        bounded_by = cutoff_ns if bounded_by is None else min(bounded_by, cutoff_ns)
    unit, exact = unit_for(_all_times(problem), bounded_by or _horizon_ns(problem))
    cap = math.inf if bounded_by is None else math.ceil(bounded_by / unit) + 2

    def u_(t_ns: float) -> int:
        return int(min(floor_units(t_ns, unit), cap))

    m = cp_model.CpModel()
    horizon = sum(u_(t) for t in _all_times(problem)) + 1
    ub = horizon
    if bounded_by is not None:
        ub = min(horizon, math.ceil(bounded_by / unit) + 1)  # floored optimum <= real optimum <= UB
    lower = 0
    if lower_bound_ns > 0 and not options.plain:  # 6n + 1: terms on a path of the expansion (3n parts)
        lower = min(ub, max(0, floor_units(lower_bound_ns, unit) - (0 if exact else 6 * n + 1)))
    slicings = problem.slicings or ((),) * n
    capable = [problem.capable(v) for v in range(n)]
    host = [u_(problem.t_host_ns[v]) for v in range(n)]
    acc = [u_(problem.t_cim_ns[v]) if capable[v] else 0 for v in range(n)]  # type: ignore[arg-type]
    whole_cim = [capable[v] and problem.crossbars[v] <= problem.budget for v in range(n)]
    allowed = [[k for k, o in enumerate(slicings[v]) if o.crossbars <= problem.budget] for v in range(n)]
    zero, one = m.NewConstant(0), m.NewConstant(1)
    h = [m.NewBoolVar(f"h{v}") if whole_cim[v] or allowed[v] else one for v in range(n)]
    c = [m.NewBoolVar(f"c{v}") if whole_cim[v] else zero for v in range(n)]
    y = [{k: m.NewBoolVar(f"y{v}_{k}") for k in allowed[v]} for v in range(n)]
    s = [m.NewIntVar(0, ub, f"s{v}") for v in range(n)]
    f = [m.NewIntVar(0, ub, f"f{v}") for v in range(n)]
    sc: dict[int, cp_model.IntVar] = {}
    sh: dict[int, cp_model.IntVar] = {}
    sj: dict[int, cp_model.IntVar] = {}
    makespan = m.NewIntVar(lower, ub, "T")
    intervals = []
    load: list = []
    duration: list = []
    """Per operator, the shortest time from its inputs to its output in its mode (linear in the mode)."""
    """Per operator, its host time as a linear expression of its mode."""
    for v in range(n):
        if whole_cim[v] or allowed[v]:
            m.AddExactlyOne([h[v], c[v], *y[v].values()])
        intervals.append(m.NewOptionalFixedSizeIntervalVar(s[v], host[v], h[v], f"H{v}"))
        m.Add(f[v] == s[v] + host[v]).OnlyEnforceIf(h[v])
        load.append(host[v] * h[v])
        duration.append(host[v] * h[v])
        if whole_cim[v]:
            m.Add(f[v] == s[v] + acc[v]).OnlyEnforceIf(c[v])
            duration[v] = duration[v] + acc[v] * c[v]
        if not allowed[v]:
            continue
        sliced = m.NewBoolVar(f"sliced{v}")
        m.Add(sliced == sum(y[v].values()))
        sc[v], sh[v], sj[v] = (m.NewIntVar(0, ub, f"{kind}{v}") for kind in ("sc", "sh", "sj"))
        opts = {k: slicings[v][k] for k in allowed[v]}
        size_h = m.NewIntVar(0, max(u_(o.t_host_ns) for o in opts.values()), f"dh{v}")
        size_j = m.NewIntVar(0, max(u_(o.t_join_ns) for o in opts.values()), f"dj{v}")
        m.Add(size_h == sum(u_(opts[k].t_host_ns) * y[v][k] for k in opts))
        m.Add(size_j == sum(u_(opts[k].t_join_ns) * y[v][k] for k in opts))
        end_h, end_j = m.NewIntVar(0, ub, f"eh{v}"), m.NewIntVar(0, ub, f"ej{v}")
        intervals.append(m.NewOptionalIntervalVar(sh[v], size_h, end_h, sliced, f"P{v}"))
        intervals.append(m.NewOptionalIntervalVar(sj[v], size_j, end_j, sliced, f"J{v}"))
        load[v] = load[v] + size_h + size_j
        duration[v] = duration[v] + sum(
            (u_(o.t_join_ns) + max(u_(o.t_host_ns), u_(o.t_cim_ns) + u_(o.t_back_ns))) * y[v][k] for k, o in opts.items())
        for k, o in opts.items():
            m.Add(f[v] == sj[v] + u_(o.t_join_ns)).OnlyEnforceIf(y[v][k])
            m.Add(sj[v] >= sh[v] + u_(o.t_host_ns)).OnlyEnforceIf(y[v][k])
            m.Add(sj[v] >= sc[v] + u_(o.t_cim_ns) + u_(o.t_back_ns)).OnlyEnforceIf(y[v][k])
            if o.t_graph_in_ns > 0:
                m.Add(sc[v] >= u_(o.t_graph_in_ns)).OnlyEnforceIf(y[v][k])
    m.AddNoOverlap(intervals)
    for u, v, t_ns in problem.edges:
        t = u_(t_ns)
        if not (whole_cim[v] or allowed[v]):
            m.Add(s[v] >= f[u] + t * c[u])
            continue
        m.Add(s[v] >= f[u] + t * c[u]).OnlyEnforceIf(h[v])
        if whole_cim[v]:
            m.Add(s[v] >= f[u] + t - t * c[u]).OnlyEnforceIf(c[v])
        for k, lit in y[v].items():
            o = slicings[v][k]
            t_host, t_cim = u_(dict(o.in_host_ns).get(u, t_ns)), u_(dict(o.in_cim_ns).get(u, t_ns))
            m.Add(sh[v] >= f[u] + t_host * c[u]).OnlyEnforceIf(lit)
            m.Add(sc[v] >= f[u] + t_cim - t_cim * c[u]).OnlyEnforceIf(lit)
    for v in range(n):
        t_in = u_(problem.t_in_ns[v])
        if whole_cim[v] and t_in > 0:
            m.Add(s[v] >= t_in).OnlyEnforceIf(c[v])
    bounded = set(dag.sinks(problem)) | {v for v in range(n) if problem.writes_output[v]}
    for v in sorted(bounded):
        t_out = u_(problem.t_out_ns[v]) if whole_cim[v] and problem.writes_output[v] else 0
        m.Add(makespan >= f[v] + t_out * c[v])
    xbars = [(problem.crossbars[v], c[v]) for v in range(n) if whole_cim[v]]
    xbars += [(slicings[v][k].crossbars, lit) for v in range(n) for k, lit in y[v].items()]
    if sum(x for x, _ in xbars) > problem.budget:
        m.Add(sum(x * lit for x, lit in xbars) <= problem.budget)  # eq. 14
    if not options.plain:
        shortest = [min([host[v], *([acc[v]] if whole_cim[v] else []),
                         *(u_(o.t_join_ns) + max(u_(o.t_host_ns), u_(o.t_cim_ns) + u_(o.t_back_ns))
                           for o in (slicings[v][k] for k in allowed[v]))]) for v in range(n)]
        record = SlicedModel(problem=problem, m=m, ub=ub, T=makespan, f=f,
                             starts=[[s[v], *((sc[v], sh[v], sj[v]) if v in sc else ())] for v in range(n)],
                             load=load, duration=duration, shortest=shortest, ancestors=dag.ancestors(problem),
                             descendants=dag.descendants(problem))
        add_load_rows(record)
        add_path_rows(record)
    if warm_start is not None:
        _add_hints(m, problem, warm_start, unit, (h, c, y, s, f, sc, sh, sj), whole_cim, allowed)
    # One worker unless told otherwise: the interleaved search then picks the same optimum among equal
    # ones in `partition` and in a sweep's points (which solve single-threaded).
    cp_options = CpSatOptions.from_solve_options(options, threads=options.threads or 1,
                                                 parameters=SMALL_MODEL_PARAMETERS if small else None)

    def read(value) -> tuple[Schedule, tuple[int, ...]]:
        """The solution ``value`` gives (a CP-SAT solver's ``Value``), re-timed in real ns, and its host order."""
        slicing = [WHOLE] * n
        on_host = [not value(c[v]) for v in range(n)]
        for v in range(n):
            for k, lit in y[v].items():
                if value(lit):
                    slicing[v] = k
        expansion = expand(problem, on_host, slicing)
        # Starts and finishes in units of the expanded operators, in the order expand() lays them out.
        starts: list[int] = []
        ends: list[int] = []
        for i, v in enumerate(expansion.owner):
            role = expansion.role[i]
            starts.append(value({"whole": s, "cim": sc, "host": sh, "join": sj}[role][v]))
            if role == "whole":
                ends.append(starts[-1] + (host[v] if on_host[v] else acc[v]))
            else:
                o = slicings[v][slicing[v]]
                ends.append(starts[-1] + u_({"cim": o.t_cim_ns, "host": o.t_host_ns, "join": o.t_join_ns}[role]))
        hosts = [i for i, on in enumerate(expansion.on_host) if on]
        order = tuple(sorted(hosts, key=lambda i: (starts[i], ends[i], i)))
        parts = simulate(expansion.problem, expansion.on_host, order)
        return parts_schedule(problem, expansion, parts, slicing), order

    if cutoff_ns is not None and bounded_by == cutoff_ns:
        search = Descent(m, makespan, unit, cp_options, begin + options.time_limit_s,
                         None if work_limit_s is None else work_limit_s * DECISION_SHARE)
        schedule, order, bound_ns, finished = search.run(read, cutoff_ns, options.effective_mip_gap)
        if not finished and work_limit_s is not None:
            search.work_s = work_limit_s * (1.0 - DECISION_SHARE)
            schedule, order, bound_ns, finished = search.minimize(read, schedule, order)
        bound_ns = max(bound_ns, lower_bound_ns)
    else:
        m.Minimize(makespan)
        solver = cp_model.CpSolver()
        _configure(solver, cp_options, cp_options.threads, max(0.05, options.time_limit_s - (time.perf_counter() - begin)))
        if work_limit_s is not None:
            solver.parameters.max_deterministic_time = max(0.01, work_limit_s)
        code = solver.Solve(m)
        finished = code in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
        schedule, order = read(solver.Value) if code in (cp_model.OPTIMAL, cp_model.FEASIBLE) else (None, None)
        if code == cp_model.INFEASIBLE and bounded_by is not None:  # nothing within T <= UB: the optimum is above it
            bound_ns = bounded_by
        else:
            # CP-SAT's bound holds for every schedule of the model: T <= UB (or the cutoff) and T >= it.  Without
            # a schedule it still says the optimum is at least min(it, UB): above the UB, or within it and above it.
            bound_ns = max(0.0, solver.BestObjectiveBound() * unit * (1.0 if exact else 1.0 - 1e-15), lower_bound_ns)
            if schedule is None and bounded_by is not None:
                bound_ns = min(bound_ns, bounded_by)
    elapsed = time.perf_counter() - begin
    proto = m.Proto()
    n_vars, n_cons = len(proto.variables), len(proto.constraints)
    if schedule is None:
        return SlicedOutcome(STATUS_NO_SOLUTION, None, None, bound_ns, elapsed, n_vars, n_cons, finished)
    bound_ns = min(bound_ns, schedule.makespan_ns)
    status = gap_status(schedule.makespan_ns, bound_ns, options)
    log.info("cp-sat sliced %s: %.6g ns, bound %.6g ns, %.2f s, %d vars, %d constraints", status,
             schedule.makespan_ns, bound_ns, elapsed, n_vars, n_cons)
    return SlicedOutcome(status, schedule, order, bound_ns, elapsed, n_vars, n_cons, finished)


def gap_status(makespan_ns: float, bound_ns: float, options: SolveOptions) -> str:
    """``optimal`` iff the real gap (rounding included) is within the gap limit (``gap_limit`` when
    a ``--mip-gap`` above zero let it stop short of 1e-9), else ``time_limit``: the status follows
    the reported schedule and bound alone, never CP-SAT's code."""
    gap = (makespan_ns - bound_ns) / makespan_ns if makespan_ns > 0 else 0.0
    if gap > max(options.effective_mip_gap, 1e-9):
        return STATUS_TIME_LIMIT
    return STATUS_OPTIMAL if options.mip_gap is None or gap <= 1e-9 else STATUS_GAP_LIMIT


def _add_hints(m: cp_model.CpModel, problem: PlacementProblem, warm: Schedule, unit: float, variables: tuple,
               whole_cim: list[bool], allowed: list[list[int]]) -> None:
    """Hint the modes and starts of ``warm`` (a whole-operator or a sliced schedule)."""
    h, c, y, s, f, sc, sh, sj = variables
    slicing = warm.slicing or (WHOLE,) * problem.n
    parts: dict[tuple[int, str], float] = {}
    if warm.slicing and warm.parts is not None:
        expansion = expand(problem, warm.on_host, warm.slicing)
        parts = {(v, r): warm.parts.start_ns[i] for i, (v, r) in enumerate(zip(expansion.owner, expansion.role))}
    for v in range(problem.n):
        k = slicing[v]
        if whole_cim[v] or allowed[v]:
            m.AddHint(h[v], int(k == WHOLE and warm.on_host[v]))
            for j, lit in y[v].items():
                m.AddHint(lit, int(j == k))
        if whole_cim[v]:
            m.AddHint(c[v], int(k == WHOLE and not warm.on_host[v]))
        if k != WHOLE and k in y[v]:
            for var, role in ((sc, "cim"), (sh, "host"), (sj, "join")):
                m.AddHint(var[v], floor_units(parts[(v, role)], unit))
        else:
            m.AddHint(s[v], floor_units(warm.start_ns[v], unit))
        m.AddHint(f[v], floor_units(warm.finish_ns[v], unit))
