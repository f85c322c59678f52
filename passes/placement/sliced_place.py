"""The slicing step of the driver: after the whole-operator solve, the sliced problem, decided by proof.

:func:`place_sliced` takes the whole-operator result W (validated, never worse than
the baselines) and, when slicing is asked for (``SolveOptions.slicing``) and the
problem has options of those kinds whose CIM part fits the budget:

1. computes a cheap lower bound L of the sliced problem
   (:func:`~cimsplit.passes.placement.sliced_bound.sliced_lower_bound_ns`: host
   load over mode choices within the budget, critical path of shortest modes).
   If W's makespan is within the gap of L, W is optimal for the sliced problem
   too (its optimum is >= L and <= W, W being a feasible sliced schedule): no
   sliced solve is needed, and the reason says so.
2. Otherwise solves the sliced problem
   (:func:`~cimsplit.passes.placement.solvers.cpsat.sliced_staged.solve_sliced_staged`,
   warm-started and bounded by W) and keeps its schedule, validated on the
   expanded problem, when it is strictly shorter than W (one that slices nothing,
   on the whole-operator problem: W's step stops at a gap).

Either way the result carries the sliced problem's bound, gap and status:
``optimal`` iff the reported schedule's gap to a proven lower bound of the
sliced optimum is within the gap limit.  ``auto`` is ``all``: both slice
exactly when that is shorter (no heuristic decides it).  Without options (or
with ``off``) the result is the whole-operator one, unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from cimsplit.errors import CimsplitError
from cimsplit.passes.placement.options import SLICING_CHOICES, SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import PlacementResult, Schedule, SolverStats
from cimsplit.passes.placement.sliced_bound import sliced_lower_bound_ns
from cimsplit.passes.placement.slicing import KINDS, with_kinds
from cimsplit.passes.placement.validate import validate

__all__ = ["WHOLE_GAP", "WHOLE_SHARE", "fits", "place_sliced", "slicing_kinds", "whole_step_options"]

if TYPE_CHECKING:
    from cimsplit.passes.placement.solvers.cpsat.sliced import SlicedOutcome

log = logging.getLogger(__name__)

WHOLE_SHARE = 0.5
"""The part of the time limit the whole-operator step may use when a sliced step follows."""
WHOLE_GAP = 0.05
"""The gap at which the whole-operator step stops when a sliced step follows (:func:`whole_step_options`)."""


def slicing_kinds(choice: str) -> tuple[str, ...]:
    """The slicing kinds ``--slicing choice`` may use (``auto`` and ``all``: every kind)."""
    if choice not in SLICING_CHOICES:
        raise CimsplitError(f"unknown slicing {choice!r}", hint=f"choose one of {', '.join(SLICING_CHOICES)}")
    return {"off": (), "ks": ("ks",), "ofm": ("ofm",)}.get(choice, KINDS)


def fits(problem: PlacementProblem) -> bool:
    """Whether some slicing option's CIM part fits the budget (else no schedule slices: the problem is
    the whole-operator one).  Options are never dropped from the problem: a schedule's ``slicing``
    indexes them, also when a budget chain carries it to another budget."""
    return any(o.crossbars <= problem.budget for options in problem.slicings for o in options)


def whole_step_options(problem: PlacementProblem, options: SolveOptions) -> SolveOptions:
    """The options of the whole-operator step before :func:`place_sliced` on ``problem``.

    When a sliced step will follow (slicing asked for and an option fits), the whole-operator
    step stops at :data:`WHOLE_SHARE` of the limit, so the sliced step always gets at least the
    rest (plus what the whole step leaves): the sliced problem contains the whole-operator one,
    and its step starts from the whole step's schedule (its incumbent and ``T <= UB``), so that
    schedule is never lost, while a whole step that runs to its limit can no longer starve the
    step that decides the answer (YOLOv5n at 25 crossbars / 500 ns, 60 s: the whole step used
    most of the limit and the sliced step found nothing shorter).

    It also stops at a gap of :data:`WHOLE_GAP` (or the caller's, if larger): the sliced step proves
    the answer, whole-operator schedule or not, against its own bound, so the whole step's proof
    is never needed, only its schedule (a warm start and ``T <= UB``).  The gap is CP-SAT's, checked
    between its deterministic segment solves, so it ends the same way on every run.  Measured on
    the int8 zoo at the paper's grid (9 models x 16 points, 60 s): every makespan the same but YOLOv8n
    100 / 500 ns (a 2.56 % gap at the limit before, 68.56 ms; 68.38 ms now), solve time 583 -> 472 s
    (YOLOv5n 167 -> 140 s, YOLOv8n 319 -> 259 s, ResNet-50 25 -> 17 s) with no gap but this; from 1 %
    to 5 %: ``sweep --paper`` 100 -> 81 s (YOLOv5n 142 -> 107 s of solving: its whole steps at 25 and
    50 crossbars took 3-10 s each, now under 0.5 s) with every makespan the same, the other five
    models' grid 189 -> 163 s (78 of 80 points proven either way).  The sliced step keeps a shorter
    schedule that slices nothing (:func:`place_sliced`).  Otherwise ``options``.
    """
    if options.slicing == "off" or not fits(with_kinds(problem, slicing_kinds(options.slicing))):
        return options
    return replace(options, time_limit_s=WHOLE_SHARE * options.time_limit_s,
                   mip_gap=max(WHOLE_GAP, options.mip_gap or 0.0))


def _gap(objective_ns: float, bound_ns: float) -> float:
    return max(0.0, (objective_ns - bound_ns) / objective_ns) if objective_ns > 0 else 0.0


def place_sliced(problem: PlacementProblem, options: SolveOptions, whole: PlacementResult,
                 time_left_s: float, memo: dict | None = None) -> PlacementResult:
    """``whole`` (the result on ``problem`` without slicings) with the sliced problem's bound and status,
    or a strictly better validated sliced result.  ``memo``: a budget chain's shared segment solves
    (:data:`~cimsplit.passes.placement.solvers.cpsat.sliced_segments.SegmentMemo`)."""
    from cimsplit.passes.placement.solvers.cpsat.sliced import gap_status

    sliced_problem = with_kinds(problem, slicing_kinds(options.slicing))
    if not fits(sliced_problem):
        if options.slicing != "off" and problem.slicings:
            kept = replace(whole.solver, reason=f"{whole.solver.reason}; slicing {options.slicing}: no slicing "
                           f"option fits the budget of {problem.budget} crossbars (the whole-operator problem)")
            return replace(whole, solver=kept)
        return whole
    stats = whole.solver
    made_ns = whole.schedule.makespan_ns
    cheap_ns = min(sliced_lower_bound_ns(sliced_problem), made_ns)
    if gap_status(made_ns, cheap_ns, options) != "time_limit":
        note = (f"slicing {options.slicing}: the whole-operator schedule is optimal with slicing too "
                f"(sliced lower bound {cheap_ns:.6g} ns: host load / critical path)")
        log.info("%s", note)
        kept = replace(stats, status=gap_status(made_ns, cheap_ns, options), bound_ns=cheap_ns,
                       gap=_gap(made_ns, cheap_ns), reason=f"{stats.reason}; {note}")
        return replace(whole, solver=kept)
    from cimsplit.passes.placement.solvers.cpsat.sliced_staged import solve_sliced_staged  # ortools, lazily

    outcome, how = solve_sliced_staged(sliced_problem, replace(options, time_limit_s=max(time_left_s, 0.05)),
                                       whole.schedule, memo)
    note = (f"slicing {options.slicing}: cpsat {outcome.status} ({how}; "
            f"{outcome.n_variables} variables, {outcome.n_constraints} constraints)")
    bound_ns = max(outcome.bound_ns, cheap_ns)
    found = outcome.schedule
    if found is None or found.makespan_ns >= made_ns * (1 - 1e-9):
        bound_ns = min(bound_ns, made_ns)
        kept = replace(stats, status=gap_status(made_ns, bound_ns, options), bound_ns=bound_ns,
                       gap=_gap(made_ns, bound_ns), time_s=stats.time_s + outcome.time_s,
                       reason=f"{stats.reason}; {note}: no slicing shortens the schedule")
        return replace(whole, solver=kept)
    if not found.slicing:  # shorter, slicing nothing: the whole step stopped at its gap (:func:`whole_step_options`)
        return _shorter_whole(whole, found, outcome, bound_ns, options, f"{stats.reason}; {note}: a shorter "
                              "whole-operator schedule")
    schedule = validate(sliced_problem, found.on_host, slicing=found.slicing, host_order=outcome.host_order,
                        objective_ns=found.makespan_ns, source="cpsat (slicing)")
    bound_ns = min(bound_ns, schedule.makespan_ns)
    sliced_stats = SolverStats(
        name="cpsat", status=gap_status(schedule.makespan_ns, bound_ns, options), objective_ns=schedule.makespan_ns,
        bound_ns=bound_ns, gap=_gap(schedule.makespan_ns, bound_ns), time_s=stats.time_s + outcome.time_s,
        n_operators=problem.n, n_variables=outcome.n_variables, n_constraints=outcome.n_constraints,
        reason=f"{stats.reason}; {note}")
    return PlacementResult(sliced_problem, schedule, sliced_stats, whole.baselines, whole.warnings)


def _shorter_whole(whole: PlacementResult, found: Schedule, outcome: SlicedOutcome, bound_ns: float,
                   options: SolveOptions, reason: str) -> PlacementResult:
    """``whole`` with the sliced step's shorter schedule that slices nothing: validated on the whole-operator
    problem, with its stream, the sliced problem's bound and the time of both steps."""
    from cimsplit.passes.placement.solvers.cpsat.sliced import gap_status
    from cimsplit.passes.placement.stream.driver import latency_plan_stream

    schedule = validate(whole.problem, found.on_host, host_order=outcome.host_order, objective_ns=found.makespan_ns,
                        source="cpsat (sliced step)")
    bound_ns = min(bound_ns, schedule.makespan_ns)
    stats = replace(whole.solver, status=gap_status(schedule.makespan_ns, bound_ns, options),
                    objective_ns=schedule.makespan_ns, bound_ns=bound_ns, gap=_gap(schedule.makespan_ns, bound_ns),
                    time_s=whole.solver.time_s + outcome.time_s, reason=reason)
    return replace(whole, schedule=schedule, solver=stats,
                   stream=latency_plan_stream(whole.problem, schedule.on_host))
