"""What the caller asks of a placement solve: which solver, how long, how exact.

:class:`SolveOptions` is the solver argument group's value (``--solver``,
``--time-limit``, ``--mip-gap``, ``--plain``, ``--verbose``, ``--objective``,
``--max-latency``, ``--frames-in-flight``); the driver
:func:`cimsplit.passes.placement.place` takes it and hands each back end a copy
whose time limit is what is left after the warm-start heuristic.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_MIP_GAP", "OBJECTIVES", "SLICING_CHOICES", "SolveOptions"]

OBJECTIVES = ("latency", "throughput")
SLICING_CHOICES = ("auto", "off", "ks", "ofm", "all")
"""``--slicing``: ``auto`` (and ``all``) slice (KS and OFM) exactly when a proof says it is shorter
(:func:`cimsplit.passes.placement.sliced_place.place_sliced`); ``off`` never; ``ks``/``ofm`` that kind only."""

DEFAULT_MIP_GAP = 1e-6
"""Relative gap at which a solve counts as optimal unless ``--mip-gap`` says otherwise.

Solvers default to 1e-4, which would let "optimal" differ from the optimum by 0.01 %."""


@dataclass(frozen=True)
class SolveOptions:
    solver: str = "auto"
    """``auto``, ``gurobi``, ``highs`` or ``cpsat`` (see :func:`cimsplit.passes.placement.driver.auto_candidates`)."""
    time_limit_s: float = 60.0
    mip_gap: float | None = None
    """Relative MIP gap to stop at; ``None`` means :data:`DEFAULT_MIP_GAP`."""
    verbose: bool = False
    """Show the solver's own log (otherwise quiet)."""
    threads: int | None = None
    seed: int = 0
    plain: bool = False
    """The paper's formulation as written: no cuts, bounds or hints (MILP backends get it
    through the built :class:`MilpModel`; CP-SAT builds its own model and reads it here)."""
    objective: str = "latency"
    """``latency`` (one frame's makespan, the paper's) or ``throughput`` (a stream's period, Pipe-it)."""
    max_latency_ns: float | None = None
    """Throughput only: bound on one frame's latency in the stream (``--max-latency``)."""
    frames_in_flight: int | None = None
    """Throughput only: bound on how many frames overlap, latency <= K * period (``--frames-in-flight``)."""
    warm_start: bool = True
    """Hand the solver the best baseline/heuristic schedule as start and (unless ``plain``)
    its makespan as upper bound; ``False`` solves cold, to measure the solver on its own."""
    slicing: str = "auto"
    """Operator slicing (TSO), one of :data:`SLICING_CHOICES`; acts only on problems with slicing options."""
    lower_bound_ns: float = 0.0
    """A proven lower bound on the optimal makespan from elsewhere (a sweep's larger crossbar budget,
    :mod:`cimsplit.passes.placement.budget_chain`): a ``T >= LB`` row in every back end's model and
    the reported bound is at least this.  0: none."""

    @property
    def effective_mip_gap(self) -> float:
        return DEFAULT_MIP_GAP if self.mip_gap is None else float(self.mip_gap)
