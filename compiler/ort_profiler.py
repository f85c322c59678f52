"""Measure per-node and whole-model host latency with ONNX Runtime (paper IV-A1).

Per-node latencies come from ONNX Runtime's own profiler, not from timing nodes
one by one: one session with ``enable_profiling`` runs the model ``warmup + runs``
times, ``end_profiling`` writes a Chrome-trace JSON, and every
``<node>_kernel_time`` event is attributed to the ``model_run`` event that
contains it.  ORT starts profiling at session creation, so warm-up runs cannot
be left out of the trace; instead the first ``warmup`` ``model_run`` windows are
dropped when parsing (the same session is warmed up that is then measured:
allocator arena, caches and kernel state are those of the recorded runs).
The trace lives in a temporary folder that is removed afterwards.

Graph optimizations are off (``ORT_DISABLE_ALL``) so that ORT's nodes are the
simplified model's nodes one to one.  ORT reports ``dur`` in whole
microseconds, so a node's latency has a 1 us resolution (the median over runs
of integers); nodes ORT does not execute as kernels (Constant, which ORT turns
into an initializer) are not reported and count 0.

Whole-model medians are measured separately by timing ``session.run`` of two
more sessions without the profiler, one with optimizations off (the sum the
ILP sees) and one with ``ORT_ENABLE_ALL`` (what plain onnxruntime gives a
user).  The three sessions take turns run by run, so that a neighbour's load
on a shared machine weighs on all three alike instead of on whichever was
measured while it lasted.
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
from onnxruntime.capi import onnxruntime_pybind11_state as _ort_state
from tqdm import tqdm

from cimsplit.errors import CimsplitError
from cimsplit.ort_logging import ort_log_severity

__all__ = ["NodeStats", "Measurement", "measure", "random_inputs"]

log = logging.getLogger(__name__)

_KERNEL_SUFFIX = "_kernel_time"
_ORT_ERRORS = tuple(
    cls for cls in vars(_ort_state).values() if isinstance(cls, type) and issubclass(cls, Exception)
)
_TIMED_LEVELS = {
    "optimizations_off": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "optimizations_all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


@dataclass(frozen=True)
class NodeStats:
    op_type: str
    median_ns: float
    p10_ns: float
    p90_ns: float
    samples: int
    """Recorded runs in which ORT reported the node (0: never executed as a kernel)."""


@dataclass(frozen=True)
class Measurement:
    nodes: dict[str, NodeStats]
    model_median_ns: dict[str, float]
    """``optimizations_off`` and ``optimizations_all``."""


def measure(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    *,
    runs: int = 30,
    warmup: int = 5,
    threads: int = 1,
    seed: int = 0,
    progress: bool | None = None,
) -> Measurement:
    """Profile every node of ``model`` and time the whole model (see module docstring).

    ``progress``: ``None`` shows a tqdm bar on stderr only when it is a terminal,
    ``False`` never, ``True`` always.
    """
    if runs < 1:
        raise CimsplitError(f"runs must be at least 1, not {runs}", hint="e.g. --runs 30")
    if warmup < 0:
        raise CimsplitError(f"warm-up runs must be zero or more, not {warmup}", hint="e.g. --warmup 5")
    if threads < 1:
        raise CimsplitError(f"threads must be at least 1, not {threads}", hint="e.g. --threads 1")
    feeds = random_inputs(model, input_shapes or {}, seed)
    payload = model.SerializeToString()
    folder = tempfile.mkdtemp(prefix="cimsplit-profile-")
    try:
        options = _options(ort.GraphOptimizationLevel.ORT_DISABLE_ALL, threads)
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(folder, "ort")
        profiled = _session(payload, options)
        timed = {key: _session(payload, _options(level, threads)) for key, level in _TIMED_LEVELS.items()}
        times_ns: dict[str, list[int]] = {key: [] for key in timed}
        disable = None if progress is None else not progress
        with tqdm(total=warmup + runs, desc="profiling", unit="run", disable=disable, leave=False) as bar:
            for index in range(warmup + runs):
                _run(profiled, feeds)
                for key, session in timed.items():
                    start = time.perf_counter_ns()
                    _run(session, feeds)
                    elapsed = time.perf_counter_ns() - start
                    if index >= warmup:
                        times_ns[key].append(elapsed)
                bar.update(1)
        trace_path = profiled.end_profiling()
        with open(trace_path, encoding="utf-8") as handle:
            events = json.load(handle)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    nodes = _node_stats(model, events, runs, warmup)
    medians = {key: float(np.median(values)) for key, values in times_ns.items()}
    return Measurement(nodes=nodes, model_median_ns=medians)


def random_inputs(model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input: floats standard normal, integers in [0, 3)."""
    rng = np.random.default_rng(seed)
    initializers = {init.name for init in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in initializers:
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


def _node_stats(model: onnx.ModelProto, events: list[dict], runs: int, warmup: int) -> dict[str, NodeStats]:
    """Median, p10, p90 over the recorded runs of every main-graph node."""
    op_types = {node.name: node.op_type for node in model.graph.node}
    per_run = _kernel_times_by_run(events, warmup, runs, op_types)
    nodes: dict[str, NodeStats] = {}
    for name, op_type in op_types.items():
        samples = per_run.get(name)
        if not samples:
            nodes[name] = NodeStats(op_type, 0.0, 0.0, 0.0, 0)
            continue
        # A node missing from one run but present in others (a branch not taken) costs 0 there.
        values = np.array([samples.get(run, 0.0) for run in range(runs)], dtype=float)
        p10, median, p90 = np.percentile(values, [10, 50, 90])
        nodes[name] = NodeStats(op_type, float(median), float(p10), float(p90), len(samples))
    unreported = sorted(name for name, stats in nodes.items() if stats.samples == 0)
    if unreported:
        log.debug("ORT reported no kernel time for %d node(s), counted as 0: %s", len(unreported), ", ".join(unreported))
    return nodes


def _kernel_times_by_run(
    events: list[dict], warmup: int, runs: int, node_names: Mapping[str, str]
) -> dict[str, dict[int, float]]:
    """node name -> {recorded run index -> summed kernel time in ns}, warm-up runs dropped."""
    windows = sorted(
        (event["ts"], event["ts"] + event["dur"])
        for event in events
        if event.get("cat") == "Session" and event.get("name") == "model_run"
    )
    if len(windows) != warmup + runs:
        raise RuntimeError(f"ORT's trace holds {len(windows)} model_run events, expected {warmup + runs}")
    recorded = windows[warmup:]
    starts = [start for start, _ in recorded]
    per_run: dict[str, dict[int, float]] = defaultdict(dict)
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX):
            continue
        node = name[: -len(_KERNEL_SUFFIX)]
        if node not in node_names:
            continue  # a node of a subgraph (If/Loop body): its time is inside its parent's
        run = int(np.searchsorted(starts, event["ts"], side="right")) - 1
        if run < 0 or event["ts"] > recorded[run][1]:
            continue  # a warm-up run's event
        per_run[node][run] = per_run[node].get(run, 0.0) + float(event["dur"]) * 1e3  # ORT's dur is in us
    return per_run
