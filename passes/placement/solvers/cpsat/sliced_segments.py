"""The bottleneck decomposition of :mod:`.segments` for problems with slicing options (TSO).

The problem is cut at bottlenecks without slicing options (:mod:`.sliced_split`, which argues why the DP's bound
and its exactness carry over); each segment is a small sliced problem solved by the sliced CP-SAT model
(:func:`.sliced.solve_sliced`) or, when small enough, read off its enumerated front, and the lazy DP of
:mod:`.segments` combines them.

Solves shared across budgets (``memo``).  A segment problem depends on the crossbar budget only
through its own budget field: its members, bottleneck devices, times, transfers and slicing options
come from the augmented problem, which the points of a budget chain share.  So F_i, and every fact a
solve states about it (a solve at limit L with bound lb: F_i(b) >= lb for b <= L; a schedule using u
crossbars with span s: F_i(b) <= s for b >= u), is the same at every budget where the bottleneck
chain cuts the same segment.  A :data:`SegmentMemo` keyed by the segment problem without its budget
(and its index map) hands each decomposition of a chain the fronts the earlier ones built; a solve is
skipped when one at the same limit already finished or had at least its time (it would state nothing
new: the lazy loop asks for twice the longest try, so it still progresses).

Before any solve each front holds the warm start cut into its segments (an upper point and the
first hints) and the floor of the segment's cheap bounds at every budget (a lower bound the deadline
cannot take away); :meth:`_SlicedDecomposition.enter_warm_start` and ``enter_cheap_bounds`` argue both.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from functools import partial

from cimsplit.passes.placement.heuristics.shrink import shrink_to_budget
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import host_order_by_start, simulate
from cimsplit.passes.placement.sliced_bound import critical_path_bound_ns, host_load_by_budget_ns
from cimsplit.passes.placement.slicing import WHOLE, expand, parts_schedule, sliced_crossbars
from cimsplit.passes.placement.solvers.cpsat.fronts import dp_tables, rest_ns
from cimsplit.passes.placement.solvers.cpsat.segments import (
    SegmentsRun,
    _Decomposition,
    _Key,
    _Solve,
    run_decomposition,
)
from cimsplit.passes.placement.solvers.cpsat.sliced import SlicedOutcome, solve_sliced
from cimsplit.passes.placement.solvers.cpsat.sliced_split import sliced_segment, split_sliced
from cimsplit.passes.placement.solvers.exhaustive import best_within

__all__ = ["SegmentMemo", "solve_sliced_by_segments"]

SegmentMemo = dict[tuple[PlacementProblem, tuple[int, ...]], list[_Solve]]
"""Segment solves by segment problem (its budget set to 0) and index map, shared by the decompositions
of one budget chain (module docstring)."""

LARGE_SEGMENT = 16
"""Segments of at least this many operators are *large*: the first time the lazy loop targets one, the
fronts of all the others are settled (:meth:`_SlicedDecomposition.settle`), and each of its solves
seeks only what could shorten the incumbent (:meth:`_SlicedDecomposition.cutoff_ns`)."""
LARGE_TRY_S = 0.5
"""The least deterministic time a large segment's solve gets.  The lazy loop's first try is 5 % of the time limit, at
most 0.5 s: at a 5 s limit, 0.25 s tries at YOLOv8n int8's 41-operator head found nothing at any budget (YOLOv5n's
and YOLOv8n's 32 points within 0.5 % of the 60 s result: 28, 27, 27 in three runs; 28, 29, 30 with this floor;
bench/results/first_solution_shrink_spr_s41.txt).  At limits of 10 s and more the loop gives this anyway."""
CUTOFF_SLACK = 1e-9
"""A large segment's cutoff lies this much of the incumbent above incumbent - R, to admit the incumbent's own
segment schedule, whose span it is exactly when R is exact (enumerated fronts).  That solve then minimizes from
it (:func:`.sliced.solve_sliced` decides only below its warm start); left to float rounding, it often decided
just below it instead, and YOLOv5n int8's 500 and 1000 ns chains took 78-108 s at three seeds, not 57-91 s."""


class _SlicedDecomposition(_Decomposition):
    """:class:`.segments._Decomposition` whose segment solves are sliced (modes and a host order of parts)."""

    def __init__(self, *args, memo: SegmentMemo | None = None) -> None:
        super().__init__(*args)
        memo = {} if memo is None else memo
        for key in self.keys:  # the front's solves are the memo's list: what this run adds, the next one sees
            sub, index = sliced_segment(self.seg, key[0], key[1], key[2], 0)
            self.fronts[key].solves = memo.setdefault((sub, tuple(index)), [])
        aug = self.aug
        slicings = aug.slicings or ((),) * aug.n

        def most(w: int) -> int:
            xbars = [aug.crossbars[w]] if aug.capable(w) and aug.crossbars[w] <= self.budget else [0]
            return max(xbars + [o.crossbars for o in slicings[w] if o.crossbars <= self.budget])

        self.caps = [min(self.budget, sum(most(w) for w in members)) for members in self.seg.members]
        self.settled = False
        """Whether :meth:`settle` ran."""
        self.enter_warm_start()
        self.enter_cheap_bounds()

    def _modes(self, known: _Solve | None, index: list[int], h0: bool, h1: bool) -> tuple[list[bool], list[int]]:
        inner = index[1:-1]
        on_host = [h0, *(known.on_host[v] if known else True for v in inner), h1]
        slicing = [WHOLE, *(known.slicing.get(v, WHOLE) if known else WHOLE for v in inner), WHOLE]
        return on_host, slicing

    def segment(self, key: _Key, limit: int) -> tuple[PlacementProblem, list[int]]:
        return sliced_segment(self.seg, *key, limit)

    def prepare(self, key: _Key, limit: int, seconds: float):
        """A segment solve, warm-started from the best known solution that fits, with the front's bound there.

        Where no known solution fits, the warm start is the better of all on the host and the nearest larger solution
        shrunk to fit (:func:`~..heuristics.shrink.shrink_to_budget`): a large segment's first solves are below its
        warm start's share (YOLOv8n int8's head at 45 crossbars in the chain of 100 / 500 ns started from 48.5 ms all
        on the host, now from 16.1 ms).  A large segment's known solution that leaves crossbars unused is polished
        with them (the same function; the loop walks its budgets up one at a time, each try starting from the last)."""
        i, h0, h1 = key
        sub, index = sliced_segment(self.seg, i, h0, h1, limit)
        front = self.fronts[key]
        known = front.upper(limit)
        warm = self._timed(sub, index, known, h0, h1)
        start = known if known is not None and known.used < limit and self.large(i) else None
        if known is None:  # the nearest larger solution, if any
            start = min((s for s in front.solves if s.used > limit), key=lambda s: (s.used, s.span_ns), default=None)
        if start is not None:  # shrunk to fit, or polished with the crossbars it leaves
            improved = shrink_to_budget(sub, *self._modes(start, index, h0, h1), limit)
            warm = min((warm, improved), key=lambda schedule: schedule.makespan_ns)
        seconds = max(seconds, LARGE_TRY_S) if self.large(i) else seconds
        return key, limit, seconds, sub, index, warm, front.lower(limit)

    def cutoff_ns(self, key: _Key, limit: int, tables: tuple) -> float | None:
        """The span below which segment i at budget ``limit`` could still shorten the incumbent: the
        incumbent less R(limit), the least the rest costs beside it (:func:`.fronts.rest_ns` on ``tables``);
        None where nothing fits.  The solve seeks only spans up to it; a model proven infeasible proves
        F_i(b) > cutoff for b <= limit, all the DP needs there, far sooner than the optimum (YOLOv5n
        int8, 50 crossbars / 1000 ns: its head at 8, 13, 14, 16, 19 crossbars in 0.2-0.4 s).  Whatever
        the cutoff (raised by :data:`CUTOFF_SLACK`), a solve records proven facts about F_i: bounds stay bounds."""
        rest = float(rest_ns(self, key, tables)[min(limit, self.caps[key[0]])])
        return self.incumbent_ns * (1.0 + CUTOFF_SLACK) - rest if math.isfinite(rest) else None

    def _timed(self, sub: PlacementProblem, index: list[int], known: _Solve | None, h0: bool, h1: bool) -> Schedule:
        """``known``'s modes and host order (all whole on the host if ``None``) re-timed on the segment."""
        on_host, slicing = self._modes(known, index, h0, h1)
        expansion = expand(sub, on_host, slicing)
        where = {(index[v], r): j for j, (v, r) in enumerate(zip(expansion.owner, expansion.role))}
        order = [where[(v, r)] for v, r in known.host_order] if known else \
            [j for j in range(1, len(index) - 1)]  # all whole on the host: expansion indices = local ones
        last = len(expansion.owner) - 1
        order = ([0] if h0 else []) + order + ([last] if h1 else [])
        parts = simulate(expansion.problem, expansion.on_host, order)
        return parts_schedule(sub, expansion, parts, slicing)

    def enter_warm_start(self) -> None:
        """Enter the warm start, cut into its segments, as a solution of each front it belongs to.

        Restricted to segment i, the warm start is a feasible segment schedule (the argument of the
        module docstring) using its share of crossbars: an upper point F_i(share) <= its span, and
        the hint of the first solves at budgets >= its share (instead of all on the host).  It
        proves nothing (bound 0).
        """
        warm = self.warm_start
        if warm is None:
            return
        n = self.problem.n
        slicing = (WHOLE, *(warm.slicing or (WHOLE,) * n), WHOLE)  # augmented indices
        on_host = (True, *warm.on_host, True)
        expansion = expand(self.problem, warm.on_host, slicing[1:-1])
        timed = warm.parts if warm.parts is not None else warm
        order = [(expansion.owner[j] + 1, expansion.role[j]) for j in host_order_by_start(timed)]
        for i, members in enumerate(self.seg.members):
            key = (i, on_host[self.chain[i]], on_host[self.chain[i + 1]])
            if not members or key not in self.fronts:
                continue
            inside = set(members)
            share = sum(self.aug.slicings[w][slicing[w]].crossbars if slicing[w] != WHOLE
                        else (0 if on_host[w] else self.aug.crossbars[w]) for w in members)
            known = _Solve(limit=share, used=share, span_ns=0.0, bound_ns=0.0,
                           on_host={w: on_host[w] for w in members},
                           host_order=tuple(p for p in order if p[0] in inside), finished=False, seconds=0.0,
                           slicing={w: slicing[w] for w in members if slicing[w] != WHOLE})
            sub, index = sliced_segment(self.seg, i, key[1], key[2], share)
            span_ns = self._timed(sub, index, known, key[1], key[2]).makespan_ns
            self.fronts[key].solves.append(replace(known, span_ns=span_ns))

    def enter_cheap_bounds(self) -> None:
        """Give every front the floor of the cheap bounds, so that a segment whose solves the deadline
        cuts off still bounds the DP.

        For the segment problem at its cap, :func:`~cimsplit.passes.placement.sliced_bound.host_load_by_budget_ns`
        at c crossbars is the least host time of any segment schedule using at most c crossbars, and
        every host task of the segment runs within its span (the argument of the module docstring),
        so F_i(b) >= that at c = b; the critical path of shortest modes at the cap is <= F_i(cap) <=
        F_i(b) for b <= cap (F does not increase with the budget).  ``floor[b]`` is their maximum.
        """
        for key in self.keys:
            i, h0, h1 = key
            sub, _ = sliced_segment(self.seg, i, h0, h1, self.caps[i])
            path_ns = critical_path_bound_ns(sub)
            loads = host_load_by_budget_ns(sub)
            loads += [loads[-1]] * (self.caps[i] + 1 - len(loads))
            self.fronts[key].floor = [max(load, path_ns) * (1.0 - 1e-12) for load in loads]  # float sums' rounding

    def large(self, i: int) -> bool:
        """Whether segment i is large (:data:`LARGE_SEGMENT`)."""
        return len(self.seg.members[i]) >= LARGE_SEGMENT

    def settle(self, seconds: float = 0.5) -> None:
        """Solve the fronts of the segments that are not large at every budget from their cap down to
        :meth:`lowest` (below it F cannot change the DP's value), so that R (:func:`.fronts.rest_ns`) is
        their exact DP and a large segment's cutoff at each budget is what the incumbent leaves it.
        Keys step down side by side: a proven solve at b whose schedule uses u crossbars settles F on
        [u, b] (F(b') <= its span for b' >= u, >= its bound for b' <= b), so the next budget is u - 1.

        Before, the lazy loop proved the small segments only where the DP's bound put them, so R sat
        up to 2 ms below the rest's optimum, every cutoff of YOLOv5n int8's 56-operator head was as
        loose (50 crossbars / 1000 ns: 12.2 ms at 22 crossbars, spans 9.2), and its solves ran to their
        time limits.  Settled (76 solves, all proven, ~3 s there), most of them are proven infeasible
        in 0.1-0.8 s; that point went from 49 to 24 s (``bench/yolo_chains.py``), and the mode-bound
        MILPs that used to floor the head (a module of their own, 0.5-3 s each) no longer paid."""
        self.settled = True
        at = {key: self.caps[key[0]] for key in self.keys if not self.large(key[0])}
        while at and time.perf_counter() < self.deadline:
            self.solve_all([self.prepare(key, b, seconds) for key, b in at.items()])
            for key, b in list(at.items()):
                done = [s for s in self.fronts[key].solves if s.limit == b and s.finished]
                below = min(s.used for s in done) - 1 if done else b - 1
                if below < self.lowest(key[0]):
                    del at[key]
                else:
                    at[key] = below

    def loose_segments(self, lower_path: list[tuple[bool, int]], tolerance_ns: float) -> list[tuple[_Key, int]]:
        """:meth:`.segments._Decomposition.loose_segments`; the first time a large segment is among them,
        after :meth:`settle`, on the DP's new allocation."""
        targets = super().loose_segments(lower_path, tolerance_ns)
        if self.settled or not any(self.large(key[0]) for key, _ in targets):
            return targets
        self.settle()
        return super().loose_segments(self.best(lower=True)[1], tolerance_ns)

    def solve_all(self, jobs: list) -> None:
        """:meth:`.segments._Decomposition.solve_all` less the jobs an earlier solve at their limit
        (this run's or the memo's) already answered: one that finished, or one given as much time; the
        large segments' with their cutoff (:meth:`cutoff_ns`, from one DP before they run side by side)."""
        def answered(key: _Key, limit: int, seconds: float) -> bool:
            return any(s.limit == limit and (s.finished or s.seconds >= seconds) for s in self.fronts[key].solves
                       if s.seconds > 0)  # (the warm start's entry, seconds 0, is no solve)
        jobs = [job for job in jobs if not answered(*job[:3])]
        large = [self.large(job[0][0]) for job in jobs]
        tables = dp_tables(self) if any(large) and math.isfinite(self.incumbent_ns) else None
        super().solve_all([(*job, self.cutoff_ns(job[0], job[1], tables) if tables is not None and big else None)
                           for job, big in zip(jobs, large)])

    def run(self, job) -> _Solve | None:
        key, limit, seconds, sub, index, warm, lb, cutoff = job
        if (points := self.enumerated(key)) is not None:  # exact, as in :meth:`.segments._Decomposition.run`
            point = best_within(points, limit)
            return self._entry(sub, index, point.schedule, point.host_order, limit, point.schedule.makespan_ns, seconds, True)
        left = self.deadline - time.perf_counter()
        if left < 0.01:
            return None
        # ``lb``: what the front proved at this budget when the job was made (not while the solves of
        # the batch run beside it).  A warm start within the gap of it is optimal without a solve, one
        # at the cutoff tells the DP all it needs.  Not a ``T >= lb`` row of the solve: that row made
        # CP-SAT slower on the zoo's heads (YOLOv8n int8, 25 crossbars / 50 ns: 15 crossbars proven in
        # 0.7 s without it, 14 s with), and it is entered below anyway.
        if lb >= warm.makespan_ns * (1.0 - self.gap):
            out = SlicedOutcome("optimal", warm, None, min(lb, warm.makespan_ns), 0.0, 0, 0, True)
        elif cutoff is not None and lb >= cutoff:
            return self._entry(sub, index, warm, None, limit, lb, seconds, False)
        else:
            # ``seconds`` of CP-SAT's deterministic time (the wall clock only at the deadline): the
            # solves, hence the fronts, the DP and the answer, do not depend on the machine's load.
            # A retry at this budget searches with another seed: a proof's time varies widely with the seed
            # (YOLOv5n int8's head at 21 crossbars / 1000 ns, one cutoff: 1.5-22 s over eight seeds), so
            # a fresh search with twice the work beats the same one continued.  Still deterministic.
            tries = sum(1 for solve in self.fronts[key].solves if solve.limit == limit and solve.seconds > 0)
            out = solve_sliced(sub, SolveOptions(time_limit_s=left, mip_gap=self.gap, seed=self.seed + tries, threads=1),
                               warm, work_limit_s=seconds, cutoff_ns=cutoff, small=not self.large(key[0]))
            if out.schedule is None:  # (none within the cutoff, or none in time: F_i's optimum is still unknown)
                out = replace(out, finished=False)
        sched, order, bound = out.schedule, out.host_order, max(out.bound_ns, lb)
        if sched is None or sched.makespan_ns > warm.makespan_ns:  # nothing (better) in time: the warm start
            sched, order = warm, None
        return self._entry(sub, index, sched, order, limit, bound, seconds, out.finished)

    @staticmethod
    def _entry(sub: PlacementProblem, index: list[int], sched: Schedule, order: tuple[int, ...] | None, limit: int,
               bound_ns: float, seconds: float, finished: bool) -> _Solve:
        """A segment schedule (``order``: its host order over the expansion, if not by start) as a front's solve."""
        slicing = list(sched.slicing or (WHOLE,) * sub.n)
        expansion = expand(sub, sched.on_host, slicing)
        if order is None:
            order = tuple(host_order_by_start(sched.parts if sched.parts is not None else sched))
        inner = range(1, len(index) - 1)
        return _Solve(limit=limit, used=sliced_crossbars(sub, sched.on_host, slicing), span_ns=sched.makespan_ns,
                      bound_ns=min(bound_ns, sched.makespan_ns), on_host={index[k]: sched.on_host[k] for k in inner},
                      host_order=tuple((index[expansion.owner[j]], expansion.role[j]) for j in order
                                       if 0 < expansion.owner[j] < len(index) - 1),
                      finished=finished, seconds=seconds,
                      slicing={index[k]: slicing[k] for k in inner if slicing[k] != WHOLE})

    def assemble(self, path: list[tuple[bool, int]]) -> Schedule:
        """The concatenated segment schedules of ``path``, re-timed on the expansion of the original problem."""
        aug, chain, seg = self.aug, self.chain, self.seg
        on_host, slicing = [True] * aug.n, [WHOLE] * aug.n
        order: list[tuple[int, str]] = []
        for i, (h0, spent) in enumerate(path):
            on_host[chain[i]] = h0
            if seg.members[i]:
                chosen = self.fronts[(i, h0, self._exit_host(path, i))].upper(spent)
                assert chosen is not None
                for v, h in chosen.on_host.items():
                    on_host[v] = h
                for v, k in chosen.slicing.items():
                    slicing[v] = k
                order += list(chosen.host_order)
            if i + 1 < len(chain) and self._exit_host(path, i):
                order.append((chain[i + 1], "whole"))
        n = self.problem.n
        expansion = expand(self.problem, on_host[1:-1], slicing[1:-1])
        where = {(v + 1, r): j for j, (v, r) in enumerate(zip(expansion.owner, expansion.role))}
        hosts = [where[(v, r)] for v, r in order if 0 < v <= n and expansion.on_host[where[(v, r)]]]
        parts = simulate(expansion.problem, expansion.on_host, hosts)
        return parts_schedule(self.problem, expansion, parts, slicing[1:-1])

    def starts(self, key: _Key) -> set[int]:
        """First budgets: full, none and the warm start's share (its slices' crossbars included); none for
        a large segment, which the lazy loop reaches after :meth:`settle`, with cutoffs: its first solves
        had none (no incumbent yet) and ran to their limits (YOLOv5n int8's head: 1.5-3 s each, three
        or so per chain of the paper's sweep, whose four chains took 88.3 s with them, 78.5 s without)."""
        i, h0, h1 = key
        if self.large(i):
            return set()
        shares = {self.caps[i], 0}
        warm = self.warm_start
        if warm is not None:
            on_host = (True, *warm.on_host, True)  # augmented indices
            slicing = (WHOLE, *(warm.slicing or (WHOLE,) * self.problem.n), WHOLE)
            if (on_host[self.chain[i]], on_host[self.chain[i + 1]]) == (h0, h1):
                members = self.seg.members[i]
                shares.add(sum(self.aug.slicings[w][slicing[w]].crossbars if slicing[w] != WHOLE
                               else (0 if on_host[w] else self.aug.crossbars[w]) for w in members))
        return shares


def solve_sliced_by_segments(problem: PlacementProblem, *, time_limit_s: float = 60.0, gap: float = 1e-6,
                             threads: int = 2, seed: int = 0, warm_start: Schedule | None = None,
                             memo: SegmentMemo | None = None) -> SegmentsRun:
    """The sliced problem by the bottleneck decomposition (module docstring); a sliced CP-SAT model per segment.

    ``warm_start`` (a feasible schedule, sliced or not) is the starting incumbent; ``memo``: the solves
    of the same segments at other budgets of a chain (read, and extended by this run).
    """
    seg = split_sliced(problem)
    return run_decomposition(partial(_SlicedDecomposition, memo=memo), problem, seg, time_limit_s=time_limit_s, gap=gap, threads=threads,
                             seed=seed, warm_start=warm_start)
