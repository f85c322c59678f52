"""Sequencing a fixed assignment: list scheduling of the host under several priority rules.

The host is the only resource with conflicts.  Rules: bottom level (longest path
to the end, the critical-path rule), remaining host work below the operator,
topological index, and "feed the CIM first".  Each is a non-delay serial schedule
generation: whenever the host is free it runs the released host operator of best
priority; CIM operators start the moment their inputs arrive (each owns its crossbars).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from cimsplit.passes.placement import dag
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import host_order_by_start, simulate

__all__ = ["RULES", "Sequencer", "best_list_schedule", "polish_order"]

RULES = ("bottom", "host_below", "index", "cim_feed")


class Sequencer:
    """Precomputed graph structure for fast list scheduling of many assignments (the heuristics' inner loop)."""

    def __init__(self, problem: PlacementProblem) -> None:
        self.p = problem
        n = problem.n
        succ: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        n_pred = [0] * n
        for u, v, t in problem.edges:
            succ[u].append((v, t))
            n_pred[v] += 1
        self.succ = [tuple(edges) for edges in succ]
        self.n_pred = n_pred
        self.out_ns = [problem.t_out_ns[v] if problem.writes_output[v] else 0.0 for v in range(n)]
        """What a CIM operator's graph output adds after it ends."""
        # descendants as bitmasks (and a 0/1 matrix for the "host work below" rule)
        desc = dag.descendants(problem)
        self.desc = desc
        self.desc_matrix = dag.bit_matrix(desc, n).astype(float)
        self.work = n + len(problem.edges)

    def durations(self, on_host: Sequence[bool]) -> list[float]:
        p = self.p
        return [p.t_host_ns[v] if on_host[v] else p.t_cim_ns[v] for v in range(p.n)]  # type: ignore[misc]

    def bottom_levels(self, on_host: Sequence[bool], dur: list[float]) -> list[float]:
        """Longest path from each operator's start to the end (its duration, transfers, a CIM output's write)."""
        succ, out_ns = self.succ, self.out_ns
        bottom = [0.0] * self.p.n
        for u in range(self.p.n - 1, -1, -1):
            here = on_host[u]
            tail = 0.0 if here else out_ns[u]
            for v, t in succ[u]:
                through = bottom[v] + t if here != on_host[v] else bottom[v]
                if through > tail:
                    tail = through
            bottom[u] = dur[u] + tail
        return bottom

    def priorities(self, on_host: Sequence[bool], dur: list[float], rule: str, bottom: list[float] | None = None) -> list[float]:
        """Each operator's priority under ``rule`` (higher runs first); ``bottom``: :meth:`bottom_levels`, if known."""
        n = self.p.n
        if rule == "index":
            return [float(-v) for v in range(n)]
        if bottom is None:
            bottom = self.bottom_levels(on_host, dur)
        if rule == "bottom":
            return bottom
        if rule == "host_below":
            host_dur = np.array([d if h else 0.0 for d, h in zip(dur, on_host)])
            below = (self.desc_matrix @ host_dur).tolist()
            return [below[u] + dur[u] + 1e-3 * bottom[u] for u in range(n)]
        if rule == "cim_feed":
            return [bottom[u] + (1e12 if any(not on_host[v] for v, _ in self.succ[u]) else 0.0) for u in range(n)]
        raise ValueError(f"unknown rule {rule!r}")

    def run(self, on_host: Sequence[bool], rule: str) -> tuple[float, list[int]]:
        """Non-delay list schedule: (makespan, host order).  Equals simulate() on that order."""
        dur = self.durations(on_host)
        return self._schedule(on_host, dur, self.priorities(on_host, dur, rule))

    def best_makespan(self, on_host: Sequence[bool], rules: Sequence[str]) -> float:
        """The least of :meth:`run`'s makespans over ``rules`` (durations and bottom levels computed once)."""
        dur = self.durations(on_host)
        bottom = self.bottom_levels(on_host, dur)
        return min(self._schedule(on_host, dur, self.priorities(on_host, dur, rule, bottom))[0] for rule in rules)

    def _schedule(self, on_host: Sequence[bool], dur: list[float], prio: list[float]) -> tuple[float, list[int]]:
        p, n, succ, out_ns = self.p, self.p.n, self.succ, self.out_ns
        release = [0.0 if on_host[v] else p.t_in_ns[v] for v in range(n)]
        left = list(self.n_pred)
        finish = [0.0] * n
        pending: list[tuple[float, int]] = []  # host ops with all inputs placed: (release, v)
        ready: list[tuple[float, int]] = []  # released host ops: (-priority, v)
        makespan = 0.0
        push, pop = heapq.heappush, heapq.heappop

        def place(u: int) -> None:
            """Finish ``u`` (``finish[u]`` set) and every CIM operator it releases; queue the host ones."""
            nonlocal makespan
            stack = [u]
            while stack:
                w = stack.pop()
                f = finish[w]
                here = on_host[w]
                end = f if here else f + out_ns[w]
                if end > makespan:
                    makespan = end
                for x, t in succ[w]:
                    r = f + t if here != on_host[x] else f
                    if r > release[x]:
                        release[x] = r
                    left[x] -= 1
                    if left[x] == 0:
                        if on_host[x]:
                            push(pending, (release[x], x))
                        else:
                            finish[x] = release[x] + dur[x]
                            stack.append(x)

        for v in [v for v in range(n) if left[v] == 0]:  # sources, listed before any placement
            if on_host[v]:
                push(pending, (release[v], v))
            else:
                finish[v] = release[v] + dur[v]
                place(v)
        order: list[int] = []
        clock = 0.0
        while pending or ready:
            if not ready and pending[0][0] > clock:
                clock = pending[0][0]
            while pending and pending[0][0] <= clock:
                v = pop(pending)[1]
                push(ready, (-prio[v], v))
            v = pop(ready)[1]
            start = clock if clock > release[v] else release[v]
            order.append(v)
            finish[v] = clock = start + dur[v]
            place(v)
        return makespan, order



def best_list_schedule(problem: PlacementProblem, on_host: Sequence[bool], rules: Sequence[str] = RULES,
                  sequencer: Sequencer | None = None) -> Schedule:
    """The best of the list schedules of a fixed assignment, one per priority rule, re-timed by simulate()."""
    seq = sequencer or Sequencer(problem)
    best = min((seq.run(on_host, r) for r in rules), key=lambda mo: mo[0])
    return simulate(problem, on_host, best[1])



def polish_order(problem: PlacementProblem, sched: Schedule, work_left: float, seq: Sequencer) -> Schedule:
    """Adjacent swaps in the host order that shorten the makespan (first improvement)."""
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

