"""OR-Tools CP-SAT backend (``--solver cpsat``): the scheduling model, exact in real time.

The model is the problem of :func:`cimsplit.passes.placement.simulate.simulate`, written as a
constraint-programming schedule instead of the big-M ILP of eq. 5-14 (their
optima coincide):

- ``x_v`` Boolean, 1 = host, fixed to 1 outside V_acc (eq. 5) and where the
  operator alone needs more crossbars than the budget;
- ``s_v`` integer start; ``f_v = s_v + T_acc,v + x_v·(T_host,v - T_acc,v)`` (eq. 7);
- the host as an optional interval per operator (present iff ``x_v``) in one
  ``AddNoOverlap``: the single-core host of eq. 10-12 without any order
  variable or big-M;
- ``z_uv >= |x_u - x_v|`` and ``s_v >= f_u + z_uv·T_transfer`` on every edge
  (eq. 8-9), ``s_v >= (1 - x_v)·t_in``, ``T >= f_v (+ (1 - x_v)·t_out)`` for sinks
  and output writers (eq. 6), the crossbar budget as one linear row (eq. 14),
  minimize ``T``.

``plain=False`` adds what keeps the optimum and helps the search (each implied
by the constraints above for every solution with ``T <= UB``; same arguments as
in :func:`cimsplit.passes.placement.solvers.milp.build_milp`): ``T <= UB`` from the warm start,
release/tail domains ``release_v <= s_v <= UB - tail_v - min_dur_v``, the
host-load row ``T >= sum x_v·T_host,v`` and its ancestor/descendant forms
``s_v >= sum_{u in anc(v)} x_u·T_host,u`` and ``T >= f_v + sum_{w in desc(v)}
x_w·T_host,w`` (host operators never overlap and respect precedence), the
host idle time along the longest chain of host-only operators added to the host
load (:func:`_add_idle_chain_cut`), the host idle time forced while a chain of
CIM operators runs (:func:`_add_cim_idle_cut`, ``cim_idle_cut=True``, the default),
and a complete solution hint (assignment,
starts, z, T, idle fills) from the heuristics.  Intermediate solutions may carry
a T above their real makespan (the idle rows let y be small); the optimum never
does, and every reported objective is the re-timed real makespan.

Exactness in real time.  CP-SAT needs integers.  Every duration, transfer and
input/output time d is replaced by ``floor(d / r)`` in units of ``r`` ns.  If
all inputs are integer multiples of ``r`` (checked exactly), nothing is rounded.
Otherwise two facts keep the answer exact:

1. *The bound is a true lower bound.*  For any placement and host order the
   earliest-start makespan is a longest path whose lengths are sums of the
   times; flooring every time can only shorten each path, so the floored
   problem's optimum is <= the real optimum, and CP-SAT's proven bound (in
   units) times ``r`` is a lower bound on the real optimum.
2. *The objective is real.*  The solution's placement and host order (by start,
   ties by finish, then by index: a zero-length host operator that shares its
   start with a longer one ran first; this respects precedence because floored
   times are >= 0 and every edge goes from a lower to a higher index) are re-timed with the real
   times by ``simulate``; that makespan is what is reported.  It exceeds the
   floored makespan by less than ``r`` per term on the critical path (at most
   ``2n + 1`` terms), so ``r`` is chosen to make this error far below the MIP
   gap (the horizon is about 2**32 units: the error is at most (2n + 1)·2**-32
   of it).  The gap reported is between the real makespan and the real lower
   bound, rounding included.

Determinism.  CP-SAT's parallel portfolio is not deterministic; with
``deterministic=True`` (the default) it runs ``interleave_search``, whose path
does not depend on thread timing, so every solve that finishes before the time
limit returns the same schedule.  A solve stopped by the wall-clock limit may
stop at a different incumbent on a busier machine (as with any solver).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field
from fractions import Fraction

from cimsplit.passes.placement import dag
from cimsplit.passes.placement.options import DEFAULT_MIP_GAP, SolveOptions
from cimsplit.passes.placement.solvers.backend import (
    STATUS_GAP_LIMIT,
    STATUS_NO_SOLUTION,
    STATUS_OPTIMAL,
    STATUS_TIME_LIMIT,
    BackendOutcome,
    BackendUnavailable,
)
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import host_order_by_start, simulate

__all__ = ["CpSatBackend", "CpSatRun", "solve_cpsat", "time_unit_ns"]

log = logging.getLogger(__name__)

_HORIZON_UNITS = 2.0**32
"""Target size of the horizon in model units when times must be rounded.  Larger
values make CP-SAT 9.15's presolve declare feasible models infeasible (a
detector-250 segment at 2**36 units; google/or-tools#3168 reports the same
with no-overlap and large values, fixed there by scaling down)."""
_EXACT_UNITS_MAX = 2.0**32
"""Largest horizon accepted when an exact (rounding-free) unit exists (same reason)."""
_CHAINS = 1
"""Chains of host-only operators that get an idle-time cut (more did not help on detector graphs)."""


def _horizon_ns(problem: PlacementProblem) -> float:
    """eq. 13's M: no schedule without idle-time padding is longer."""
    total = sum(max(problem.t_host_ns[v], problem.t_cim_ns[v] or 0.0) + problem.t_in_ns[v] + problem.t_out_ns[v]
                for v in range(problem.n))
    return total + sum(t for _, _, t in problem.edges)


def _all_times(problem: PlacementProblem) -> list[float]:
    times = list(problem.t_host_ns) + [t for t in problem.t_cim_ns if t is not None]
    return times + list(problem.t_in_ns) + list(problem.t_out_ns) + [t for _, _, t in problem.edges]


def time_unit_ns(problem: PlacementProblem) -> tuple[float, bool]:
    """The model's time unit r in ns and whether every time is an exact multiple of it.

    Tries r = 2**-k ns (k = 0..20) first: profiles in whole ns and bus times of
    bytes / (n·10.24 GB/s) are exact in such units.  Falls back to a rounding
    unit that makes the horizon about 2**32 units.
    """
    horizon = max(_horizon_ns(problem), 1e-9)
    times = [Fraction(t) for t in _all_times(problem) if t > 0]
    for k in range(21):
        unit = Fraction(1, 2**k)
        if horizon / float(unit) > _EXACT_UNITS_MAX:
            break
        if all((t / unit).denominator == 1 for t in times):
            return float(unit), True
    return horizon / _HORIZON_UNITS, False


@dataclass
class CpSatRun:
    """One CP-SAT solve, with the incumbent trace the Table I bench reads."""

    outcome: BackendOutcome
    schedule: Schedule | None
    unit_ns: float
    exact_units: bool
    incumbents: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since the start of the solve, real makespan in ns) of each improving solution."""
    warm_start: tuple[float, float] | None = None
    """(seconds since the start, makespan in ns) when the warm start (hint) was ready."""


class _Incumbents:
    """Solution callback: records when each improving solution arrived (for the bench)."""

    def __init__(self, begin: float, unit_ns: float, on_new=None) -> None:
        from ortools.sat.python import cp_model

        class _Cb(cp_model.CpSolverSolutionCallback):
            def __init__(cb) -> None:  # noqa: N805 - the callback's own self
                super().__init__()
                cb.trace: list[tuple[float, float]] = []

            def on_solution_callback(cb) -> None:  # noqa: N805
                cb.trace.append((time.perf_counter() - begin, cb.ObjectiveValue() * unit_ns))
                if on_new is not None:
                    on_new(cb.ObjectiveValue())

        self.callback = _Cb()


def _floor_units(t_ns: float, unit_ns: float) -> int:
    """floor(t / r) in exact rational arithmetic: never above the real time, not even by an ulp."""
    return max(0, int(Fraction(t_ns) // Fraction(unit_ns)))


def solve_cpsat(problem: PlacementProblem, *, time_limit_s: float = 60.0, mip_gap: float | None = None,
                seed: int = 0, threads: int = 2, plain: bool = False, warm_start: Schedule | None = None,
                deterministic: bool = True, verbose: bool = False, record: bool = False,
                heuristic_time_s: float | None = None, cumulative_host: bool = False,
                parameters: dict | None = None, whole_windows: bool = False,
                bound_worker: bool = False, cim_idle_cut: bool = True, lower_bound_ns: float = 0.0) -> CpSatRun:
    """Build and solve the CP-SAT model; the schedule returned is re-timed in real ns.

    Options beyond the model above (each exact, each brute-force tested in
    ``tests/passes/test_cpsat_options_bruteforce.py``): ``bound_worker`` (LB-tree
    search on a second thread, :func:`_solve_with_bound_worker`), ``cim_idle_cut``
    (on by default), ``whole_windows`` (Booleans in the idle-chain rows),
    ``cumulative_host`` (the host once more as a capacity-1 cumulative) and
    ``parameters`` (raw CP-SAT parameters, for experiments).

    ``lower_bound_ns``: a proven lower bound on the optimum from elsewhere (the
    bottleneck segments).  It enters as ``T >= floor(LB / r) - e`` with e = 0 in
    exact units, else 2n + 1: the floored optimum is at least the real one less
    one unit per term of the critical path (the rounding argument below), so
    the row keeps the floored optimum.  The reported bound is the larger of the two.
    """
    try:
        from ortools.sat.python import cp_model
    except ImportError as exc:  # pragma: no cover - ortools is a dependency
        raise BackendUnavailable("OR-Tools is not installed", hint="pip install ortools") from exc
    from cimsplit.passes.placement.heuristics import best_heuristic

    begin = time.perf_counter()
    n = problem.n
    gap_limit = DEFAULT_MIP_GAP if mip_gap is None else float(mip_gap)
    if not plain and (warm_start is None or heuristic_time_s):
        # 8 ms per operator: a better incumbent also tightens every start domain (T <= UB), which
        # is what lifted the bound on YOLOv5n at 25 crossbars, 1000 ns (with the bound worker:
        # 3.2 % -> 0.2 % gap at 30 s).
        budget_s = heuristic_time_s if heuristic_time_s else min(1.0, 0.05 * time_limit_s, 0.008 * n)
        found = best_heuristic(problem, budget_s, seed)
        if warm_start is None or found.makespan_ns < warm_start.makespan_ns:
            warm_start = found
    warm_at = None if warm_start is None else (time.perf_counter() - begin, warm_start.makespan_ns)
    unit, exact = time_unit_ns(problem)

    def units(t_ns: float) -> int:
        return _floor_units(t_ns, unit)

    capable = [problem.capable(v) and problem.crossbars[v] <= problem.budget for v in range(n)]
    host = [units(problem.t_host_ns[v]) for v in range(n)]
    acc = [units(problem.t_cim_ns[v]) if capable[v] else host[v] for v in range(n)]  # type: ignore[arg-type]
    t_in = [units(problem.t_in_ns[v]) if capable[v] else 0 for v in range(n)]
    t_out = [units(problem.t_out_ns[v]) if capable[v] and problem.writes_output[v] else 0 for v in range(n)]
    edges = [(u, v, units(t)) for u, v, t in problem.edges]
    # The floored problem, to time the warm start in model units (its makespan is an upper bound there).
    floored = PlacementProblem(
        names=problem.names, t_host_ns=tuple(float(h) for h in host),
        t_cim_ns=tuple(float(acc[v]) if capable[v] else None for v in range(n)),
        crossbars=problem.crossbars, edges=tuple((u, v, float(t)) for u, v, t in edges), budget=problem.budget,
        t_in_ns=tuple(float(t) for t in t_in), t_out_ns=tuple(float(t) for t in t_out),
        writes_output=problem.writes_output)
    hint: Schedule | None = None
    if warm_start is not None and all(h or capable[v] for v, h in enumerate(warm_start.on_host)) and sum(
            problem.crossbars[v] for v in range(n) if not warm_start.on_host[v]) <= problem.budget:
        hint = simulate(floored, warm_start.on_host, host_order_by_start(warm_start))
    horizon = int(sum(max(host[v], acc[v]) + t_in[v] + t_out[v] for v in range(n)) + sum(t for _, _, t in edges))
    ub = horizon if hint is None or plain else min(horizon, int(round(hint.makespan_ns)))

    m = cp_model.CpModel()
    min_dur = [min(host[v], acc[v]) for v in range(n)]
    release = [0] * n
    tail = [0] * n
    if not plain:
        for u, v, _ in sorted(edges, key=lambda e: e[1]):
            release[v] = max(release[v], release[u] + min_dur[u])
        for u, v, _ in sorted(edges, key=lambda e: -e[0]):
            tail[u] = max(tail[u], tail[v] + min_dur[v])
    x = [m.NewBoolVar(f"x{v}") if capable[v] else m.NewConstant(1) for v in range(n)]
    s = [m.NewIntVar(release[v], max(release[v], ub - tail[v] - min_dur[v]), f"s{v}") for v in range(n)]
    t_lower = max((release[v] + min_dur[v] + tail[v] for v in range(n)), default=0) if not plain else 0
    if lower_bound_ns > 0 and not plain:
        t_lower = max(t_lower, units(lower_bound_ns) - (0 if exact else 2 * n + 1))
    makespan = m.NewIntVar(t_lower, max(t_lower, ub), "T")

    def load(members) -> object:
        """sum_{u in members} x_u·T_host,u as one flat expression (forced-host terms are constants)."""
        free = [u for u in members if capable[u] and host[u] > 0]
        fixed = sum(host[u] for u in members if not capable[u])
        return cp_model.LinearExpr.WeightedSum([x[u] for u in free], [host[u] for u in free]) + fixed

    def finish(v: int):
        return s[v] + acc[v] + (host[v] - acc[v]) * x[v] if capable[v] else s[v] + host[v]  # eq. 7

    intervals = []
    for v in range(n):
        if capable[v]:
            intervals.append(m.NewOptionalFixedSizeIntervalVar(s[v], host[v], x[v], f"h{v}"))
        else:
            intervals.append(m.NewFixedSizeIntervalVar(s[v], host[v], f"h{v}"))
    m.AddNoOverlap(intervals)  # the single-core host (eq. 10-12)
    if cumulative_host and not plain:
        m.AddCumulative(intervals, [1] * n, 1)  # the same host again, for the cumulative propagators
    z: dict[tuple[int, int], object] = {}
    for u, v, tr in edges:
        if tr > 0 and (capable[u] or capable[v]):
            if capable[u] and capable[v]:
                zuv = m.NewBoolVar(f"z{u}_{v}")
                m.Add(zuv >= x[u] - x[v])  # eq. 9
                m.Add(zuv >= x[v] - x[u])
                z[(u, v)] = zuv
                m.Add(s[v] >= finish(u) + tr * zuv)  # eq. 8
            else:
                other = x[u] if capable[u] else x[v]  # |x_u - x_v| = 1 - x_other
                m.Add(s[v] >= finish(u) + tr - tr * other)
        else:
            m.Add(s[v] >= finish(u))  # eq. 8 with no transfer
    for v in range(n):
        if t_in[v] > 0:
            m.Add(s[v] >= t_in[v] - t_in[v] * x[v])
    bounded = set(dag.sinks(problem)) | {v for v in range(n) if problem.writes_output[v]}
    for v in sorted(bounded):
        if t_out[v] > 0:
            m.Add(makespan >= finish(v) + t_out[v] - t_out[v] * x[v])  # eq. 6 + output transfer
        else:
            m.Add(makespan >= finish(v))  # eq. 6
    cim_able = [v for v in range(n) if capable[v]]
    if sum(problem.crossbars[v] for v in cim_able) > problem.budget:
        on_cim = cp_model.LinearExpr.WeightedSum([x[v] for v in cim_able], [-problem.crossbars[v] for v in cim_able])
        m.Add(on_cim + sum(problem.crossbars[v] for v in cim_able) <= problem.budget)  # eq. 14
    if not plain:
        m.Add(makespan >= load(range(n)))  # host-load cut
        anc, desc = dag.ancestors(problem), dag.descendants(problem)
        for v in range(n):
            members = [u for u in range(v) if (anc[v] >> u) & 1]
            if len(members) >= 2:
                m.Add(s[v] >= load(members))
            members = [w for w in range(v + 1, n) if (desc[v] >> w) & 1]
            if len(members) >= 2:
                m.Add(makespan >= finish(v) + load(members))
        extra_hints = _add_idle_chain_cut(m, makespan, max(t_lower, ub), s, x, host, capable, anc, desc, n, hint, load,
                                          whole_windows)
        if cim_idle_cut:
            pads = _cim_pads(n, capable, edges, t_in, t_out, problem.writes_output)
            acc_pad = [acc[v] + pads[v][0] + pads[v][1] for v in range(n)]
            extra_hints += _add_cim_idle_cut(m, makespan, s, x, host, acc_pad, capable, anc, desc, n, hint, load,
                                             [acc[v] for v in range(n)], "a", [b for b, _ in pads])
            if hint is not None:  # the same rows along the chain of the warm start's CIM operators
                weight = [acc[v] if not hint.on_host[v] else 0 for v in range(n)]
                extra_hints += _add_cim_idle_cut(m, makespan, s, x, host, acc_pad, capable, anc, desc, n, hint,
                                                 load, weight, "h", [b for b, _ in pads])
        if hint is not None:
            for var, value in extra_hints:
                m.AddHint(var, value)
            for v in range(n):
                if capable[v]:
                    m.AddHint(x[v], int(hint.on_host[v]))
                m.AddHint(s[v], int(round(hint.start_ns[v])))
            for (u, v), zuv in z.items():
                m.AddHint(zuv, int(hint.on_host[u] != hint.on_host[v]))
            m.AddHint(makespan, int(round(hint.makespan_ns)))
    m.Minimize(makespan)

    proto = m.Proto()
    n_vars, n_cons = len(proto.variables), len(proto.constraints)
    remaining = max(0.05, time_limit_s - (time.perf_counter() - begin))
    pair = bound_worker and not plain and threads >= 2

    def configure(solver, workers: int) -> None:
        prm = solver.parameters
        prm.max_time_in_seconds = remaining
        prm.num_workers = max(1, workers)
        prm.random_seed = int(seed)
        prm.relative_gap_limit = gap_limit
        prm.log_search_progress = verbose
        if deterministic:
            # Interleaved search does not depend on thread timing: a solve that ends before the
            # time limit (proven optimum) gives the same answer every run.  A wall-clock limit
            # can still cut it at a different point, as with any solver's time limit.
            prm.interleave_search = True
            prm.interleave_batch_size = prm.num_workers  # short batches: little waiting once a worker is done
        for key, value in (parameters or {}).items():
            if isinstance(value, list):
                getattr(prm, key).extend(value)
            else:
                setattr(prm, key, value)

    solver = cp_model.CpSolver()
    configure(solver, threads - 1 if pair else threads)
    if pair:
        code, solver, bound_units, trace = _solve_with_bound_worker(m, solver, configure, gap_limit, begin, unit)
    else:
        cb = _Incumbents(begin, unit) if record else None
        code = solver.Solve(m, cb.callback if cb else None)
        bound_units = solver.BestObjectiveBound()
        trace = cb.callback.trace if cb else []
    if code == cp_model.INFEASIBLE:
        # Impossible (all on the host is always a solution): a solver failure.  CP-SAT's
        # presolve is where such failures were seen; solve again without it.
        log.warning("cp-sat called a feasible model infeasible; solving again without presolve")
        remaining = max(0.05, time_limit_s - (time.perf_counter() - begin))
        solver = cp_model.CpSolver()
        configure(solver, threads)
        solver.parameters.cp_model_presolve = False
        code = solver.Solve(m)
        bound_units = solver.BestObjectiveBound() if code != cp_model.INFEASIBLE else 0.0
        code = cp_model.UNKNOWN if code == cp_model.INFEASIBLE else code
    elapsed = time.perf_counter() - begin

    schedule: Schedule | None = None
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        on_host = tuple(bool(solver.Value(x[v])) for v in range(n))
        starts = [solver.Value(s[v]) for v in range(n)]
        # Ties by finish, then index: a zero-length host operator that starts with a longer one ran first.
        order = sorted((v for v in range(n) if on_host[v]), key=lambda v: (starts[v], starts[v] + host[v], v))
        schedule = simulate(problem, on_host, order)
    elif warm_start is not None:
        schedule = warm_start  # CP-SAT was handed it: still the incumbent
    bound_ns = bound_units * unit if code in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN) else 0.0
    if not exact:
        bound_ns *= 1.0 - 1e-15  # units -> ns rounded down, so that it stays a lower bound
    bound_ns = max(0.0, bound_ns)  # (exact units are powers of two: the product is exact)
    if schedule is not None:
        if warm_start is not None and warm_start.makespan_ns < schedule.makespan_ns:
            schedule = warm_start  # re-timing in real ns can reorder ties: keep the better
        bound_ns = min(max(bound_ns, lower_bound_ns), schedule.makespan_ns)
        true_gap = (schedule.makespan_ns - bound_ns) / schedule.makespan_ns if schedule.makespan_ns > 0 else 0.0
        if code == cp_model.OPTIMAL and true_gap <= max(gap_limit, 1e-9):
            status = STATUS_OPTIMAL if mip_gap is None or true_gap <= 1e-9 else STATUS_GAP_LIMIT
        elif code == cp_model.OPTIMAL:
            status = STATUS_GAP_LIMIT
            log.info("cp-sat: optimal in model units, real gap %.3g after rounding to %.3g ns", true_gap, unit)
        else:
            status = STATUS_TIME_LIMIT
    else:
        status = STATUS_NO_SOLUTION
    if code == cp_model.MODEL_INVALID:  # pragma: no cover - a bug in this module
        raise RuntimeError(f"CP-SAT rejected the model: {m.Validate()}")
    outcome = BackendOutcome(
        solver="cpsat", status=status,
        on_host=None if schedule is None else schedule.on_host,
        start_ns=None if schedule is None else schedule.start_ns,
        host_order=None if schedule is None else tuple(host_order_by_start(schedule)),
        objective_ns=math.inf if schedule is None else schedule.makespan_ns,
        bound_ns=bound_ns, time_s=elapsed, n_variables=n_vars, n_constraints=n_cons)
    log.info("cp-sat %s: %.6g ns, bound %.6g ns, %.2f s, %d vars, %d constraints", status,
             outcome.objective_ns, bound_ns, elapsed, n_vars, n_cons)
    return CpSatRun(outcome, schedule, unit, exact, trace if record else [], warm_at)


def _solve_with_bound_worker(m, main, configure, gap_limit: float, begin: float, unit: float):
    """Solve ``m`` with ``main`` and, beside it on one more thread, a bound worker.

    The bound worker is CP-SAT's LB-tree search (``optimize_with_lb_tree_search``,
    one thread): it raises the proven lower bound much faster than the default
    interleaved portfolio on these models.  Exactness: both solve the same model,
    so each proven bound is a lower bound of its optimum and the larger of the two
    is one too; every solution either returns is a solution of the model.  The
    pair stops when one proves its optimum alone or when the best solution of
    either meets the best bound of either within ``gap_limit`` (CP-SAT's own
    relative gap).  Returns (status code, the solver holding the best solution,
    the best bound in units, merged incumbent trace).

    Determinism: the solution reported is the main solver's unless the bound
    worker's is strictly better or the bound worker proved optimality alone.
    A solve proven optimal always reports the optimal makespan and bound; which
    of two equally good schedules is returned can depend on which thread
    proves it first, so this is opt-in (``bound_worker=True``).
    """
    import threading

    from ortools.sat.python import cp_model

    side = cp_model.CpSolver()
    configure(side, 1)
    side.parameters.interleave_search = False
    side.parameters.optimize_with_lb_tree_search = True
    lock = threading.Lock()
    best = {"obj": math.inf, "bound": -math.inf}

    def check() -> None:
        obj, bound = best["obj"], best["bound"]
        if math.isfinite(obj) and obj - bound <= gap_limit * max(1.0, abs(obj)):
            main.StopSearch()
            side.StopSearch()

    def on_bound(value: float) -> None:
        with lock:
            best["bound"] = max(best["bound"], value)
            check()

    def on_solution(value: float) -> None:
        with lock:
            best["obj"] = min(best["obj"], value)
            check()

    cb, side_cb = _Incumbents(begin, unit, on_solution), _Incumbents(begin, unit, on_solution)
    main.best_bound_callback = on_bound
    side.best_bound_callback = on_bound
    result: dict = {}

    def run_side() -> None:
        result["code"] = side.Solve(m, side_cb.callback)
        if result["code"] in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
            main.StopSearch()

    thread = threading.Thread(target=run_side, name="cpsat-bound", daemon=True)
    thread.start()
    code = main.Solve(m, cb.callback)
    if code in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        side.StopSearch()
    thread.join()
    side_code = result.get("code", cp_model.UNKNOWN)
    trace = sorted(cb.callback.trace + side_cb.callback.trace)
    has = (cp_model.OPTIMAL, cp_model.FEASIBLE)
    if code == cp_model.INFEASIBLE or side_code == cp_model.INFEASIBLE:
        return cp_model.INFEASIBLE, main, 0.0, trace
    bound = max(main.BestObjectiveBound() if code in has or code == cp_model.UNKNOWN else -math.inf,
                side.BestObjectiveBound() if side_code in has or side_code == cp_model.UNKNOWN else -math.inf)
    chosen, chosen_code = main, code
    if side_code in has and (code not in has or side.ObjectiveValue() < main.ObjectiveValue()
                             or (side_code == cp_model.OPTIMAL and code != cp_model.OPTIMAL
                                 and side.ObjectiveValue() <= main.ObjectiveValue())):
        chosen, chosen_code = side, side_code
    if chosen_code in has:
        objective = chosen.ObjectiveValue()
        bound = min(bound, objective)
        if objective - bound <= gap_limit * max(1.0, abs(objective)):
            chosen_code = cp_model.OPTIMAL  # proven by the pair, as CP-SAT itself reports a gap-limit stop
    return chosen_code, chosen, bound if math.isfinite(bound) else 0.0, trace


def _cim_pads(n, capable, edges, t_in, t_out, writes_output) -> list[tuple[int, int]]:
    """(before, after) bus time every CIM placement of v surely pays next to its run, in units.

    Before: the smallest transfer from a predecessor when every predecessor is
    host-only (so each edge is crossed once v is on the CIM: ``s_v >= f_u +
    T_transfer,uv``), or the graph-input time when v has no predecessor.  After:
    the same for successors, or the output time of an output writer without
    successors.  So ``[s_v - before, f_v + after]`` holds no ancestor and no
    descendant of v on the host, and the windows of a chain of capable operators
    stay disjoint (a nonzero pad needs a host-only operator between two of them).
    """
    preds: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    succs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for u, v, tr in edges:
        preds[v].append((u, tr))
        succs[u].append((v, tr))

    def pad(links: list[tuple[int, int]], alone: int) -> int:
        if not links:
            return alone
        return min(tr for _, tr in links) if all(not capable[w] for w, _ in links) else 0

    return [(pad(preds[v], t_in[v]), pad(succs[v], t_out[v] if writes_output[v] else 0)) if capable[v] else (0, 0)
            for v in range(n)]


def _add_cim_idle_cut(m, makespan, s, x, host, acc, capable, anc, desc, n, hint, load, weights, tag,
                      pad_before) -> list:
    """Host idle time forced while CIM operators of one chain run (keeps the optimum).

    ``acc`` here is the CIM time plus the pads of :func:`_cim_pads`: the window
    is ``[s_v - before, f_v + after]`` instead of ``[s_v, f_v]``, the argument below
    unchanged (only incomparable host operators can overlap it; the windows of a
    chain are disjoint and inside [0, T]).

    Take CIM-capable operators v_1, ..., v_k, each an ancestor of the next (the
    chain of largest total ``weights``; any chain is valid).  If v_i runs on the CIM, the host can work
    during [s_i, f_i] only on operators incomparable to v_i (ancestors finish
    before s_i, descendants start after f_i).  With ``y_wi`` the time host
    operator w overlaps [s_i, f_i]: ``sum_i y_wi <= x_w·T_host,w`` and the host
    idles at least ``idle_i >= (1 - x_i)·T_acc,i - sum_w y_wi`` (>= 0) there.  The
    intervals of a chain are disjoint (v_i finishes before v_{i+1} starts) and lie
    in [0, T], so ``T >= sum_v x_v·T_host,v + sum_i idle_i``.  Every schedule
    satisfies the rows with its own overlaps (idle_i = its real idle time in
    [s_i, f_i], or 0 when v_i is on the host), so no solution is lost.
    Returns (variable, value) pairs that complete a hint schedule.
    """
    from ortools.sat.python import cp_model

    cands = [v for v in range(n) if capable[v] and acc[v] > 0 and weights[v] > 0]
    weight: dict[int, int] = {}
    prev: dict[int, int | None] = {}
    for v in cands:
        best, arg = 0, None
        for u in cands:
            if u >= v:
                break
            if (anc[v] >> u) & 1 and weight[u] > best:
                best, arg = weight[u], u
        weight[v], prev[v] = best + weights[v], arg
    if not weight:
        return []
    end: int | None = max(cands, key=lambda w: (weight[w], -w))
    chain: list[int] = []
    while end is not None:
        chain.append(end)
        end = prev[end]
    chain.reverse()
    everything = (1 << n) - 1
    fill: dict[int, list] = {}
    idles, hints = [], []
    for i, v in enumerate(chain):
        free = everything & ~(anc[v] | desc[v] | (1 << v))
        members = [w for w in range(n) if (free >> w) & 1 and host[w] > 0]
        ys = []
        for w in members:
            y = m.NewIntVar(0, min(host[w], acc[v]), f"c{tag}_{w}_{i}")
            fill.setdefault(w, []).append(y)
            ys.append(y)
        idle = m.NewIntVar(0, acc[v], f"cidle{tag}_{i}")
        m.Add(idle >= acc[v] - acc[v] * x[v] - cp_model.LinearExpr.Sum(ys))
        idles.append(idle)
        if hint is not None:
            busy = 0
            for w, y in zip(members, ys):
                overlap = 0
                if hint.on_host[w] and not hint.on_host[v]:
                    overlap = int(round(max(0.0, min(hint.finish_ns[w], hint.start_ns[v] + acc[v] - pad_before[v])
                                            - max(hint.start_ns[w], hint.start_ns[v] - pad_before[v]))))
                hints.append((y, overlap))
                busy += overlap
            hints.append((idle, 0 if hint.on_host[v] else max(0, acc[v] - busy)))
    for w, ys in fill.items():
        m.Add(cp_model.LinearExpr.Sum(ys) <= host[w] * x[w])
    m.Add(makespan >= load(range(n)) + cp_model.LinearExpr.Sum(idles))
    return hints


def _host_chains(capable: list[bool], anc: list[int], desc: list[int], n: int, limit: int) -> list[list[int]]:
    """Longest chains (by count) of host-only operators, each an ancestor of the next.

    One chain per maximal end (a host-only operator without host-only descendants),
    the ``limit`` longest, so that branches other than the longest get their own cut.
    """
    fixed = [v for v in range(n) if not capable[v]]
    fixed_mask = sum(1 << v for v in fixed)
    length: dict[int, int] = {}
    prev: dict[int, int | None] = {}
    for v in fixed:
        best, arg = 0, None
        for u in fixed:
            if u >= v:
                break
            if (anc[v] >> u) & 1 and length[u] > best:
                best, arg = length[u], u
        length[v], prev[v] = best + 1, arg
    ends = sorted((v for v in fixed if not desc[v] & fixed_mask), key=lambda w: (-length[w], w))
    chains = []
    for end in ends[:limit]:
        chain: list[int] = []
        v: int | None = end
        while v is not None:
            chain.append(v)
            v = prev[v]
        chains.append(chain[::-1])
    return chains


def _add_idle_chain_cut(m, makespan, ub: int, s, x, host, capable, anc, desc, n, hint, load,
                        whole: bool = False) -> list:
    """Host idle time forced along chains of host-only operators (keeps the optimum).

    Take host-only operators v_1, ..., v_k, each an ancestor of the next.  The
    windows W_0 = [0, s_1] and W_i = [f_i, s_{i+1}] are disjoint and inside [0, T].
    Only operators that are neither ancestors of v_i (nor v_i) nor descendants of
    v_{i+1} (nor v_{i+1}) can run on the host inside W_i (call them F_i).  With
    ``y_wi`` the time operator w runs inside W_i: ``sum_i y_wi <= x_w·T_host,w``
    (the windows are disjoint) and the host idles ``idle_i = |W_i| - sum_{w in
    F_i} y_wi >= 0`` there.  Host operators do not overlap, so
    ``T >= sum_v x_v·T_host,v + sum_i idle_i``.  Every schedule satisfies these rows
    with its own overlaps y and idle times, so no solution is lost.  The
    host-load rows alone see the work or the waiting (for CIM operators on the
    chain); this one adds the waiting to the work.  (Its LP relaxation lets an
    operator fill several windows, as if preempted: it is weakest when a long
    operator runs beside a chain of short waits.)

    ``whole=True`` closes that hole: a host operator w off the chain sits, in
    the host order, between two consecutive chain operators (or before the
    first, or after the last), so it lies entirely inside one window or after
    the chain (with a zero-length chain operator in between, w still ends
    before it starts or starts after it ends: the host runs one at a time).
    So ``y_wi = T_host,w·b_wi`` with Booleans ``sum_i b_wi <= x_w``: every
    schedule satisfies these rows with b = "w lies in W_i", the idle rows are
    unchanged, and no solution is lost.
    Returns (variable, value) pairs that complete a hint schedule.
    """
    from ortools.sat.python import cp_model

    chains = [c for c in _host_chains(capable, anc, desc, n, _CHAINS) if len(c) >= 2]
    if not chains:
        return []
    hints: list = []
    for k, chain in enumerate(chains):
        hints += _chain_rows(m, makespan, ub, s, x, host, anc, desc, n, hint, load, chain, k, whole)
    return hints


def _chain_rows(m, makespan, ub, s, x, host, anc, desc, n, hint, load, chain, k, whole=False) -> list:
    """The rows of :func:`_add_idle_chain_cut` for one chain (variables tagged ``k``)."""
    from ortools.sat.python import cp_model

    everything = (1 << n) - 1
    windows = [(None, chain[0])] + list(zip(chain, chain[1:]))
    fill: dict[int, list] = {}
    idles, hints = [], []
    for i, (a, b) in enumerate(windows):
        blocked = (desc[b] | (1 << b)) | (0 if a is None else (anc[a] | (1 << a)))
        free = everything & ~blocked
        members = [w for w in range(n) if (free >> w) & 1 and host[w] > 0]
        opens = 0 if a is None else s[a] + host[a]
        ys, own = [], []
        for w in members:
            if whole:  # y_wi = T_host,w·b_wi: w lies wholly inside W_i or not at all
                inside = m.NewBoolVar(f"b{k}_{w}_{i}")
                ys.append(inside * host[w])
            else:
                inside = m.NewIntVar(0, host[w], f"y{k}_{w}_{i}")
                ys.append(inside)
            fill.setdefault(w, []).append(inside)
            own.append(inside)
        idle = m.NewIntVar(0, max(0, ub), f"idle{k}_{i}")
        m.Add(idle == s[b] - opens - cp_model.LinearExpr.Sum(ys))
        idles.append(idle)
        if hint is not None:
            w_open = 0.0 if a is None else hint.finish_ns[a]
            w_close = hint.start_ns[b]
            busy = 0
            for w, inside in zip(members, own):
                overlap = 0
                if hint.on_host[w]:
                    overlap = int(round(max(0.0, min(hint.finish_ns[w], w_close) - max(hint.start_ns[w], w_open))))
                if whole:
                    overlap = host[w] if overlap > 0 else 0
                hints.append((inside, int(overlap > 0) if whole else overlap))
                busy += overlap
            hints.append((idle, int(round(w_close - w_open)) - busy))
    for w, ys in fill.items():
        if whole:
            m.Add(cp_model.LinearExpr.Sum(ys) <= x[w])
        else:
            m.Add(cp_model.LinearExpr.Sum(ys) <= host[w] * x[w])
    m.Add(makespan >= load(range(n)) + cp_model.LinearExpr.Sum(idles))
    return hints


class CpSatBackend:
    """``--solver cpsat``: ignores the MILP and builds the scheduling model above.

    ``options.plain`` selects the model without cuts, bounds or hints; otherwise
    the time limit is spent as :mod:`cimsplit.passes.placement.solvers.cpsat.staged` says (whole
    graph, bottleneck segments, whole graph again).
    """

    name = "cpsat"

    def solve(self, problem: PlacementProblem, formulation: object, options: SolveOptions,
              warm_start: Schedule | None) -> BackendOutcome:
        threads = options.threads or 2
        if options.plain:
            return solve_cpsat(problem, time_limit_s=options.time_limit_s, mip_gap=options.mip_gap, seed=options.seed,
                               threads=threads, plain=True, warm_start=warm_start, verbose=options.verbose).outcome
        from cimsplit.passes.placement.solvers.cpsat.staged import solve_staged

        run, how = solve_staged(problem, time_limit_s=options.time_limit_s, mip_gap=options.mip_gap,
                                seed=options.seed, threads=threads, warm_start=warm_start, verbose=options.verbose)
        return dataclasses.replace(run.outcome, detail=how)
