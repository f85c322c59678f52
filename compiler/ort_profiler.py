"""Measure per-node and whole-model host latency with ONNX Runtime (paper IV-A1).

Per-node latencies come from ONNX Runtime's own profiler, not from timing nodes
one by one: a session with ``enable_profiling`` runs the model ``warmup + runs``
times (and once more per turn, below), ``end_profiling`` writes a Chrome-trace JSON, and every
``<node>_kernel_time`` event (category ``Node``, ``dur`` in whole microseconds,
as onnxruntime's own ``transformers/profile_result_processor.py`` reads them;
``args.output_type_shape`` lists the kernel's output types in onnxruntime 1.2x-1.3x)
is attributed to the ``model_run`` event that contains it.  ORT starts profiling at session
creation, so warm-up runs cannot be left out of the trace; instead their
``model_run`` windows are dropped when parsing (the same session is warmed up
that is then measured).  Traces live in a temporary folder that is
removed afterwards.

``level`` is the graph optimization level of the profiled session:

* ``"all"`` (default): ``ORT_ENABLE_ALL``, the level of the runtime's host
  partitions, so an int8 QDQ Conv costs the QLinearConv that really runs.  The
  session saves its optimized graph (``optimized_model_filepath``) and
  :mod:`kernel_attribution` maps its kernels to the simplified model's nodes;
  a kernel that does the work of several nodes is split among them in
  proportion to their times in a second profiled session with optimizations
  off.
* ``"off"``: ``ORT_DISABLE_ALL``, ORT's nodes are the simplified model's nodes
  one to one (for research: what each ONNX node costs on its own).

At both levels a node computed from constants only (a weight's
DequantizeLinear) that runs is charged to the nodes that read it; one that ORT
folds costs nothing.  A node's latency has a 1 us resolution at ``off`` (the
median over runs of integers).

Whole-model medians are measured by timing ``session.run`` of two more
sessions without the profiler, ``optimizations_off`` and ``optimizations_all``.
All sessions take turns (:func:`turns`), so that a neighbour's load on a shared
machine weighs on all of them alike; each turn begins with a run that is not
measured, which fills the caches with the session's own weights and buffers
again, as a model run alone in a loop has them.  The 1-minute load average is
read before and after.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from google.protobuf.message import DecodeError
from onnxruntime.capi import onnxruntime_pybind11_state as _ort_state
from tqdm import tqdm

from cimsplit.compiler.kernel_attribution import Region, attribute_kernels, split_region_times
from cimsplit.errors import CimsplitError
from cimsplit.machine import load_average
from cimsplit.ort_logging import ort_log_severity

__all__ = ["LEVELS", "TURN_RUNS", "NodeStats", "Measurement", "measure", "optimized_model", "random_inputs", "turns"]

log = logging.getLogger(__name__)

_KERNEL_SUFFIX = "_kernel_time"
_ORT_ERRORS = tuple(
    cls for cls in vars(_ort_state).values() if isinstance(cls, type) and issubclass(cls, Exception)
)
LEVELS = {"off": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
"""Profiling levels: name -> ORT graph optimization level."""
_TIMED_LEVELS = {"optimizations_off": "off", "optimizations_all": "all"}
TURN_RUNS = 5
"""Measured runs a session makes in a row (:func:`turns`).  Taking turns run by run, the four sessions of a model
evicted each other's weights and buffers from the last-level cache between any two runs of one, which a model run
alone in a loop does not see.  On an Intel Xeon VM (2 cores, three profiles each, alternating): MobileNetV2's
operators summed 6.44-6.77 ms run by run and 5.61-6.11 in turns of 5, its classifier (5 MB of weights) 414 us
against 234; EfficientNet-B0 11.21-12.35 against 11.17-11.73; ResNet-18 (45 MB of weights) 21.0-22.5 both ways."""
# Element type names of the trace's output_type_shape (ORT's own spelling of the ONNX types).
_TRACE_TYPES = {
    "float": onnx.TensorProto.FLOAT, "double": onnx.TensorProto.DOUBLE, "float16": onnx.TensorProto.FLOAT16,
    "uint8": onnx.TensorProto.UINT8, "int8": onnx.TensorProto.INT8, "int16": onnx.TensorProto.INT16,
    "uint16": onnx.TensorProto.UINT16, "int32": onnx.TensorProto.INT32, "int64": onnx.TensorProto.INT64,
    "bool": onnx.TensorProto.BOOL,
}


@dataclass(frozen=True)
class NodeStats:
    op_type: str
    median_ns: float
    p10_ns: float
    p90_ns: float
    samples: int
    """Recorded runs in which the node was charged kernel time (0: ORT never ran anything for it)."""


@dataclass(frozen=True)
class Measurement:
    nodes: dict[str, NodeStats]
    model_median_ns: dict[str, float]
    """``optimizations_off`` and ``optimizations_all``."""
    level: str = "all"
    """The profiled optimization level (a key of LEVELS)."""
    load_average_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_average_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    kernels: int = 0
    """Kernels of the graph ORT ran at ``level``."""


def measure(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    *,
    runs: int = 30,
    warmup: int = 5,
    threads: int = 1,
    seed: int = 0,
    progress: bool | None = None,
    level: str = "all",
    given_inputs: Mapping[str, np.ndarray] | None = None,
    uncharged: frozenset[str] = frozenset(),
) -> Measurement:
    """Profile every node of ``model`` at ``level`` and time the whole model (see module docstring).

    ``progress``: ``None`` shows a tqdm bar on stderr only when it is a terminal,
    ``False`` never, ``True`` always.  ``given_inputs`` are fed as they are, the other inputs random.
    ``uncharged``: kernels of the graph run at ``level`` whose time no node is charged (a calibration point's
    layout glue, :func:`~cimsplit.compiler.host_glue.glue_kernels`).
    """
    if runs < 1:
        raise CimsplitError(f"runs must be at least 1, not {runs}", hint="e.g. --runs 30")
    if warmup < 0:
        raise CimsplitError(f"warm-up runs must be zero or more, not {warmup}", hint="e.g. --warmup 5")
    if threads < 1:
        raise CimsplitError(f"threads must be at least 1, not {threads}", hint="e.g. --threads 1")
    if level not in LEVELS:
        raise CimsplitError(f"unknown profiling level {level!r}", hint=f"use one of {', '.join(LEVELS)}")
    feeds = random_inputs(model, input_shapes or {}, seed, given_inputs)
    payload = model.SerializeToString()
    load_before = load_average()
    folder = tempfile.mkdtemp(prefix="cimsplit-profile-")
    try:
        profiled: dict[str, ort.InferenceSession] = {}
        for key in dict.fromkeys(("off", level)):
            options = _options(LEVELS[key], threads)
            options.enable_profiling = True
            options.profile_file_prefix = os.path.join(folder, f"ort-{key}")
            # Even with optimizations off ORT rewrites QDQ graphs (a DequantizeLinear feeding two
            # consumers is duplicated), so the graph that runs is read back at every level.
            options.optimized_model_filepath = os.path.join(folder, f"optimized-{key}.onnx")
            profiled[key] = _session(payload, options)
        timed = {key: _session(payload, _options(LEVELS[lvl], threads)) for key, lvl in _TIMED_LEVELS.items()}
        times_ns: dict[str, list[int]] = {key: [] for key in timed}
        schedule = turns(warmup, runs)
        recorded = [measured for unmeasured, n in schedule for measured in [False] * unmeasured + [True] * n]
        disable = None if progress is None else not progress
        with tqdm(total=len(recorded), desc="profiling", unit="run", disable=disable, leave=False) as bar:
            for unmeasured, n in schedule:
                for session in profiled.values():
                    for _ in range(unmeasured + n):
                        _run(session, feeds)
                for key, session in timed.items():
                    for index in range(unmeasured + n):
                        start = time.perf_counter_ns()
                        _run(session, feeds)
                        if index >= unmeasured:
                            times_ns[key].append(time.perf_counter_ns() - start)
                bar.update(unmeasured + n)
        per_run: dict[str, list[float]] = {}
        kernels = 0
        for key, session in profiled.items():  # "off" first: its node times split the fused kernels at "all"
            with open(session.end_profiling(), encoding="utf-8") as handle:
                events = json.load(handle)
            optimized = _load_optimized(os.path.join(folder, f"optimized-{key}.onnx"))
            _name_as_traced(optimized, events)
            regions = attribute_kernels(model, optimized, _trace_types(events, optimized))
            kept = {node.name for node in optimized.graph.node} - (uncharged if key == level else frozenset())
            kernel_runs = _kernel_times_by_run(events, recorded, kept)
            weights = {name: float(np.median(values)) for name, values in per_run.items()}
            per_run, kernels = _node_times_by_run(regions, kernel_runs, runs, weights), len(optimized.graph.node)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    nodes = _node_stats(model, per_run)
    medians = {key: float(np.median(values)) for key, values in times_ns.items()}
    return Measurement(nodes=nodes, model_median_ns=medians, level=level, load_average_before=load_before,
                       load_average_after=load_average(), kernels=kernels)


def turns(warmup: int, runs: int, per_turn: int = TURN_RUNS) -> list[tuple[int, int]]:
    """Each session's turns as (runs not measured, runs measured): ``warmup`` before the first turn, one before each
    later one, and ``per_turn`` measured runs a turn (the last turn the rest)."""
    return [(warmup if first == 0 else 1, min(per_turn, runs - first)) for first in range(0, runs, per_turn)]


UNNAMED = "cimsplit_unnamed_"
"""Placeholder name of a node ONNX Runtime saved without one (:func:`_load_optimized`)."""


def optimized_model(model: onnx.ModelProto, level: str = "all", threads: int = 1) -> onnx.ModelProto:
    """The graph ONNX Runtime runs for ``model`` at ``level`` (its kernels are the profiler's nodes)."""
    folder = tempfile.mkdtemp(prefix="cimsplit-optimized-")
    try:
        options = _options(LEVELS[level], threads)
        options.optimized_model_filepath = os.path.join(folder, "optimized.onnx")
        _session(model.SerializeToString(), options)
        return _load_optimized(options.optimized_model_filepath)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def random_inputs(model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]], seed: int,
                  given: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input: floats standard normal, integers in [0, 3); those in ``given`` as given."""
    rng = np.random.default_rng(seed)
    initializers = {init.name for init in model.graph.initializer}
    feeds: dict[str, np.ndarray] = dict(given or {})
    for value in model.graph.input:
        if value.name in initializers or value.name in feeds:
            continue
        if not value.type.HasField("tensor_type"):
            raise CimsplitError(f"graph input {value.name!r} is not a tensor", hint="cimsplit profiles tensor inputs only")
        shape = input_shapes.get(value.name)
        if shape is None:
            dims = value.type.tensor_type.shape.dim
            if any(not dim.HasField("dim_value") for dim in dims):
                raise CimsplitError(
                    f"graph input {value.name!r} has unknown dims",
                    hint=f"pass --input-shape {value.name}=D0,D1,...",
                )
            shape = tuple(dim.dim_value for dim in dims)
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
        _check_allocatable(value.name, shape)
        if dtype.kind == "f":
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[value.name] = rng.integers(0, 3, size=shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[value.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise CimsplitError(f"graph input {value.name!r} has type {dtype}, which cimsplit cannot fill with random data")
    return feeds


def _check_allocatable(name: str, shape: tuple[int, ...]) -> None:
    """Refuse an input whose random data (float64 while drawn) would not fit in this machine's memory."""
    draw_bytes = math.prod(shape) * 8
    try:
        memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory_bytes = 2**34
    if draw_bytes > memory_bytes // 2:
        raise CimsplitError(
            f"graph input {name!r} of shape {'x'.join(map(str, shape))} is too large to profile on this machine "
            f"({draw_bytes / 2**30:.0f} GiB of random data)",
            hint="pass smaller dims with --input-shape, or a profile taken elsewhere with --host-profile",
        )


def _options(level: ort.GraphOptimizationLevel, threads: int) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = ort_log_severity()
    return options


def _session(payload: bytes, options: ort.SessionOptions) -> ort.InferenceSession:
    try:
        return ort.InferenceSession(payload, options, providers=["CPUExecutionProvider"])
    except _ORT_ERRORS as exc:
        raise CimsplitError(f"onnxruntime cannot load the model: {_first_line(exc)}") from None


def _run(session: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> None:
    try:
        session.run(None, feeds)
    except _ORT_ERRORS as exc:
        raise CimsplitError(f"onnxruntime failed to run the model: {_first_line(exc)}", hint="check --input-shape") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _load_optimized(path: str) -> onnx.ModelProto:
    """The optimized graph ONNX Runtime saved, each node it saved without a name (the body of a function it inlined:
    a HardSwish's HardSigmoid and Mul) named :data:`UNNAMED` and its position, so that no two share a name."""
    try:
        model = onnx.load(path, load_external_data=False)
    except (OSError, ValueError, DecodeError) as exc:
        raise CimsplitError(f"cannot read the graph onnxruntime optimized: {exc}",
                            hint="profile with --profile-level off") from None
    for position, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{UNNAMED}{position}"
    return model


def _name_as_traced(optimized: onnx.ModelProto, events: list[dict]) -> None:
    """Give the unnamed nodes of ``optimized`` the names the profiler gives their kernels (``<OpType>_<node index>``).

    The saved graph and a run's trace list them in the same order, the session's topological one: they are matched
    per op type in that order, where the counts agree (else they keep their placeholder, and their time is not
    charged, as before: a HardSwish cost 0).
    """
    unnamed: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in optimized.graph.node:
        if node.name.startswith(UNNAMED):
            unnamed[node.op_type].append(node)
    known = {node.name for node in optimized.graph.node}
    traced: dict[str, dict[str, float]] = defaultdict(dict)  # op type -> kernel -> its first event's start
    for event in events:
        name, op_type = event.get("name", ""), (event.get("args") or {}).get("op_name")
        if event.get("cat") == "Node" and name.endswith(_KERNEL_SUFFIX) and op_type in unnamed:
            kernel = name[: -len(_KERNEL_SUFFIX)]
            if kernel not in known:
                traced[op_type].setdefault(kernel, event["ts"])
    for op_type, nodes in unnamed.items():
        kernels = sorted(traced[op_type], key=traced[op_type].__getitem__)
        if len(kernels) != len(nodes):
            log.debug("%d unnamed %s node(s) in the optimized graph, %d in the trace: not charged", len(nodes), op_type,
                      len(kernels))
            continue
        for node, kernel in zip(nodes, kernels):
            node.name = kernel


def _trace_types(events: list[dict], optimized: onnx.ModelProto) -> dict[str, int]:
    """Tensor name -> element type of the optimized graph's outputs, from the kernels' ``output_type_shape``."""
    outputs = {node.name: list(node.output) for node in optimized.graph.node}
    types: dict[str, int] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX):
            continue
        shapes = (event.get("args") or {}).get("output_type_shape")
        tensors = outputs.get(name[: -len(_KERNEL_SUFFIX)])
        if not isinstance(shapes, list) or tensors is None:
            continue
        for tensor, entry in zip(tensors, shapes):
            if tensor and isinstance(entry, dict) and len(entry) == 1:
                kind = _TRACE_TYPES.get(next(iter(entry)))
                if kind is not None:
                    types.setdefault(tensor, kind)
    return types


def _node_times_by_run(
    regions: tuple[Region, ...],
    kernel_runs: Mapping[str, Mapping[int, float]],
    runs: int,
    weights: Mapping[str, float] | None = None,
) -> dict[str, list[float]]:
    """node -> its charged ns in each recorded run (kernel times split by :func:`split_region_times`)."""
    per_run: dict[str, list[float]] = defaultdict(lambda: [0.0] * runs)
    for run in range(runs):
        # A kernel missing from one run but present in others (a branch not taken) costs 0 there.
        kernel_ns = {kernel: samples.get(run, 0.0) for kernel, samples in kernel_runs.items()}
        for node, value in split_region_times(regions, kernel_ns, weights).items():
            per_run[node][run] = value
    return dict(per_run)


def _node_stats(model: onnx.ModelProto, per_run: Mapping[str, list[float]]) -> dict[str, NodeStats]:
    """Median, p10, p90 over the recorded runs of every main-graph node."""
    nodes: dict[str, NodeStats] = {}
    for node in model.graph.node:
        samples = per_run.get(node.name)
        if not samples or not any(samples):
            nodes[node.name] = NodeStats(node.op_type, 0.0, 0.0, 0.0, 0)
            continue
        values = np.array(samples, dtype=float)
        p10, median, p90 = np.percentile(values, [10, 50, 90])
        nodes[node.name] = NodeStats(node.op_type, float(median), float(p10), float(p90), int(np.count_nonzero(values)))
    unreported = sorted(name for name, stats in nodes.items() if stats.samples == 0)
    if unreported:
        log.debug("no kernel time for %d node(s), counted as 0: %s", len(unreported), ", ".join(unreported))
    return nodes


def _kernel_times_by_run(
    events: list[dict], recorded_runs: list[bool], kernel_names: set[str] | Mapping[str, object]
) -> dict[str, dict[int, float]]:
    """kernel (node) name -> {recorded run index -> summed kernel time in ns}: the session's runs in order, those
    ``recorded_runs`` marks False (warm-up, re-warming) dropped."""
    windows = sorted(
        (event["ts"], event["ts"] + event["dur"])
        for event in events
        if event.get("cat") == "Session" and event.get("name") == "model_run"
    )
    if len(windows) != len(recorded_runs):
        raise RuntimeError(f"ORT's trace holds {len(windows)} model_run events, expected {len(recorded_runs)}")
    recorded = [window for window, kept in zip(windows, recorded_runs, strict=True) if kept]
    starts = [start for start, _ in recorded]
    per_run: dict[str, dict[int, float]] = defaultdict(dict)
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX):
            continue
        node = name[: -len(_KERNEL_SUFFIX)]
        if node not in kernel_names:
            continue  # a node of a subgraph (If/Loop body): its time is inside its parent's
        run = int(np.searchsorted(starts, event["ts"], side="right")) - 1
        if run < 0 or event["ts"] > recorded[run][1]:
            continue  # a warm-up run's event
        per_run[node][run] = per_run[node].get(run, 0.0) + float(event["dur"]) * 1e3  # ORT's dur is in us
    return per_run
