"""Why each operator sits where it does, with the exact cost of moving it (DESIGN §8).

Works on the plain :class:`PlacementProblem` and a solved plan: no ONNX.  The
cost of moving an operator is an exact re-solve with it forced onto the other
device (:mod:`cimsplit.passes.placement.whatif`), through the caller's ``solve``
(the plan's solver and limits).

Reasons (:data:`REASONS`), in this order of precedence:

``not_cim_capable``   the front end's reason (``t_cim_ns is None``);
``never_profitable``  on the host, and even alone on an idle CIM (every neighbour on
                      the host) its slowest input transfer + T_acc + slowest output
                      transfer exceeds T_host;
``off_critical_path`` moving it to the other device leaves the makespan unchanged;
``on_cim``            on the CIM, saving ``forced - plan`` ns;
``crowded_out``       on the host although it would pay alone: moving it costs more,
                      because it does not fit beside the plan's CIM operators (if it
                      fitted, the plan plus it is no slower -- every path through it
                      gets shorter -- and it would be off the critical path); the
                      forced re-solve says which CIM operators it displaces.

Makespans closer than :data:`~cimsplit.passes.placement.whatif.REL_TOL` (relative)
count as equal: the solvers' default MIP gap.  :func:`explain_plan` adds the
budget curve (:mod:`cimsplit.passes.placement.budget`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cimsplit.passes.placement.budget import BudgetCurve, budget_curve
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import PlacementResult, Schedule
from cimsplit.passes.placement.simulate import host_order_by_start
from cimsplit.passes.placement.whatif import ForcedMove, Solve, forced_move, tolerance_ns

__all__ = [
    "REASONS",
    "Explanation",
    "OperatorExplanation",
    "critical_operators",
    "explain_operators",
    "explain_plan",
    "solo_cim_ns",
]

log = logging.getLogger(__name__)

REASONS = ("not_cim_capable", "never_profitable", "off_critical_path", "on_cim", "crowded_out")


@dataclass(frozen=True)
class OperatorExplanation:
    name: str
    device: str
    reason: str
    detail: str
    """One sentence with the numbers behind the reason."""
    crossbars: int
    critical: bool
    """On a critical path of the plan's schedule (no slack)."""
    forced: ForcedMove | None
    """``None`` for operators that are not CIM-capable."""
    saving_ns: float | None
    """forced makespan - plan makespan (>= 0), when the move is possible."""
    displaced: tuple[str, ...] = ()
    """Plan CIM operators on the host in the forced schedule (forced to the CIM only)."""
    solo_cim_ns: float | None = None
    """Slowest input transfer + T_acc + slowest output transfer, alone on the CIM."""

    @property
    def forced_makespan_ns(self) -> float | None:
        return None if self.forced is None else self.forced.makespan_ns


def solo_cim_ns(problem: PlacementProblem, v: int) -> float:
    """T_acc of ``v`` plus its slowest input and output transfer with every neighbour on the host."""
    t_in = max([problem.t_in_ns[v], *(t for _, w, t in problem.edges if w == v)])
    t_out = max([problem.t_out_ns[v] if problem.writes_output[v] else 0.0, *(t for u, _, t in problem.edges if u == v)])
    return t_in + float(problem.t_cim_ns[v]) + t_out  # type: ignore[arg-type]


def critical_operators(problem: PlacementProblem, schedule: Schedule) -> frozenset[int]:
    """Operators on a critical path: a chain of tight constraints that ends at the makespan.

    Walks back from every operator whose end (plus its graph-output transfer on the
    CIM) is the makespan, through each predecessor whose finish plus transfer, or
    the previous host operator whose finish, equals the start (within :data:`REL_TOL`).
    """
    n, tol = problem.n, tolerance_ns(schedule.makespan_ns)
    on_host, start, finish = schedule.on_host, schedule.start_ns, schedule.finish_ns
    preds: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for u, w, t in problem.edges:
        preds[w].append((u, t if on_host[u] != on_host[w] else 0.0))
    order = host_order_by_start(schedule)
    for a, b in zip(order, order[1:]):
        preds[b].append((a, 0.0))
    stack = [v for v in range(n)
             if finish[v] + (problem.t_out_ns[v] if not on_host[v] and problem.writes_output[v] else 0.0)
             >= schedule.makespan_ns - tol]
    critical: set[int] = set()
    while stack:
        v = stack.pop()
        if v in critical:
            continue
        critical.add(v)
        stack.extend(u for u, delay in preds[v] if abs(finish[u] + delay - start[v]) <= tol)
    return frozenset(critical)


def _ns(value: float) -> str:
    return f"{value:,.0f} ns"


def _classify(plan: PlacementResult, v: int, move: ForcedMove | None, critical: bool,
              not_capable: Mapping[str, str]) -> OperatorExplanation:
    problem, schedule = plan.problem, plan.schedule
    name, makespan = problem.names[v], schedule.makespan_ns
    on_host = schedule.on_host[v]
    device = "host" if on_host else "cim"
    common = dict(name=name, device=device, crossbars=int(problem.crossbars[v]), critical=critical, forced=move)
    if move is None:
        why = not_capable.get(name) or "not CIM-capable"
        return OperatorExplanation(reason="not_cim_capable", detail=why, saving_ns=None, **common)
    forced = move.makespan_ns
    saving = None if forced is None else forced - makespan
    unchanged = saving is not None and saving <= tolerance_ns(makespan)
    if on_host:
        solo = solo_cim_ns(problem, v)
        if solo > problem.t_host_ns[v]:
            detail = (f"alone on the CIM it takes {_ns(solo)} (T_acc {_ns(problem.t_cim_ns[v])} plus transfers) "
                      f"> {_ns(problem.t_host_ns[v])} on the host")
            return OperatorExplanation(reason="never_profitable", detail=detail, saving_ns=saving,
                                       solo_cim_ns=solo, **common)
        if unchanged:
            return OperatorExplanation(reason="off_critical_path", detail="moving it to the CIM changes nothing",
                                       saving_ns=0.0, solo_cim_ns=solo, **common)
        free = problem.budget - plan.crossbars_used
        if forced is None:
            detail = f"needs {problem.crossbars[v]} crossbars, the budget is {problem.budget}"
            return OperatorExplanation(reason="crowded_out", detail=detail, saving_ns=None, solo_cim_ns=solo, **common)
        displaced = tuple(problem.names[u] for u in range(problem.n)
                          if not schedule.on_host[u] and move.on_host is not None and move.on_host[u])
        detail = (f"needs {problem.crossbars[v]} crossbars, {free} free; forced to the CIM: {_ns(forced)} "
                  f"(+{_ns(saving)}), displacing {len(displaced)} CIM operator(s)")
        return OperatorExplanation(reason="crowded_out", detail=detail, saving_ns=saving, displaced=displaced,
                                   solo_cim_ns=solo, **common)
    if unchanged:
        return OperatorExplanation(reason="off_critical_path", detail="moving it to the host changes nothing "
                                   "(host work hidden behind CIM work)", saving_ns=0.0, **common)
    return OperatorExplanation(reason="on_cim", detail=f"saves {_ns(saving)}: forced to the host {_ns(forced)}",
                               saving_ns=saving, **common)


def explain_operators(plan: PlacementResult, solve: Solve, *, operators: Iterable[str] | None = None,
                      not_capable: Mapping[str, str] | None = None) -> list[OperatorExplanation]:
    """The reason of every operator (or of the named ones, in problem order).

    ``not_capable`` maps operator names to the front end's reason they are not
    CIM-capable.  Raises ``KeyError`` naming an unknown operator.
    """
    problem = plan.problem
    index = {name: v for v, name in enumerate(problem.names)}
    wanted = range(problem.n) if operators is None else sorted({index[name] for name in operators})
    critical = critical_operators(problem, plan.schedule)
    out = []
    for v in wanted:
        move = forced_move(plan, v, solve) if problem.capable(v) else None
        out.append(_classify(plan, v, move, v in critical, not_capable or {}))
        if move is not None and move.makespan_ns is not None and move.makespan_ns < plan.schedule.makespan_ns - tolerance_ns(
                plan.schedule.makespan_ns):
            log.warning("forcing %s to the %s found %.6g ns, better than the plan's %.6g ns (the plan is not proven "
                        "optimal)", problem.names[v], move.device, move.makespan_ns, plan.schedule.makespan_ns)
    return out


@dataclass(frozen=True)
class Explanation:
    """Everything ``cimsplit explain`` says about one plan."""

    plan: PlacementResult
    operators: tuple[OperatorExplanation, ...]
    curve: BudgetCurve | None
    solves: int
    """Solver runs besides the plan's own (forced moves and budget curve)."""
    time_s: float


def explain_plan(plan: PlacementResult, solve: Solve, *, operators: Iterable[str] | None = None,
                 not_capable: Mapping[str, str] | None = None, with_curve: bool = True) -> Explanation:
    """The reasons (:func:`explain_operators`) and, with ``with_curve``, the budget curve."""
    begin = time.perf_counter()
    reasons = tuple(explain_operators(plan, solve, operators=operators, not_capable=not_capable))
    curve = budget_curve(plan, solve) if with_curve else None
    solves = sum(1 for e in reasons if e.forced is not None and e.forced.solved) + (curve.solves if curve else 0)
    return Explanation(plan, reasons, curve, solves, time.perf_counter() - begin)
