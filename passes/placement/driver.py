"""The partitioning pass driver: baselines, one ILP solve, validation, fallbacks.

``partition`` never returns a schedule worse than the best baseline, and never
an unvalidated one: every result is re-timed by the independent simulator.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from cimsplit.errors import CimsplitError
from cimsplit.passes.placement import dag
from cimsplit.passes.placement.baselines import all_baselines
from cimsplit.passes.placement.heuristics import best_heuristic, heuristic_budget_s
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem, SliceOption, TensorTransfer
from cimsplit.passes.placement.result import PlacementResult, Schedule, SolverStats
from cimsplit.passes.placement.simulate import host_order_by_start
from cimsplit.passes.placement.sliced_place import place_sliced, whole_step_options
from cimsplit.passes.placement.solvers.backend import (
    BACKENDS,
    STATUS_GAP_LIMIT,
    STATUS_INFEASIBLE,
    STATUS_NO_SOLUTION,
    STATUS_OPTIMAL,
    STATUS_TIME_LIMIT,
    BackendMissing,
    BackendOutcome,
    BackendUnavailable,
    get_backend,
)
from cimsplit.passes.placement.solvers.milp import MilpModel, build_milp
from cimsplit.passes.placement.validate import InternalError, validate

if TYPE_CHECKING:  # OR-Tools is optional: imported where it is used
    from cimsplit.passes.placement.solvers.cpsat.segments import Segments

__all__ = ["BRANCHY_PAIRS_PER_OPERATOR", "MILP_SOLVERS", "SOLVER_CHOICES", "auto_candidates", "place", "problem_from_costs"]

log = logging.getLogger(__name__)

MILP_SOLVERS = ("gurobi", "highs")
"""Backends that solve :class:`MilpModel`; others (cpsat) build their own model."""
SOLVER_CHOICES = ("auto", *BACKENDS)

BRANCHY_PAIRS_PER_OPERATOR = 1.0
"""``--solver auto`` picks CP-SAT when incomparable pairs / operators reaches this.

Incomparable pairs (eq. 10; every operator can run on the host, so every such
pair may need serializing) are what the MILP pays for: one binary o_uv and two
big-M rows each, whose LP relaxation is weak.  CP-SAT handles them with one
no-overlap constraint.  Measured on the zoo (int8, bench/table1_scale.py):
ResNet-18 0.15 pairs per operator (6 / 40), ResNet-50 0.13 (12 / 89),
MobileNetV2 0 (65 operators, no branch holds an operator) -- linear graphs,
which Gurobi solves instantly; YOLOv5n 7.2 (883 / 122) and the random
detector DAGs 7-8 and Inception DAGs 2.5, on which HiGHS finds no solution in
30 s while CP-SAT proves YOLOv5n optimal in < 0.4 s.  1 per operator (as many
order variables as placement variables) sits far from both groups."""


def problem_from_costs(workload, costs, slices=()) -> PlacementProblem:
    """The plain cost tables of a costed workload (operators in workload order; budget = C).

    ``workload`` is a :class:`cimsplit.compiler.workload.Workload`, ``costs`` a
    :class:`cimsplit.compiler.costs.Costs`.  Several tensors on one edge add up.
    ``slices``: slicing candidates (:class:`cimsplit.compiler.slicing.SliceCost`),
    the operators' :class:`SliceOption` lists.
    """
    names = tuple(op.name for op in workload.operators)
    index = {name: i for i, name in enumerate(names)}
    by_name = {c.name: c for c in costs.operators}
    missing = [name for name in names if name not in by_name]
    if missing:
        raise CimsplitError(f"no cost for operator {missing[0]!r}", hint="costs were built for another workload")
    op_costs = [by_name[name] for name in names]
    edge_time: dict[tuple[int, int], float] = {}
    for edge in costs.edges:
        u, v = index[edge.src], index[edge.dst]
        edge_time[(u, v)] = edge_time.get((u, v), 0.0) + edge.t_transfer_ns
    for edge in workload.edges:  # an edge the cost model left out still orders its operators
        edge_time.setdefault((index[edge.src], index[edge.dst]), 0.0)
    groups: dict[tuple[int, tuple[str, ...]], tuple[list[int], float]] = {}
    for edge in workload.edges:  # the stream model's bus: one transfer per tensor (and destination device)
        u, v = index[edge.src], index[edge.dst]
        key = (u, tuple(edge.tensors) or (f"{edge.src}:{edge.dst}",))
        dsts, t = groups.setdefault(key, ([], 0.0))
        groups[key] = ([*dsts, v], max(t, edge_time[(u, v)]))
    tensors = tuple(TensorTransfer("+".join(key[1]), key[0], tuple(dsts), t)
                    for key, (dsts, t) in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[1][0])))
    t_in = [0.0] * len(names)
    t_out = [0.0] * len(names)
    writes = [op.graph_output_elements > 0 for op in workload.operators]
    for io in costs.io_transfers:
        v = index[io.operator]
        if io.direction == "in":
            t_in[v] += io.t_transfer_ns
        else:
            t_out[v] += io.t_transfer_ns
            writes[v] = True
    preds: list[list[int]] = [[] for _ in names]
    for u, v in sorted(edge_time):
        preds[v].append(u)
    options: list[list[SliceOption]] = [[] for _ in names]
    for sc in slices:
        v = index[sc.operator]
        options[v].append(SliceOption(
            kind=sc.kind, split=int(sc.split), t_host_ns=float(sc.t_host_ns), t_cim_ns=float(sc.t_cim_ns),
            crossbars=int(sc.crossbars), t_join_ns=float(sc.t_join_ns), t_back_ns=float(sc.t_back_ns),
            in_cim_ns=() if sc.t_in_cim_ns is None else tuple((u, float(sc.t_in_cim_ns)) for u in preds[v]),
            in_host_ns=() if sc.t_in_host_ns is None else tuple((u, float(sc.t_in_host_ns)) for u in preds[v]),
            t_graph_in_ns=float(sc.t_graph_in_ns)))
    return PlacementProblem(
        slicings=tuple(tuple(o) for o in options) if slices else (),
        names=names,
        t_host_ns=tuple(float(c.t_host_ns) for c in op_costs),
        t_cim_ns=tuple(None if c.t_cim_ns is None else float(c.t_cim_ns) for c in op_costs),
        crossbars=tuple(int(c.crossbars or 0) for c in op_costs),
        edges=tuple((u, v, t) for (u, v), t in sorted(edge_time.items())),
        budget=int(costs.hardware.crossbars),
        t_in_ns=tuple(t_in),
        t_out_ns=tuple(t_out),
        writes_output=tuple(writes),
        tensors=tensors,
    )


def _check_arguments(problem: PlacementProblem, options: SolveOptions) -> None:
    solver, time_limit_s, mip_gap = options.solver, options.time_limit_s, options.mip_gap
    if solver not in SOLVER_CHOICES:
        raise CimsplitError(f"unknown solver {solver!r}", hint=f"choose one of {', '.join(SOLVER_CHOICES)}")
    if not (isinstance(time_limit_s, (int, float)) and math.isfinite(time_limit_s) and time_limit_s > 0):
        raise CimsplitError(f"the time limit must be a positive number of seconds, got {time_limit_s!r}")
    if mip_gap is not None and not (math.isfinite(mip_gap) and 0 <= mip_gap < 1):
        raise CimsplitError(f"the MIP gap must be in [0, 1), got {mip_gap!r}")
    if problem.budget < 0:
        raise CimsplitError(f"the crossbar budget must be zero or more, got {problem.budget}")
    for v in range(problem.n):
        values = [problem.t_host_ns[v], problem.t_in_ns[v], problem.t_out_ns[v]]
        if problem.t_cim_ns[v] is not None:
            values.append(problem.t_cim_ns[v])  # type: ignore[arg-type]
        if any(not math.isfinite(t) or t < 0 for t in values) or problem.crossbars[v] < 0:
            raise CimsplitError(f"operator {problem.names[v]!r} has a negative or non-finite cost")
    if any(not math.isfinite(t) or t < 0 for _, _, t in problem.edges):
        raise CimsplitError("an edge has a negative or non-finite transfer time")


def _gap(objective_ns: float, bound_ns: float) -> float:
    """Relative MIP gap (z_inc - z_bound) / |z_inc| (section II-B)."""
    if objective_ns <= 0:
        return 0.0
    return max(0.0, (objective_ns - bound_ns) / objective_ns)


def auto_candidates(problem: PlacementProblem) -> tuple[list[str], str]:
    """``--solver auto``'s back ends to try in order, and why (the start of the reason line).

    Branchy graph (incomparable pairs >= :data:`BRANCHY_PAIRS_PER_OPERATOR` x operators):
    CP-SAT.  A nearly linear graph that splits exactly at bottlenecks into segments
    (:func:`~.solvers.cpsat.staged.decomposes`): CP-SAT too, which solves the segments one by one
    and combines them exactly over the budget -- Gurobi's one big-M model of a long chain proves
    slowly (ViT-Tiny int8, 404 operators in 270 segments: 0.83 % gap after 60 s, where CP-SAT's
    segments prove it in 0.1 s).  Otherwise Gurobi (DESIGN §4: first choice) when it imports, is
    licensed and the model fits its licence -- the driver learns the last two by trying -- else
    HiGHS.  CP-SAT missing falls through to the MILP order.
    """
    pairs = len(dag.incomparable_pairs(problem))
    shape = f"{pairs} incomparable operator pairs for {problem.n} operators"
    if problem.n and pairs >= BRANCHY_PAIRS_PER_OPERATOR * problem.n:
        return ["cpsat", "gurobi", "highs"], f"branchy graph ({shape}, >= {BRANCHY_PAIRS_PER_OPERATOR:g} per operator)"
    linear = f"nearly linear graph ({shape}, < {BRANCHY_PAIRS_PER_OPERATOR:g} per operator)"
    seg = _bottleneck_segments(problem)
    if seg is not None:
        parts = sum(1 for m in seg.members if m)
        return ["cpsat", "gurobi", "highs"], (f"{linear} that splits at {len(seg.bottlenecks) - 2} bottlenecks into "
                                              f"{parts} segments (largest {seg.largest} operators)")
    return ["gurobi", "highs"], linear


def _bottleneck_segments(problem: PlacementProblem) -> Segments | None:
    """The problem's exact bottleneck segments when CP-SAT's decomposition applies to them, else None
    (also when OR-Tools is not installed)."""
    try:
        from cimsplit.passes.placement.solvers.cpsat.staged import decomposes, split_at_bottlenecks
    except ImportError:
        return None
    seg = split_at_bottlenecks(problem)
    return seg if seg.exact and decomposes(seg) else None


def _described(name: str) -> str:
    if name in ("heuristic", "incumbent"):
        return f"{name} schedule"
    return f"best baseline ({name})"


def place(problem: PlacementProblem, options: SolveOptions = SolveOptions(),  # noqa: B008 (frozen)
          *, incumbent: Schedule | None = None, stream: bool = True) -> PlacementResult:
    """Place every operator on the host or the CIM with minimal makespan (section IV-B).

    ``options.solver``: ``auto`` (see :func:`auto_candidates`: CP-SAT on branchy graphs,
    else Gurobi when it imports, is licensed and the model fits the licence, else
    HiGHS), ``gurobi``, ``highs`` or ``cpsat``.  ``options.plain``
    solves the paper's formulation as written (no cuts or tightenings).
    The result's schedule is validated, and never worse than the best baseline.
    ``options.objective == "throughput"`` minimizes a stream's period instead
    (:func:`cimsplit.passes.placement.stream.driver.place_throughput`); a latency
    result carries its placement's minimum period too (``result.stream``).
    ``options.warm_start=False`` solves cold (no baseline handed to the solver, no
    baseline upper bound in the model): to measure the solver on its own.

    Warm start (``warm_start and not plain``): the better (by makespan) of the best
    baseline and :func:`best_heuristic` run for :func:`heuristic_budget_s`;
    its makespan is the MILP's ``T <= UB`` and it is every back end's starting
    incumbent or hint.  With ``plain`` the solver gets the best baseline as start
    only (the model has no UB).  The heuristic's time counts against the time
    limit and is included in ``SolverStats.time_s``.

    ``incumbent``: a feasible whole-operator schedule from elsewhere (a sweep's smaller crossbar
    budget); re-validated on ``problem``, it is the warm start when it beats the baselines and the
    heuristic.  ``options.lower_bound_ns``: a proven lower bound from elsewhere, a row of the
    model; the result's bound is at least this (and a solve whose gap it closes is optimal).
    ``stream=False`` leaves a latency result's ``stream`` out (None): a caller that may discard the
    schedule (the whole-operator step before slicing) computes it for the schedule it keeps.

    Slicing (TSO): when ``problem`` has slicing options, the whole-operator problem is
    solved first (as above, the options stripped; within half the limit when a sliced step
    follows, :func:`~.sliced_place.whole_step_options`), then :func:`place_sliced` may
    return a strictly shorter sliced schedule (``options.slicing``) in the rest of the limit.
    """
    from cimsplit.passes.placement.stream.driver import check_stream_options, latency_plan_stream, place_throughput

    if problem.slicings:
        stripped = replace(problem, slicings=())
        if options.objective != "latency":  # the stream model has no sliced parts: slicing is for latency
            return place(stripped, options, incumbent=incumbent)
        begin = time.perf_counter()
        whole = place(stripped, whole_step_options(problem, options), incumbent=incumbent, stream=False)
        left_s = options.time_limit_s - (time.perf_counter() - begin)
        final = place_sliced(problem, options, whole, left_s)
        if stream and final.schedule is whole.schedule:  # a sliced plan has no stream (its parts are not modeled)
            final = replace(final, stream=latency_plan_stream(final.problem, final.schedule.on_host))
        return final
    _check_arguments(problem, options)
    check_stream_options(options)
    baselines = _validated_baselines(problem)
    best_name = min(baselines, key=lambda k: (baselines[k].makespan_ns, list(baselines).index(k)))
    if problem.n == 0:
        stats = SolverStats("none", "optimal", 0.0, 0.0, 0.0, 0.0, 0, 0, 0, reason="empty workload: nothing to solve")
        return PlacementResult(problem, baselines[best_name], stats, baselines, (), objective=options.objective,
                               stream=latency_plan_stream(problem, baselines[best_name].on_host))
    if options.objective == "throughput":
        return place_throughput(problem, options, baselines)
    start, start_name, heuristic_s = _warm_start(problem, options, baselines[best_name], best_name)
    if incumbent is not None and not incumbent.slicing:
        given = validate(problem, incumbent.on_host, host_order=host_order_by_start(incumbent),
                         objective_ns=incumbent.makespan_ns, source="incumbent")
        if given.makespan_ns < start.makespan_ns:
            start, start_name = given, "incumbent"
    # The heuristic's clock guard is 3x its budget (<= 15 % of the limit): the solver keeps most of it.
    time_left_s = max(float(options.time_limit_s) - heuristic_s, 0.5 * options.time_limit_s)
    outcome, reason, warnings = _solve(problem, replace(options, time_limit_s=time_left_s), start)
    if outcome.status == STATUS_INFEASIBLE:
        raise InternalError(f"{outcome.solver} reports the model infeasible, but CPU-only is a feasible schedule")
    schedule, fallback = _checked_schedule(problem, outcome, start, start_name, options.time_limit_s)
    warnings += fallback
    # The solver's proven bound is a true lower bound also when the model carries T <= UB:
    # the optimum is <= UB, so the restricted model has the same optimum.
    bound_ns = min(outcome.bound_ns, start.makespan_ns) if outcome.bound_ns > 0 else 0.0
    bound_ns = min(max(bound_ns, options.lower_bound_ns), schedule.makespan_ns)
    status = outcome.status
    gap = _gap(schedule.makespan_ns, bound_ns)
    if status in (STATUS_TIME_LIMIT, STATUS_NO_SOLUTION) and gap <= options.effective_mip_gap:
        # closed by the given bound (options.lower_bound_ns)
        status = STATUS_OPTIMAL if options.mip_gap is None or gap <= 1e-9 else STATUS_GAP_LIMIT
    stats = SolverStats(
        name=outcome.solver,
        status=status,
        objective_ns=schedule.makespan_ns,
        bound_ns=bound_ns,
        gap=gap,
        time_s=outcome.time_s + heuristic_s,
        n_operators=problem.n,
        n_variables=outcome.n_variables,
        n_constraints=outcome.n_constraints,
        reason=reason,
    )
    for text in warnings:
        log.info("%s", text)  # returned in result.warnings; the CLI prints them
    return PlacementResult(problem, schedule, stats, baselines, tuple(warnings),
                           stream=latency_plan_stream(problem, schedule.on_host) if stream else None)


def _validated_baselines(problem: PlacementProblem) -> dict[str, Schedule]:
    baselines = all_baselines(problem)
    for name, schedule in baselines.items():
        validate(problem, schedule.on_host, host_order=None, start_ns=schedule.start_ns,
                 objective_ns=schedule.makespan_ns, source=f"baseline {name}")
    return baselines


def _warm_start(problem: PlacementProblem, options: SolveOptions, best: Schedule, best_name: str
                ) -> tuple[Schedule, str, float]:
    """(start schedule, its name, seconds the heuristic took): the better of ``best`` and the heuristic."""
    if not options.warm_start or options.plain:
        return best, best_name, 0.0
    begin = time.perf_counter()
    found = best_heuristic(problem, heuristic_budget_s(problem, options.time_limit_s), seed=0)
    heuristic_s = time.perf_counter() - begin
    found = validate(problem, found.on_host, host_order=None, start_ns=found.start_ns,
                     objective_ns=found.makespan_ns, source="heuristic")
    if found.makespan_ns < best.makespan_ns:
        return found, "heuristic", heuristic_s
    return best, best_name, heuristic_s


def _solve(problem: PlacementProblem, options: SolveOptions, start: Schedule) -> tuple[BackendOutcome, str, list[str]]:
    """Try the candidate back ends in order; (outcome, the reason line, warnings).

    A named solver that cannot run for licence reasons degrades to HiGHS (DESIGN §9);
    a named solver whose package is missing is an error.
    """
    solver, plain, warm_start = options.solver, options.plain, options.warm_start
    if solver == "auto":
        candidates, shape = auto_candidates(problem)
    else:
        candidates, shape = list(dict.fromkeys([solver, "highs"])), ""
    formulation: MilpModel | None = None
    reasons: list[str] = []
    warnings: list[str] = []
    outcome: BackendOutcome | None = None
    for name in candidates:
        try:
            backend = get_backend(name)
            if name in MILP_SOLVERS and formulation is None:
                upper_ns = start.makespan_ns if warm_start and not plain else None
                formulation = build_milp(problem, plain=plain, upper_bound_ns=upper_ns,
                                         lower_bound_ns=options.lower_bound_ns)
            outcome = backend.solve(problem, formulation if name in MILP_SOLVERS else None, options,
                                    start if warm_start else None)
        except BackendUnavailable as exc:
            if name == candidates[-1] or (solver != "auto" and isinstance(exc, BackendMissing)):
                raise
            reasons.append(f"{name} skipped: {exc.message}")
            log.info("solver %s unavailable: %s", name, exc.message)
            if solver != "auto":
                warnings.append(f"--solver {solver} could not run ({exc.message}); solved with HiGHS instead")
            continue
        break
    assert outcome is not None
    reason = _reason(solver, outcome, shape, reasons)
    log.info("%s", reason)
    return outcome, reason, warnings


def _reason(solver: str, outcome: BackendOutcome, shape: str, reasons: list[str]) -> str:
    """Why this back end ran (the plan's ``solver.reason``)."""
    if solver == "auto":
        why = [shape, *reasons]
        if outcome.solver == "gurobi":
            why.append("gurobipy is installed, licensed and the model fits its licence")
        reason = f"auto chose {outcome.solver}: {'; '.join(why)}"
    elif reasons:
        reason = f"requested {solver}, ran {outcome.solver}: {'; '.join(reasons)}"
    else:
        reason = f"requested with --solver {solver}"
    if outcome.detail:
        reason += f"; {outcome.detail}"
    return reason


def _checked_schedule(problem: PlacementProblem, outcome: BackendOutcome, start: Schedule, start_name: str,
                      time_limit_s: float) -> tuple[Schedule, list[str]]:
    """The outcome's schedule re-timed by the validator, or the start when it is worse or missing."""
    if not outcome.has_solution:
        return start, [f"{outcome.solver} found no solution ({outcome.status}) within {time_limit_s:g} s: "
                       f"returning the {_described(start_name)}"]
    schedule = validate(problem, outcome.on_host, start_ns=outcome.start_ns,  # type: ignore[arg-type]
                        host_order=outcome.host_order, objective_ns=outcome.objective_ns, source=outcome.solver)
    if schedule.makespan_ns > start.makespan_ns * (1 + 1e-9):
        return start, [f"{outcome.solver} stopped ({outcome.status}) with a schedule of {schedule.makespan_ns:.0f} ns, "
                       f"worse than the {_described(start_name)} ({start.makespan_ns:.0f} ns): returning that instead"]
    return schedule, []
