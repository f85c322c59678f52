"""Independent re-check of any partitioning result (solver or baseline), DESIGN §4.

A result passes when non-capable operators are on the host (eq. 5), the
crossbar budget holds (eq. 14), and the schedule re-timed by
:func:`~cimsplit.passes.schedule.simulate` (host operators in the solver's
start-time order) is no longer than the solver said.  Shorter is normal for a
time-limited incumbent whose start times carry slack; longer is a bug.
"""

from __future__ import annotations

from collections.abc import Sequence

from cimsplit.passes.problem import PartitionProblem
from cimsplit.passes.result import Schedule
from cimsplit.passes.schedule import host_order_by_start, simulate

__all__ = ["InternalError", "validate", "host_order_from_starts"]

REL_TOL = 1e-6


class InternalError(RuntimeError):
    """A result broke the model: a bug in a solver backend or the formulation, not a user error."""


def host_order_from_starts(problem: PartitionProblem, on_host: Sequence[bool], start_ns: Sequence[float]) -> list[int]:
    """The solver's host order: host operators by start time (``host_order_by_start``).

    Start times that tie up to solver tolerance can list an operator before its
    zero-length predecessor; then the order is rebuilt as the precedence-respecting
    order that always runs the ready host operator with the earliest start.
    """
    finish = [start_ns[v] + (problem.t_host_ns[v] if on_host[v] else (problem.t_cim_ns[v] or 0.0)) for v in range(problem.n)]
    order = host_order_by_start(Schedule(tuple(on_host), tuple(start_ns), tuple(finish), 0.0))
    position = {v: i for i, v in enumerate(order)}
    if all(position[u] < position[v] for u, v, _ in problem.edges if u in position and v in position):
        return order
    # Host-only precedence through any path: a predecessor set over the transitive closure.
    n = problem.n
    anc = [0] * n
    for u, v, _ in sorted(problem.edges, key=lambda e: e[1]):
        anc[v] |= anc[u] | (1 << u)
    host_mask = sum(1 << v for v in order)
    placed = 0
    result = []
    pending = sorted(order, key=lambda v: (start_ns[v], v))
    while pending:
        for i, v in enumerate(pending):
            if anc[v] & host_mask & ~placed == 0:
                result.append(v)
                placed |= 1 << v
                del pending[i]
                break
    return result


def validate(
    problem: PartitionProblem,
    on_host: Sequence[bool],
    *,
    start_ns: Sequence[float] | None = None,
    host_order: Sequence[int] | None = None,
    objective_ns: float | None = None,
    source: str = "solver",
) -> Schedule:
    """Re-time a placement and check it; returns the re-timed schedule.

    Raises :class:`InternalError` when the placement breaks eq. 5 or eq. 14, the
    host order breaks precedence, or the re-timed makespan exceeds
    ``objective_ns`` by more than 1e-6 relative.
    """
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
            order = host_order_from_starts(problem, on_host, start_ns)
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
