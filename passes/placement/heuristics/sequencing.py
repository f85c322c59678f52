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
        desc = dag.descendants(problem)
        self.desc = desc
        self.desc_matrix = dag.bit_matrix(desc, n).astype(float)
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

