"""Segment fronts by parametric descent: F(b) in about one solve per Pareto point, where the DP can use it.

F(b), the shortest span of a segment (with its bottleneck devices fixed) using
at most b crossbars, is non-increasing in b.  The descent computes it from the
top: at budget L it solves the segment (CP-SAT, span minimised), then, among
the schedules no longer than the one found (in model units), one with the
fewest crossbars u (:func:`.solve.solve_fewest_crossbars`), and continues at
u - 1.  Exactness is that of :mod:`.segments`: a solve at budget L with proven
bound lb tells F(b) >= lb for every b <= L, and every schedule found using u
crossbars with span s tells F(b) <= s for every b >= u.  When the solve at L
is proven and the second phase's schedule keeps its span, F = s on [u, L]
(up to the rounding of the model's time unit, which :mod:`.model` bounds), so
one solve pair settles a whole step of the front, and no budget in [u, L] is
solved again.  Unproven solves keep their bounds, and the lazy loop of
:mod:`.segments` refines them afterwards.

Where the descent stops.  A budget b of key k = (segment i, entry device h0,
exit device h1) is *useful* when

    A_i(h0, a) + lower_k(b) + duration(h1) + B_i+1(h1, c) < (1 - gap / 2)·UB

for some a + b + crossbars(h1) + c <= C, where A_i(h, a) is the DP over lower
bounds of the segments before i with at most a crossbars (bottleneck i on h,
its time and crossbars included), B_i+1(h, c) the same DP over the segments
after i, lower_k(b) the best proven bound at a budget >= b and UB the best
concatenated schedule.  Every allocation giving k a budget that is not useful
is at least (1 - gap / 2)·UB for every later, tighter state of the bounds, so
the loop's final DP bound meets the gap there without solving it: each key
descends only through its useful budgets, to the largest useful one below the
last step, and stops when none is left.  Keys descend side by side in rounds
(one step each, ``threads`` at a time); the usefulness test runs between
rounds, so a solve that ends before its time limit gives the same fronts, and
the same answer, on every run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cimsplit.passes.placement.solvers.cpsat.solve import CpSatOptions, solve_fewest_crossbars

_Decomposition = Any
"""A :class:`.segments._Decomposition` (not imported: segments imports this module)."""
_Key = tuple[int, bool, bool]
"""(segment, entry bottleneck on the host, exit bottleneck on the host)."""

__all__ = ["best_path", "descend", "dp_tables", "host_floor", "rest_ns", "useful_budgets"]


@dataclass(frozen=True)
class _Solve:
    """One CP-SAT solve of a segment at crossbar budget ``limit``."""

    limit: int
    used: int
    span_ns: float
    bound_ns: float
    on_host: dict[int, bool]
    """Device of every segment operator (augmented indices)."""
    host_order: tuple
    """Host operators (augmented indices) in order; with slicing, (operator, role) pairs of the expansion."""
    finished: bool
    """CP-SAT proved its optimum (the bound may still sit below the span by rounding)."""
    seconds: float
    """The time limit it was given."""
    slicing: dict[int, int] = field(default_factory=dict)
    """Slicing option of every sliced segment operator (augmented indices; the others are whole)."""


@dataclass
class _Front:
    """What the solves of one (segment, entry device, exit device) say about F(b)."""

    solves: list[_Solve] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    """``floor[b]``: a proven F(b) >= this from elsewhere (:func:`host_floor`), b = 0..len - 1."""

    def finished(self, b: int) -> bool:
        """Whether a solve at budget b ran to the end (nothing more to learn there)."""
        return any(s.finished for s in self.solves if s.limit == b)

    def longest_try(self, b: int) -> float:
        """The largest time limit a solve at budget b was given (0 if none)."""
        return max((s.seconds for s in self.solves if s.limit == b), default=0.0)

    def upper(self, b: int) -> _Solve | None:
        """The best solve whose solution fits in b crossbars (ties: fewest crossbars, then first found)."""
        fits = [s for s in self.solves if s.used <= b]
        return min(fits, key=lambda s: (s.span_ns, s.used)) if fits else None

    def lower(self, b: int) -> float:
        """Proven F(b) >= this: the best bound of a solve at a budget >= b, or the floor."""
        floor = self.floor[min(b, len(self.floor) - 1)] if self.floor else 0.0
        return max([floor, *(s.bound_ns for s in self.solves if s.limit >= b)])

    def upper_points(self) -> list[tuple[int, float]]:
        """(crossbars used, span) of every solution not beaten by one using no more crossbars."""
        points, best = [], math.inf
        for s in sorted(self.solves, key=lambda s: (s.used, s.span_ns)):
            if s.span_ns < best:
                points.append((s.used, s.span_ns))
                best = s.span_ns
        return points

    def lower_steps(self, cap: int) -> list[tuple[int, float]]:
        """(b, lower(b)) at the smallest b of every step of the lower bound, b <= cap."""
        cuts = sorted({0} | {s.limit + 1 for s in self.solves if s.limit < cap}
                      | {b for b in range(1, min(cap + 1, len(self.floor))) if self.floor[b] < self.floor[b - 1]})
        return [(b, self.lower(b)) for b in cuts]


def _points(dec: _Decomposition, i: int, h0: bool, h1: bool) -> list[tuple[int, float]]:
    """The DP's (crossbars, lower bound of the span) points of segment i between those devices."""
    if not dec.seg.members[i]:
        return [(0, dec.direct(i, h0, h1))]
    return dec.fronts[(i, h0, h1)].lower_steps(dec.caps[i])


def _shift(values: np.ndarray, by: int) -> np.ndarray:
    """values[r - by] for r >= by, inf below (``at most r crossbars`` after spending ``by``)."""
    out = np.full_like(values, math.inf)
    if by < len(values):
        out[by:] = values[:len(values) - by]
    return out


def dp_tables(dec: _Decomposition) -> tuple[list[dict[bool, np.ndarray]], list[dict[bool, np.ndarray]]]:
    """Forward A[i][h] and backward B[i][h] arrays over "at most r crossbars" (module docstring)."""
    size, last = dec.budget + 1, len(dec.chain) - 1
    forward: list[dict[bool, np.ndarray]] = [{True: np.zeros(size)}]
    for i in range(last):
        layer: dict[bool, np.ndarray] = {}
        for h1, duration, crossbars in dec.devices[i + 1]:
            best = np.full(size, math.inf)
            for h0, values in forward[-1].items():
                for spent, span in _points(dec, i, h0, h1):
                    best = np.minimum(best, _shift(values, spent + crossbars) + span + duration)
            layer[h1] = best
        forward.append(layer)
    backward: list[dict[bool, np.ndarray]] = [{} for _ in range(last)] + [{True: np.zeros(size)}]
    for i in range(last - 1, -1, -1):
        for h0, _, _ in dec.devices[i]:
            best = np.full(size, math.inf)
            for h1, duration, crossbars in dec.devices[i + 1]:
                if h1 in backward[i + 1]:
                    for spent, span in _points(dec, i, h0, h1):
                        best = np.minimum(best, _shift(backward[i + 1][h1], spent + crossbars) + span + duration)
            backward[i][h0] = best
    return forward, backward


def best_path(dec: _Decomposition, lower: bool) -> tuple[float, list[tuple[bool, int]]]:
    """The DP over ``dec``'s chain: (value, [(device of bottleneck i, crossbars spent in segment i), ...]);
    ``lower``: of the fronts' lower bounds, else of their solutions.

    One array per device of each bottleneck over the crossbars used so far (exactly, inf where
    unreachable), with back-pointers.  Ties keep the first candidate in the order (device of the
    previous bottleneck, host first; crossbars used before it, fewest first), and the end state with
    the fewest crossbars among the best."""
    seg, devices, size = dec.seg, dec.devices, dec.budget + 1
    points = {key: front.lower_steps(dec.caps[key[0]]) if lower else front.upper_points()
              for key, front in dec.fronts.items()}
    start = np.full(size, math.inf)
    start[0] = 0.0
    values: dict[bool, np.ndarray] = {True: start}
    # per layer: device -> (device before, crossbars used before, crossbars spent in the segment) arrays
    back: list[dict[bool, tuple[np.ndarray, np.ndarray, np.ndarray]]] = []
    for i in range(len(dec.chain) - 1):
        layer, pointers = {}, {}
        for h1, duration, crossbars in devices[i + 1]:
            best = np.full(size, math.inf)
            came_host, came_used, came_spent = np.ones(size, bool), np.zeros(size, int), np.zeros(size, int)
            for h0 in sorted(values):
                steps = points[(i, h0, h1)] if seg.members[i] else [(0, dec.direct(i, h0, h1))]
                for spent, span in reversed(steps):  # more spent, fewer used before: first among ties
                    shift = spent + crossbars
                    if shift >= size:
                        continue
                    candidate = values[h0][:size - shift] + span + duration
                    better = np.flatnonzero(candidate < best[shift:])
                    best[shift + better] = candidate[better]
                    came_host[shift + better], came_used[shift + better], came_spent[shift + better] = h0, better, spent
            layer[h1], pointers[h1] = best, (came_host, came_used, came_spent)
        values = layer
        back.append(pointers)
    ends = [(float(row[used]), int(used), h) for h, row in values.items() for used in [int(np.argmin(row))]]
    if not ends or min(ends)[0] == math.inf:
        return math.inf, []
    value, used, h = min(ends, key=lambda end: end[:2])
    path = []
    for pointers in reversed(back):
        came_host, came_used, came_spent = pointers[h]
        h, used, spent = bool(came_host[used]), int(came_used[used]), int(came_spent[used])
        path.append((h, spent))
    return value, path[::-1]


def _lower_array(dec: _Decomposition, key: _Key) -> np.ndarray:
    """lower_k(b) for b = 0..cap: the best bound of a solve at a budget >= b."""
    lower = np.zeros(dec.caps[key[0]] + 1)
    for s in dec.fronts[key].solves:
        top = min(s.limit, len(lower) - 1)
        lower[:top + 1] = np.maximum(lower[:top + 1], s.bound_ns)
    return lower


def useful_budgets(dec: _Decomposition, keys: list[_Key], threshold_ns: float) -> dict[_Key, np.ndarray]:
    """For every key, a Boolean array over b = 0..cap: whether budget b is useful (module docstring)."""
    tables = dp_tables(dec)
    return {key: _lower_array(dec, key) + rest_ns(dec, key, tables) < threshold_ns for key in keys}


def rest_ns(dec: _Decomposition, key: _Key, tables: tuple | None = None) -> np.ndarray:
    """For b = 0..cap: the DP over lower bounds of everything but segment i when it holds b crossbars
    (A_i(h0, a) + duration(h1) + B_i+1(h1, c), a + b + crossbars(h1) + c <= C; inf if nothing fits).
    Non-decreasing in b.  ``tables``: :func:`dp_tables` of ``dec``, when the caller has them."""
    forward, backward = tables or dp_tables(dec)
    i, h0, h1 = key
    budget, size = dec.budget, dec.caps[i] + 1
    a, b_rest = forward[i].get(h0), backward[i + 1].get(h1)
    if a is None or b_rest is None:
        return np.full(size, math.inf)
    duration, crossbars = next((d, c) for h, d, c in dec.devices[i + 1] if h == h1)
    # rest[t]: the least value of both sides with at most t crossbars between them
    rest = np.array([np.min(a[:t + 1] + b_rest[t::-1]) for t in range(budget + 1)])
    room = budget - np.arange(size) - crossbars
    return np.where(room >= 0, duration + rest[np.clip(room, 0, budget)], math.inf)


def host_floor(dec: _Decomposition, i: int) -> list[float]:
    """F_i(b) >= the host time of segment i's members less the most host time b crossbars can take off
    (a 0/1 knapsack), for b = 0..cap: every member's host interval lies between the two bottlenecks,
    and host intervals do not overlap.  Whole operators only (a sliced part takes host time off for
    fewer crossbars)."""
    aug, cap = dec.aug, dec.caps[i]
    members = dec.seg.members[i]
    total = sum(aug.t_host_ns[w] for w in members)
    removable = [0.0] * (cap + 1)
    for w in members:
        crossbars = aug.crossbars[w]
        if aug.capable(w) and crossbars <= dec.budget:
            for b in range(cap, crossbars - 1, -1):
                removable[b] = max(removable[b], removable[b - crossbars] + aug.t_host_ns[w])
    return [max(0.0, (total - r) * (1.0 - 1e-12)) for r in removable]  # (1 - 1e-12): float sums' rounding


def descend(dec: _Decomposition, incumbent_ns: Callable[[], float], seconds: float,
            largest: int | None = None) -> None:
    """Refine the fronts of every key by the descent of the module docstring.

    ``incumbent_ns()`` updates and returns the best concatenated makespan (called between
    rounds); ``seconds`` is each solve's time limit (the deadline of ``dec`` caps it).
    Every key gets its :func:`host_floor`; only segments of at most ``largest`` operators
    (``None``: all) descend.  A large segment's front has a step at almost every crossbar
    (a detector tail of 130 operators: 2 s per step, and every round waited for it), while
    its floor is within 0.1-0.2 % of it: it keeps the floor and its first solves, and the
    lazy loop solves it where the DP's allocation needs it.  Skipping keys only leaves
    their fronts looser, so every bound stays a bound.
    """
    for key in dec.keys:
        dec.fronts[key].floor = host_floor(dec, key[0])
    below = {key: dec.caps[key[0]] for key in dec.keys  # the descent continues at budgets <= this
             if largest is None or len(dec.seg.members[key[0]]) <= largest}
    while below and time.perf_counter() < dec.deadline:
        threshold = incumbent_ns() * (1.0 - 0.5 * dec.gap)
        useful = useful_budgets(dec, sorted(below), threshold)
        jobs = []
        for key in sorted(below):
            budgets = np.flatnonzero(useful[key][:below[key] + 1])
            if len(budgets) == 0:
                del below[key]
                continue
            jobs.append((key, int(budgets[-1]), seconds))
        for (key, _, _), step in zip(jobs, dec.pool.map(lambda job: _step(dec, *job), jobs)):
            if step is None:  # the deadline
                del below[key]
                continue
            first, solves = step
            dec.fronts[key].solves.extend(solves)
            below[key] = min(s.used for s in [first, *solves]) - 1
            if below[key] < 0:
                del below[key]
    incumbent_ns()


def _step(dec: _Decomposition, key: _Key, limit: int, seconds: float) -> tuple[_Solve, list[_Solve]] | None:
    """One descent step at ``limit``: the span solve (unless one at this budget already ran to the
    end) and the fewest-crossbars solve within its span; (the span solve, the new solves), or
    ``None`` at the deadline."""
    front, out = dec.fronts[key], []
    first = next((s for s in front.solves if s.limit == limit and s.finished), None)
    if first is None:
        first = dec.run(dec.prepare(key, limit, seconds))
        if first is None:
            return None
        out.append(first)
    if not first.finished or first.used == 0 or front.lower(first.used - 1) > first.span_ns or dec.enumerated(key) is not None:
        return first, out  # not the shortest span (the lazy loop solves it again), or none as short uses fewer crossbars
    _, _, _, sub, index, warm = dec.prepare_from(key, limit, seconds, first)
    left = min(seconds, dec.deadline - time.perf_counter())
    if left < 0.01 or warm is None:
        return first, out
    few = solve_fewest_crossbars(sub, CpSatOptions(time_limit_s=left, seed=dec.seed, threads=1), warm)
    if few.used < first.used:
        out.append(dec.record(sub, index, few.schedule, limit, 0.0, False, seconds))
    return first, out
