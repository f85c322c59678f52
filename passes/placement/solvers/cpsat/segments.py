"""Bottleneck decomposition: the partitioning problem solved segment by segment, exactly.

A *bottleneck* is an operator comparable to every other one: each other
operator is its ancestor or its descendant.  Detectors and CNNs have many
(every backbone stage's last operator, the concats the skip connections meet
at).  In every schedule each ancestor of a bottleneck b finishes before b
starts and each descendant starts after b finishes, so the host work between
two consecutive bottlenecks b_i, b_i+1 (the *segment* of operators that are
descendants of b_i and ancestors of b_i+1) runs in [f_b_i, s_b_i+1] and
nowhere else.  With a virtual ``<start>`` before every operator and ``<end>``
after every one (host-only, zero time; graph inputs and outputs become edges
from ``<start>`` and to ``<end>`` carrying their transfer times) the makespan is

    T = sum_i (s_b_i+1 - f_b_i) + sum_b duration(b)

and s_b_i+1 - f_b_i >= F_i(device(b_i), device(b_i+1), crossbars used in
segment i), where F_i is the optimum of the segment alone between its two
bottlenecks (a :class:`PlacementProblem` of its own): restricted to one
segment, any schedule is a feasible segment schedule.  So

    T* >= min over devices of the bottlenecks and crossbars per segment with
          sum <= C of sum_i F_i + sum_b duration(b)            (exact DP)

Equality holds when every *skip edge* (an edge that jumps over a bottleneck,
like a backbone feature going to the neck) is implied: it joins two host-only
operators (nothing crosses the bus) or its transfer time is at most the total
minimal duration of the bottlenecks it jumps over, because in a concatenation
of segment schedules those run between its two ends.  Then the
concatenation of optimal segment schedules is an optimal schedule.  Otherwise
the DP value is still a lower bound, and the concatenation is re-timed with
every edge by :func:`simulate` (an upper bound).

F_i(b) is the shortest span with at most b crossbars on the CIM.  A "solve" of a small segment
reads it off the segment's enumerated front (:meth:`_Decomposition.enumerated`); else it is
computed by CP-SAT, from solves per segment and bottleneck devices at
the segment's full budget, at none and at the warm start's share; then (whole
operators, segments of at most :data:`LARGEST_SEGMENT` operators) by the parametric
descent of :mod:`.fronts`, about one solve pair per Pareto point of F_i over the
budgets the DP can use (larger segments keep the knapsack floor of
:func:`.fronts.host_floor`, a proven F_i(b) >= host time left after b crossbars'
worth of operators leave the host); then lazily: the DP over
lower bounds picks a
crossbar allocation; every segment on it whose bound is not yet tight at that
allocation is solved (to optimality if time allows) with its crossbar budget
set to the allocation, and the DP runs again.  A solve at budget L with
proven bound lb and a solution using u crossbars of span s tells F_i(b) >= lb
for b <= L (F_i does not increase with b) and F_i(b) <= s for b >= u.  The
loop ends when the DP's bound meets the best concatenated schedule within the
gap, or at the deadline.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from cimsplit.passes.placement import dag
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import host_order_by_start, simulate
from cimsplit.passes.placement.solvers.cpsat.fronts import _Front, _Key, _Solve, best_path, descend
from cimsplit.passes.placement.solvers.cpsat.solve import CpSatOptions, solve_cpsat
from cimsplit.passes.placement.solvers.exhaustive import MAX_CHOICES, FrontPoint, best_within, segment_front

__all__ = ["LARGEST_SEGMENT", "Segments", "SegmentsRun", "chain_segments", "run_decomposition", "solve_by_segments",
           "split_at_bottlenecks"]

log = logging.getLogger(__name__)

LARGEST_SEGMENT = 64
"""Segments up to this many operators descend their fronts (:func:`.fronts.descend`); larger ones keep
their knapsack floor and are solved lazily.  YOLOv5n's largest has 55, which CP-SAT proves at most
budgets in 0.1-0.3 s; a random detector-400's 130-operator tail takes 1-2 s per step of a front
with a step at nearly every crossbar, so descending it starved the small segments (0.9 % gap at
30 s, 0.29 % without)."""

ENUMERATED_CHOICES = MAX_CHOICES
"""Segments with at most this many choices (ways to run each member) are enumerated instead of solved
(:meth:`_Decomposition.enumerated`); 0: none are (the tests of the solves set it)."""


@dataclass(frozen=True)
class Segments:
    """The bottleneck chain of a problem (indices of :attr:`augmented`: 0 = ``<start>``, n+1 = ``<end>``)."""

    augmented: PlacementProblem
    bottlenecks: tuple[int, ...]
    """In topological order, from ``<start>`` to ``<end>``."""
    members: tuple[tuple[int, ...], ...]
    """``members[i]``: the operators between ``bottlenecks[i]`` and ``bottlenecks[i + 1]``."""
    exact: bool
    """Every skip edge is implied: the DP optimum is the problem's optimum."""

    @property
    def largest(self) -> int:
        """Operators in the largest segment."""
        return max((len(m) for m in self.members), default=0)


def augment(problem: PlacementProblem) -> PlacementProblem:
    """The problem with a host-only, zero-time ``<start>`` (index 0) and ``<end>`` (n + 1).

    Graph inputs become edges ``<start> -> v`` carrying ``t_in`` (paid iff v is on
    the CIM, as ``s_v >= t_in·(1 - x_v)``), graph outputs edges ``v -> <end>``
    carrying ``t_out``; every source and sink is linked too, so the makespan is
    the start of ``<end>``.  Same optimum, same schedules (shifted by one index).
    """
    n = problem.n
    has_pred = {v for _, v, _ in problem.edges}
    sinks = set(dag.sinks(problem))
    edges = [(u + 1, v + 1, t) for u, v, t in problem.edges]
    for v in range(n):
        if v not in has_pred or (problem.capable(v) and problem.t_in_ns[v] > 0):
            edges.append((0, v + 1, problem.t_in_ns[v] if problem.capable(v) else 0.0))
        writes = problem.capable(v) and problem.writes_output[v] and problem.t_out_ns[v] > 0
        if v in sinks or writes:
            edges.append((v + 1, n + 1, problem.t_out_ns[v] if writes else 0.0))
    return PlacementProblem(
        names=("<start>", *problem.names, "<end>"), t_host_ns=(0.0, *problem.t_host_ns, 0.0),
        t_cim_ns=(None, *problem.t_cim_ns, None), crossbars=(0, *problem.crossbars, 0),
        edges=tuple(sorted(edges)), budget=problem.budget)


def split_at_bottlenecks(problem: PlacementProblem) -> Segments:
    """Bottlenecks, segments and whether the decomposition is exact (see the module docstring)."""
    return chain_segments(augment(problem))


def chain_segments(aug: PlacementProblem, allowed: set[int] | None = None,
                   edge_ns: dict[tuple[int, int], float] | None = None) -> Segments:
    """:func:`split_at_bottlenecks` on an augmented problem, with the bottlenecks taken among
    ``allowed`` (augmented indices; default all) and, for the exactness rule, ``edge_ns[(u, v)]``
    as the longest time edge u -> v can carry (default its transfer)."""
    anc, desc = dag.ancestors(aug), dag.descendants(aug)
    everything = (1 << aug.n) - 1
    chain = [v for v in range(aug.n) if anc[v] | desc[v] | (1 << v) == everything and (allowed is None or v in allowed)]
    members = tuple(tuple(w for w in range(aug.n) if (desc[a] & anc[b]) >> w & 1) for a, b in itertools.pairwise(chain))
    # Position of every operator on the chain: 2i for bottleneck i, 2i + 1 inside segment i.
    where = {b: 2 * i for i, b in enumerate(chain)}
    where.update({w: 2 * i + 1 for i, seg in enumerate(members) for w in seg})
    shortest = [dag.min_duration_ns(aug, b) for b in chain]
    exact = True
    for u, v, t in aug.edges:
        t = max(t, (edge_ns or {}).get((u, v), t))
        jumped = range(where[u] // 2 + 1, (where[v] + 1) // 2)  # bottlenecks strictly between u and v
        paid = aug.capable(u) or aug.capable(v)  # between two host-only operators nothing crosses
        if t > 0 and paid and len(jumped) and sum(shortest[i] for i in jumped) < t:
            exact = False
    return Segments(aug, tuple(chain), members, exact)


def _segment_problem(seg: Segments, i: int, entry_host: bool, exit_host: bool, budget: int
                     ) -> tuple[PlacementProblem, list[int]]:
    """Segment i between its bottlenecks, with their devices fixed; and the local -> augmented index map.

    A bottleneck on the host is a host-only operator of zero time; on the CIM, a
    CIM-capable one of zero CIM time and zero crossbars whose host time exceeds
    any schedule without it on the host (so no optimum puts it there).  The
    bottlenecks' own times are added by the DP.  The makespan is the exit's start.
    """
    aug = seg.augmented
    a, b = seg.bottlenecks[i], seg.bottlenecks[i + 1]
    index = [a, *seg.members[i], b]
    local = {v: k for k, v in enumerate(index)}
    edges = tuple((local[u], local[v], t) for u, v, t in aug.edges if u in local and v in local)
    inner = seg.members[i]
    horizon = sum(max(aug.t_host_ns[v], aug.t_cim_ns[v] or 0.0) for v in inner) + sum(t for _, _, t in edges)
    never = 2.0 ** math.ceil(math.log2(horizon + 2.0))  # a power of two keeps binary-exact time units exact

    def boundary(on_host: bool) -> tuple[float, float | None]:
        return (0.0, None) if on_host else (never, 0.0)

    (h0, c0), (h1, c1) = boundary(entry_host), boundary(exit_host)
    problem = PlacementProblem(
        names=tuple(aug.names[v] for v in index),
        t_host_ns=(h0, *(aug.t_host_ns[v] for v in inner), h1),
        t_cim_ns=(c0, *(aug.t_cim_ns[v] for v in inner), c1),
        crossbars=(0, *(aug.crossbars[v] for v in inner), 0), edges=edges, budget=budget)
    return problem, index


@dataclass
class SegmentsRun:
    """The outcome of :func:`solve_by_segments`."""

    schedule: Schedule
    """Best concatenated schedule, re-timed on the original problem."""
    bound_ns: float
    """Proven lower bound on the optimal makespan."""
    solves: int
    time_s: float
    segments: Segments
    incumbents: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since the start, makespan in ns) of every improving concatenated schedule."""


def solve_by_segments(problem: PlacementProblem, *, time_limit_s: float = 60.0, gap: float = 1e-6,
                      threads: int = 2, seed: int = 0, warm_start: Schedule | None = None,
                      largest_descent: int | None = LARGEST_SEGMENT) -> SegmentsRun:
    """Solve ``problem`` by the bottleneck decomposition (module docstring); CP-SAT per segment.

    Segment solves run ``threads`` at a time, one CP-SAT worker each.  Every
    solve that ends before its time limit is deterministic, so is the result.
    Segments of more than ``largest_descent`` operators skip the fronts' descent
    (:func:`.fronts.descend`; ``None``: none skips it).
    """
    seg = split_at_bottlenecks(problem)
    return run_decomposition(_Decomposition, problem, seg, time_limit_s=time_limit_s, gap=gap, threads=threads,
                             seed=seed, warm_start=warm_start, descent=True, largest_descent=largest_descent)


def run_decomposition(kind: type[_Decomposition], problem: PlacementProblem, seg: Segments, *, time_limit_s: float,
                      gap: float, threads: int, seed: int, warm_start: Schedule | None,
                      descent: bool = False, largest_descent: int | None = None) -> SegmentsRun:
    """The lazy loop of the module docstring with the decomposition ``kind`` (whole operators, or
    :mod:`.sliced_segments`' sliced segments); ``descent``: first the fronts' descent of
    :mod:`.fronts` (its second phase is a whole-operator model) on the segments of at most
    ``largest_descent`` operators."""
    begin = time.perf_counter()
    first = min(0.5, 0.05 * time_limit_s)
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        dec = kind(problem, seg, gap, seed, warm_start, begin + time_limit_s, pool)
        dec.solve_all([dec.prepare(key, limit, first) for key in dec.keys for limit in sorted(dec.starts(key), reverse=True)])
        best = [warm_start or simulate(problem, [True] * problem.n)]
        trace: list[tuple[float, float]] = []

        def improve() -> float:
            """The best concatenated schedule's makespan, after assembling the DP's best allocation."""
            _, upper_path = dec.best(lower=False)
            if upper_path:
                candidate = dec.assemble(upper_path)
                if candidate.makespan_ns < best[0].makespan_ns:
                    best[0] = candidate
                    trace.append((time.perf_counter() - begin, candidate.makespan_ns))
            dec.incumbent_ns = best[0].makespan_ns
            return best[0].makespan_ns

        if descent and improve() - dec.best(lower=True)[0] > gap * best[0].makespan_ns:
            descend(dec, improve, 4.0 * first, largest_descent)  # 4x: long enough for most steps to end
        while True:
            improve()
            incumbent = best[0]
            lower_ns, lower_path = dec.best(lower=True)
            if incumbent.makespan_ns - lower_ns <= gap * incumbent.makespan_ns or time.perf_counter() >= dec.deadline:
                break
            targets = dec.loose_segments(lower_path, 0.1 * gap * incumbent.makespan_ns)
            if not targets:  # the bound's allocation is tight everywhere: lower == its own upper
                improve()  # (its upper points may be new: the sliced decomposition settles some fronts there)
                incumbent, lower_ns = best[0], dec.best(lower=True)[0]
                break
            dec.solve_all([dec.prepare(key, spent, 2.0 * (dec.fronts[key].longest_try(spent) or first / 2))
                           for key, spent in targets])
    bound = min(lower_ns, incumbent.makespan_ns)
    solves = sum(len(front.solves) for front in dec.fronts.values())
    log.info("segments: %d bottlenecks, largest segment %d operators, %d solves: %.6g ns, bound %.6g ns",
             len(seg.bottlenecks) - 2, seg.largest, solves, incumbent.makespan_ns, bound)
    return SegmentsRun(incumbent, bound, solves, time.perf_counter() - begin, seg, trace)


class _Decomposition:
    """The fronts F_i of every segment and bottleneck devices, the solves that refine them, and the DP."""

    def __init__(self, problem: PlacementProblem, seg: Segments, gap: float, seed: int,
                 warm_start: Schedule | None, deadline: float, pool: ThreadPoolExecutor) -> None:
        self.problem, self.seg, self.gap, self.seed = problem, seg, gap, seed
        self.warm_start, self.deadline, self.pool = warm_start, deadline, pool
        aug, chain, budget = seg.augmented, seg.bottlenecks, problem.budget
        self.aug, self.chain, self.budget = aug, chain, budget
        # (on host, duration, crossbars) of every device each bottleneck can take
        self.devices = [[(True, aug.t_host_ns[b], 0)] + ([(False, aug.t_cim_ns[b], aug.crossbars[b])]
                        if aug.capable(b) and aug.crossbars[b] <= budget else []) for b in chain]
        self.caps = [min(budget, sum(aug.crossbars[w] for w in members if aug.capable(w) and aug.crossbars[w] <= budget))
                     for members in seg.members]
        self.keys: list[_Key] = [(i, h0, h1) for i in range(len(seg.members)) if seg.members[i]
                                 for h0, _, _ in self.devices[i] for h1, _, _ in self.devices[i + 1]]
        self.fronts = {key: _Front() for key in self.keys}
        self.incumbent_ns = math.inf
        """The best concatenated makespan so far (the lazy loop updates it between rounds)."""

    def segment(self, key: _Key, limit: int) -> tuple[PlacementProblem, list[int]]:
        """Segment problem of ``key`` at budget ``limit``, and its local -> augmented index map."""
        return _segment_problem(self.seg, *key, limit)

    def enumerated(self, key: _Key) -> list[FrontPoint] | None:
        """The front of ``key``'s segment by enumeration (:func:`.exhaustive.segment_front`), if it is small
        enough: every budget's optimum, exact; each point uses the fewest crossbars of any as short."""
        sub, _ = self.segment(key, 0)
        return segment_front(sub, key[1], key[2], ENUMERATED_CHOICES)

    def prepare(self, key: _Key, limit: int, seconds: float):
        """A segment solve, warm-started from the best known solution that fits (built before any runs)."""
        return self.prepare_from(key, limit, seconds, self.fronts[key].upper(limit))

    def prepare_from(self, key: _Key, limit: int, seconds: float, known: _Solve | None):
        """A segment solve at budget ``limit``, warm-started from ``known`` (a solve of this key that fits)."""
        i, h0, h1 = key
        sub, index = _segment_problem(self.seg, i, h0, h1, limit)
        warm = None
        if known is not None:
            on_host = [h0, *(known.on_host[v] for v in index[1:-1]), h1]
            order = [index.index(v) for v in known.host_order]
            warm = simulate(sub, on_host, ([0] if h0 else []) + order + ([len(index) - 1] if h1 else []))
        return key, limit, seconds, sub, index, warm

    def run(self, job) -> _Solve | None:
        key, limit, seconds, sub, index, warm = job
        points = self.enumerated(key)
        if points is not None:  # the optimum at ``limit``, exact (a proven solve, found in microseconds)
            point = best_within(points, limit)
            return self.record(sub, index, point.schedule, limit, point.schedule.makespan_ns, True, seconds)
        left = min(seconds, self.deadline - time.perf_counter())
        if left < 0.01:
            return None
        out = solve_cpsat(sub, CpSatOptions(time_limit_s=left, mip_gap=self.gap, seed=self.seed, threads=1,
                                            heuristic_time_s=min(0.2, 0.004 * sub.n)), warm_start=warm)
        assert out.schedule is not None  # all on the host is always a solution
        return self.record(sub, index, out.schedule, limit, out.outcome.bound_ns,
                           out.outcome.status in ("optimal", "gap_limit"), seconds)

    @staticmethod
    def record(sub: PlacementProblem, index: list[int], sched: Schedule, limit: int, bound_ns: float,
               finished: bool, seconds: float) -> _Solve:
        """What a segment schedule ``sched`` (local indices) found at budget ``limit`` tells its front."""
        inner = range(1, len(index) - 1)
        return _Solve(limit=limit, used=sum(sub.crossbars[k] for k in inner if not sched.on_host[k]),
                      span_ns=sched.makespan_ns, bound_ns=bound_ns, on_host={index[k]: sched.on_host[k] for k in inner},
                      host_order=tuple(index[k] for k in host_order_by_start(sched) if 0 < k < len(index) - 1),
                      finished=finished, seconds=seconds)

    def solve_all(self, jobs: list) -> None:
        """Run the jobs ``threads`` at a time and record what each tells about its front."""
        for (key, *_), result in zip(jobs, self.pool.map(self.run, jobs)):
            if result is not None:
                self.fronts[key].solves.append(result)

    def direct(self, i: int, h0: bool, h1: bool) -> float:
        """Span of an empty segment: the transfer on the edge between its bottlenecks, if any."""
        if h0 == h1:
            return 0.0
        if not hasattr(self, "_direct"):
            self._direct: dict[tuple[int, int], float] = {}
            for u, v, t in self.aug.edges:
                self._direct[(u, v)] = self._direct.get((u, v), 0.0) + t
        return self._direct.get((self.chain[i], self.chain[i + 1]), 0.0)

    def best(self, lower: bool) -> tuple[float, list[tuple[bool, int]]]:
        """DP over the chain: (value, [(device of bottleneck i, crossbars spent in segment i), ...]) (:func:`best_path`)."""
        return best_path(self, lower)

    def _exit_host(self, path: list[tuple[bool, int]], i: int) -> bool:
        """Device of bottleneck i + 1 on ``path`` (``<end>`` is on the host)."""
        return path[i + 1][0] if i + 1 < len(path) else True

    def assemble(self, path: list[tuple[bool, int]]) -> Schedule:
        """The concatenated segment schedules of ``path``, re-timed on the original problem."""
        aug, chain, seg = self.aug, self.chain, self.seg
        on_host = [True] * aug.n
        order = [0]
        for i, (h0, spent) in enumerate(path):
            on_host[chain[i]] = h0
            if seg.members[i]:
                chosen = self.fronts[(i, h0, self._exit_host(path, i))].upper(spent)
                assert chosen is not None
                for v, h in chosen.on_host.items():
                    on_host[v] = h
                order += list(chosen.host_order)
            if i + 1 < len(chain) and self._exit_host(path, i):
                order.append(chain[i + 1])
        hosts = [v - 1 for v in order if 0 < v < aug.n - 1 and on_host[v]]
        return simulate(self.problem, on_host[1:-1], hosts)

    def starts(self, key: _Key) -> set[int]:
        """First budgets: full (an optimistic bound), none (every allocation fits) and the warm start's share."""
        i, h0, h1 = key
        shares = {self.caps[i], 0}
        if self.warm_start is not None:
            warm = (True, *self.warm_start.on_host, True)  # augmented indices
            if (warm[self.chain[i]], warm[self.chain[i + 1]]) == (h0, h1):
                shares.add(sum(self.aug.crossbars[w] for w in self.seg.members[i] if not warm[w]))
        return shares

    def lowest(self, i: int) -> int:
        """Crossbars segment i can always take: the budget less every other segment's cap and every
        bottleneck's largest device (0 when they can use the whole budget)."""
        others = sum(self.caps) - self.caps[i] + sum(max(x for _, _, x in devices) for devices in self.devices)
        return min(self.caps[i], max(0, self.budget - others))

    def loose_segments(self, lower_path: list[tuple[bool, int]], tolerance_ns: float) -> list[tuple[_Key, int]]:
        """The segments on the bound's allocation whose bound is not tight there, loosest first, each
        at the budget it spends there or, if larger, at :meth:`lowest`: a solve at b >= spent bounds
        F(spent) too, and its schedule fits beside every allocation of the others (the DP's tie between
        the two budgets made the loop walk up a step of the floor one budget per round)."""
        targets = []
        for i, (h0, spent) in enumerate(lower_path):
            if not self.seg.members[i]:
                continue
            key = (i, h0, self._exit_host(lower_path, i))
            front, at = self.fronts[key], max(spent, self.lowest(i))
            top = front.upper(at)
            slack = (top.span_ns if top else math.inf) - front.lower(spent)
            if not front.finished(at) and slack > tolerance_ns:
                targets.append((-slack, key, at))
        return [(key, at) for _, key, at in sorted(targets)]
