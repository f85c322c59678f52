"""The slicing step of the driver: after the whole-operator solve, solve again with slicing options.

:func:`place_sliced` takes the whole-operator result (validated, never worse than
the baselines) and, when slicing is asked for (``SolveOptions.slicing``) and the
problem has options of those kinds, solves the sliced model
(:mod:`cimsplit.passes.placement.solvers.cpsat.sliced`, warm-started and bounded
by the whole-operator schedule), validates it on the expanded problem and keeps
it only when it is strictly shorter.  ``auto`` slices only when the budget binds
(:func:`budget_binds`).  Without slicing the result is the whole-operator one,
unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from cimsplit.errors import CimsplitError
from cimsplit.passes.placement.options import SLICING_CHOICES, SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import PlacementResult, Schedule, SolverStats
from cimsplit.passes.placement.slicing import KINDS, with_kinds
from cimsplit.passes.placement.validate import validate

__all__ = ["budget_binds", "place_sliced", "slicing_kinds"]

log = logging.getLogger(__name__)


def slicing_kinds(choice: str) -> tuple[str, ...]:
    """The slicing kinds ``--slicing choice`` may use (``auto``: all of them, when the budget binds)."""
    if choice not in SLICING_CHOICES:
        raise CimsplitError(f"unknown slicing {choice!r}", hint=f"choose one of {', '.join(SLICING_CHOICES)}")
    return {"off": (), "ks": ("ks",), "ofm": ("ofm",)}.get(choice, KINDS)


def budget_binds(problem: PlacementProblem, schedule: Schedule) -> bool:
    """Whether the whole-operator schedule leaves on the host a CIM-capable operator that would run
    faster on the CIM (T_acc < T_host) but needs more crossbars than the budget has left."""
    left = problem.budget - sum(c for c, h in zip(problem.crossbars, schedule.on_host) if not h)
    return any(schedule.on_host[v] and problem.capable(v) and problem.t_cim_ns[v] < problem.t_host_ns[v]  # type: ignore[operator]
               and problem.crossbars[v] > left for v in range(problem.n))


def place_sliced(problem: PlacementProblem, options: SolveOptions, whole: PlacementResult,
                 time_left_s: float) -> PlacementResult:
    """``whole`` (the result on ``problem`` without slicings), or a strictly better validated sliced one."""
    sliced_problem = with_kinds(problem, slicing_kinds(options.slicing))
    if not sliced_problem.slicings:
        return whole
    if options.slicing == "auto" and not budget_binds(whole.problem, whole.schedule):
        log.info("slicing auto: the budget does not bind, no slicing")
        return whole
    from cimsplit.passes.placement.solvers.cpsat.sliced import solve_sliced  # ortools is imported lazily

    outcome = solve_sliced(sliced_problem, replace(options, time_limit_s=max(time_left_s, 1.0)), whole.schedule)
    stats = whole.solver
    note = (f"slicing {options.slicing}: cpsat {outcome.status} in {outcome.time_s:.2f} s "
            f"({outcome.n_variables} variables, {outcome.n_constraints} constraints)")
    if outcome.schedule is None or not outcome.schedule.slicing or \
            outcome.schedule.makespan_ns >= whole.schedule.makespan_ns * (1 - 1e-9):
        kept = replace(stats, reason=f"{stats.reason}; {note}: no slicing shortens the schedule",
                       time_s=stats.time_s + outcome.time_s)
        return replace(whole, solver=kept)
    schedule = validate(sliced_problem, outcome.schedule.on_host, slicing=outcome.schedule.slicing,
                        host_order=outcome.host_order, objective_ns=outcome.schedule.makespan_ns,
                        source="cpsat (slicing)")
    bound_ns = min(outcome.bound_ns, schedule.makespan_ns)
    gap = (schedule.makespan_ns - bound_ns) / schedule.makespan_ns if schedule.makespan_ns > 0 else 0.0
    sliced_stats = SolverStats(
        name="cpsat", status=outcome.status, objective_ns=schedule.makespan_ns, bound_ns=bound_ns, gap=gap,
        time_s=stats.time_s + outcome.time_s, n_operators=problem.n, n_variables=outcome.n_variables,
        n_constraints=outcome.n_constraints, reason=f"{stats.reason}; {note}")
    return PlacementResult(sliced_problem, schedule, sliced_stats, whole.baselines, whole.warnings)
