"""What-if solves: the optimum with one operator forced onto a device (``cimsplit explain``).

Forcing restricts the plain :class:`PlacementProblem`; no solver needs to know:

- to the host: the operator's ``t_cim_ns`` becomes ``None``, the problem's own
  encoding of "not CIM-capable" (eq. 5);
- to the CIM: its ``t_host_ns`` becomes ``2 U + 1`` where ``U`` is the makespan of
  a feasible schedule with it on the CIM.  Any schedule with it on the host then
  lasts more than ``U``, so the restricted optimum is the forced optimum and the
  solver's bound is a bound on it; a returned schedule with it on the host (a
  solve stopped early) is replaced by the known one.

A what-if only removes options, so it is never better than the plan's optimum:
one below the plan's proven bound raises :class:`InternalError`.  It is skipped
when a cheap schedule with the move (the plan's host order, or a list schedule)
already reaches the plan's proven bound: then moving changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from cimsplit.passes.placement.baselines import list_schedule
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import PlacementResult, Schedule
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.placement.validate import InternalError, host_order_from_solver_starts

__all__ = ["REL_TOL", "ForcedMove", "Solve", "force_device", "forced_move", "tolerance_ns"]

REL_TOL = 1e-6
"""Relative tolerance under which two makespans are the same (the default MIP gap)."""

Solve = Callable[[PlacementProblem], PlacementResult]
"""Solves a problem exactly (up to its limits): the plan's solver and options."""


def tolerance_ns(makespan_ns: float) -> float:
    return REL_TOL * max(1.0, abs(makespan_ns))

@dataclass(frozen=True)
class ForcedMove:
    """The best schedule with one operator forced onto ``device``."""

    device: str
    """``host`` or ``cim``: where the operator was forced."""
    makespan_ns: float | None
    """``None`` when the move is impossible (its crossbars exceed the budget)."""
    bound_ns: float | None
    """Proven lower bound on the forced optimum (equal to ``makespan_ns`` when proven)."""
    status: str
    """The forced solve's status, or ``shortcut`` / ``impossible`` when no solve ran."""
    on_host: tuple[bool, ...] | None
    solved: bool
    """Whether a solver ran (False: a cheap schedule already met the plan's bound)."""

    @property
    def gap(self) -> float | None:
        if self.makespan_ns is None or self.bound_ns is None:
            return None
        return max(0.0, (self.makespan_ns - self.bound_ns) / self.makespan_ns) if self.makespan_ns > 0 else 0.0

def force_device(problem: PlacementProblem, v: int, on_host: bool, cim_upper_ns: float = 0.0) -> PlacementProblem:
    """``problem`` with operator ``v`` restricted to one device (see the module docstring).

    ``cim_upper_ns`` (forcing to the CIM) is the makespan of a feasible schedule
    with ``v`` on the CIM.
    """
    if on_host:
        t_cim = list(problem.t_cim_ns)
        t_cim[v] = None
        crossbars = list(problem.crossbars)
        crossbars[v] = 0
        return replace(problem, t_cim_ns=tuple(t_cim), crossbars=tuple(crossbars))
    if not problem.capable(v):
        raise ValueError(f"operator {problem.names[v]!r} is not CIM-capable")
    t_host = list(problem.t_host_ns)
    t_host[v] = 2.0 * cim_upper_ns + 1.0
    return replace(problem, t_host_ns=tuple(t_host))

def _used(problem: PlacementProblem, on_host: Sequence[bool]) -> int:
    return sum(c for c, h in zip(problem.crossbars, on_host) if not h)


def _flipped_schedule(problem: PlacementProblem, plan: Schedule, v: int) -> Schedule | None:
    """A cheap schedule of the plan with ``v`` on the other device, or ``None`` when it overflows.

    The better of the plan's host order (``v`` inserted at its plan start or
    removed) and a list schedule of the flipped placement.
    """
    on_host = list(plan.on_host)
    on_host[v] = not on_host[v]
    if _used(problem, on_host) > problem.budget:
        return None
    order = host_order_from_solver_starts(problem, on_host, plan.start_ns)
    return min((simulate(problem, on_host, order), list_schedule(problem, on_host)), key=lambda s: s.makespan_ns)


def forced_move(plan: PlacementResult, v: int, solve: Solve) -> ForcedMove:
    """The optimum with operator ``v`` forced to the device it is not on in the plan."""
    problem, schedule = plan.problem, plan.schedule
    to_host = not schedule.on_host[v]
    device = "host" if to_host else "cim"
    if not to_host and problem.crossbars[v] > problem.budget:
        return ForcedMove(device, None, None, "impossible", None, False)
    known = _flipped_schedule(problem, schedule, v)
    if not to_host:  # v alone on the CIM always fits
        alone = [True] * problem.n
        alone[v] = False
        alone_schedule = list_schedule(problem, alone)
        if known is None or alone_schedule.makespan_ns < known.makespan_ns:
            known = alone_schedule
    assert known is not None  # moving to the host frees crossbars
    if known.makespan_ns <= plan.solver.bound_ns + tolerance_ns(plan.solver.bound_ns):
        return ForcedMove(device, known.makespan_ns, known.makespan_ns, "shortcut", known.on_host, False)
    restricted = force_device(problem, v, to_host, known.makespan_ns)
    result = solve(restricted)
    found = result.schedule
    if found.on_host[v] != to_host or found.makespan_ns > known.makespan_ns:
        found = known  # the solver stopped early with a worse schedule than the one we had
    bound = min(result.solver.bound_ns, found.makespan_ns)
    if found.makespan_ns < plan.solver.bound_ns - tolerance_ns(plan.solver.bound_ns):
        raise InternalError(
            f"forcing {problem.names[v]!r} to the {device} gave {found.makespan_ns:.6g} ns, below the plan's "
            f"proven bound of {plan.solver.bound_ns:.6g} ns: a restriction cannot beat the optimum"
        )
    return ForcedMove(device, found.makespan_ns, bound, result.solver.status, found.on_host, True)
