"""Does a board calibration still describe this machine?  Re-measure some of its points and compare.

A board is measured once and used for months; the machine can change speed in between (a shared VM's neighbours,
a frequency governor, a firmware update).  On an Intel Xeon VM the same nine zoo models' profiled sums moved up to
25 % within two hours, while each run's own rounds agreed within a few per cent: a prediction error measured there
mixes the predictor's error with the machine's drift.  The check tells them apart: it re-measures a spread of the
board's GEMM points here, now, as the campaign measured them (:func:`.calibration.measure_point`, without the
cache flush), and reports the ratio of the times now to the board's.

A sample is matched to its grid point by its kind and GEMM descriptors, or an element point by its element count
(its input's, else its output's), and only where that names one point (:func:`reference_points`): the board records
a point's descriptors, not its geometry, and two convs of one GEMM shape are different kernels.  Compute-bound
and memory-bound kernels need not drift alike (a neighbour can take memory bandwidth and leave the cores), so the
GEMM kinds' ratio and the others' are kept apart (:meth:`SpeedCheck.ratio_for`).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass

import numpy as np

from cimsplit.compiler.calibration_grid import gemm_descriptors, grid
from cimsplit.compiler.calibration_models import GridPoint
from cimsplit.compiler.host_model import HostModel, Sample, is_gemm_kind

REFERENCE_MIN_NS = 50_000.0
"""The shortest point taken as a reference: onnxruntime's profiler counts whole microseconds."""
REFERENCE_MAX_NS = 2_000_000.0
"""The longest: a reference costs four sessions' turns of runs, and the check should take seconds."""


@dataclass(frozen=True)
class Reference:
    """One board point re-measured: its kind, shape and times (ns) then (the board's) and now."""

    kind: str
    shape: tuple[int, ...]
    """Its GEMM descriptors, or its element count."""
    then_ns: float
    now_ns: float

    @property
    def ratio(self) -> float:
        return self.now_ns / self.then_ns


@dataclass(frozen=True)
class SpeedCheck:
    references: tuple[Reference, ...]

    @property
    def ratio(self) -> float:
        """The median of now / then over the references: above 1, this machine runs slower than the board says."""
        return float(np.median([r.ratio for r in self.references]))

    def quartiles(self) -> tuple[float, float]:
        return tuple(float(q) for q in np.percentile([r.ratio for r in self.references], (25, 75)))  # type: ignore[return-value]

    def ratio_for(self, kind: str) -> float:
        """The median ratio of the references of ``kind``'s class, GEMM or not; :attr:`ratio` without any."""
        same = [r.ratio for r in self.references if is_gemm_kind(r.kind) == is_gemm_kind(kind)]
        return float(np.median(same)) if same else self.ratio


def hot_ns(sample: Sample) -> float:
    """A sample's time as measured without a flush (what the check measures again)."""
    return sample.profiled_ns[0] if sample.profiled_ns is not None else sample.t_ns


def shape(point: GridPoint) -> tuple[int, ...]:
    """What a sample records of a point: its GEMM descriptors, or its element count."""
    gemm = gemm_descriptors(point)
    return gemm if gemm is not None else (point.elements(),)


def _sample_shapes(sample: Sample) -> list[tuple[int, ...]]:
    if is_gemm_kind(sample.kind):
        return [tuple(int(sample.features[key]) for key in ("m", "n", "n_mvm"))]
    return [(int(sample.features[key]),) for key in ("n_in", "n_out") if key in sample.features]


def reference_points(board: HostModel, kinds: Collection[str] | None = None, count: int = 24) -> list[tuple[GridPoint, Sample]]:
    """Up to ``count`` of the board's points of ``kinds`` (all its kinds when None, or when it has none of them),
    each with its sample: kinds taken in turn (a GEMM kind, another, in name order), and within a kind the points at
    evenly spaced quantiles of its samples' times (one: the median) between :data:`REFERENCE_MIN_NS` and
    :data:`REFERENCE_MAX_NS`.  Deterministic."""
    points = grid(int8=board.int8, seed=int(board.campaign.get("seed", 0)))
    named = Counter((p.kind, shape(p)) for p in points)
    unique = {(p.kind, shape(p)): p for p in points if named[(p.kind, shape(p))] == 1}
    by_kind: dict[str, list[tuple[GridPoint, Sample]]] = {}
    for sample in board.samples:
        if not REFERENCE_MIN_NS <= hot_ns(sample) <= REFERENCE_MAX_NS:
            continue
        point = next((unique[key] for key in ((sample.kind, s) for s in _sample_shapes(sample)) if key in unique), None)
        if point is not None:
            by_kind.setdefault(sample.kind, []).append((point, sample))
    wanted = [kind for kind in sorted(by_kind) if kinds is None or kind in kinds] or sorted(by_kind)
    gemm, other = [k for k in wanted if is_gemm_kind(k)], [k for k in wanted if not is_gemm_kind(k)]
    wanted = [k for pair in itertools.zip_longest(gemm, other) for k in pair if k is not None]  # the classes in turn
    spread = {}
    for kind in wanted:
        pairs = sorted(by_kind[kind], key=lambda pair: hot_ns(pair[1]))
        share = min(len(pairs), -(-count // len(wanted)))
        spread[kind] = [pairs[int((j + 0.5) * len(pairs) / share)] for j in range(share)]
    chosen = []
    for i in range(max(map(len, spread.values()), default=0)):
        chosen += [spread[kind][i] for kind in wanted if i < len(spread[kind])]
    return chosen[:count]


def speed_check(board: HostModel, references: list[tuple[GridPoint, Sample]],
                measure: Callable[[GridPoint], float] | None = None) -> SpeedCheck:
    """Measure ``references`` (:func:`reference_points`) here, as the board's campaign did (its threads, runs and
    warm-up), or with ``measure`` (point -> ns); a point that cannot be measured as its kind is left out."""
    if measure is None:
        from cimsplit.compiler.calibration import measure_point

        runs, warmup = int(board.campaign.get("runs", 5)), int(board.campaign.get("warmup", 2))

        def measure(point: GridPoint) -> float:
            return measure_point(point, threads=board.threads, runs=runs, warmup=warmup)[0].t_ns

    measured = []
    for point, sample in references:
        try:
            measured.append(Reference(sample.kind, shape(point), hot_ns(sample), measure(point)))
        except RuntimeError:  # a point onnxruntime runs as another kind here (the campaign skips it too)
            continue
    return SpeedCheck(tuple(measured))
