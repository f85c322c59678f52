"""Solve the CP-SAT model: options, the warm start, one search (or two beside each other), the result.

Every reported objective is the makespan of the solution's placement and host
order re-timed with the real times (:mod:`~cimsplit.passes.placement.solvers.cpsat.model`
says why that and the bound are exact).

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
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from cimsplit.passes.placement.heuristics import best_heuristic
from cimsplit.passes.placement.options import DEFAULT_MIP_GAP, SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import host_order_by_start, simulate
from cimsplit.passes.placement.solvers.backend import (
    STATUS_GAP_LIMIT,
    STATUS_NO_SOLUTION,
    STATUS_OPTIMAL,
    STATUS_TIME_LIMIT,
    BackendOutcome,
)
from cimsplit.passes.placement.solvers.cpsat.cuts import add_cim_idle_cuts, add_idle_chain_cut
from cimsplit.passes.placement.solvers.cpsat.model import CpSatModel, add_hints, add_load_cuts, build_model

__all__ = ["CpSatOptions", "CpSatRun", "FewestCrossbars", "solve_cpsat", "solve_fewest_crossbars"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CpSatOptions:
    """How one CP-SAT solve runs.  The experiment flags (each exact, each brute-force tested in
    ``tests/passes/placement/test_cpsat_options_bruteforce.py``) are off unless noted."""

    time_limit_s: float = 60.0
    mip_gap: float | None = None
    """Relative gap to stop at; ``None`` means :data:`DEFAULT_MIP_GAP`."""
    seed: int = 0
    threads: int = 2
    plain: bool = False
    """The model without cuts, bounds or hints."""
    deterministic: bool = True
    """Interleaved search: a solve that ends before the time limit gives the same answer every run."""
    verbose: bool = False
    record: bool = False
    """Keep the incumbent trace (:attr:`CpSatRun.incumbents`) for the Table I bench."""
    heuristic_time_s: float | None = None
    """Run the warm-start heuristic for this long even when a warm start is given (``None``:
    only without one, for min(1 s, 5 % of the limit, 8 ms per operator))."""
    cim_idle_cut: bool = True
    """The host idle time forced while a chain of CIM operators runs (:func:`~.cuts.add_cim_idle_cuts`); on."""
    whole_windows: bool = False
    """Booleans in the idle-chain rows (:func:`~.cuts.add_idle_chain_cut` with ``whole=True``)."""
    cumulative_host: bool = False
    """The host once more as a capacity-1 cumulative."""
    bound_worker: bool = False
    """LB-tree search on a second thread beside the main search (:func:`_solve_with_bound_worker`)."""
    parameters: Mapping[str, object] | None = None
    """Raw CP-SAT parameters, for experiments."""

    @classmethod
    def from_solve_options(cls, options: SolveOptions, **changes) -> CpSatOptions:
        """The driver's options as CP-SAT's (two threads unless ``options.threads`` says otherwise)."""
        values = dict(time_limit_s=options.time_limit_s, mip_gap=options.mip_gap, seed=options.seed,
                      threads=options.threads or 2, plain=options.plain, verbose=options.verbose)
        return cls(**{**values, **changes})

    @property
    def gap_limit(self) -> float:
        return DEFAULT_MIP_GAP if self.mip_gap is None else float(self.mip_gap)


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


class _Incumbents(cp_model.CpSolverSolutionCallback):
    """Solution callback: records when each improving solution arrived (for the bench)."""

    def __init__(self, begin: float, unit_ns: float, on_new: Callable[[float], None] | None = None) -> None:
        super().__init__()
        self.trace: list[tuple[float, float]] = []
        self._begin, self._unit_ns, self._on_new = begin, unit_ns, on_new

    def on_solution_callback(self) -> None:
        self.trace.append((time.perf_counter() - self._begin, self.ObjectiveValue() * self._unit_ns))
        if self._on_new is not None:
            self._on_new(self.ObjectiveValue())


def _warm_start(problem: PlacementProblem, options: CpSatOptions, warm_start: Schedule | None) -> Schedule | None:
    """The better of ``warm_start`` and the heuristic, when the heuristic is asked for (or there is no start)."""
    if options.plain or not (warm_start is None or options.heuristic_time_s):
        return warm_start
    # 8 ms per operator: a better incumbent also tightens every start domain (T <= UB), which
    # is what lifted the bound on YOLOv5n at 25 crossbars, 1000 ns (with the bound worker:
    # 3.2 % -> 0.2 % gap at 30 s).
    budget_s = options.heuristic_time_s or min(1.0, 0.05 * options.time_limit_s, 0.008 * problem.n)
    found = best_heuristic(problem, budget_s, options.seed)
    return found if warm_start is None or found.makespan_ns < warm_start.makespan_ns else warm_start


def _build(problem: PlacementProblem, options: CpSatOptions, warm_start: Schedule | None,
           lower_bound_ns: float) -> CpSatModel:
    """The model with, unless ``plain``, its load rows, idle cuts and the complete hint."""
    model = build_model(problem, plain=options.plain, warm_start=warm_start, cumulative_host=options.cumulative_host,
                        lower_bound_ns=lower_bound_ns)
    if not options.plain:
        add_load_cuts(model)
        extra = add_idle_chain_cut(model, options.whole_windows)
        if options.cim_idle_cut:
            extra += add_cim_idle_cuts(model)
        add_hints(model, extra)
    model.m.Minimize(model.T)
    return model


def _configure(solver: cp_model.CpSolver, options: CpSatOptions, workers: int, seconds: float) -> None:
    prm = solver.parameters
    prm.max_time_in_seconds = seconds
    prm.num_workers = max(1, workers)
    prm.random_seed = int(options.seed)
    prm.relative_gap_limit = options.gap_limit
    prm.log_search_progress = options.verbose
    if options.deterministic:
        # Interleaved search does not depend on thread timing: a solve that ends before the
        # time limit (proven optimum) gives the same answer every run.  A wall-clock limit
        # can still cut it at a different point, as with any solver's time limit.
        prm.interleave_search = True
        prm.interleave_batch_size = prm.num_workers  # short batches: little waiting once a worker is done
    # CP-SAT's "fixed" worker branches on the start times' values, one literal per value tried: on a
    # sliced segment in a fine time unit (domains up to 2^32) it made 64,000 Booleans and ran 87 s of
    # wall time for 0.8 s of deterministic time, the limit meant to bound it; without it the same solve
    # is proven in 6.6 s (YOLOv5n int8's head, 200 crossbars / 1000 ns).  The other workers search.
    prm.ignore_subsolvers.append("fixed")
    for key, value in (options.parameters or {}).items():
        if isinstance(value, list):
            getattr(prm, key).extend(value)
        else:
            setattr(prm, key, value)


def solve_cpsat(problem: PlacementProblem, options: CpSatOptions = CpSatOptions(),  # noqa: B008 (frozen)
                *, warm_start: Schedule | None = None, lower_bound_ns: float = 0.0) -> CpSatRun:
    """Build and solve the CP-SAT model; the schedule returned is re-timed in real ns.

    ``lower_bound_ns``: a proven lower bound on the optimum from elsewhere (the
    bottleneck segments), a row of the model (:func:`~.model.build_model`); the
    reported bound is the larger of the two.
    """
    begin = time.perf_counter()
    warm_start = _warm_start(problem, options, warm_start)
    warm_at = None if warm_start is None else (time.perf_counter() - begin, warm_start.makespan_ns)
    model = _build(problem, options, warm_start, lower_bound_ns)
    proto = model.m.Proto()
    n_vars, n_cons = len(proto.variables), len(proto.constraints)
    code, solver, bound_units, trace = _search(model, options, begin)
    elapsed = time.perf_counter() - begin
    if code == cp_model.MODEL_INVALID:  # pragma: no cover - a bug in this module
        raise RuntimeError(f"CP-SAT rejected the model: {model.m.Validate()}")
    schedule = _solution(model, solver) if code in (cp_model.OPTIMAL, cp_model.FEASIBLE) else warm_start
    bound_ns = bound_units * model.unit_ns if code in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN) else 0.0
    if not model.exact:
        bound_ns *= 1.0 - 1e-15  # units -> ns rounded down, so that it stays a lower bound
    bound_ns = max(0.0, bound_ns)  # (exact units are powers of two: the product is exact)
    status = STATUS_NO_SOLUTION
    if schedule is not None:
        if warm_start is not None and warm_start.makespan_ns < schedule.makespan_ns:
            schedule = warm_start  # re-timing in real ns can reorder ties: keep the better
        bound_ns = min(max(bound_ns, lower_bound_ns), schedule.makespan_ns)
        status = _status(code, schedule.makespan_ns, bound_ns, options, model.unit_ns)
    outcome = BackendOutcome(
        solver="cpsat", status=status,
        on_host=None if schedule is None else schedule.on_host,
        start_ns=None if schedule is None else schedule.start_ns,
        host_order=None if schedule is None else tuple(host_order_by_start(schedule)),
        objective_ns=math.inf if schedule is None else schedule.makespan_ns,
        bound_ns=bound_ns, time_s=elapsed, n_variables=n_vars, n_constraints=n_cons)
    log.info("cp-sat %s: %.6g ns, bound %.6g ns, %.2f s, %d vars, %d constraints", status,
             outcome.objective_ns, bound_ns, elapsed, n_vars, n_cons)
    return CpSatRun(outcome, schedule, model.unit_ns, model.exact, trace if options.record else [], warm_at)


def _search(model: CpSatModel, options: CpSatOptions, begin: float
            ) -> tuple[int, cp_model.CpSolver, float, list[tuple[float, float]]]:
    """Run CP-SAT (with the bound worker beside it if asked); (status code, solver, bound in units, trace)."""
    remaining = max(0.05, options.time_limit_s - (time.perf_counter() - begin))
    pair = options.bound_worker and not options.plain and options.threads >= 2
    solver = cp_model.CpSolver()
    _configure(solver, options, options.threads - 1 if pair else options.threads, remaining)
    if pair:
        code, solver, bound_units, trace = _solve_with_bound_worker(model, solver, options, remaining, begin)
    else:
        cb = _Incumbents(begin, model.unit_ns) if options.record else None
        code = solver.Solve(model.m, cb)
        bound_units = solver.BestObjectiveBound()
        trace = cb.trace if cb else []
    if code == cp_model.INFEASIBLE:
        # Impossible (all on the host is always a solution): a solver failure.  CP-SAT's
        # presolve is where such failures were seen; solve again without it.
        log.warning("cp-sat called a feasible model infeasible; solving again without presolve")
        remaining = max(0.05, options.time_limit_s - (time.perf_counter() - begin))
        solver = cp_model.CpSolver()
        _configure(solver, options, options.threads, remaining)
        solver.parameters.cp_model_presolve = False
        code = solver.Solve(model.m)
        bound_units = solver.BestObjectiveBound() if code != cp_model.INFEASIBLE else 0.0
        code = cp_model.UNKNOWN if code == cp_model.INFEASIBLE else code
    return code, solver, bound_units, trace


def _solution(model: CpSatModel, solver: cp_model.CpSolver) -> Schedule:
    """The solver's placement and host order, re-timed with the real times."""
    n = model.n
    on_host = tuple(bool(solver.Value(model.x[v])) for v in range(n))
    starts = [solver.Value(model.s[v]) for v in range(n)]
    # Ties by finish, then index: a zero-length host operator that starts with a longer one ran first.
    order = sorted((v for v in range(n) if on_host[v]), key=lambda v: (starts[v], starts[v] + model.host[v], v))
    return simulate(model.problem, on_host, order)


def _status(code: int, makespan_ns: float, bound_ns: float, options: CpSatOptions, unit_ns: float) -> str:
    """Optimal only when the real gap (rounding included) closes; CP-SAT's code alone is not enough."""
    gap_limit = options.gap_limit
    true_gap = (makespan_ns - bound_ns) / makespan_ns if makespan_ns > 0 else 0.0
    if code == cp_model.OPTIMAL and true_gap <= max(gap_limit, 1e-9):
        return STATUS_OPTIMAL if options.mip_gap is None or true_gap <= 1e-9 else STATUS_GAP_LIMIT
    if code == cp_model.OPTIMAL:
        log.info("cp-sat: optimal in model units, real gap %.3g after rounding to %.3g ns", true_gap, unit_ns)
        return STATUS_GAP_LIMIT
    return STATUS_TIME_LIMIT


def _solve_with_bound_worker(model: CpSatModel, main: cp_model.CpSolver, options: CpSatOptions, seconds: float,
                             begin: float) -> tuple[int, cp_model.CpSolver, float, list[tuple[float, float]]]:
    """Solve the model with ``main`` and, beside it on one more thread, a bound worker.

    The bound worker is CP-SAT's LB-tree search (``optimize_with_lb_tree_search``,
    one thread): it raises the proven lower bound much faster than the default
    interleaved portfolio on these models.  Exactness: both solve the same model,
    so each proven bound is a lower bound of its optimum and the larger of the two
    is one too; every solution either returns is a solution of the model.  The
    pair stops when one proves its optimum alone or when the best solution of
    either meets the best bound of either within the gap limit (CP-SAT's own
    relative gap).  Returns (status code, the solver holding the best solution,
    the best bound in units, merged incumbent trace).

    Determinism: the solution reported is the main solver's unless the bound
    worker's is strictly better or the bound worker proved optimality alone.
    A solve proven optimal always reports the optimal makespan and bound; which
    of two equally good schedules is returned can depend on which thread
    proves it first, so this is opt-in (``bound_worker=True``).
    """
    m, gap_limit = model.m, options.gap_limit
    side = cp_model.CpSolver()
    _configure(side, options, 1, seconds)
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

    cb, side_cb = _Incumbents(begin, model.unit_ns, on_solution), _Incumbents(begin, model.unit_ns, on_solution)
    main.best_bound_callback = on_bound
    side.best_bound_callback = on_bound
    result: dict = {}

    def run_side() -> None:
        result["code"] = side.Solve(m, side_cb)
        if result["code"] in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
            main.StopSearch()

    thread = threading.Thread(target=run_side, name="cpsat-bound", daemon=True)
    thread.start()
    code = main.Solve(m, cb)
    if code in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        side.StopSearch()
    thread.join()
    side_code = result.get("code", cp_model.UNKNOWN)
    trace = sorted(cb.trace + side_cb.trace)
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


@dataclass(frozen=True)
class FewestCrossbars:
    """The outcome of :func:`solve_fewest_crossbars`."""

    schedule: Schedule
    """A schedule no longer (in model units) than the warm start, re-timed in real ns."""
    used: int
    """Its crossbars."""
    proven: bool
    """No schedule within that span uses fewer crossbars."""


def solve_fewest_crossbars(problem: PlacementProblem, options: CpSatOptions, warm_start: Schedule) -> FewestCrossbars:
    """Among the schedules whose span (in model units) is at most ``warm_start``'s, one with the
    fewest crossbars on the CIM (the second phase of a front descent, :mod:`.segments`).

    The model is :func:`_build`'s with T's domain capped at the warm start's floored span (every
    row of it holds for every schedule with ``T <= UB``) and the crossbars used as the objective;
    the warm start is its hint.  The schedule returned is the solver's placement and host order
    re-timed in real ns, or the warm start when the solver found nothing better.
    """
    begin = time.perf_counter()
    model = _build(problem, dataclasses.replace(options, plain=False), warm_start, 0.0)
    cim_able = [v for v in range(problem.n) if model.capable[v] and problem.crossbars[v] > 0]
    total = sum(problem.crossbars[v] for v in cim_able)
    used = total - cp_model.LinearExpr.WeightedSum([model.x[v] for v in cim_able],
                                                   [problem.crossbars[v] for v in cim_able])
    model.m.ClearObjective()
    model.m.Minimize(used)
    warm_used = sum(problem.crossbars[v] for v in cim_able if not warm_start.on_host[v])
    if model.hint is None or not cim_able:
        return FewestCrossbars(warm_start, warm_used, not cim_able)
    solver = cp_model.CpSolver()
    _configure(solver, dataclasses.replace(options, mip_gap=0.0), options.threads,
               max(0.05, options.time_limit_s - (time.perf_counter() - begin)))
    code = solver.Solve(model.m)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return FewestCrossbars(warm_start, warm_used, False)
    schedule = _solution(model, solver)
    found = int(round(solver.ObjectiveValue()))
    if found >= warm_used:
        return FewestCrossbars(warm_start, warm_used, code == cp_model.OPTIMAL)
    return FewestCrossbars(schedule, found, code == cp_model.OPTIMAL)
