"""Exact placement of tiny problems by enumeration: every device and slicing choice, every host order.

For a fixed choice per operator (whole on the host, whole on the CIM, or one of its slicing options)
and a fixed order of the host operators, the earliest-start schedule of the expansion
(:func:`~cimsplit.passes.placement.simulate.simulate` on :func:`~cimsplit.passes.placement.slicing.expand`)
is the shortest schedule with that choice and order: each operator starts when its predecessors,
their transfers and the previous host operator allow, and no start can be earlier in any schedule
with that order (induction along the order and the DAG), so neither can the makespan.  Every
schedule runs its host operators (parts and joins included) one at a time in some order that
respects precedence.  So the shortest over every choice and every such order is the optimum, and
grouped by the crossbars each choice holds (eq. 14), the whole crossbar front at once:

    F(b) = the shortest span with at most b crossbars, for every budget b.

Branch and bound keeps it short.  Choices are taken in increasing crossbars, so a choice can only
make a step of the front by beating every span found so far (the incumbent); it is skipped when its
host work or its critical path already reaches the incumbent, and a partial host order is dropped
when the host's free time plus the host work left, or a finish time so far, does.  Both are lower
bounds on every completion.  The front's schedules are re-timed by ``simulate`` on ``expand``.

This is exact in nanoseconds, not in CP-SAT's floored time units.  It pays where a problem has a
handful of operators: a bottleneck segment of ResNet-50 (3-4 convolutions with 3-6 slicing options
each) takes 4 ms on average for its whole front (71 fronts of a sweep chain: 0.3 s), where CP-SAT took
12-26 ms per budget.  Beyond ``max_choices`` choices or ``max_steps`` steps of the host-order search it
gives up (``None``) and the caller solves.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.placement.slicing import WHOLE, expand, parts_schedule

__all__ = ["MAX_CHOICES", "MAX_STEPS", "FrontPoint", "best_within", "crossbar_front", "segment_front"]

MAX_CHOICES = 4096
"""Choices (one way to run each operator) beyond which :func:`crossbar_front` does not start."""
MAX_STEPS = 2000
"""Host-order search steps (one operator placed, 5-15 us) one front may take: ResNet-50's fronts take at most
256, so giving up on a larger segment costs a few tens of milliseconds."""


@dataclass(frozen=True)
class FrontPoint:
    """One step of the front: the shortest schedule with at most ``crossbars`` crossbars."""

    crossbars: int
    schedule: Schedule
    """Operator level; with ``parts`` (the expansion's schedule) when something is sliced."""
    host_order: tuple[int, ...]
    """Host order over the expansion's operators (what the validator re-times)."""


class _Parts:
    """The expansion of one choice as flat lists (the operators in :func:`expand`'s order), timed incrementally
    along each partial host order; ``expand`` + ``simulate`` per order cost about 150 us, a step here 5-15 us.
    The front's schedules are re-timed by those two (:func:`crossbar_front`)."""

    def __init__(self, problem: PlacementProblem, choice: tuple[tuple[bool, int], ...]) -> None:
        self.duration: list[float] = []
        self.host: list[bool] = []
        self.release: list[float] = []  # graph input read before a CIM operator starts
        self.tail: list[float] = []     # graph output written after a CIM operator ends
        self.preds: list[list[tuple[int, float]]] = []
        first, output = [0] * problem.n, [0] * problem.n
        for v, (on_host, k) in enumerate(choice):
            first[v] = len(self.duration)
            if k == WHOLE:
                cim = not on_host
                self._add(problem.t_cim_ns[v] if cim else problem.t_host_ns[v], on_host,  # type: ignore[arg-type]
                          problem.t_in_ns[v] if cim else 0.0, problem.t_out_ns[v] if cim and problem.writes_output[v] else 0.0)
            else:
                opt = problem.slicings[v][k]
                self._add(opt.t_cim_ns, False, opt.t_graph_in_ns, 0.0)
                self._add(opt.t_host_ns, True, 0.0, 0.0)
                self._add(opt.t_join_ns, True, 0.0, 0.0)
                self.preds[-1] += [(first[v], opt.t_back_ns), (first[v] + 1, 0.0)]
            output[v] = len(self.duration) - 1
        for u, v, t in problem.edges:
            src, (on_host, k) = output[u], choice[v]
            if k == WHOLE:
                self.preds[first[v]].append((src, t if self.host[src] != on_host else 0.0))
                continue
            opt = problem.slicings[v][k]
            self.preds[first[v]].append((src, dict(opt.in_cim_ns).get(u, t) if self.host[src] else 0.0))
            self.preds[first[v] + 1].append((src, 0.0 if self.host[src] else dict(opt.in_host_ns).get(u, t)))
        n = len(self.duration)
        self.ancestors = [0] * n
        for v in range(n):
            for u, _ in self.preds[v]:
                self.ancestors[v] |= self.ancestors[u] | 1 << u
        self.hosts = [v for v in range(n) if self.host[v]]
        mask = sum(1 << v for v in self.hosts)
        self.needs = [self.ancestors[v] & mask for v in range(n)]

    def _add(self, duration: float, host: bool, release: float, tail: float) -> None:
        self.duration.append(duration)
        self.host.append(host)
        self.release.append(release)
        self.tail.append(tail)
        self.preds.append([])

    def lower_bound(self) -> float:
        """Host work, and the longest path with every transfer (no schedule of this choice is shorter)."""
        finish = [0.0] * len(self.duration)
        for v, preds in enumerate(self.preds):
            finish[v] = max([self.release[v], *(finish[u] + d for u, d in preds)]) + self.duration[v]
        path = max(f + t for f, t in zip(finish, self.tail))
        return max(path, sum(self.duration[v] for v in self.hosts))

    def shortest(self, below: float, steps: list[int]) -> tuple[float, list[int]] | None:
        """The shortest span below ``below`` over the host orders, with its order (None if none);
        ``steps[0]`` counts down the search's steps (at 0 the search stops: the caller gives up)."""
        n = len(self.duration)
        finish: list[float | None] = [None] * n
        order: list[int] = []
        best: list = [below, None]

        def timed(v: int, host_free: float) -> float:
            start = max([self.release[v], *(finish[u] + d for u, d in self.preds[v])])  # type: ignore[operator]
            return max(start, host_free) + self.duration[v] if self.host[v] else start + self.duration[v]

        def settle(limit: int) -> list[int]:
            """Time the CIM operators below index ``limit`` whose inputs are all timed; return them."""
            done = []
            for v in range(limit):
                if finish[v] is None and not self.host[v] and all(finish[u] is not None for u, _ in self.preds[v]):
                    finish[v] = timed(v, 0.0)
                    done.append(v)
            return done

        def search(placed: int, host_free: float, work_left: float, reached: float) -> None:
            if steps[0] <= 0:
                return
            steps[0] -= 1
            if len(order) == len(self.hosts):
                done = settle(n)
                span = max([reached, *(finish[v] + self.tail[v] for v in done)])  # type: ignore[operator]
                if span < best[0]:
                    best[:] = [span, list(order)]
                for v in done:
                    finish[v] = None
                return
            for v in self.hosts:
                if placed >> v & 1 or self.needs[v] & ~placed:
                    continue
                done = settle(v)  # every CIM ancestor of v (lower index) is ready: its host ancestors are placed
                end = timed(v, host_free)
                peak = max([reached, end, *(finish[u] + self.tail[u] for u in done)])  # type: ignore[operator]
                if max(peak, end + work_left - self.duration[v]) < best[0]:
                    finish[v] = end
                    order.append(v)
                    search(placed | 1 << v, end, work_left - self.duration[v], peak)
                    order.pop()
                    finish[v] = None
                for u in done:
                    finish[u] = None

        search(0, 0.0, sum(self.duration[v] for v in self.hosts), 0.0)
        return None if best[1] is None else (best[0], best[1])


def _ways(problem: PlacementProblem, v: int, fixed: Mapping[int, bool]) -> list[tuple[bool, int]]:
    """(on host, slicing) of every way to run operator v."""
    if v in fixed:
        return [(fixed[v], WHOLE)]
    ways = [(True, WHOLE)]
    if problem.capable(v):
        ways.append((False, WHOLE))
        ways += [(True, k) for k in range(len(problem.slicings[v]) if problem.slicings else 0)]
    return ways


def _crossbars(problem: PlacementProblem, choice: tuple[tuple[bool, int], ...]) -> int:
    return sum(problem.slicings[v][k].crossbars if k != WHOLE else (0 if h else problem.crossbars[v])
               for v, (h, k) in enumerate(choice))


def _host_work(problem: PlacementProblem, choice: tuple[tuple[bool, int], ...]) -> float:
    """Host time of a choice: a lower bound of its span (host operators run one at a time)."""
    total = 0.0
    for v, (on_host, k) in enumerate(choice):
        if k != WHOLE:
            total += problem.slicings[v][k].t_host_ns + problem.slicings[v][k].t_join_ns
        elif on_host:
            total += problem.t_host_ns[v]
    return total


def crossbar_front(problem: PlacementProblem, fixed: Mapping[int, bool] | None = None,
                   max_choices: int = MAX_CHOICES, max_steps: int = MAX_STEPS) -> list[FrontPoint] | None:
    """The crossbar front of ``problem`` (its budget ignored): steps of increasing crossbars and
    decreasing span.  ``fixed``: operators whose device is given (whole).  ``None`` when there are
    more than ``max_choices`` choices or the search would take more than ``max_steps`` steps.
    Deterministic: among equal spans the first choice in enumeration order (fewest crossbars; then
    host, CIM, the options in order, by operator index)."""
    fixed = fixed or {}
    ways = [_ways(problem, v, fixed) for v in range(problem.n)]
    if math.prod(len(w) for w in ways) > max_choices:
        return None
    choices = sorted(itertools.product(*ways), key=lambda choice: _crossbars(problem, choice))
    steps = [max_steps]
    incumbent = math.inf
    found: list[tuple[int, tuple[tuple[bool, int], ...], list[int]]] = []
    for choice in choices:
        if _host_work(problem, choice) >= incumbent:
            continue
        parts = _Parts(problem, choice)
        if parts.lower_bound() >= incumbent:
            continue
        shortest = parts.shortest(incumbent, steps)
        if steps[0] <= 0:
            return None
        if shortest is not None:
            incumbent = shortest[0]
            used = _crossbars(problem, choice)
            if found and found[-1][0] == used:
                found.pop()
            found.append((used, choice, shortest[1]))
    front = []
    for used, choice, order in found:
        on_host, slicing = [h for h, _ in choice], [k for _, k in choice]
        expansion = expand(problem, on_host, slicing)
        timed = simulate(expansion.problem, expansion.on_host, order)
        front.append(FrontPoint(used, parts_schedule(problem, expansion, timed, slicing), tuple(order)))
    return front


@functools.lru_cache(maxsize=512)
def segment_front(problem: PlacementProblem, entry_host: bool, exit_host: bool,
                  max_choices: int = MAX_CHOICES) -> list[FrontPoint] | None:
    """:func:`crossbar_front` of a bottleneck segment's problem (:mod:`.cpsat.segments`), its first and last
    operators (the bottlenecks) on the given devices; cached: a sweep's points share their segments."""
    return crossbar_front(problem, {0: entry_host, problem.n - 1: exit_host}, max_choices=max_choices)


def best_within(front: list[FrontPoint], budget: int) -> FrontPoint:
    """The optimum at ``budget``: the last step that fits (the front starts with the fewest crossbars)."""
    fits = [point for point in front if point.crossbars <= budget]
    if not fits:
        raise ValueError(f"no schedule within {budget} crossbars")
    return fits[-1]
