"""The calibration campaign: micro-benchmarks of one operator each, measured as host profiling measures.

The grid is :mod:`.calibration_grid`'s.  Each point is a one-node ONNX model from one input, or the measured node in
the context a network gives it (a conv or depthwise conv between two
pointwise convs, so onnxruntime keeps its blocked layout across it; an int8
element-wise op reading convs' outputs, an int8 activation an Add of two
convs; a float Concat between convs; a Reshape or Flatten read by another op; a quantized SiLU, whose
sample is its nodes after the conv it follows;
int8: the same model through the zoo's QDQ recipe, ``models/quantize.py``), loaded by the front
end and profiled with :func:`host_profile.profile_model` — the optimization
level, threads and attribution of host profiling itself — and the
operator's latency is its nodes' medians, as :func:`host_profile.operator_latencies` sums them, less the
DQs that only keep a pair int8 (:func:`point_time`) and the layout glue onnxruntime puts in its region
(:func:`host_glue.glue_kernels`: an int8 element point's Transpose out of the NHWC chain and its graph output's
DequantizeLinear, which a network runs only where its own graph has them, and the predictor adds then).
A point with a weight is profiled a second time after reading the machine's last-level cache's worth of memory,
at most 128 MiB (:func:`.cache_flush.flushed`, :func:`.cache_flush.flush_bytes_for`), and its weights' share of what
that adds, less what its compute hides, is kept (:func:`.weight_fetch.in_network_ns`; the sample records both times,
so a refit can mix them again):
a network's layer finds its weights evicted by the other layers, and small-spatial convs are bound by
reading them (EfficientNet-B0's squeeze-and-excitation convs ran 2-3.5x their points' time without it).
How much the compute hides is the board's, measured once on context networks before the grid
(:mod:`.calibration_context`).  A copy point (a Concat, Split, pool, Resize, Transpose, Softmax) is profiled flushed
too, and keeps its output's share of what that adds by its bytes over this machine's L2 (:mod:`.cold_outputs`): in a
network it writes a buffer other layers may have evicted, a point the one it rewrote at the run before.
"""

from __future__ import annotations

import logging
import math
import os
import platform
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from cimsplit.compiler.cache_flush import FLUSH_PREFIX, flush_buffer, flush_bytes_for, flushed, l2_cache_bytes
from cimsplit.compiler.calibration_context import measure_context
from cimsplit.compiler.calibration_grid import LARGE, gemm_descriptors, gemm_key, grid, has_weights
from cimsplit.compiler.calibration_models import FORK_PREFIX, MEASURED_NODE, GridPoint, build_glue_point, build_point, keep_int8
from cimsplit.compiler.cold_outputs import in_network_ns as copy_in_network_ns
from cimsplit.compiler.cold_outputs import is_copy_kind
from cimsplit.compiler.host_chains import CHAIN_KINDS
from cimsplit.compiler.host_fused import QUANTIZED_SILU, activation_nodes, quantized_silu
from cimsplit.compiler.host_glue import GLUE_PREFIX, glue_kernels
from cimsplit.compiler.host_model import (
    INT8_PREFIX,
    HostModel,
    Sample,
    anchor_kind,
    fit_samples,
    is_gemm_kind,
    operator_features,
    operator_kind,
    plain_kind,
)
from cimsplit.compiler.host_variants import op_variants
from cimsplit.compiler.kernel_attribution import ATTRIBUTION_VERSION, CALIBRATION_ATTRIBUTIONS
from cimsplit.compiler.ort_profiler import TURN_RUNS, optimized_model, turns
from cimsplit.compiler.qdq_kernels import int8_kernels
from cimsplit.compiler.weight_fetch import ContextLayer, board_reuse
from cimsplit.compiler.workload import Operator
from cimsplit.errors import CimsplitError

__all__ = ["point_model", "measure_point", "measured_operator", "calibrate", "fitted_model", "point_time"]

log = logging.getLogger(__name__)



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
    if flush_bytes > 0 and _flushed_too(point):
        model = flushed(model, flush_bytes)
    return model


def _flushed_too(point: GridPoint) -> bool:
    """A point also profiled :func:`flushed`: one with a weight (:mod:`.weight_fetch`) or a copy (:mod:`.cold_outputs`)."""
    return has_weights(point) or is_copy_kind(point.kind)


def measure_point(point: GridPoint, *, threads: int, runs: int, warmup: int, seed: int = 0,
                  flush_bytes: int = 0) -> tuple[Sample, str]:
    """Build, load and profile one point (:func:`point_model`): its operator's sample (less the DQs
    :func:`keep_int8` adds) and the profiled optimization level.

    With ``flush_bytes``, a point that :func:`has_weights` is profiled twice, as it is and :func:`flushed`, and its time is
    :func:`~cimsplit.compiler.weight_fetch.in_network_ns` of the two (:meth:`Sample.profiled`); a copy point's
    (:func:`~.cold_outputs.is_copy_kind`) is :func:`~cimsplit.compiler.cold_outputs.in_network_ns` of the two on this
    machine's L2.
    """
    if point.kind.startswith(GLUE_PREFIX):
        return _measure_glue(point, threads=threads, runs=runs, warmup=warmup, seed=seed, flush_bytes=flush_bytes)
    sample, level = _profiled_sample(point, threads=threads, runs=runs, warmup=warmup, seed=seed)
    if flush_bytes > 0 and _flushed_too(point):
        cold, _ = _profiled_sample(point, threads=threads, runs=runs, warmup=warmup, seed=seed, flush_bytes=flush_bytes)
        if has_weights(point):
            sample = Sample.profiled(sample.kind, sample.features, sample.t_ns, cold.t_ns)
        else:
            t_ns = copy_in_network_ns(sample.kind, sample.features["n_out"], sample.t_ns, cold.t_ns, l2_cache_bytes())
            sample = Sample(sample.kind, sample.features, t_ns, (sample.t_ns, cold.t_ns))
    return sample, level


def _loaded_point(model: onnx.ModelProto, flush_bytes: int) -> tuple[Any, dict[str, np.ndarray]]:
    """A point's model through the front end, and the flush buffer it reads when :func:`flushed`."""
    from cimsplit.compiler.frontend import load

    with tempfile.TemporaryDirectory(prefix="cimsplit-calibrate-") as folder:
        path = Path(folder) / "point.onnx"
        onnx.save(model, path)
        loaded = load(path)
    return loaded, {FLUSH_PREFIX: flush_buffer(flush_bytes)} if any(i.name == FLUSH_PREFIX for i in model.graph.input) else {}


def _profiled_sample(point: GridPoint, *, threads: int, runs: int, warmup: int, seed: int,
                     flush_bytes: int = 0) -> tuple[Sample, str]:
    from cimsplit.compiler.host_profile import profile_model

    loaded, given = _loaded_point(point_model(point, seed, flush_bytes), flush_bytes)
    node_types = {node.name: node.op_type for node in loaded.model.graph.node}
    if point.kind == QUANTIZED_SILU:  # the first conv's activation nodes, as a network's conv has them
        op = next((o for o in loaded.workload.operators if quantized_silu(o, node_types)), None)
        if op is None:  # (as a point the front end lowers into another kind: the campaign skips it)
            raise RuntimeError(f"calibration point {point} has no conv with a quantized SiLU")
        profile = profile_model(loaded, runs=runs, warmup=warmup, threads=threads, seed=seed, progress=False)
        t_ns = math.fsum(float(profile.nodes[node]["median_ns"]) for node in activation_nodes(op, node_types) if node in profile.nodes)
        return Sample(point.kind, {"n_in": float(op.n_out), "n_out": float(op.n_out)}, t_ns), str(getattr(profile, "level", "off"))
    kernels = int8_kernels(loaded.model.graph)
    # The graph onnxruntime runs, where a Softmax's axis is decided and an int8 element op's layout glue is added
    # (a GEMM point sits between two convs of its kind: no glue of its own, host_glue).
    int8_element = point.kind.startswith(INT8_PREFIX) and not has_weights(point)
    optimized = (optimized_model(loaded.model, "all", threads)
                 if int8_element or "Softmax" in node_types.values() else None)
    variants = op_variants(loaded.model, optimized)
    kinds = [(op, operator_kind(op, node_types, kernels.get(op.name, ""), variants.get(op.name, "")))
             for op in loaded.workload.operators]
    op = None if point.kind in CHAIN_KINDS else measured_operator(point, kinds)
    glue = frozenset[str]()  # the layout glue in the operator's region: the predictor adds a network's own
    if op is not None and optimized is not None:
        glue = frozenset(g.kernel for g in glue_kernels(loaded.model, optimized, loaded.workload).get(op.name, ()))
    profile = profile_model(loaded, runs=runs, warmup=warmup, threads=threads, seed=seed, progress=False,
                            given_inputs=given, uncharged=glue)
    level = str(getattr(profile, "level", "off"))
    if op is None:  # a chain: one fused kernel does all its operators' work: their sum, by output elements
        elements = float(point.elements())
        return (Sample(point.kind, {"n_in": elements, "n_out": elements}, sum(point_time(o, profile.nodes) for o, _ in kinds)),
                level)
    return Sample(point.kind, operator_features(op), point_time(op, profile.nodes)), level


def point_time(op: Operator, nodes: Mapping[str, Mapping[str, Any]]) -> float:
    """The measured operator's time: its nodes' medians (``nodes``: a profile's), the forks :func:`keep_int8`
    adds left out."""
    return math.fsum(float(nodes[node]["median_ns"]) for node in op.nodes if not node.startswith(FORK_PREFIX))


def _measure_glue(point: GridPoint, *, threads: int, runs: int, warmup: int, seed: int,
                  flush_bytes: int = 0) -> tuple[Sample, str]:
    """A layout-glue kernel alone: its node's median, by its element count; with ``flush_bytes`` also :func:`flushed`,
    mixed as a copy's (a Q/DQ or Transpose writes a new buffer: :func:`~.cold_outputs.in_network_ns`)."""
    from cimsplit.compiler.host_profile import profile_model

    def median(model: onnx.ModelProto) -> tuple[float, str]:
        loaded, given = _loaded_point(model, flush_bytes)
        profile = profile_model(loaded, runs=runs, warmup=warmup, threads=threads, seed=seed, progress=False, given_inputs=given)
        return float(profile.nodes[MEASURED_NODE]["median_ns"]), str(getattr(profile, "level", "off"))

    elements = float(point.elements())
    features = {"n_in": elements, "n_out": elements}
    hot_ns, level = median(build_glue_point(point))
    if flush_bytes <= 0:
        return Sample(point.kind, features, hot_ns), level
    cold_ns, _ = median(flushed(build_glue_point(point), flush_bytes))
    return Sample(point.kind, features, copy_in_network_ns(point.kind, elements, hot_ns, cold_ns, l2_cache_bytes()),
                  (hot_ns, cold_ns)), level


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
    return float(point.elements())


POINTS_VERSION = 5
"""Bumped when what a point's sample measures changes, so that ``--extend`` measures the changed kinds again
(2: an operator without a weight is measured without the layout glue of its region, :func:`_profiled_sample`; 4: a
copy point is also measured flushed, :mod:`.cold_outputs`; 5: a glue point too), or
when the grid gains points of kinds without a weight, which ``--extend`` cannot tell apart by their samples (3: the
element points at :data:`~cimsplit.compiler.calibration_grid.LARGE`)."""

CONTEXT_MIN_BUDGET_S = 120.0
"""The least budget a campaign spends on context networks (:mod:`.calibration_context`: 36 s on an Intel Xeon core,
float and int8, three rounds); a shorter one mixes its points at the default reuse."""

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
    :func:`flush_bytes_for` this machine; 0: not) — :func:`measure_point`.  ``extend``: an earlier
    calibration of this machine, at its threads: only what it lacks is measured, and its samples of points the
    grid no longer has are dropped (:func:`_lacking`).  The grid's campaign (no ``points``) of a board without them
    first times the context networks (:mod:`.calibration_context`), given :data:`CONTEXT_MIN_BUDGET_S`.

    A point is skipped when its estimated cost (per-kind overhead plus the
    work times the kind's measured ns per unit) does not fit in what is left
    once the fits' share (:data:`FIT_S_PER_SAMPLE`) is kept back.
    ``progress(done, total, elapsed_s)`` is called after each point.
    """
    if threads < 1:
        raise CimsplitError(f"--threads must be at least 1, not {threads}")
    if not budget_s > 0:
        raise CimsplitError(f"--budget-s must be positive, not {budget_s:g}")
    if extend is not None:
        _check_extendable(extend, threads)
        int8 = int8 or extend.int8
    todo = list(points) if points is not None else grid(int8=int8, seed=seed, held_out=held_out)
    if extend is not None:
        todo, kept, dropped = _lacking(todo, extend.samples, _stale(extend, todo), _added(extend, todo))
    else:
        kept, dropped = [], 0
    flush_bytes = flush_bytes_for() if flush_bytes is None else max(0, flush_bytes)
    start = time.perf_counter()
    load_before = os.getloadavg()
    context = list(extend.context) if extend is not None else []
    if points is None and flush_bytes > 0 and not context and budget_s >= CONTEXT_MIN_BUDGET_S:  # once per board
        try:
            context = measure_context(lambda point: measure_point(point, threads=threads, runs=runs, warmup=warmup,
                                                                  seed=seed, flush_bytes=flush_bytes)[0],
                                      int8=int8, threads=threads, runs=runs, warmup=warmup, seed=seed)
        except RuntimeError as exc:  # (as a point the front end or onnxruntime cannot run: the grid goes on)
            log.warning("no context networks (%s): the weights' fetch is mixed at the default reuse", exc)
    samples: list[Sample] = list(kept)
    overhead_s: dict[str, float] = {}
    ns_per_unit: dict[str, list[float]] = {}
    skipped = failed = 0
    level = extend.level if extend is not None else "off"  # (the profiled level: what an extension measures nothing at keeps)
    passes = 4 * sum(unmeasured + n for unmeasured, n in turns(warmup, runs))  # four sessions take turns (ort_profiler.turns)
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
        if sample.t_ns < 0 or (sample.t_ns == 0 and is_gemm_kind(sample.kind)):  # (0: all glue, :func:`fit_kind`)
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
    return fitted_model(samples, threads=threads, int8=int8, level=level, context=context, campaign={
        "budget_s": budget_s, "elapsed_s": round(elapsed_s, 3), "grid_points": len(todo), "measured": len(samples) - len(kept),
        "skipped": skipped, "failed": failed, "runs": runs, "warmup": warmup, "seed": seed, "flush_bytes": flush_bytes, "l2_bytes": l2_cache_bytes(),
        "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
        "attribution": ATTRIBUTION_VERSION, "extends": None if extend is None else extend.source, "kept": len(kept),
        "dropped": dropped, "points": POINTS_VERSION, "turn_runs": TURN_RUNS,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    })


def _stale(earlier: HostModel, points: Sequence[GridPoint]) -> set[str]:
    """The kinds whose samples in ``earlier`` measure what this cimsplit's points no longer do (:data:`POINTS_VERSION`):
    before 2, the int8 kinds without a weight, which held their layout glue; before 4, the copy kinds, and before 5 the
    glue kinds (measured as they are only)."""
    version = int(earlier.campaign.get("points", 1))
    return ({p.kind for p in points if p.kind.startswith(INT8_PREFIX) and not has_weights(p) and version < 2}
            | {p.kind for p in points if is_copy_kind(p.kind) and version < 4}
            | {p.kind for p in points if p.kind.startswith(GLUE_PREFIX) and version < 5})


def _added(earlier: HostModel, points: Sequence[GridPoint]) -> set[GridPoint]:
    """The points without a GEMM shape the grid gained since ``earlier`` (:data:`POINTS_VERSION`): before 3, those at
    :data:`~cimsplit.compiler.calibration_grid.LARGE`."""
    if int(earlier.campaign.get("points", 1)) >= 3:
        return set()
    return {p for p in points if gemm_descriptors(p) is None and dict(p.params).get("h") == LARGE}


def _lacking(points: Sequence[GridPoint], earlier: Sequence[Sample], stale: Collection[str] = (),
             added: Collection[GridPoint] = ()) -> tuple[list[GridPoint], list[Sample], int]:
    """The ``points`` an earlier calibration's samples do not measure, the samples kept, and how many are dropped.

    A GEMM point is matched by its kind and descriptors (:func:`gemm_descriptors`, one sample to one point), so a
    grid grown since, or a campaign its budget cut short, is completed; a GEMM sample of no point (one the grid no
    longer has) is dropped.  Other kinds' points are seeded samples of shapes: measured only when the earlier
    calibration has none of their kind, or when ``added`` since.  Samples of the ``stale`` kinds are dropped (and
    their points measured).
    """
    wanted = Counter((p.kind, gemm_descriptors(p)) for p in points if gemm_descriptors(p) is not None)
    kept = []
    for sample in earlier:
        if sample.kind in stale:
            continue
        if is_gemm_kind(sample.kind):
            key = (sample.kind, gemm_key(sample.features["m"], sample.features["n"], sample.features["n_mvm"]))
            if wanted[key] <= 0:
                continue
            wanted[key] -= 1
        kept.append(sample)
    known = {sample.kind for sample in kept}
    lacking = []
    for point in points:
        descriptors = gemm_descriptors(point)
        if descriptors is None and (point.kind not in known or point in added):
            lacking.append(point)
        elif descriptors is not None and wanted[(point.kind, descriptors)] > 0:
            wanted[(point.kind, descriptors)] -= 1
            lacking.append(point)
    return lacking, kept, len(earlier) - len(kept)


def _check_extendable(earlier: HostModel, threads: int) -> None:
    """An extended calibration must have been measured here, as this campaign measures (its profiles' sessions taking
    turns of as many runs: before :data:`~.ort_profiler.TURN_RUNS`, run by run)."""
    from cimsplit.compiler.host_profile import cpu_model

    here = {"onnxruntime": ort.__version__, "cpu": cpu_model(), "threads": threads, "attribution": ATTRIBUTION_VERSION,
            "turns of": TURN_RUNS}
    there = {"onnxruntime": earlier.ort_version, "cpu": earlier.cpu, "threads": earlier.threads,
             "attribution": earlier.campaign.get("attribution"), "turns of": earlier.campaign.get("turn_runs", 1)}
    differ = [key for key in here if here[key] != there[key]
              and not (key == "attribution" and there[key] in CALIBRATION_ATTRIBUTIONS)]
    if differ:
        key = differ[0]
        raise CimsplitError(f"{earlier.source!r} was calibrated with {key} {there[key]}, this campaign's is {here[key]}",
                            hint="calibrate the board anew (without --extend)")
    if not earlier.samples:
        raise CimsplitError(f"{earlier.source!r} recorded no samples to keep", hint="calibrate the board anew")


def fitted_model(samples: Sequence[Sample], *, threads: int, int8: bool, campaign: dict, level: str,
                 context: Sequence[ContextLayer] = ()) -> HostModel:
    """Fit ``samples``, their weighted points' times mixed at the reuse of the ``context`` layers
    (:func:`.weight_fetch.board_reuse`), and record this machine, onnxruntime and the profiling level they were
    measured at."""
    from cimsplit.compiler.host_profile import cpu_model

    machine = {"system": platform.system(), "machine": platform.machine(), "node": platform.node(),
               "python": platform.python_version(), "cores": str(os.cpu_count() or 1)}
    begin = time.perf_counter()
    reuse = board_reuse(context)
    samples = [sample.remixed(reuse) for sample in samples]
    fits = fit_samples(samples)
    campaign = {**campaign, "fit_s": round(time.perf_counter() - begin, 3)}
    return HostModel(ort_version=ort.__version__, cpu=cpu_model(), machine=machine, threads=threads, level=level,
                     int8=int8, fits=fits, samples=tuple(samples), campaign=campaign, context=tuple(context))
