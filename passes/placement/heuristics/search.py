"""Choosing the assignment: iterated local search from the greedy and knapsack starts.

Moves flip one operator's device; swaps put one operator on the CIM and evict
the CIM operators of least saving per crossbar until the budget holds;
exchanges send one CIM operator home for one of the best few host operators
that then fit; random kicks between descents.  Deterministic for a seed: the
search stops on a work count (operators + edges touched), derived from
``time_budget_s`` with a fixed rate, not on the clock; a wall-clock guard at
three times the budget only protects against a slow machine (it logs a warning
when it fires, since the result may then differ).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Sequence

from cimsplit.passes.placement.heuristics.assignment import fits_alone, greedy_assignment, knapsack_assignment
from cimsplit.passes.placement.heuristics.sequencing import RULES, Sequencer, best_list_schedule, polish_order
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule

__all__ = ["best_heuristic", "heuristic_budget_s", "local_search"]

log = logging.getLogger(__name__)

_WORK_PER_S = 1.0e6
"""Work units (operators + edges processed by one list schedule) per second assumed by the budget."""
_EXCHANGE_CANDIDATES = 4
"""Host operators tried per exchange: the largest savings that fit in the freed crossbars."""


def heuristic_budget_s(problem: PlacementProblem, time_limit_s: float) -> float:
    """The warm-start heuristic's budget: min(1 s, 5 % of the limit, 4 ms per operator).

    The per-operator cap keeps small graphs fast: the local search otherwise
    spends its whole work budget kicking a 3-operator chain (0.6 s).  YOLOv5n
    (122 operators) gets 0.49 s of work, about 0.25 s of wall time; at 2 ms per
    operator its schedule at 25 crossbars, 1000 ns was 2.0 % above the optimum,
    at 4 ms 0.26 %.
    """
    return min(1.0, 0.05 * time_limit_s, 0.004 * problem.n)


class _Search:
    """Iterated local search over assignments; evaluation = best of a few list schedules."""

    def __init__(self, problem: PlacementProblem, seed: int, work_limit: float, deadline: float,
                 rules: Sequence[str]) -> None:
        self.p = problem
        self.seq = Sequencer(problem)
        self.rng = random.Random(seed)
        self.work_left = work_limit
        self.deadline = deadline
        self.rules = tuple(rules)
        self.cache: dict[tuple[bool, ...], float] = {}
        self.best_value = math.inf
        self.best: tuple[bool, ...] = tuple(True for _ in range(problem.n))
        self.capable = [v for v in range(problem.n) if fits_alone(problem, v)]
        gain = {v: problem.t_host_ns[v] - problem.t_cim_ns[v] for v in self.capable}  # type: ignore[operator]
        self.by_gain = sorted(self.capable, key=lambda v: (-gain[v], v))
        self.by_ratio = sorted((v for v in self.capable if gain[v] > 0), key=lambda v: (-self.gain_ratio(v), v))
        self.timed_out = False

    def exhausted(self) -> bool:
        if self.work_left <= 0:
            return True
        if time.thread_time() > self.deadline:
            self.timed_out = True
            return True
        return False

    def value(self, on_host: tuple[bool, ...]) -> float:
        hit = self.cache.get(on_host)
        if hit is not None:
            self.work_left -= self.p.n  # a look-up still costs: keeps tiny searches finite
            return hit
        self.work_left -= self.seq.work * len(self.rules)
        v = self.seq.best_makespan(on_host, self.rules)
        self.cache[on_host] = v
        if v < self.best_value - 1e-9 * max(1.0, abs(v)):
            self.best_value, self.best = v, on_host
        return v

    def used(self, on_host: Sequence[bool]) -> int:
        return sum(self.p.crossbars[v] for v in self.capable if not on_host[v])

    def gain_ratio(self, v: int) -> float:
        p = self.p
        return (p.t_host_ns[v] - p.t_cim_ns[v]) / max(1, p.crossbars[v])  # type: ignore[operator]

    def fill(self, x: list[bool], used: int, banned: int) -> None:
        """Offload host operators that still fit, best saving per crossbar first (not ``banned``)."""
        p = self.p
        for v in self.by_ratio:
            if x[v] and v != banned and used + p.crossbars[v] <= p.budget:
                x[v] = False
                used += p.crossbars[v]

    def neighbours(self, on_host: tuple[bool, ...]) -> list[tuple[bool, ...]]:
        """Moves (flip one operator), swaps (offload one, evict the worst until it fits) and
        exchanges (send one CIM operator home, offload one of the best few host operators
        that then fit, refill the freed crossbars)."""
        p = self.p
        used = self.used(on_host)
        on_cim = [v for v in self.capable if not on_host[v]]
        out = []
        for v in self.capable:
            x = list(on_host)
            if not on_host[v]:
                x[v] = True  # move to the host
                out.append(tuple(x))
                continue
            x[v] = False
            if used + p.crossbars[v] <= p.budget:
                out.append(tuple(x))  # move to the CIM
                continue
            # swap: evict CIM operators of least saving per crossbar until v fits
            need = used + p.crossbars[v] - p.budget
            for u in sorted(on_cim, key=lambda u: (self.gain_ratio(u), u)):
                if need <= 0:
                    break
                x[u] = True
                need -= p.crossbars[u]
            if need <= 0:
                out.append(tuple(x))
        for z in on_cim:  # exchanges
            free = p.budget - used + p.crossbars[z]
            fits = [v for v in self.by_gain if on_host[v] and p.crossbars[v] <= free][:_EXCHANGE_CANDIDATES]
            for v in fits:
                x = list(on_host)
                x[z], x[v] = True, False
                self.fill(x, used - p.crossbars[z] + p.crossbars[v], banned=z)
                out.append(tuple(x))
        self.rng.shuffle(out)
        return out

    def descend(self, start: tuple[bool, ...]) -> tuple[bool, ...]:
        cur, cur_v = start, self.value(start)
        improved = True
        while improved and not self.exhausted():
            improved = False
            for nb in self.neighbours(cur):
                if self.exhausted():
                    break
                v = self.value(nb)
                if v < cur_v - 1e-9 * max(1.0, cur_v):
                    cur, cur_v, improved = nb, v, True
                    break
        return cur

    def kick(self, x: tuple[bool, ...], flips: int) -> tuple[bool, ...]:
        y = list(x)
        for _ in range(flips):
            if not self.capable:
                break
            v = self.rng.choice(self.capable)
            y[v] = not y[v]
        while self.used(y) > self.p.budget:  # repair: send random CIM operators home
            y[self.rng.choice([v for v in self.capable if not y[v]])] = True
        return tuple(y)



def local_search(problem: PlacementProblem, starts: Sequence[Sequence[bool]], *, seed: int = 0,
                 work_limit: float = 1e6, time_limit_s: float = 10.0,
                 rules: Sequence[str] = ("bottom", "host_below")) -> tuple[tuple[bool, ...], bool]:
    """Iterated local search from ``starts``; returns (best assignment, stopped by the clock)."""
    # The clock is this thread's CPU time: neighbours' load on a shared machine does not stop the search early,
    # so the work limit, not the machine, decides the result wherever the search is not truly too long.
    s = _Search(problem, seed, work_limit, time.thread_time() + time_limit_s, rules)
    for x in starts:
        s.value(tuple(bool(h) for h in x))
    for x in sorted({tuple(bool(h) for h in x) for x in starts}, key=s.value):
        if s.exhausted():
            break
        s.descend(x)
    while not s.exhausted() and s.capable:
        s.descend(s.kick(s.best, s.rng.randint(2, max(2, min(8, len(s.capable) // 4 + 2)))))
    return s.best, s.timed_out



def best_heuristic(problem: PlacementProblem, time_budget_s: float = 1.0, seed: int = 0) -> Schedule:
    """The best schedule the heuristics find in about ``time_budget_s`` (deterministic for ``seed``)."""
    t0 = time.monotonic()
    seq = Sequencer(problem)
    starts = [
        [True] * problem.n,
        greedy_assignment(problem, "ratio"),
        greedy_assignment(problem, "saving"),
        knapsack_assignment(problem, use_saving=True),
        knapsack_assignment(problem, use_saving=False),
    ]
    work = max(time_budget_s, 0.0) * _WORK_PER_S
    best_x, timed_out = local_search(problem, starts, seed=seed, work_limit=0.8 * work,
                                     time_limit_s=3.0 * max(time_budget_s, 0.05))
    sched = best_list_schedule(problem, best_x, RULES, seq)
    sched = polish_order(problem, sched, 0.2 * work, seq)
    if timed_out:
        log.warning("heuristic search stopped by its CPU-time limit after %.2f s; the result may vary between runs",
                    time.monotonic() - t0)
    log.debug("best heuristic: %.1f ns in %.2f s", sched.makespan_ns, time.monotonic() - t0)
    return sched
