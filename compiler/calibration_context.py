"""Context networks: convs timed in a network of their own, against their points' times (a board's weight reuse).

How much of a weight's fetch a conv's compute hides in a network is the machine's (:mod:`.weight_fetch`): a Zen 3's
convs hid nearly all of it past 16 output pixels, an Intel Xeon's (profiled run by run) hardly any at 49-196.  So a campaign times,
once, a chain of 3 x 3 and 1 x 1 convs at each of :data:`CONTEXT_SIZES`, channels rising to 680 and back
(:data:`CONTEXT_CHANNELS`: 12.5 MB of float weights, more than any core's L2, so that each layer finds its weights
evicted by the others', as in a network), and measures each of its inner convs as a calibration point of its kind
too, as it is and flushed (the first reads the graph's input and the last writes its output, as a network's
inner layers do not).  A :class:`~.weight_fetch.ContextLayer` holds the three times, and the reuse whose mix of the point's
two is closest to the network's time is the board's (:func:`.weight_fetch.board_reuse`).  The int8 network is the
float one through the zoo's QDQ recipe; its convs' points are of the kinds they have there (with the kernel variant
onnxruntime runs them in, :mod:`.qdq_kernels`).  The shapes are the grid's channel counts and sizes, none of
the zoo's.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.calibration_models import GridPoint
from cimsplit.compiler.host_model import Sample, operator_features, operator_kind
from cimsplit.compiler.weight_fetch import ContextLayer

__all__ = ["CONTEXT_SIZES", "CONTEXT_CHANNELS", "CONTEXT_ROUNDS", "context_network", "measure_context"]

CONTEXT_SIZES = (10, 18)
"""Spatial sizes of the context networks (100 and 324 output pixels): where what the compute hides decides most."""
CONTEXT_ROUNDS = 3
"""Sessions each network and each point is profiled in; a layer keeps the medians.  On a shared VM a whole session
can run 10-20 % slow: with one session each, two campaigns on the Intel Xeon chose 'nothing hidden' and 128 pixels
for float; with three, three campaigns chose nothing, 1024 and 256 (between which the predictions differ less)."""
CONTEXT_CHANNELS = (40, 88, 176, 344, 680, 344, 176, 88, 40)
"""Channels along a context network: conv i maps ``CONTEXT_CHANNELS[i]`` to ``[i + 1]``, 3 x 3 at even i, 1 x 1 at odd."""


def context_network(h: int, seed: int = 0) -> onnx.ModelProto:
    """The float context network at ``h`` x ``h`` (module docstring), seeded weights, opset 17."""
    rng = np.random.default_rng(seed)
    nodes, initializers, x = [], [], "x"
    for i, (c_in, c_out) in enumerate(zip(CONTEXT_CHANNELS, CONTEXT_CHANNELS[1:])):
        k = 3 if i % 2 == 0 else 1
        weight = (rng.standard_normal((c_out, c_in, k, k)) / np.sqrt(c_in * k * k)).astype(np.float32)
        initializers += [numpy_helper.from_array(weight, f"w{i}"), numpy_helper.from_array(np.zeros(c_out, np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"y{i}"], name=f"conv{i}", kernel_shape=[k, k],
                                      pads=[k // 2] * 4))
        x = f"y{i}"
    graph = helper.make_graph(nodes, f"context_{h}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CONTEXT_CHANNELS[0], h, h])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, CONTEXT_CHANNELS[-1], h, h])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def measure_context(measure: Callable[[GridPoint], Sample], *, int8: bool, threads: int, runs: int, warmup: int,
                    seed: int = 0) -> list[ContextLayer]:
    """Every inner conv of the context networks (float, and int8 with ``int8``): its point's times, as ``measure``
    profiles a point as it is and flushed (:func:`.calibration.measure_point`), and its time in the network, each the
    median of :data:`CONTEXT_ROUNDS` sessions."""
    from cimsplit.compiler.frontend import load
    from cimsplit.compiler.host_profile import operator_latencies, profile_model
    from cimsplit.compiler.host_variants import op_variants
    from cimsplit.compiler.ort_profiler import optimized_model
    from cimsplit.compiler.qdq_kernels import int8_kernels
    from cimsplit.models.quantize import quantize_qdq

    layers = []
    for quantized in (False, True) if int8 else (False,):
        for h in CONTEXT_SIZES:
            model = context_network(h, seed)
            model = quantize_qdq(model, seed=seed) if quantized else model
            with tempfile.TemporaryDirectory(prefix="cimsplit-calibrate-") as folder:
                path = Path(folder) / "context.onnx"
                onnx.save(model, path)
                loaded = load(path)
            network = [operator_latencies(loaded.workload, profile_model(loaded, runs=runs, warmup=warmup, threads=threads,
                                                                         seed=seed, progress=False))
                       for _ in range(CONTEXT_ROUNDS)]
            types = {node.name: node.op_type for node in loaded.model.graph.node}
            kernels = int8_kernels(loaded.model.graph)
            variants = op_variants(loaded.model, optimized_model(loaded.model, "all", threads) if quantized else None)
            convs = [op for op in loaded.workload.operators if op.m is not None and op.weight_shape is not None]
            for op in convs[1:-1]:  # (the first reads the graph's input, the last writes its output: a network's edges)
                c_out, c_in, k = op.weight_shape[:3]
                kind = operator_kind(op, types, kernels.get(op.name, ""), variants.get(op.name, ""))
                point = GridPoint(kind, (("c_in", c_in), ("c_out", c_out), ("h", h), ("k", k), ("s", 1)))
                times = [sample.profiled_ns for sample in (measure(point) for _ in range(CONTEXT_ROUNDS)) if sample.profiled_ns]
                if times:
                    hot, flushed = np.median(times, axis=0)
                    layers.append(ContextLayer(kind, operator_features(op), float(hot), float(flushed),
                                               float(np.median([times_of[op.name] for times_of in network]))))
    return layers
