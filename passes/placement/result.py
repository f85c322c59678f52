"""What the partitioning pass returns: a validated schedule plus solver statistics."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cimsplit.passes.placement.problem import PlacementProblem


@dataclass(frozen=True)
class Schedule:
    """A placement and its timing. ``on_host[v]`` is x_v of the paper."""

    on_host: tuple[bool, ...]
    start_ns: tuple[float, ...]
    finish_ns: tuple[float, ...]
    makespan_ns: float
    slicing: tuple[int, ...] = ()
    """Per operator, -1 (placed whole) or the index of its :class:`SliceOption`; empty: nothing sliced.
    A sliced operator has ``on_host`` True (its join runs there), starts with its first part and
    finishes with its join."""
    parts: Schedule | None = None
    """When something is sliced: the schedule of the expanded problem
    (:func:`cimsplit.passes.placement.slicing.expand`), parts and joins as operators."""


@dataclass(frozen=True)
class StreamTask:
    """A task of the single-frame schedule S: frame f runs it at f * period + ``start_ns``."""

    name: str
    kind: str
    resource: str
    unit: str
    start_ns: float
    duration_ns: float
    after: tuple[int, ...]
    operator: int | None = None

    @property
    def finish_ns(self) -> float:
        return self.start_ns + self.duration_ns


@dataclass(frozen=True)
class PeriodicSchedule:
    """A validated shifted-copies schedule of a stream for the placement ``on_host``.

    Every frame runs the same single-frame schedule S (the tasks' ``start_ns``), frame f
    shifted by f * ``period_ns`` (:mod:`cimsplit.passes.placement.stream`)."""

    on_host: tuple[bool, ...]
    period_ns: float
    latency_ns: float
    """One frame's latency: the makespan of S (frame released at 0)."""
    tasks: tuple[StreamTask, ...]

    @property
    def frames_in_flight(self) -> int:
        """ceil(latency / period): how many frames overlap in the steady state (1 when nothing overlaps)."""
        if self.period_ns <= 0:
            return 1
        return max(1, math.ceil(self.latency_ns / self.period_ns * (1 - 1e-12)))


@dataclass(frozen=True)
class SolverStats:
    """The columns of the paper's Table I, plus why this solver ran."""

    name: str
    status: str
    objective_ns: float
    bound_ns: float
    gap: float
    time_s: float
    n_operators: int
    n_variables: int
    n_constraints: int
    reason: str = ""


@dataclass(frozen=True)
class PlacementResult:
    problem: PlacementProblem
    schedule: Schedule
    """The validated (re-timed) schedule of the best solution found."""
    solver: SolverStats
    baselines: dict[str, Schedule] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    objective: str = "latency"
    """What the solve minimized: ``latency`` (``schedule.makespan_ns``) or ``throughput`` (``stream.period_ns``)."""
    stream: PeriodicSchedule | None = None
    """The stream's validated periodic schedule: for throughput the optimized one (``schedule`` is then
    its frame S), for latency the placement's minimum period (modulo construction)."""

    @property
    def cpu_only_ns(self) -> float:
        return sum(self.problem.t_host_ns)

    @property
    def speedup(self) -> float:
        return self.cpu_only_ns / self.schedule.makespan_ns if self.schedule.makespan_ns > 0 else 1.0

    @property
    def crossbars_used(self) -> int:
        """Crossbars of whole CIM operators plus those of the CIM parts of sliced ones (eq. 14)."""
        slicing = self.schedule.slicing
        total = 0
        for v, (c, h) in enumerate(zip(self.problem.crossbars, self.schedule.on_host)):
            if slicing and slicing[v] >= 0:
                total += self.problem.slicings[v][slicing[v]].crossbars
            elif not h:
                total += c
        return total

    @property
    def sliced(self) -> tuple[int, ...]:
        """Operators the schedule slices."""
        return tuple(v for v, k in enumerate(self.schedule.slicing) if k >= 0)
