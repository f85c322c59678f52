"""The throughput pass: min period of a stream, optionally under a frame-latency or frames-in-flight bound.

:func:`place_throughput` solves the unbounded MILP
(:func:`~cimsplit.passes.placement.stream.milp.build_period_milp`), builds its
schedule by the modulo construction and, when ``max_latency_ns`` or
``frames_in_flight`` is given and that schedule breaks it, solves the bounded
MILP (the shifted-copies class exactly; the unbounded optimum is its lower
bound).  Every schedule returned has passed the periodic validator.
:func:`latency_plan_stream` gives a latency placement its own minimum period.
"""

from __future__ import annotations

import logging
import math
import time

from cimsplit.errors import CimsplitError
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import PlacementResult, Schedule, SolverStats
from cimsplit.passes.placement.solvers.backend import (
    STATUS_INFEASIBLE,
    STATUS_OPTIMAL,
    STATUS_TIME_LIMIT,
    BackendMissing,
    BackendOutcome,
    BackendUnavailable,
    get_backend,
)
from cimsplit.passes.placement.solvers.milp import MilpModel
from cimsplit.passes.placement.stream.compact import compact_stream
from cimsplit.passes.placement.stream.construct import (
    bounded_heuristic,
    modulo_schedule,
    schedule_from_starts,
    tighten,
)
from cimsplit.passes.placement.stream.milp import build_bounded_milp, build_period_milp, task_name
from cimsplit.passes.placement.stream.tasks import PeriodicSchedule, resource_bound_ns, task_graph
from cimsplit.passes.placement.stream.validate import validate_stream
from cimsplit.passes.placement.validate import InternalError

__all__ = ["place_throughput", "latency_plan_stream", "check_stream_options"]

log = logging.getLogger(__name__)

_REL = 1e-6


def check_stream_options(options: SolveOptions) -> None:
    """Refuse a bad objective or bound (a user error)."""
    if options.objective not in ("latency", "throughput"):
        raise CimsplitError(f"unknown objective {options.objective!r}", hint="choose latency or throughput")
    t = options.max_latency_ns
    if t is not None and not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
        raise CimsplitError(f"the maximum latency must be a positive time, got {t!r}")
    k = options.frames_in_flight
    if k is not None and not (isinstance(k, int) and not isinstance(k, bool) and k >= 1):
        raise CimsplitError(f"the frames in flight must be a whole number >= 1, got {k!r}")
    if options.objective == "latency" and (t is not None or k is not None):
        raise CimsplitError("--max-latency and --frames-in-flight bound a stream", hint="add --objective throughput")


def latency_plan_stream(problem: PlacementProblem, on_host: tuple[bool, ...]) -> PeriodicSchedule:
    """The minimum period of the placement ``on_host`` (its resource bound) and its modulo-constructed schedule."""
    period = resource_bound_ns(task_graph(problem, tuple(on_host)))
    return validate_stream(problem, modulo_schedule(problem, tuple(on_host), period), source="latency plan stream",
                           slack_free=False)


def _candidates(solver: str) -> tuple[list[str], list[str]]:
    if solver in ("auto", "gurobi"):
        return ["gurobi", "highs"], []
    if solver == "cpsat":
        return ["highs"], ["--solver cpsat has no throughput model: solved the stream MILP with HiGHS"]
    return ["highs"], []


def _solve(problem: PlacementProblem, model: MilpModel, options: SolveOptions) -> tuple[BackendOutcome, str, list[str]]:
    candidates, warnings = _candidates(options.solver)
    reasons: list[str] = []
    for name in candidates:
        try:
            outcome = get_backend(name).solve(problem, model, options, None)
        except BackendUnavailable as exc:
            if name == candidates[-1] or (options.solver == name and isinstance(exc, BackendMissing)):
                raise
            reasons.append(f"{name} skipped: {exc.message}")
            if options.solver == name:
                warnings.append(f"--solver {name} could not run ({exc.message}); solved with HiGHS instead")
            continue
        reason = f"stream MILP on {outcome.solver}" + (f" ({'; '.join(reasons)})" if reasons else "")
        return outcome, reason, warnings
    raise AssertionError("no candidate back end")


def _schedule_of(stream: PeriodicSchedule, problem: PlacementProblem) -> Schedule:
    """The frame S as a latency-side :class:`Schedule` (what annotate, split and trace read)."""
    start = [0.0] * problem.n
    finish = [0.0] * problem.n
    for task in stream.tasks:
        if task.operator is not None:
            start[task.operator], finish[task.operator] = task.start_ns, task.finish_ns
    return Schedule(stream.on_host, tuple(start), tuple(finish), stream.latency_ns)


def _meets(stream: PeriodicSchedule, options: SolveOptions) -> bool:
    t, k = options.max_latency_ns, options.frames_in_flight
    tol = _REL * max(1.0, stream.latency_ns)
    if t is not None and stream.latency_ns > t + tol:
        return False
    return k is None or stream.latency_ns <= k * stream.period_ns + tol


def _bounded(problem: PlacementProblem, options: SolveOptions, lower_ns: float, placements: list[tuple[bool, ...]]
             ) -> tuple[PeriodicSchedule, BackendOutcome, str, list[str]]:
    t, k = options.max_latency_ns, options.frames_in_flight
    cpu_only = sum(problem.t_host_ns)
    upper = cpu_only if t is None or cpu_only <= t else t  # CPU-only meets the bounds, or P <= L <= T
    if t is not None:
        upper = min(upper, t)
    incumbent = bounded_heuristic(problem, placements, t, k)
    if incumbent is not None:  # the MILP only has to beat it: a tighter P_ub and big-Ms
        upper = min(upper, incumbent.period_ns)
    if lower_ns > upper * (1 + _REL):
        raise CimsplitError(f"no stream schedule meets --max-latency {t:g} ns: every placement keeps a resource "
                            f"busy for at least {lower_ns:.6g} ns per frame, so one frame takes at least that long",
                            hint="raise --max-latency")
    built = build_bounded_milp(problem, period_lower_ns=lower_ns, period_upper_ns=max(upper, lower_ns),
                               max_latency_ns=t, frames_in_flight=k)
    outcome, reason, warnings = _solve(problem, built.model, options)
    bounds = ", ".join(b for b in (f"--max-latency {t:.6g} ns" if t is not None else "",
                                   f"--frames-in-flight {k}" if k is not None else "") if b)
    if incumbent is not None and (not outcome.has_solution or outcome.status == STATUS_INFEASIBLE
                                  or outcome.objective_ns >= incumbent.period_ns * (1 - _REL)):
        # nothing better than the incumbent (infeasible: P_ub = the incumbent's period was not beaten)
        status = STATUS_OPTIMAL if outcome.status in (STATUS_OPTIMAL, STATUS_INFEASIBLE) else STATUS_TIME_LIMIT
        done = BackendOutcome(outcome.solver, status, None, None, None, incumbent.period_ns,
                              incumbent.period_ns if status == STATUS_OPTIMAL else outcome.bound_ns,
                              outcome.time_s, outcome.n_variables, outcome.n_constraints)
        return incumbent, done, reason + "; the first-fit incumbent was not beaten", warnings
    if outcome.status == STATUS_INFEASIBLE:
        raise CimsplitError(f"no stream schedule meets {bounds}", hint="raise the bound")
    if not outcome.has_solution:
        raise CimsplitError(f"no stream schedule meeting {bounds} was found within the time limit "
                            f"({outcome.status})", hint="raise --time-limit or loosen the bound")
    on_host = tuple(outcome.on_host)  # type: ignore[arg-type]
    specs = task_graph(problem, on_host)
    starts = dict(zip((task_name(problem, task.key, on_host) for task in built.tasks), outcome.start_ns or ()))
    period = max(outcome.objective_ns, resource_bound_ns(specs))
    raw = schedule_from_starts(problem, on_host, specs, [starts[s.name] for s in specs], period)
    stream = validate_stream(problem, tighten(problem, raw), source=f"{outcome.solver} stream", slack_free=False)
    if not _meets(stream, options):
        raise InternalError(f"{outcome.solver}: the bounded stream schedule breaks {bounds} "
                            f"(latency {stream.latency_ns:.6g} ns, period {stream.period_ns:.6g} ns)")
    return stream, outcome, reason, warnings


def place_throughput(problem: PlacementProblem, options: SolveOptions, baselines: dict[str, Schedule]
                     ) -> PlacementResult:
    """Minimum-period placement and its validated periodic schedule (module docstring)."""
    check_stream_options(options)
    begin = time.perf_counter()
    model = build_period_milp(problem)
    outcome, reason, warnings = _solve(problem, model, options)
    if not outcome.has_solution:
        raise InternalError(f"{outcome.solver} found no placement for the period MILP ({outcome.status}), "
                            "but CPU-only is feasible")
    on_host = tuple(outcome.on_host)  # type: ignore[arg-type]
    period = resource_bound_ns(task_graph(problem, on_host))
    if period > outcome.objective_ns * (1 + _REL) + 1e-9:
        raise InternalError(f"{outcome.solver}: period {outcome.objective_ns:.6g} ns, but the placement needs "
                            f"{period:.6g} ns")
    stream = compact_stream(problem, modulo_schedule(problem, on_host, period))
    lower = min(outcome.bound_ns, period) if outcome.status == STATUS_OPTIMAL else max(outcome.bound_ns, 0.0)
    n_vars, n_rows, status, name = model.n_variables, model.n_constraints, outcome.status, outcome.solver
    if not _meets(stream, options):
        log.info("the minimum-period schedule (latency %.6g ns) breaks the bound: solving the bounded model",
                 stream.latency_ns)
        placements = [on_host, *(b.on_host for b in baselines.values())]
        stream, outcome, reason_b, more = _bounded(problem, options, max(lower, 1e-9 * period) if period else 0.0,
                                                   placements)
        reason, warnings = f"{reason}; bounded {reason_b}", [*warnings, *more]
        n_vars, n_rows, status, name = outcome.n_variables, outcome.n_constraints, outcome.status, outcome.solver
        lower = max(lower, min(outcome.bound_ns, stream.period_ns))
    validate_stream(problem, stream, source="throughput result", slack_free=False)
    bound = min(lower, stream.period_ns) if status == STATUS_OPTIMAL else lower
    gap = max(0.0, (stream.period_ns - bound) / stream.period_ns) if stream.period_ns > 0 else 0.0
    stats = SolverStats(name=name, status=status, objective_ns=stream.period_ns, bound_ns=bound, gap=gap,
                        time_s=time.perf_counter() - begin, n_operators=problem.n, n_variables=n_vars,
                        n_constraints=n_rows, reason=f"objective throughput: {reason}")
    return PlacementResult(problem, _schedule_of(stream, problem), stats, baselines, tuple(warnings),
                           objective="throughput", stream=stream)
