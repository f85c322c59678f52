"""The calibration campaign: micro-benchmarks of one operator each, measured as host profiling measures.

The grid (:func:`grid`) is fixed and ordered: Conv over C_in x C_out x spatial
size x kernel 1/3/5/7 x stride 1/2, depthwise Conv (alone and with the Clip
onnxruntime folds into it, float only), Gemm (M_v x N_v x batch), MatMul of two
activations (batch x rows x depth x columns, attention's products),
and the non-GEMM operators over element counts.  Its spatial sizes (10, 18, 36,
68, 132) are none of the zoo's (7 ... 224, 20 ... 640), so no zoo model's
GEMM shape (M_v, N_v, N_mvm) is in it; :func:`grid` also drops any point in
``held_out``.  Points are interleaved across kinds (each kind's own points in
a seeded shuffle), so a campaign cut short by its time budget still covers
every kind with a spread of sizes.

Each point is a one-node ONNX model from one input, or the measured node in
the context a network gives it (a conv or depthwise conv between two
pointwise convs, so onnxruntime keeps its blocked layout across it; an int8
element-wise op reading convs' outputs, an int8 activation an Add of two
convs; a float Concat between convs; a Reshape or Flatten read by another op;
int8: the same model through the zoo's QDQ recipe, ``models/quantize.py``), loaded by the front
end and profiled with :func:`host_profile.profile_model` — the optimization
level, threads and attribution of host profiling itself — and the
operator's latency is its nodes' medians, as :func:`host_profile.operator_latencies` sums them, less the
DQs that only keep a pair int8 (:func:`point_time`).  A GEMM point is profiled a second time after
reading the machine's last-level cache's worth of memory (:func:`calibration_models.flushed`,
:func:`last_level_cache_bytes`), and its weights' share of what that adds is kept (:func:`in_network_ns`):
a network's layer finds its weights evicted by the other layers, and small-spatial convs are bound by
reading them (EfficientNet-B0's squeeze-and-excitation convs ran 2-3.5x their points' time without it).
"""

from __future__ import annotations

import logging
import math
import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from cimsplit.compiler.calibration_models import (
    FLUSH_PREFIX,
    FORK_PREFIX,
    IMAGE_CHANNELS,
    MEASURED_NODE,
    GridPoint,
    build_glue_point,
    build_point,
    flush_buffer,
    flushed,
    keep_int8,
)
from cimsplit.compiler.host_glue import GLUE_KINDS, GLUE_PREFIX
from cimsplit.compiler.host_model import (
    INT8_PREFIX,
    KERNEL_SUFFIXES,
    HostModel,
    Sample,
    anchor_kind,
    fit_samples,
    operator_features,
    operator_kind,
    plain_kind,
)
from cimsplit.compiler.kernel_attribution import ATTRIBUTION_VERSION
from cimsplit.compiler.qdq_kernels import int8_kernels, onnxruntime_converts_int8_pairs
from cimsplit.compiler.workload import Operator
from cimsplit.errors import CimsplitError

__all__ = ["GridPoint", "grid", "build_point", "point_model", "measure_point", "measured_operator", "calibrate", "SPATIAL", "gemm_key",
           "last_level_cache_bytes", "in_network_ns",
           "has_weights"]

log = logging.getLogger(__name__)

SPATIAL = (10, 18, 36, 68, 132)
POOLED = 1
"""The spatial size of 1x1 Conv points on a pooled tensor (squeeze-and-excitation, heads after a global pool)."""
CONV_IN = (3, 16, 40, 88, 176, 344, 680, 1360)
CONV_OUT = (16, 40, 88, 176, 344, 680, 1360)
"""Up to the channel counts of a network's last layers (MobileNetV2's 960 and 1280, ResNet-50's 2048 at 7 x 7): a fit
extrapolated from 344 in and 680 out under-predicted those by 15-30 %."""
DEPTHWISE = (16, 40, 88, 176, 344, 680, 1360)
MAX_DEPTHWISE_ELEMENTS = 12e6
FUSED_DEPTHWISE = "Conv-depthwise+Clip"
"""A depthwise conv with the Clip (ReLU6) onnxruntime folds into it (MobileNetV2's): float only, the quantizer folds
a Clip into the int8 range."""
GEMM_M = (10, 100, 500, 1500)
GEMM_N = (40, 200, 700, 1800, 3000)
GEMM_BATCH = (1, 3, 17)
MATMUL_BATCH = (1, 4)
MATMUL_ROWS = (16, 60, 260)
MATMUL_DEPTH = (16, 40, 100)
MATMUL_COLUMNS = (16, 60, 260)
"""A MatMul of two activations, (b, m, k) x (b, k, n): attention's, whose heads are the batch."""
ELEMENT_CHANNELS = (16, 40, 88, 176, 344)
MAX_MACS = 250e6
MAX_ELEMENTS = 3e6
ELEMENT_POINTS = 12
"""Points per non-GEMM kind (a three-column fit needs few)."""
ELEMENT_OPS = (
    "Relu", "Clip", "Sigmoid", "HardSigmoid", "Tanh", "LeakyRelu", "Add", "Mul", "Sub", "Div", "Pow",
    "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Reshape", "Transpose", "Concat", "Split", "Slice",
    "Resize", "Softmax", "Erf", "LayerNormalization", "Squeeze", "Gather",
)
"""Not HardSwish: onnxruntime runs its function body (HardSigmoid, Mul), whose kernels a point's attribution
charged nothing; a float HardSwish, fused or not, is predicted as those two kinds (:mod:`.host_prediction`)."""
_WEIGHTS = {"Conv": 4, "Conv-depthwise": 2, FUSED_DEPTHWISE: 2, "Gemm": 1}


def gemm_key(m: int, n: int, n_mvm: int) -> tuple[int, int, int]:
    """The GEMM descriptors a held-out shape is compared by."""
    return (int(m), int(n), int(n_mvm))


def _out(size: int, k: int, s: int) -> int:
    return (size + 2 * (k // 2) - k) // s + 1


def _conv_points() -> list[GridPoint]:
    points = []
    for c_in in CONV_IN:
        for c_out in CONV_OUT:
            for h in (POOLED, *SPATIAL):
                for k in ((1,) if h == POOLED else (1, 3, 5, 7)):
                    for s in ((1,) if h == POOLED else (1, 2)):
                        macs = c_out * c_in * k * k * _out(h, k, s) ** 2
                        image_wide = c_in == IMAGE_CHANNELS and c_out > 680  # a first layer has few outputs
                        if macs <= MAX_MACS and not (k > 3 and c_in * c_out > 176 * 176) and not image_wide:
                            points.append(GridPoint("Conv", (("c_in", c_in), ("c_out", c_out), ("h", h), ("k", k), ("s", s))))
    return points


def _depthwise_points(kind: str = "Conv-depthwise") -> list[GridPoint]:
    return [GridPoint(kind, (("c", c), ("h", h), ("k", k), ("s", s)))
            for c in DEPTHWISE for h in SPATIAL for k in (3, 5, 7) for s in (1, 2) if c * h * h <= MAX_DEPTHWISE_ELEMENTS]


def _gemm_points() -> list[GridPoint]:
    return [GridPoint("Gemm", (("m", m), ("n", n), ("b", b))) for m in GEMM_M for n in GEMM_N for b in GEMM_BATCH]


def _matmul_points() -> list[GridPoint]:
    return [GridPoint("MatMul", (("b", b), ("m", m), ("k", k), ("n", n)))
            for b in MATMUL_BATCH for m in MATMUL_ROWS for k in MATMUL_DEPTH for n in MATMUL_COLUMNS]


def _element_points(op: str, rng: np.random.Generator) -> list[GridPoint]:
    shapes = [(c, h) for c in ELEMENT_CHANNELS for h in SPATIAL if c * h * h <= MAX_ELEMENTS]
    variants = 2 if op == "MaxPool" else 1
    points = [GridPoint(op, (("c", c), ("h", h)), variant=i % variants) for i, (c, h) in enumerate(shapes)]
    chosen = rng.permutation(len(points))[:ELEMENT_POINTS]
    return [points[i] for i in sorted(chosen)]


def gemm_descriptors(point: GridPoint) -> tuple[int, int, int] | None:
    """(M_v, N_v, N_mvm) of a GEMM point as im2col lowers it (None for element-wise points)."""
    kind = plain_kind(anchor_kind(point.kind)).removeprefix(INT8_PREFIX)
    if kind == "Conv":
        k, s = point.get("k"), point.get("s")
        return gemm_key(point.get("c_out"), point.get("c_in") * k * k, _out(point.get("h"), k, s) ** 2)
    if kind == "Conv-depthwise":
        c, k, s = point.get("c"), point.get("k"), point.get("s")
        return gemm_key(c, k * k, _out(point.get("h"), k, s) ** 2 * c)
    if kind == "Gemm":
        return gemm_key(point.get("m"), point.get("n"), point.get("b"))
    if kind == "MatMul":
        return gemm_key(point.get("n"), point.get("k"), point.get("b") * point.get("m"))
    return None


def has_weights(point: GridPoint) -> bool:
    """A point whose operator reads a constant weight (what :func:`flushed` evicts): a GEMM point but a MatMul of
    two activations."""
    return gemm_descriptors(point) is not None and plain_kind(point.kind).removeprefix(INT8_PREFIX) != "MatMul"


def grid(int8: bool = False, seed: int = 0, held_out: Iterable[tuple[int, int, int]] = ()) -> list[GridPoint]:
    """Every calibration point, in campaign order (deterministic for a seed).

    ``int8`` adds the ``int8:`` kinds, and on x86 their variants whose int8 input, output or both
    stay int8 (``-s8in``, ``-s8out``, ``-s8``).
    """
    rng = np.random.default_rng(seed)
    excluded = set(held_out)
    per_kind: dict[str, list[GridPoint]] = {
        "Conv": _conv_points(), "Conv-depthwise": _depthwise_points(), FUSED_DEPTHWISE: _depthwise_points(FUSED_DEPTHWISE),
        "Gemm": _gemm_points(),
    }
    for op in ELEMENT_OPS:
        per_kind[op] = _element_points(op, rng)
    per_kind["MatMul"] = _matmul_points()
    if int8 and onnxruntime_converts_int8_pairs():  # the layout glue of the NHWC int8 chain (host_glue)
        glue_rng = np.random.default_rng(seed + 1)  # its own stream: the other kinds' order stays as it was
        for kind in GLUE_KINDS:
            per_kind[kind] = [GridPoint(kind, p.params) for p in _element_points("Relu", glue_rng)]
    queues: list[tuple[int, list[GridPoint]]] = []
    for kind, points in per_kind.items():
        points = [p for p in points if gemm_descriptors(p) not in excluded]
        order = [points[i] for i in rng.permutation(len(points))]
        queues.append((_WEIGHTS.get(kind, 1), order))
        if int8 and not kind.startswith(GLUE_PREFIX) and kind == anchor_kind(kind):
            queues.append((_WEIGHTS.get(kind, 1), [GridPoint(INT8_PREFIX + p.kind, p.params, p.variant) for p in order]))
            if onnxruntime_converts_int8_pairs():
                for suffix in KERNEL_SUFFIXES:
                    queues.append((_WEIGHTS.get(kind, 1), [GridPoint(INT8_PREFIX + p.kind + suffix, p.params, p.variant)
                                                    for p in order]))
    ordered: list[GridPoint] = []
    while any(points for _, points in queues):
        for weight, points in queues:
            ordered.extend(points[:weight])
            del points[:weight]
    return ordered


def point_model(point: GridPoint, seed: int = 0, flush_bytes: int = 0) -> onnx.ModelProto:
    """The model a (non-glue) point measures: :func:`build_point`, through the zoo's QDQ recipe for an int8 kind;
    a point that :func:`has_weights` :func:`flushed` with ``flush_bytes`` (when positive)."""
    model = build_point(point, seed)
    if point.kind.startswith(INT8_PREFIX):
        from cimsplit.models.quantize import quantize_qdq

        model = quantize_qdq(model, seed=seed)
        kernel = point.kind.removeprefix(plain_kind(point.kind))
        if kernel:
            model = keep_int8(model, inputs=kernel in ("-s8in", "-s8"), outputs=kernel in ("-s8out", "-s8"))
    if flush_bytes > 0 and has_weights(point):
        model = flushed(model, flush_bytes)
    return model


def measure_point(point: GridPoint, *, threads: int, runs: int, warmup: int, seed: int = 0,
                  flush_bytes: int = 0) -> tuple[Sample, str]:
    """Build, load and profile one point (:func:`point_model`): its operator's sample (less the DQs
    :func:`keep_int8` adds) and the profiled optimization level.

    With ``flush_bytes``, a point that :func:`has_weights` is profiled twice, as it is and :func:`flushed`, and its time is
    :func:`in_network_ns` of the two.
    """
    if point.kind.startswith(GLUE_PREFIX):
        return _measure_glue(point, threads=threads, runs=runs, warmup=warmup, seed=seed)
    sample, level = _profiled_sample(point, threads=threads, runs=runs, warmup=warmup, seed=seed)
    if flush_bytes > 0 and has_weights(point):
        cold, _ = _profiled_sample(point, threads=threads, runs=runs, warmup=warmup, seed=seed, flush_bytes=flush_bytes)
        sample = Sample(sample.kind, sample.features, in_network_ns(sample.features, sample.t_ns, cold.t_ns))
    return sample, level


def in_network_ns(features: Mapping[str, float], hot_ns: float, flushed_ns: float) -> float:
    """A GEMM operator's time in a network, from its point's time as it is (``hot_ns``) and :func:`flushed`.

    In a network a layer finds its weights evicted by the other layers but its output buffer (an arena
    block the layers before it just freed) in cache; the flush makes both cold.  What the flush adds is
    split between the two by their element counts (``m * n`` weights, ``n_out`` outputs) and only the
    weights' share is kept: pointwise convs on a pooled tensor keep nearly all of it (a 1152 -> 48 1x1 conv
    at 1 x 1: 5.5 us, 15 us flushed, 13-16 us in EfficientNet-B0), depthwise convs nearly none (their
    weights are k x k per channel, and flushed they ran 20-50 % over their times in MobileNetV2).
    """
    weights, outputs = features["m"] * features["n"], features["n_out"]
    return hot_ns + max(0.0, flushed_ns - hot_ns) * weights / max(weights + outputs, 1.0)


def _profiled_sample(point: GridPoint, *, threads: int, runs: int, warmup: int, seed: int,
                     flush_bytes: int = 0) -> tuple[Sample, str]:
    from cimsplit.compiler.frontend import load
    from cimsplit.compiler.host_profile import profile_model

    model = point_model(point, seed, flush_bytes)
    with tempfile.TemporaryDirectory(prefix="cimsplit-calibrate-") as folder:
        path = Path(folder) / "point.onnx"
        onnx.save(model, path)
        loaded = load(path)
    given = {FLUSH_PREFIX: flush_buffer(flush_bytes)} if flush_bytes > 0 and has_weights(point) else {}
    profile = profile_model(loaded, runs=runs, warmup=warmup, threads=threads, seed=seed, progress=False,
                            given_inputs=given)
    node_types = {node.name: node.op_type for node in loaded.model.graph.node}
    level = str(getattr(profile, "level", "off"))
    kernels = int8_kernels(loaded.model.graph)
    kinds = [(op, operator_kind(op, node_types, kernels.get(op.name, ""))) for op in loaded.workload.operators]
    op = measured_operator(point, kinds)
    return Sample(point.kind, operator_features(op), point_time(op, profile.nodes)), level


def last_level_cache_bytes(caches: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int:
    """The largest CPU cache of this machine (Linux sysfs), 32 MiB where it cannot be read."""
    sizes = []
    for index in caches.glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        number, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
        if number.isdigit():
            sizes.append(int(number) * unit)
    return max(sizes, default=32 << 20)


def point_time(op: Operator, nodes: Mapping[str, Mapping[str, Any]]) -> float:
    """The measured operator's time: its nodes' medians (``nodes``: a profile's), the forks :func:`keep_int8`
    adds left out."""
    return math.fsum(float(nodes[node]["median_ns"]) for node in op.nodes if not node.startswith(FORK_PREFIX))


def _measure_glue(point: GridPoint, *, threads: int, runs: int, warmup: int, seed: int) -> tuple[Sample, str]:
    """A layout-glue kernel alone: its node's median, by its element count."""
    from cimsplit.compiler.frontend import load
    from cimsplit.compiler.host_profile import profile_model

    with tempfile.TemporaryDirectory(prefix="cimsplit-calibrate-") as folder:
        path = Path(folder) / "point.onnx"
        onnx.save(build_glue_point(point), path)
        loaded = load(path)
    profile = profile_model(loaded, runs=runs, warmup=warmup, threads=threads, seed=seed, progress=False)
    elements = float(point.get("c") * point.get("h") ** 2)
    return (Sample(point.kind, {"n_in": elements, "n_out": elements}, float(profile.nodes[MEASURED_NODE]["median_ns"])),
            str(getattr(profile, "level", "off")))


def measured_operator(point: GridPoint, kinds: Sequence[tuple[Operator, str]]) -> Operator:
    """The operator a point measures, among the (operator, kind) pairs of its loaded model.

    The node named :data:`MEASURED_NODE` when there is one, else the operator of the point's
    kind.  The quantizer leaves a lone element-wise op from a graph input in float (no Q/DQ
    around it); that is the op's cost in an int8 model too, where its Q/DQ neighbours are
    charged to their producers, so the float kind stands in for the int8 one.
    """
    base = anchor_kind(point.kind.removeprefix(INT8_PREFIX))
    named = [(op, kind) for op, kind in kinds if MEASURED_NODE in op.nodes]
    for op, kind in named or sorted(kinds, key=lambda item: item[1] != point.kind):
        if kind in (point.kind, base):
            return op
    found = ", ".join(kind for _, kind in kinds) or "none"
    raise RuntimeError(f"calibration point {point} yields operators {found}, not {point.kind}")


def _work(point: GridPoint) -> float:
    """MACs of a GEMM point, elements of another: what its run time scales with."""
    gemm = gemm_descriptors(point)
    if gemm is not None:
        return float(math.prod(gemm))
    return float(point.get("c") * point.get("h") ** 2)


FIT_S_PER_SAMPLE = 0.005
"""Seconds of the budget kept back for the fits, per sample measured: the fits of a full int8 campaign
(7,271 samples; linear methods cross-validated, then the kernel ridge correction) took 34 s on a Zen 4
core, after the measuring had spent the whole budget."""


def calibrate(
    *, threads: int = 1, int8: bool = False, budget_s: float = 300.0, runs: int = 5, warmup: int = 2, seed: int = 0,
    held_out: Iterable[tuple[int, int, int]] = (), progress: Callable[[int, int, float], None] | None = None,
    points: Sequence[GridPoint] | None = None, flush_bytes: int | None = None, extend: HostModel | None = None,
) -> HostModel:
    """Measure grid points until the budget is spent, then fit every kind (see the module docstring).

    A point that :func:`has_weights` is also profiled after reading ``flush_bytes`` (by default
    :func:`last_level_cache_bytes`; 0: not) — :func:`measure_point`.  ``extend``: an earlier
    calibration of this machine, whose samples are kept; only the kinds it has none of are measured
    (those a newer cimsplit calibrates), at its threads.

    A point is skipped when its estimated cost (per-kind overhead plus the
    work times the kind's measured ns per unit) does not fit in what is left
    once the fits' share (:data:`FIT_S_PER_SAMPLE`) is kept back.
    ``progress(done, total, elapsed_s)`` is called after each point.
    """
    if threads < 1:
        raise CimsplitError(f"--threads must be at least 1, not {threads}")
    if not budget_s > 0:
        raise CimsplitError(f"--budget-s must be positive, not {budget_s:g}")
    kept: list[Sample] = []
    if extend is not None:
        _check_extendable(extend, threads)
        kept, int8 = list(extend.samples), int8 or extend.int8
    todo = list(points) if points is not None else grid(int8=int8, seed=seed, held_out=held_out)
    if extend is not None:
        todo = [point for point in todo if point.kind not in {sample.kind for sample in kept}]
    flush_bytes = last_level_cache_bytes() if flush_bytes is None else max(0, flush_bytes)
    start = time.perf_counter()
    load_before = os.getloadavg()
    samples: list[Sample] = list(kept)
    overhead_s: dict[str, float] = {}
    ns_per_unit: dict[str, list[float]] = {}
    skipped = failed = 0
    level = "off"
    passes = 4 * (runs + warmup)  # profiled and timed sessions take turns (host_profile.measure)
    for index, point in enumerate(todo):
        left_s = budget_s - (time.perf_counter() - start) - FIT_S_PER_SAMPLE * (len(samples) + 1)
        rates = ns_per_unit.get(point.kind)
        estimate_s = overhead_s.get(point.kind, 0.1) + passes * _work(point) * (float(np.median(rates)) if rates else 0.05) * 1e-9
        if estimate_s > left_s:
            skipped += 1
            if left_s < 0.05:
                break
            continue
        begun = time.perf_counter()
        try:
            sample, level = measure_point(point, threads=threads, runs=runs, warmup=warmup, seed=seed,
                                          flush_bytes=flush_bytes)
        except RuntimeError as exc:  # a point the front end or onnxruntime lowers into another kind
            log.warning("skipping a calibration point: %s", exc)
            failed += 1
            continue
        wall_s = time.perf_counter() - begun
        if sample.t_ns <= 0:
            failed += 1
            continue
        samples.append(sample)
        ns_per_unit.setdefault(point.kind, []).append(sample.t_ns / _work(point))
        overhead_s[point.kind] = min(overhead_s.get(point.kind, wall_s), max(wall_s - passes * sample.t_ns * 1e-9, 0.0))
        if progress is not None:
            progress(index + 1, len(todo), time.perf_counter() - start)
    elapsed_s = time.perf_counter() - start
    if not samples:
        raise CimsplitError(f"the budget of {budget_s:g} s measured no calibration point", hint="raise --budget-s")
    return fitted_model(samples, threads=threads, int8=int8, level=level, campaign={
        "budget_s": budget_s, "elapsed_s": round(elapsed_s, 3), "grid_points": len(todo), "measured": len(samples) - len(kept),
        "skipped": skipped, "failed": failed, "runs": runs, "warmup": warmup, "seed": seed, "flush_bytes": flush_bytes,
        "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
        "attribution": ATTRIBUTION_VERSION, "extends": None if extend is None else extend.source, "kept": len(kept),
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    })


def _check_extendable(earlier: HostModel, threads: int) -> None:
    """An extended calibration must have been measured here, as this campaign measures."""
    from cimsplit.compiler.host_profile import cpu_model

    here = {"onnxruntime": ort.__version__, "cpu": cpu_model(), "threads": threads, "attribution": ATTRIBUTION_VERSION}
    there = {"onnxruntime": earlier.ort_version, "cpu": earlier.cpu, "threads": earlier.threads,
             "attribution": earlier.campaign.get("attribution")}
    differ = [key for key in here if here[key] != there[key]]
    if differ:
        key = differ[0]
        raise CimsplitError(f"{earlier.source!r} was calibrated with {key} {there[key]}, this campaign's is {here[key]}",
                            hint="calibrate the board anew (without --extend)")
    if not earlier.samples:
        raise CimsplitError(f"{earlier.source!r} recorded no samples to keep", hint="calibrate the board anew")


def fitted_model(samples: Sequence[Sample], *, threads: int, int8: bool, campaign: dict, level: str) -> HostModel:
    """Fit ``samples`` and record this machine, onnxruntime and the profiling level they were measured at."""
    from cimsplit.compiler.host_profile import cpu_model

    machine = {"system": platform.system(), "machine": platform.machine(), "node": platform.node(),
               "python": platform.python_version(), "cores": str(os.cpu_count() or 1)}
    begin = time.perf_counter()
    fits = fit_samples(samples)
    campaign = {**campaign, "fit_s": round(time.perf_counter() - begin, 3)}
    return HostModel(ort_version=ort.__version__, cpu=cpu_model(), machine=machine, threads=threads, level=level,
                     int8=int8, fits=fits, samples=tuple(samples), campaign=campaign)
