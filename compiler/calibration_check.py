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
ratios are kept apart by :func:`drift_class`: GEMM kinds, depthwise convs (GEMM kinds, but 9-49 MACs an output
element: memory-bound) and element kinds.  On the Intel Xeon VM two days after its GEMM samples were measured,
16 float depthwise points each took a median 1.30x their board times, 16 convs 1.14x.

:func:`rescaled` re-anchors a board to the check (``calibrate --check B -o NEW``): every fit and sample of a class
scaled by its ratio, so that a board measured once predicts at this machine's speed now, after seconds of
measuring rather than a campaign.  It changes no fit's shape: what the check cannot see (a kind's drift apart from
its class's) stays.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass

import numpy as np

from cimsplit.compiler.calibration_grid import gemm_descriptors, grid
from cimsplit.compiler.calibration_models import GridPoint
from cimsplit.compiler.host_model import HostModel, Sample, anchor_kind, is_gemm_kind

DRIFT_CLASSES = ("gemm", "depthwise", "element")
"""Kernel classes whose speeds a check measures apart (:func:`drift_class`)."""

REFERENCE_MIN_NS = 50_000.0
"""The shortest point taken as a reference: onnxruntime's profiler counts whole microseconds."""
REFERENCE_MAX_NS = 2_000_000.0
"""The longest: a reference costs four sessions' turns of runs, and the check should take seconds."""


def drift_class(kind: str) -> str:
    """The class of :data:`DRIFT_CLASSES` whose speed ``kind``'s kernel follows (module docstring)."""
    if not is_gemm_kind(kind):
        return "element"
    return "depthwise" if "-depthwise" in anchor_kind(kind) else "gemm"


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
        """The median ratio of the references of ``kind``'s :func:`drift_class`; :attr:`ratio` without any."""
        same = [r.ratio for r in self.references if drift_class(r.kind) == drift_class(kind)]
        return float(np.median(same)) if same else self.ratio

    def ratios(self) -> dict[str, float]:
        """:meth:`ratio_for` of each class of :data:`DRIFT_CLASSES` (the median of all for a class without references)."""
        return {name: self.ratio_for(kind) for name, kind in zip(DRIFT_CLASSES, ("Conv", "Conv-depthwise", "Add"))}


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
    classes = [[k for k in wanted if drift_class(k) == name] for name in DRIFT_CLASSES]
    wanted = [k for turn in itertools.zip_longest(*classes) for k in turn if k is not None]  # the classes in turn
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


def rescaled(board: HostModel, check: SpeedCheck) -> HostModel:
    """``board`` at this machine's speed now: each kind's fit and samples times its class's ratio in ``check``
    (:meth:`SpeedCheck.ratios`); the campaign records the ratios, how many points gave them, and when."""
    ratios = check.ratios()

    def scaled(sample: Sample) -> Sample:
        ratio = ratios[drift_class(sample.kind)]
        times = None if sample.profiled_ns is None else (sample.profiled_ns[0] * ratio, sample.profiled_ns[1] * ratio)
        return dataclasses.replace(sample, t_ns=sample.t_ns * ratio, profiled_ns=times)

    fits = {kind: dataclasses.replace(fit, scale=fit.scale * ratios[drift_class(kind)]) for kind, fit in board.fits.items()}
    record = {"from": board.source, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "ratios": ratios,
              "references": len(check.references)}
    return dataclasses.replace(board, fits=fits, samples=tuple(scaled(s) for s in board.samples),
                               campaign={**board.campaign, "rescaled": [*board.campaign.get("rescaled", []), record]})
