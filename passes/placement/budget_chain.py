"""Solve one placement problem at several crossbar budgets, each solve using what the others proved.

A *budget chain* is a list of problems equal except for ``budget`` (a sweep's
points that differ only in the crossbar count).  Four facts, for the latency
objective; "feasible" is with respect to the problem's constraints, whose only
budget-dependent one is eq. 14, ``sum (1 - x_v) N_crossbar,v <= C`` (for a
sliced operator: its CIM part's crossbars):

1. OPT(C) is non-increasing in C: eq. 14 with C' >= C admits every placement
   eq. 14 with C admits, and nothing else in the model depends on C, so the
   feasible set at C' contains the one at C.  The same holds for the sliced
   problem (a slicing option's crossbars enter the same sum) and for the
   whole-operator problem alone.
2. A schedule using u crossbars is feasible at every budget C' >= u (eq. 14 is
   its only budget-dependent constraint).  If it is optimal at C, then for every
   C' in [u, C]: OPT(C') >= OPT(C) (fact 1) and the schedule is feasible at C',
   so it is optimal at C' -- reused without a solve, with its bound.
3. A lower bound LB proven at C holds at every C' <= C: OPT(C') >= OPT(C) >= LB.
   It is passed to the solve at C' (``SolveOptions.lower_bound_ns``, a ``T >= LB``
   row in CP-SAT and the MILP).
4. Hence results can be made monotone: the best known schedule at C' >= C is
   never worse than the one at C -- a worse one is replaced by the smaller
   budget's schedule, re-validated at C'.
5. The sliced bottleneck segments' problems do not depend on C (only their own
   budget does): the chain's sliced steps share their segment solves
   (:mod:`~cimsplit.passes.placement.solvers.cpsat.sliced_segments`, ``memo``).

Order: budgets descending, so that each proof covers every budget down to the
crossbars its schedule uses (fact 2) and each bound reaches every smaller budget
(fact 3); a schedule found at a larger budget that fits a smaller one is that
solve's incumbent.  With slicing, the whole-operator step and the sliced step
are kept apart: facts at the whole-operator level (the problem without
slicings) feed the whole-operator step; final results, which the slicing step
proves at the sliced level whether their schedule is sliced or not, feed the
final result.  A bound of the sliced problem is also one of the whole-operator
problem (its feasible set is smaller), not the other way round: a whole-operator
optimum at a larger budget bounds nothing at the sliced level.  Each point reports a
true statement: the status and gap of the schedule it reports against the
bounds valid at its budget, ``time_s`` the time spent on it, ``reused_from`` the
budget whose schedule it reports when that is another one.

A result replaced by fact 4 reports the best final-result bound of a budget at
least its own (fact 3 at the chain's level).  Reused and replaced results carry the solver statistics (solver, model size) of
the solve that found their schedule.

The throughput objective is not chained here (each point is solved alone).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from cimsplit.errors import CimsplitError
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import PlacementResult, SolverStats
from cimsplit.passes.placement.simulate import host_order_by_start
from cimsplit.passes.placement.slicing import with_kinds
from cimsplit.passes.placement.solvers.backend import STATUS_GAP_LIMIT, STATUS_OPTIMAL, STATUS_TIME_LIMIT
from cimsplit.passes.placement.validate import validate

__all__ = ["Found", "ChainPoint", "solve_chain", "chain_result", "same_but_budget"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Found:
    """One validated schedule with what its solve proved (plain values: it goes into the sweep's journal)."""

    on_host: tuple[bool, ...]
    host_order: tuple[int, ...]
    """Host operators in run order (of the expanded problem when something is sliced)."""
    slicing: tuple[int, ...]
    makespan_ns: float
    bound_ns: float
    status: str
    solver: str
    n_variables: int
    n_constraints: int
    crossbars_used: int
    budget: int
    """The budget of the point whose solve found this schedule."""
    reason: str = ""

    @property
    def sliced(self) -> bool:
        return any(k >= 0 for k in self.slicing)

    @property
    def proven(self) -> bool:
        return self.status == STATUS_OPTIMAL

    @classmethod
    def of(cls, result: PlacementResult, budget: int) -> Found:
        s = result.schedule
        order = host_order_by_start(s.parts if s.slicing and s.parts is not None else s)
        stats = result.solver
        return cls(tuple(s.on_host), tuple(order), tuple(s.slicing), float(s.makespan_ns), float(stats.bound_ns),
                   stats.status, stats.name, int(stats.n_variables), int(stats.n_constraints),
                   int(result.crossbars_used), budget, stats.reason)

    @classmethod
    def from_json(cls, data: Mapping) -> Found:
        return cls(**{**data, "on_host": tuple(data["on_host"]), "host_order": tuple(data["host_order"]),
                      "slicing": tuple(data["slicing"])})


@dataclass(frozen=True)
class ChainPoint:
    """What one budget of a chain settled: its whole-operator step and its final result."""

    budget: int
    whole: Found | None
    """The whole-operator step (None when a proven sliced result was reused and it did not run)."""
    final: Found
    time_s: float
    """Seconds spent on this point."""
    reused_from: int | None = None
    """The budget whose schedule ``final`` is, when it is another point's."""

    @classmethod
    def from_json(cls, data: Mapping) -> ChainPoint:
        whole = data.get("whole")
        return cls(int(data["budget"]), None if whole is None else Found.from_json(whole),
                   Found.from_json(data["final"]), float(data["time_s"]), data.get("reused_from"))


def same_but_budget(a: PlacementProblem, b: PlacementProblem) -> bool:
    return replace(a, budget=0) == replace(b, budget=0)


def _slices(problem: PlacementProblem, options: SolveOptions) -> PlacementProblem | None:
    """The sliced problem ``place`` would try (None: the whole-operator problem is all there is)."""
    from cimsplit.passes.placement.sliced_place import slicing_kinds

    if not problem.slicings or options.objective != "latency":
        return None
    sliced = with_kinds(problem, slicing_kinds(options.slicing))
    return sliced if sliced.slicings else None


def _status(makespan_ns: float, bound_ns: float, options: SolveOptions, own: str) -> tuple[str, float]:
    gap = max(0.0, (makespan_ns - bound_ns) / makespan_ns) if makespan_ns > 0 else 0.0
    if gap <= options.effective_mip_gap:
        return (STATUS_OPTIMAL if options.mip_gap is None or gap <= 1e-9 else STATUS_GAP_LIMIT), gap
    return (own if own not in (STATUS_OPTIMAL, STATUS_GAP_LIMIT) else STATUS_TIME_LIMIT), gap


Streams = dict[tuple[bool, ...], object]
"""A chain's latency-plan streams by placement: the stream model has no budget, so one placement's
minimum period is the same at every budget of the chain (computing it is the costly part of a reuse)."""


def chain_result(problem: PlacementProblem, found: Found, options: SolveOptions, time_s: float,
                 reason: str = "", streams: Streams | None = None, with_stream: bool = True) -> PlacementResult:
    """``found`` re-validated on ``problem`` (its budget may differ from where it was found) as a result.

    ``streams``: the chain's cache of latency-plan streams; ``with_stream=False`` leaves the stream out
    (a schedule wanted only as an incumbent)."""
    from cimsplit.passes.placement.stream.driver import latency_plan_stream

    level = _slices(problem, options) if found.sliced else replace(problem, slicings=())
    if level is None:
        raise CimsplitError("a sliced schedule was carried to a problem without its slicing options")
    schedule = validate(level, found.on_host, host_order=found.host_order, slicing=found.slicing,
                        objective_ns=found.makespan_ns, source=f"schedule of budget {found.budget}")
    bound = min(found.bound_ns, schedule.makespan_ns)
    status, gap = _status(schedule.makespan_ns, bound, options, found.status)
    stats = SolverStats(found.solver, status, schedule.makespan_ns, bound, gap, time_s, problem.n,
                        found.n_variables, found.n_constraints, reason or found.reason)
    stream = None
    if with_stream and not found.sliced:
        streams = {} if streams is None else streams
        if schedule.on_host not in streams:
            streams[schedule.on_host] = latency_plan_stream(level, schedule.on_host)
        stream = streams[schedule.on_host]
    return PlacementResult(level, schedule, stats, {}, (), stream=stream)  # type: ignore[arg-type]


def _bound(points: Mapping[int, ChainPoint], budget: int, sliced: bool) -> float:
    """The best bound proven at a budget >= ``budget`` for the problem at this level (fact 3).

    ``sliced``: the chain's problems have slicing options, so a final result (whether its
    schedule is sliced or not) is bounded at the sliced level.  A final result's bound holds
    for both levels (the sliced problem's optimum is at most the whole-operator one); a
    whole-operator step's bound only for the whole-operator problem."""
    best = 0.0
    for p in points.values():
        if p.budget >= budget:
            best = max(best, p.final.bound_ns)
            if p.whole is not None and not sliced:
                best = max(best, p.whole.bound_ns)
    return best


def _with_bound(found: Found, bound_ns: float, options: SolveOptions) -> Found:
    bound = min(max(found.bound_ns, bound_ns), found.makespan_ns)
    status, _ = _status(found.makespan_ns, bound, options, found.status)
    return replace(found, bound_ns=bound, status=status)


def _proven(points: Mapping[int, ChainPoint], budget: int) -> Found | None:
    """A proven whole-operator schedule of a larger budget that fits ``budget`` (fact 2), nearest budget first."""
    fits = [p.whole for p in points.values() if p.budget > budget and p.whole is not None
            and p.whole.proven and p.whole.crossbars_used <= budget]
    return min(fits, key=lambda f: (f.budget, f.makespan_ns), default=None)


def solve_chain(problems: Sequence[PlacementProblem], options: SolveOptions,
                known: Mapping[int, ChainPoint] | None = None) -> Iterator[tuple[int, ChainPoint, PlacementResult]]:
    """Solve ``problems`` (equal except for ``budget``; latency objective) as the module says.

    ``known``: points settled earlier (an interrupted sweep's journal), by index; they are not
    solved again, but their facts are used.  Yields ``(index, point, result)`` whenever a point
    is settled, and again for a point whose result fact 4 later replaces; the last yield per
    index is its answer.  A point whose solve raises yields nothing (the exception is logged and
    re-raised after the chain, with the index, as ``ChainError``).
    """
    from cimsplit.passes.placement.driver import place
    from cimsplit.passes.placement.sliced_place import place_sliced

    if any(not same_but_budget(problems[0], p) for p in problems):
        raise CimsplitError("a budget chain's problems must be equal except for the budget")
    points: dict[int, ChainPoint] = dict(known or {})
    streams: Streams = {}
    memo: dict = {}  # sliced segment solves, shared by the budgets (fact 5)
    failures: list[tuple[int, Exception]] = []
    for i in sorted(range(len(problems)), key=lambda k: (-problems[k].budget, k)):
        if i in points:
            continue
        try:
            point, result = _solve_point(problems[i], options, points, streams, memo, place, place_sliced)
        except Exception as exc:  # noqa: BLE001 - the caller turns it into this point's error row
            failures.append((i, exc))
            continue
        point = replace(point, time_s=result.solver.time_s)
        points[i] = point
        yield i, point, result
        yield from _monotone(problems, options, points, streams)
    if failures:
        raise ChainError(failures)


class ChainError(Exception):
    """Points of a chain whose solve raised: ``failures`` is a list of (index, exception)."""

    def __init__(self, failures: list[tuple[int, Exception]]) -> None:
        super().__init__(f"{len(failures)} chain points failed")
        self.failures = failures


def _solve_point(problem: PlacementProblem, options: SolveOptions, points: Mapping[int, ChainPoint],
                 streams: Streams, memo: dict, place, place_sliced) -> tuple[ChainPoint, PlacementResult]:
    """One budget's point and result.  Its ``time_s`` is what ``place`` reports for a solve (solver and
    heuristic, as in Table I) plus, for a reuse, the time to re-validate the reused schedule here."""
    from cimsplit.passes.placement.sliced_place import whole_step_options
    from cimsplit.passes.placement.stream.driver import latency_plan_stream

    begin = time.perf_counter()
    budget = problem.budget
    sliced_problem = _slices(problem, options)
    # Fact 2 on the final result: a proven schedule of the complete problem (sliced level, or the
    # whole-operator problem when nothing can be sliced) settles this budget.
    final_level = [p.final for p in points.values() if p.budget > budget and p.final.proven
                   and p.final.crossbars_used <= budget]
    if final_level:
        source = min(final_level, key=lambda f: (f.budget, f.makespan_ns))
        reason = f"reused the proven schedule of budget {source.budget}"
        result = chain_result(problem, source, options, 0.0, reason, streams)
        result = replace(result, solver=replace(result.solver, time_s=time.perf_counter() - begin))
        return ChainPoint(budget, None, source, 0.0, source.budget), result
    stripped = replace(problem, slicings=())
    proven_whole = _proven(points, budget)
    if proven_whole is not None:  # fact 2 on the whole-operator step
        whole_found = proven_whole
        whole = chain_result(stripped, proven_whole, options, 0.0,
                             f"reused the proven whole-operator schedule of budget {proven_whole.budget}",
                             with_stream=False)
        whole = replace(whole, solver=replace(whole.solver, time_s=time.perf_counter() - begin))
    else:
        lower = _bound(points, budget, sliced=False)  # fact 3
        fits = [f for p in points.values() for f in (p.whole, p.final)
                if f is not None and not f.sliced and f.crossbars_used <= budget]
        incumbent = None
        if fits:  # fact 2: a schedule found elsewhere that fits is a warm start
            best = min(fits, key=lambda f: (f.makespan_ns, f.budget))
            incumbent = chain_result(stripped, best, options, 0.0, with_stream=False).schedule
        whole = place(stripped, replace(whole_step_options(problem, options), lower_bound_ns=lower),
                      incumbent=incumbent, stream=False)
        whole_found = Found.of(whole, budget)
    if sliced_problem is None:
        final = whole
    else:  # as ``place`` does it: the sliced step gets what the whole-operator step (at most half) left
        final = place_sliced(problem, options, whole, options.time_limit_s - (time.perf_counter() - begin), memo)
    final_found = Found.of(final, budget)
    final_found = _with_bound(final_found, _bound(points, budget, sliced_problem is not None), options)
    reused = whole_found.budget if proven_whole is not None and not final_found.sliced else None
    if reused is not None:
        final_found = replace(final_found, budget=reused)
    if final.schedule is whole.schedule:  # the whole-operator schedule is kept: its stream (a sliced one has none)
        if final.schedule.on_host not in streams:
            streams[final.schedule.on_host] = latency_plan_stream(final.problem, final.schedule.on_host)
        final = replace(final, stream=streams[final.schedule.on_host])
    status, gap = _status(final.schedule.makespan_ns, final_found.bound_ns, options, final_found.status)
    result = replace(final, solver=replace(final.solver, bound_ns=final_found.bound_ns, status=status, gap=gap))
    return ChainPoint(budget, whole_found, final_found, 0.0, reused), result


def _monotone(problems: Sequence[PlacementProblem], options: SolveOptions,
              points: dict[int, ChainPoint], streams: Streams) -> Iterator[tuple[int, ChainPoint, PlacementResult]]:
    """Fact 4: replace every point's final result by a better one of a smaller budget, re-validated."""
    best: Found | None = None
    sliced = _slices(problems[0], options) is not None
    for i in sorted(points, key=lambda k: (points[k].budget, k)):
        p = points[i]
        if best is not None and best.makespan_ns < p.final.makespan_ns * (1 - 1e-9):
            found = _with_bound(replace(best, bound_ns=0.0), _bound(points, p.budget, sliced), options)
            why = f"the schedule of budget {best.budget} is shorter than this budget's solve found"
            result = chain_result(problems[i], found, options, p.time_s, why, streams)
            p = replace(p, final=replace(found, bound_ns=result.solver.bound_ns), reused_from=best.budget)
            points[i] = p
            yield i, p, result
        if best is None or p.final.makespan_ns < best.makespan_ns * (1 - 1e-9):
            best = p.final
