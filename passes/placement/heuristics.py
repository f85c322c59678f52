"""Primal heuristics: good schedules fast, as warm starts for every exact back end.

Two layers:

* Sequencing a fixed assignment: list scheduling of the host (the only resource
  with conflicts) under several priority rules: bottom level (longest path to the
  end, the critical-path rule), remaining host work below the operator, topological
  index, and "feed the CIM first".  Each is a non-delay serial schedule generation:
  whenever the host is free it runs the released host operator of best priority;
  CIM operators start the moment their inputs arrive (each owns its crossbars).
* Choosing the assignment: start points from greedy offloading (host time saved
  per crossbar, absolute saving) and an exact 0/1 knapsack of the saved host time
  under the crossbar budget (eq. 14); then iterated local search over moves (flip
  one operator's device) and swaps (put one operator on the CIM and evict the
  CIM operators of least saving per crossbar until the budget holds), with random
  kicks between descents.

Every schedule returned is re-timed by :func:`cimsplit.passes.placement.simulate.simulate`,
so it is valid by construction; its makespan is an upper bound on the optimum.
Deterministic for a seed: the search stops on a work count (operators + edges
touched), derived from ``time_budget_s`` with a fixed rate, not on the clock; a
wall-clock guard at three times the budget only protects against a slow machine
(it logs a warning when it fires, since the result may then differ).
"""

from __future__ import annotations

import heapq
import logging
import math
import random
import time
from collections.abc import Sequence

import numpy as np

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import simulate

__all__ = ["RULES", "Sequencer", "list_schedule", "greedy_assignment", "knapsack_assignment",
           "local_search", "best_heuristic"]

log = logging.getLogger(__name__)

RULES = ("bottom", "host_below", "index", "cim_feed")
_WORK_PER_S = 1.0e6
_EXCHANGE_CANDIDATES = 4
"""Host operators tried per exchange: the largest savings that fit in the freed crossbars."""
"""Work units (operators + edges processed by one list schedule) per second assumed by the budget."""


class Sequencer:
    """Precomputed graph structure for fast list scheduling of many assignments."""

    def __init__(self, problem: PlacementProblem) -> None:
        self.p = problem
        n = problem.n
        self.succ: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        self.pred: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        for u, v, t in problem.edges:
            self.succ[u].append((v, t))
            self.pred[v].append((u, t))
        self.n_pred = [len(ps) for ps in self.pred]
        # descendants as bitmasks (and a 0/1 matrix for the "host work below" rule)
        desc = [0] * n
        for u in range(n - 1, -1, -1):
            for v, _ in self.succ[u]:
                desc[u] |= desc[v] | (1 << v)
        self.desc = desc
        self.desc_matrix = np.zeros((n, n))
        for u in range(n):
            m = desc[u]
            while m:
                low = m & -m
                self.desc_matrix[u, low.bit_length() - 1] = 1.0
                m ^= low
        self.work = n + len(problem.edges)

    def durations(self, on_host: Sequence[bool]) -> list[float]:
        p = self.p
        return [p.t_host_ns[v] if on_host[v] else p.t_cim_ns[v] for v in range(p.n)]  # type: ignore[misc]

    def priorities(self, on_host: Sequence[bool], dur: list[float], rule: str) -> list[float]:
        p, n = self.p, self.p.n
        if rule == "index":
            return [float(-v) for v in range(n)]
        bottom = [0.0] * n
        for u in range(n - 1, -1, -1):
            tail = p.t_out_ns[u] if (not on_host[u] and p.writes_output[u]) else 0.0
            for v, t in self.succ[u]:
                tail = max(tail, (t if on_host[u] != on_host[v] else 0.0) + bottom[v])
            bottom[u] = dur[u] + tail
        if rule == "bottom":
            return bottom
        if rule == "host_below":
            host_dur = np.array([d if h else 0.0 for d, h in zip(dur, on_host)])
            below = self.desc_matrix @ host_dur
            return [float(below[u]) + dur[u] + 1e-3 * bottom[u] for u in range(n)]
        if rule == "cim_feed":
            return [bottom[u] + (1e12 if any(not on_host[v] for v, _ in self.succ[u]) else 0.0) for u in range(n)]
        raise ValueError(f"unknown rule {rule!r}")

    def run(self, on_host: Sequence[bool], rule: str) -> tuple[float, list[int]]:
        """Non-delay list schedule: (makespan, host order).  Equals simulate() on that order."""
        p, n = self.p, self.p.n
        dur = self.durations(on_host)
        prio = self.priorities(on_host, dur, rule)
        release = [0.0 if on_host[v] else p.t_in_ns[v] for v in range(n)]
        left = list(self.n_pred)
        finish = [0.0] * n
        pending: list[tuple[float, int]] = []  # host ops with all inputs placed: (release, v)
        ready: list[tuple[float, int]] = []  # released host ops: (-priority, v)
        makespan = 0.0
        stack: list[int] = []

        def place(u: int, start: float) -> None:
            nonlocal makespan
            stack.append(u)
            finish[u] = start + dur[u]
            while stack:
                w = stack.pop()
                f = finish[w]
                end = f + (p.t_out_ns[w] if (not on_host[w] and p.writes_output[w]) else 0.0)
                if end > makespan:
                    makespan = end
                for x, t in self.succ[w]:
                    r = f + (t if on_host[w] != on_host[x] else 0.0)
                    if r > release[x]:
                        release[x] = r
                    left[x] -= 1
                    if left[x] == 0:
                        if on_host[x]:
                            heapq.heappush(pending, (release[x], x))
                        else:
                            finish[x] = release[x] + dur[x]
                            stack.append(x)

        for v in [v for v in range(n) if left[v] == 0]:  # sources, listed before any placement
            if on_host[v]:
                heapq.heappush(pending, (release[v], v))
            else:
                place(v, release[v])
        order: list[int] = []
        clock = 0.0
        while pending or ready:
            if not ready and pending[0][0] > clock:
                clock = pending[0][0]
            while pending and pending[0][0] <= clock:
                r, v = heapq.heappop(pending)
                heapq.heappush(ready, (-prio[v], v))
            _, v = heapq.heappop(ready)
            start = max(clock, release[v])
            order.append(v)
            place(v, start)
            clock = finish[v]
        return makespan, order


def list_schedule(problem: PlacementProblem, on_host: Sequence[bool], rules: Sequence[str] = RULES,
                  sequencer: Sequencer | None = None) -> Schedule:
    """Best list schedule of a fixed assignment over ``rules``, re-timed by simulate()."""
    seq = sequencer or Sequencer(problem)
    best = min((seq.run(on_host, r) for r in rules), key=lambda mo: mo[0])
    return simulate(problem, on_host, best[1])


def _fits(problem: PlacementProblem, v: int) -> bool:
    return problem.capable(v) and problem.crossbars[v] <= problem.budget


def greedy_assignment(problem: PlacementProblem, key: str = "ratio") -> list[bool]:
    """Offload by host time saved (per crossbar for ``ratio``) while the budget (eq. 14) allows."""
    gain = {v: problem.t_host_ns[v] - problem.t_cim_ns[v] for v in range(problem.n) if _fits(problem, v)}  # type: ignore[operator]
    cand = [v for v, g in gain.items() if g > 0]
    if key == "ratio":
        cand.sort(key=lambda v: (-gain[v] / max(1, problem.crossbars[v]), v))
    else:
        cand.sort(key=lambda v: (-gain[v], v))
    on_host, used = [True] * problem.n, 0
    for v in cand:
        if used + problem.crossbars[v] <= problem.budget:
            on_host[v] = False
            used += problem.crossbars[v]
    return on_host


def knapsack_assignment(problem: PlacementProblem, use_saving: bool = True) -> list[bool]:
    """Exact 0/1 knapsack: offload the set that saves most host time within the budget.

    With ``use_saving`` the value is T_host - T_acc, otherwise T_host (host load only).
    Zero-crossbar operators with a positive value are always offloaded.
    """
    on_host = [True] * problem.n
    items = []
    for v in range(problem.n):
        if not _fits(problem, v):
            continue
        value = problem.t_host_ns[v] - (problem.t_cim_ns[v] if use_saving else 0.0)  # type: ignore[operator]
        if value <= 0:
            continue
        if problem.crossbars[v] == 0:
            on_host[v] = False
        else:
            items.append((v, problem.crossbars[v], value))
    cap = problem.budget
    if not items or cap * len(items) > 5_000_000:
        return greedy_assignment(problem) if items else on_host
    best = [0.0] * (cap + 1)
    take = [[False] * (cap + 1) for _ in items]
    for i, (_, w, val) in enumerate(items):
        row = take[i]
        for c in range(cap, w - 1, -1):
            cand = best[c - w] + val
            if cand > best[c]:
                best[c] = cand
                row[c] = True
    c = cap
    for i in range(len(items) - 1, -1, -1):
        if take[i][c]:
            on_host[items[i][0]] = False
            c -= items[i][1]
    return on_host


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
        self.capable = [v for v in range(problem.n) if _fits(problem, v)]
        gain = {v: problem.t_host_ns[v] - problem.t_cim_ns[v] for v in self.capable}  # type: ignore[operator]
        self.by_gain = sorted(self.capable, key=lambda v: (-gain[v], v))
        self.by_ratio = sorted((v for v in self.capable if gain[v] > 0), key=lambda v: (-self.gain_ratio(v), v))
        self.timed_out = False

    def exhausted(self) -> bool:
        if self.work_left <= 0:
            return True
        if time.monotonic() > self.deadline:
            self.timed_out = True
            return True
        return False

    def value(self, on_host: tuple[bool, ...]) -> float:
        hit = self.cache.get(on_host)
        if hit is not None:
            self.work_left -= self.p.n  # a look-up still costs: keeps tiny searches finite
            return hit
        self.work_left -= self.seq.work * len(self.rules)
        v = min(self.seq.run(on_host, r)[0] for r in self.rules)
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
    s = _Search(problem, seed, work_limit, time.monotonic() + time_limit_s, rules)
    for x in starts:
        s.value(tuple(bool(h) for h in x))
    for x in sorted({tuple(bool(h) for h in x) for x in starts}, key=s.value):
        if s.exhausted():
            break
        s.descend(x)
    while not s.exhausted() and s.capable:
        s.descend(s.kick(s.best, s.rng.randint(2, max(2, min(8, len(s.capable) // 4 + 2)))))
    return s.best, s.timed_out


def _polish_order(problem: PlacementProblem, sched: Schedule, work_left: float, seq: Sequencer) -> Schedule:
    """Adjacent swaps in the host order that shorten the makespan (first improvement)."""
    from cimsplit.passes.placement.simulate import host_order_by_start

    order = host_order_by_start(sched)
    best = sched
    improved = True
    while improved and work_left > 0:
        improved = False
        for i in range(len(order) - 1):
            a, b = order[i], order[i + 1]
            if (seq.desc[a] >> b) & 1:
                continue
            trial = order[:i] + [b, a] + order[i + 2:]
            work_left -= seq.work
            cand = simulate(problem, best.on_host, trial)
            if cand.makespan_ns < best.makespan_ns - 1e-9 * best.makespan_ns:
                best, order, improved = cand, trial, True
                break
            if work_left <= 0:
                break
    return best


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
    sched = list_schedule(problem, best_x, RULES, seq)
    sched = _polish_order(problem, sched, 0.2 * work, seq)
    if timed_out:
        log.warning("heuristic search stopped by the clock after %.2f s; the result may vary between runs",
                    time.monotonic() - t0)
    log.debug("best heuristic: %.1f ns in %.2f s", sched.makespan_ns, time.monotonic() - t0)
    return sched
