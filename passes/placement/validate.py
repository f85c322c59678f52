"""Independent re-check of any partitioning result (solver or baseline), DESIGN §4.

A result passes when non-capable operators are on the host (eq. 5), the
crossbar budget holds (eq. 14), and the schedule re-timed by
:func:`~cimsplit.passes.placement.simulate.simulate` (host operators in the solver's
start-time order) is no longer than the solver said.  Shorter is normal for a
time-limited incumbent whose start times carry slack; longer is a bug.
"""

from __future__ import annotations

from collections.abc import Sequence

from cimsplit.passes.placement import dag
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.placement.slicing import WHOLE, expand, parts_schedule

__all__ = ["InternalError", "validate", "host_order_from_solver_starts"]

REL_TOL = 1e-6
_TIE_TOL = 1e-7
"""Start times closer than this (relative to the makespan) are ties: solver noise, not an order."""


class InternalError(RuntimeError):
    """A result broke the model: a bug in a solver backend or the formulation, not a user error."""


def _tie_groups(items: list[int], value: Sequence[float], tol: float) -> list[list[int]]:
    """Split ``items`` (sorted by ``value``) into runs whose values lie within ``tol`` of the run's first."""
    groups: list[list[int]] = []
    for v in items:
        if groups and value[v] - value[groups[-1][0]] <= tol:
            groups[-1].append(v)
        else:
            groups.append([v])
    return groups


def host_order_from_solver_starts(problem: PlacementProblem, on_host: Sequence[bool], start_ns: Sequence[float]) -> list[int]:
    """The host order behind a solver's start times, which carry noise (unlike a re-timed schedule's).

    For an exact :class:`Schedule` use :func:`~cimsplit.passes.placement.simulate.host_order_by_start`;
    this one orders the same way (start, then finish, then index) but with tolerances and a repair.

    Solver start times carry floating-point and tolerance noise (1 - 1e-16 for
    1), so start times within a relative 1e-7 count as equal and, like
    ``host_order_by_start``, ties go to the earlier finish (a zero-length
    operator before a long one it precedes), then to the lower (topological)
    index.  Should noise still list an operator before a host ancestor, the
    order is repaired: repeatedly take the first operator of that list whose
    host ancestors are all placed.
    """
    n = problem.n
    finish = [start_ns[v] + (problem.t_host_ns[v] if on_host[v] else (problem.t_cim_ns[v] or 0.0)) for v in range(n)]
    tol = _TIE_TOL * max([1.0, *(abs(f) for f in finish)])
    hosts = sorted((v for v in range(n) if on_host[v]), key=lambda v: (start_ns[v], v))
    order: list[int] = []
    for same_start in _tie_groups(hosts, start_ns, tol):
        by_finish = sorted(same_start, key=lambda v: (finish[v], v))
        for same_finish in _tie_groups(by_finish, finish, tol):
            order.extend(sorted(same_finish))
    anc = dag.ancestors(problem)  # transitive closure: paths through CIM operators count
    host_mask = sum(1 << v for v in order)
    placed = 0
    for v in order:
        if anc[v] & host_mask & ~placed:
            break
        placed |= 1 << v
    else:
        return order
    placed = 0
    result = []
    pending = list(order)
    while pending:
        for i, v in enumerate(pending):
            if anc[v] & host_mask & ~placed == 0:
                result.append(v)
                placed |= 1 << v
                del pending[i]
                break
    return result


def validate(
    problem: PlacementProblem,
    on_host: Sequence[bool],
    *,
    start_ns: Sequence[float] | None = None,
    host_order: Sequence[int] | None = None,
    objective_ns: float | None = None,
    source: str = "solver",
    slicing: Sequence[int] = (),
) -> Schedule:
    """Re-time a placement and check it; returns the re-timed schedule.

    Raises :class:`InternalError` when the placement breaks eq. 5 or eq. 14, the
    host order breaks precedence, or the re-timed makespan exceeds
    ``objective_ns`` by more than 1e-6 relative.

    ``slicing`` (per operator: -1 whole, else its slicing option): the placement is
    checked on the expanded problem (:func:`~cimsplit.passes.placement.slicing.expand`),
    and ``start_ns`` / ``host_order`` then index the expanded operators.
    """
    if any(k != WHOLE for k in slicing):
        try:
            expansion = expand(problem, on_host, slicing)
        except ValueError as exc:
            raise InternalError(f"{source}: {exc}") from exc
        parts = validate(expansion.problem, expansion.on_host, start_ns=start_ns, host_order=host_order,
                         objective_ns=objective_ns, source=source)
        return parts_schedule(problem, expansion, parts, slicing)
    on_host = tuple(bool(h) for h in on_host)
    if len(on_host) != problem.n:
        raise InternalError(f"{source}: placement has {len(on_host)} entries for {problem.n} operators")
    for v in range(problem.n):
        if not on_host[v] and not problem.capable(v):
            raise InternalError(f"{source}: operator {problem.names[v]!r} is not CIM-capable but was placed on the CIM (eq. 5)")
    used = sum(c for c, h in zip(problem.crossbars, on_host) if not h)
    if used > problem.budget:
        raise InternalError(f"{source}: {used} crossbars used, budget is {problem.budget} (eq. 14)")
    if host_order is None:
        if start_ns is None:
            order = [v for v in range(problem.n) if on_host[v]]
        else:
            order = host_order_from_solver_starts(problem, on_host, start_ns)
    else:
        order = list(host_order)
    try:
        schedule = simulate(problem, on_host, order)
    except ValueError as exc:
        raise InternalError(f"{source}: {exc}") from exc
    if objective_ns is not None:
        allowed = objective_ns + REL_TOL * max(abs(objective_ns), 1e-9)
        if schedule.makespan_ns > allowed:
            raise InternalError(
                f"{source}: re-timed makespan {schedule.makespan_ns:.6g} ns exceeds the reported objective "
                f"{objective_ns:.6g} ns"
            )
    return schedule
