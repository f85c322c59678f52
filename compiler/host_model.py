"""Predicted host latencies (Pipe-it's single-core estimation, made to fit this runtime).

A *host model* (``cimsplit calibrate -o board.json``) holds, per operator
kind, a regression fitted on micro-benchmarks measured once on a board; any
model can then be compiled for that board without profiling it.  An
operator's kind is its op type (``Conv`` split into ``Conv`` and ``Conv-depthwise``; ``Gemm`` and ``MatMul`` with
a constant weight are ``Gemm``; a ``ConvTranspose`` is fitted on the GEMM its kernel runs),
prefixed ``int8:`` when quantize/dequantize nodes belong to it,
and for a quantized operator whose int8 input or output onnxruntime keeps
int8 (a Conv's kernel is then several times slower than the U8S8 one it runs
after converting both pairs; :mod:`cimsplit.compiler.qdq_kernels`) suffixed
``-s8in``, ``-s8out`` or ``-s8`` (both): ``int8:Conv-s8in``, ``int8:MaxPool-s8in``.
Where a quantized conv's NHWC int8 chain meets an op onnxruntime runs in
float, the runtime inserts Transpose and Q/DQ kernels that profiling charges
to the conv; calibration points have none, so the prediction adds them from
the model's own optimized graph, each by its ``glue:`` element kind
(:mod:`cimsplit.compiler.host_glue`).

Its descriptors come from the workload: M_v, N_v, N_mvm, the kernel size and
the activation element counts N_in, N_out (``compiler/im2col.py``).  A fused
activation (Relu, Clip, SiLU's Sigmoid and Mul) adds its element-wise kind's
prediction at N_out elements; a quantized operator's adds the kernels onnxruntime
runs for it instead (none when folded into the QLinearConv; :mod:`cimsplit.compiler.host_fused`).
A calibration may also measure an anchor with its activation, a *fused kind*
(``Conv-depthwise+Clip``, :func:`fused_kind`), which then predicts the pair alone:
MLAS applies a folded Clip to each block of a depthwise conv's output while it
is in cache, at 0.5-0.7 of a standalone Clip's time on tensors that fit L2 (Zen 4).

Fitting methods (``METHODS``, :mod:`cimsplit.compiler.host_regression`), chosen per
kind by held-out mean absolute percentage error on the calibration's own
samples: the worse of two schemes, whole shapes held out in 5 folds, and (GEMM
kinds) one input-channel count held out at a time.  The zoo's channel counts
(64 ... 2048) are none of the grid's (3 ... 1360) and partly beyond them, so a fit must
interpolate and extrapolate in channels, which the second scheme asks of it:

* ``pipeit``: Pipe-it's linear regression ``t = b0 + b1 N + b2 K + b3 M + b4 NK
  + b5 KM + b6 NM`` (N = N_mvm, K = N_v, M = M_v), ordinary least squares on
  ns; the baseline.
* ``log-quadratic``: ``log t`` quadratic in ``log M, log K, log N, log N_in``;
  latencies span five decades and their errors are relative, which a
  log-space fit weighs evenly (a 10 us and a 10 ms convolution count alike).
* ``relative-linear``: ``t = b0 + b1 MACs + b2 N_in + b3 N_out + b4 weights``
  fitted on relative residuals (rows divided by t).
* ``relative-regimes``: ``relative-linear`` with its own five coefficients for
  each kernel path onnxruntime takes (pointwise 1x1, strided, image-reading:
  :func:`conv_regimes`, read off the descriptors, so older calibrations refit).
* ``relative-nchwc8`` / ``relative-nchwc16``: ``relative-regimes`` with the
  MACs counted on channels padded to onnxruntime's NCHWc blocks of 8 (AVX2)
  or 16 (AVX-512) channels (a 40-channel conv runs as 48 on AVX-512); the
  grid's channel counts (40, 88, 344, 680) tell the two apart, so the held-out
  error picks the board's block.
* ``log-cubic-regimes``: ``log t`` cubic in the four logs, plus the paths'
  indicators and their own slopes in each log (depthwise convs, whose time
  is far from linear in their work).
* ``log-linear`` (non-GEMM kinds): ``log t`` linear in ``log N_in, log N_out``.
* ``relative-elements`` (non-GEMM kinds): ``t = b0 + b1 N_in + b2 N_out`` on relative residuals, and
  ``relative-elements-hinge`` with a further cost per element past :data:`~.host_regression.HINGE_ELEMENTS` read and written (the copy
  kinds' tensors that outgrow the caches).

A GEMM kind's chosen fit then gets a kernel ridge correction of its log
residual (:mod:`cimsplit.compiler.host_correction`) when that lowers the same
held-out error; far from the grid it vanishes, so it never extrapolates.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cimsplit.compiler.host_correction import Correction, fit_correction
from cimsplit.compiler.host_regression import (
    METHODS,
    blocked_macs,
    channel_folds,
    conv_regimes,
    cross_validated_mape,
    design_matrix,
    evaluate,
    mape,
    shape_folds,
    solve,
    transfer_mape,
)
from cimsplit.compiler.weight_fetch import WEIGHT_REUSE, ContextLayer, board_reuse, in_network_ns, precision
from cimsplit.compiler.workload import Operator
from cimsplit.errors import CimsplitError
from cimsplit.files import write_atomic

__all__ = [
    "FORMAT", "FORMAT_VERSION", "METHODS", "KindFit", "HostModel", "Sample",
    "operator_kind", "operator_features",
    "fused_kind", "anchor_kind", "fit_kind", "fit_samples", "design_matrix", "solve",
    "blocked_macs", "conv_regimes", "shape_folds", "channel_folds", "cross_validated_mape", "transfer_mape",
]

FORMAT = "cimsplit-host-model"
FORMAT_VERSION = 1
INT8_PREFIX = "int8:"
KERNEL_SUFFIXES = ("-s8in", "-s8out", "-s8")
"""Which int8 sides of a quantized Conv/Gemm onnxruntime keeps int8 (:func:`cimsplit.compiler.qdq_kernels.int8_kernels`)."""
GEMM_KINDS = ("Conv", "Conv-depthwise", "Gemm", "MatMul", "ConvTranspose")
"""Kinds fitted on GEMM descriptors: the lowered ones, and those the host runs as a GEMM without a lowering (a
MatMul of two activations, a ConvTranspose: :attr:`~cimsplit.compiler.workload.Operator.product_shape`)."""
RUNS_IN_FLOAT = frozenset({"ConvTranspose"})
"""Kinds onnxruntime's CPU provider has no quantized kernel for: an int8 one runs the float kernel between its
DequantizeLinear and QuantizeLinear kernels, and is predicted so (the float kind, its weight's DequantizeLinear and
its glue, :mod:`cimsplit.compiler.host_prediction`); the calibration measures the float kind only."""
GEMM_FEATURES = ("m", "n", "n_mvm", "k", "n_in", "n_out")
ELEMENT_FEATURES = ("n_in", "n_out")
_QUANT_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
FUSED_SEPARATOR = "+"
_FUSABLE = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Mul", "Add"})


@dataclass(frozen=True)
class Sample:
    """One micro-benchmark: an operator's kind, its descriptors and its measured latency."""

    kind: str
    features: Mapping[str, float]
    t_ns: float
    """The time fitted: for a point profiled twice, :func:`in_network_ns` of ``profiled_ns``."""
    profiled_ns: tuple[float, float] | None = None
    """A weighted point's times as it is and after a cache flush, when both were measured: a refit mixes them
    again (by this cimsplit's :func:`in_network_ns`) without measuring."""

    @classmethod
    def profiled(cls, kind: str, features: Mapping[str, float], hot_ns: float, flushed_ns: float,
                 reuse: float = WEIGHT_REUSE) -> Sample:
        """A point profiled as it is and flushed, fitted at :func:`.weight_fetch.in_network_ns` of the two."""
        return cls(kind, features, in_network_ns(features, hot_ns, flushed_ns, reuse), (hot_ns, flushed_ns))

    def remixed(self, reuse: Mapping[str, float] | None = None) -> Sample:
        """This sample with its time mixed again from ``profiled_ns`` at its precision's ``reuse`` (default
        :data:`~.weight_fetch.WEIGHT_REUSE`); itself without them."""
        if self.profiled_ns is None or "m" not in self.features:  # (a copy point's mix is its machine's: .cold_outputs)
            return self
        return Sample.profiled(self.kind, self.features, *self.profiled_ns, (reuse or {}).get(precision(self.kind), WEIGHT_REUSE))

    def to_dict(self) -> dict[str, Any]:
        data = {"kind": self.kind, "features": dict(self.features), "t_ns": self.t_ns}
        return data if self.profiled_ns is None else {**data, "profiled_ns": list(self.profiled_ns)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sample:
        profiled = data.get("profiled_ns")
        return cls(str(data["kind"]), {k: float(v) for k, v in data["features"].items()}, float(data["t_ns"]),
                   None if profiled is None else (float(profiled[0]), float(profiled[1])))


@dataclass(frozen=True)
class KindFit:
    kind: str
    method: str
    coefficients: tuple[float, ...]
    samples: int
    fit_mape: float
    """Mean absolute percentage error on the samples it was fitted on."""
    cv_mape: dict[str, float | None]
    """Cross-validated error of every applicable method (None: too few samples)."""
    ranges: dict[str, tuple[float, float]]
    """Smallest and largest value of each descriptor among the samples."""
    correction: Correction | None = None
    """The kernel ridge correction of ``method`` (GEMM kinds, when it lowers the held-out error)."""
    scale: float = 1.0
    """A factor on every prediction: a board re-anchored to its machine's speed (:func:`.calibration_check.rescaled`)."""

    @property
    def label(self) -> str:
        """The method's name, ``+ridge`` when it is corrected."""
        return self.method + ("+ridge" if self.correction is not None else "")

    @property
    def held_out_mape(self) -> float | None:
        """The held-out error of the fit as used (corrected when it is)."""
        return self.correction.cv_mape if self.correction is not None else self.cv_mape.get(self.method)

    def predict_ns(self, features: Mapping[str, float]) -> float:
        linear = evaluate(self.method, self.coefficients, features)
        return self.scale * (linear if self.correction is None else max(linear * self.correction.factor(features), 1.0))

    def to_dict(self) -> dict[str, Any]:
        data = {"method": self.method, "coefficients": list(self.coefficients), "samples": self.samples,
                "fit_mape": self.fit_mape, "cv_mape": dict(self.cv_mape),
                "ranges": {key: list(value) for key, value in self.ranges.items()}}
        if self.correction is not None:
            data["correction"] = self.correction.to_dict()
        return data if self.scale == 1.0 else {**data, "scale": self.scale}

    @classmethod
    def from_dict(cls, kind: str, data: Mapping[str, Any]) -> KindFit:
        method = str(data["method"])
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}")
        return cls(kind, method, tuple(float(c) for c in data["coefficients"]), int(data["samples"]),
                   float(data["fit_mape"]), {k: (None if v is None else float(v)) for k, v in data["cv_mape"].items()},
                   {k: (float(v[0]), float(v[1])) for k, v in data.get("ranges", {}).items()},
                   Correction.from_dict(data["correction"]) if "correction" in data else None, float(data.get("scale", 1.0)))


def is_gemm_kind(kind: str) -> bool:
    return plain_kind(anchor_kind(kind)).removeprefix(INT8_PREFIX) in GEMM_KINDS


def fused_kind(kind: str, activations: Sequence[str]) -> str:
    """The kind of an anchor of ``kind`` measured with its fused ``activations`` (``Conv-depthwise+Clip``)."""
    return FUSED_SEPARATOR.join([kind, *activations])


def anchor_kind(kind: str) -> str:
    """``kind`` without its fused activations (``Conv-depthwise+Clip`` -> ``Conv-depthwise``)."""
    return kind.split(FUSED_SEPARATOR)[0]


def plain_kind(kind: str) -> str:
    """``kind`` without its kernel suffix (``int8:Conv-s8in`` -> ``int8:Conv``)."""
    for suffix in KERNEL_SUFFIXES:
        if kind.endswith(suffix):
            return kind.removesuffix(suffix)
    return kind


def fit_kind(kind: str, samples: Sequence[Sample], methods: Sequence[str] | None = None) -> KindFit | None:
    """Fit every applicable method, keep the one with the lowest cross-validated error; None without samples.

    With too few samples to cross-validate any method, the method with the fewest
    columns that the samples determine is used; an element kind whose samples are all 0 (calibration charged its
    region's glue to no node, and nothing else ran) predicts 0.  A GEMM kind's fit then gets its
    kernel ridge correction when that lowers the held-out error
    (:mod:`cimsplit.compiler.host_correction`).
    """
    gemm = is_gemm_kind(kind)
    names = [m for m in (methods or METHODS) if METHODS[m].gemm == gemm]
    keys = GEMM_FEATURES if gemm else ELEMENT_FEATURES
    if samples and not gemm and all(s.t_ns == 0 for s in samples):  # its region is all glue (an int8 Relu folded away)
        ranges = {key: (min(s.features[key] for s in samples), max(s.features[key] for s in samples)) for key in keys}
        return KindFit(kind, "relative-elements", (0.0, 0.0, 0.0), len(samples), 0.0, {"relative-elements": None}, ranges)
    samples = [s for s in samples if s.t_ns > 0]
    if not samples:
        return None
    features = [s.features for s in samples]
    t_ns = [s.t_ns for s in samples]
    cv = {name: transfer_mape(name, features, t_ns) for name in names}
    scored = [name for name in names if cv[name] is not None]
    if scored:
        best = min(scored, key=lambda name: (cv[name], name))
    else:
        fitting = [name for name in names if len(METHODS[name].columns(features[0])) <= len(samples)]
        if not fitting:
            return None
        best = min(fitting, key=lambda name: (len(METHODS[name].columns(features[0])), name))
    coefficients = solve(best, features, t_ns)
    ranges = {key: (min(f[key] for f in features), max(f[key] for f in features)) for key in keys}
    fit = KindFit(kind, best, tuple(float(c) for c in coefficients), len(samples),
                  mape(best, coefficients, features, t_ns), cv, ranges)
    correction = fit_correction(best, features, t_ns, cv.get(best)) if gemm else None
    if correction is None:
        return fit
    corrected = dataclasses.replace(fit, correction=correction)
    errors = [abs(corrected.predict_ns(f) / t - 1) for f, t in zip(features, t_ns)]
    return dataclasses.replace(corrected, fit_mape=float(np.mean(errors)))


def fit_samples(samples: Sequence[Sample], methods: Sequence[str] | None = None) -> dict[str, KindFit]:
    """One fit per kind present in ``samples`` (kinds in sorted order), choosing among ``methods`` (default all)."""
    by_kind: dict[str, list[Sample]] = {}
    for sample in samples:
        by_kind.setdefault(sample.kind, []).append(sample)
    fits = {kind: fit_kind(kind, by_kind[kind], methods) for kind in sorted(by_kind)}
    return {kind: fit for kind, fit in fits.items() if fit is not None}


def operator_kind(op: Operator, node_types: Mapping[str, str], kernel: str = "", variant: str = "") -> str:
    """The calibration kind of a workload operator (see the module docstring).

    ``kernel``: the anchor's entry in :func:`cimsplit.compiler.qdq_kernels.int8_kernels` (``""`` if none);
    ``variant``: its entry in :func:`op_variants`.
    """
    types = [node_types.get(node, "") for node in op.nodes]
    int8 = any(t in _QUANT_OPS or t.startswith("QLinear") for t in types)
    if op.m is not None and op.weight_shape is not None and len(op.weight_shape) == 4:
        base = "Conv-depthwise" if _groups(op) > 1 and op.weight_shape[1] == 1 else "Conv"
    elif op.m is not None:
        base = "Gemm"
    else:
        base = op.op_type + variant
    if not int8:
        return base
    return f"{INT8_PREFIX}{base}{kernel}"


def operator_features(op: Operator) -> dict[str, float]:
    """The descriptors a fit reads: GEMM shape and kernel size when lowered, element counts always (a pool's
    ``n_out`` times its window's taps: it reads its input once and compares a window per output)."""
    features = {"n_in": float(max(op.n_in, 1)), "n_out": float(max(op.n_out, 1) * op.window)}
    if op.m is not None and op.n is not None and op.n_mvm is not None:
        kernel = op.weight_shape[2] if op.weight_shape is not None and len(op.weight_shape) == 4 else 1
        features.update(m=float(op.m), n=float(op.n), n_mvm=float(op.n_mvm), k=float(kernel))
    elif op.product_shape is not None:  # a MatMul of two activations, a ConvTranspose: GEMM descriptors as a Gemm's
        rows, depth, columns = op.product_shape
        features.update(m=float(columns), n=float(depth), n_mvm=float(rows), k=1.0)
    return features


def fused_activations(op: Operator, node_types: Mapping[str, str]) -> list[str]:
    """Op types of the element-wise nodes fused into a GEMM operator (after its anchor)."""
    if op.m is None:
        return []
    return [node_types[node] for node in op.nodes[1:] if node_types.get(node) in _FUSABLE]


def _groups(op: Operator) -> int:
    """Conv groups from the lowering: N_mvm = H_out W_out g B and N_out = C_out H_out W_out B."""
    if not op.n_out or op.m is None or op.n_mvm is None:
        return 1
    return max(1, round(op.n_mvm * op.m / op.n_out))


@dataclass(frozen=True)
class HostModel:
    """A board's calibration: fits per kind plus where and how they were measured."""

    ort_version: str
    cpu: str
    machine: dict[str, str]
    threads: int
    level: str
    int8: bool
    fits: dict[str, KindFit]
    samples: tuple[Sample, ...] = ()
    campaign: dict[str, Any] = field(default_factory=dict)
    """Budget, elapsed time, grid size, measured points, load averages."""
    source: str = field(default="calibrated here", compare=False)
    context: tuple[ContextLayer, ...] = ()
    """Convs timed in context networks (:mod:`.calibration_context`): what sets :attr:`reuse`."""

    @property
    def reuse(self) -> dict[str, float]:
        """How many output pixels hide a weight's fetch on this board, per precision it has context layers of
        (:func:`.weight_fetch.board_reuse`)."""
        return board_reuse(self.context)

    def predict_kind_ns(self, kind: str, features: Mapping[str, float]) -> float:
        return self.fits[kind].predict_ns(features)

    def refit(self) -> HostModel:
        """This calibration with its recorded samples fitted again by this cimsplit's methods (measures nothing)."""
        if not self.samples:
            raise CimsplitError(f"host model {self.source!r} recorded no samples to fit again",
                                hint="calibrate the board again (`cimsplit calibrate -o FILE`)")
        begin = time.perf_counter()
        samples = tuple(sample.remixed(self.reuse) for sample in self.samples)
        fits = fit_samples(samples)
        campaign = dict(self.campaign, refitted_from=self.source, fit_s=round(time.perf_counter() - begin, 3))
        return dataclasses.replace(self, fits=fits, samples=samples, campaign=campaign)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "ort_version": self.ort_version, "cpu": self.cpu,
            "machine": dict(self.machine), "threads": self.threads, "level": self.level, "int8": self.int8,
            "campaign": dict(self.campaign),
            "kinds": {kind: fit.to_dict() for kind, fit in sorted(self.fits.items())},
            "samples": [sample.to_dict() for sample in self.samples],
            "context": [layer.to_dict() for layer in self.context],
        }

    def save(self, path: str | Path) -> None:
        write_atomic(Path(path), json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n")

    def summary(self) -> dict[str, Any]:
        """What plan.json records about the calibration the host costs were predicted from."""
        return {"calibration": self.source, "cpu": self.cpu, "ort_version": self.ort_version,
                "threads": self.threads, "level": self.level, "machine": dict(self.machine),
                "kinds": sorted(self.fits), "created": self.campaign.get("created"), "rescaled": self.campaign.get("rescaled", [])}

    @classmethod
    def load(cls, path: str | Path) -> HostModel:
        path = Path(path)
        where = f"host model {str(path)!r}"
        hint = "write one with `cimsplit calibrate -o FILE`"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CimsplitError(f"{where} does not exist", hint=hint) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise CimsplitError(f"cannot read {where}: {exc}") from None
        except json.JSONDecodeError:
            raise CimsplitError(f"{where} is not JSON", hint=hint) from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CimsplitError(f"{where} is not a cimsplit calibration", hint=hint)
        if data.get("format_version") != FORMAT_VERSION:
            raise CimsplitError(f"{where} has format version {data.get('format_version')!r}, this cimsplit reads "
                                f"version {FORMAT_VERSION}", hint="calibrate the board again")
        try:
            fits = {str(kind): KindFit.from_dict(str(kind), fit) for kind, fit in data["kinds"].items()}
            samples = tuple(Sample.from_dict(sample) for sample in data.get("samples", []))
            return cls(str(data["ort_version"]), str(data["cpu"]), {k: str(v) for k, v in data["machine"].items()},
                       int(data["threads"]), str(data["level"]), bool(data["int8"]), fits, samples,
                       dict(data.get("campaign", {})), source=str(path),
                       context=tuple(ContextLayer.from_dict(layer) for layer in data.get("context", [])))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise CimsplitError(f"{where} is malformed ({type(exc).__name__}: {exc})", hint=hint) from None
