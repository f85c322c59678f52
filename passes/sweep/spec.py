"""What a sweep covers (:class:`SweepSpec`) and the hooks that report its progress (:class:`SweepObserver`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cimsplit.passes.sweep.grid import PAPER_CROSSBARS, PAPER_MVM_LATENCIES_NS

__all__ = ["THIS_MACHINE", "SweepSpec", "SweepObserver"]

THIS_MACHINE = "x86"
"""The preset whose host latencies are profiled on the machine running the sweep."""


@dataclass(frozen=True)
class SweepSpec:
    """What to sweep and how to solve each point (everything but where it runs)."""

    models: tuple[str, ...]
    """ONNX files or zoo names (``cimsplit.models.NAMES``)."""
    hosts: tuple[str, ...] = (THIS_MACHINE,)
    crossbars: tuple[int, ...] = PAPER_CROSSBARS
    mvm_latencies_ns: tuple[float, ...] = PAPER_MVM_LATENCIES_NS
    host_profiles: Mapping[str, str] = field(default_factory=dict)
    """Host label (or spec) -> profile JSON file, or a folder of ``<model>.json``."""
    host_models: Mapping[str, str] = field(default_factory=dict)
    """Host label (or spec) -> calibration JSON (``--host-model``); excludes a profile for that host."""
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    image_size: int | None = None
    """Input side of zoo models (None: the model's default)."""
    int8: bool = False
    """Build zoo models as int8 QDQ."""
    solver: str = "auto"
    time_limit_s: float = 60.0
    mip_gap: float | None = None
    plain: bool = False
    paper_exact: bool = False
    objective: str = "latency"
    """``throughput``: every point minimizes a stream's period (``--objective``)."""
    max_latencies_ns: tuple[float, ...] = (0.0,)
    """Throughput: frame-latency bounds, one point each (0 = unbounded): the latency/throughput front."""
    frames_in_flight: int | None = None
    slicing: str = "auto"
    """``--slicing`` (:data:`cimsplit.passes.placement.options.SLICING_CHOICES`)."""
    reuse: bool = True
    """Solve the points that differ only in the crossbar budget as one chain, reusing proofs, bounds and
    schedules across budgets (:mod:`cimsplit.passes.sweep.chain`); False solves every point alone."""



class SweepObserver:
    """Progress hooks (the CLI draws a tqdm bar); the default does nothing."""

    def preparing(self, model: str, host: str) -> None:
        """About to load, profile (maybe for minutes) and cost ``model`` for ``host``."""

    def started(self, total: int, reused: Sequence[dict[str, Any]]) -> None:
        """``total`` points in the grid, ``reused`` rows already done by an earlier run."""

    def point_done(self, row: dict[str, Any]) -> None:
        """One point finished (its row is already in the journal)."""
