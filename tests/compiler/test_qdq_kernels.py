"""Which int8 pairs onnxruntime converts to uint8, and which quantized kernels keep an int8 input."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from graphs import qdq_fork
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.calibration import measure_point
from cimsplit.compiler.calibration_grid import GridPoint
from cimsplit.compiler.qdq_kernels import converted_pairs, int8_kernels, onnxruntime_converts_int8_pairs


def test_pairs_converted_as_onnxruntime_does() -> None:
    """qdq_fork, int8: qx, qb and qc each feed one DQ with at most one reader (qc's and qb's DQs write
    graph outputs and feed no node); qa's DQ feeds b and c, so onnxruntime duplicates it and keeps qa int8."""
    pairs = converted_pairs(qdq_fork(np.int8).graph)
    assert {t: (p.quantize, p.dequantize, p.zero_point) for t, p in pairs.items()} == {
        "qx": ("q_x", "dq_x", 0), "qb": ("q_b", "dq_b", 0), "qc": ("q_c", "dq_c", 0)}
    assert converted_pairs(qdq_fork(np.uint8).graph) == {}  # uint8 pairs are uint8 already


def test_kernels_that_keep_an_int8_side() -> None:
    graph = qdq_fork(np.int8).graph
    # x86: a reads the converted qx and writes qa, which stays int8; b and c read da, dequantized from qa,
    # and write qb and qc, which are converted.
    assert int8_kernels(graph, "x86_64") == {"a": "-s8out", "b": "-s8in", "c": "-s8in"}
    # ARM keeps every pair int8: both sides of every node between Q/DQ pairs (the weights' DQs do not count).
    assert int8_kernels(graph, "aarch64") == {"a": "-s8", "b": "-s8", "c": "-s8"}
    assert int8_kernels(qdq_fork(np.uint8).graph, "x86_64") == {}


def test_a_residual_add_whose_shortcut_stays_int8_keeps_its_input_side() -> None:
    """x -> Q qx -> two DQs (kept int8 on x86): one feeds a Relu m -> Q -> DQ (converted), the other is the shortcut,
    the Add's second input; its first is m's converted pair.  onnxruntime runs the Add in float."""
    z8, s = numpy_helper.from_array(np.array(0, np.int8), "z"), numpy_helper.from_array(np.array(0.05, np.float32), "s")
    make = helper.make_node
    nodes = [make("QuantizeLinear", ["x", "s", "z"], ["qx"], name="q_x"),
             make("DequantizeLinear", ["qx", "s", "z"], ["dx1"], name="dq_x1"),
             make("DequantizeLinear", ["qx", "s", "z"], ["dx2"], name="dq_x2"),  # qx has two DQs: kept int8
             make("Relu", ["dx1"], ["m"], name="m"),
             make("QuantizeLinear", ["m", "s", "z"], ["qm"], name="q_m"),
             make("DequantizeLinear", ["qm", "s", "z"], ["dm"], name="dq_m"),  # converted
             make("Add", ["dm", "dx2"], ["t"], name="add"),
             make("QuantizeLinear", ["t", "s", "z"], ["qt"], name="q_t"),
             make("DequantizeLinear", ["qt", "s", "z"], ["y"], name="dq_t")]
    graph = helper.make_graph(nodes, "shortcut", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], initializer=[s, z8])
    # Before, only input 0 was read (dm, a converted pair): the Add had no kept side.
    assert int8_kernels(graph, "x86_64") == {"m": "-s8in", "add": "-s8in"}


@pytest.mark.skipif(not onnxruntime_converts_int8_pairs(), reason="onnxruntime keeps int8 pairs on this machine (not x86)")
@pytest.mark.parametrize("kind", ["int8:Conv-s8in", "int8:Conv-s8out", "int8:Conv-s8"])
def test_a_kernel_calibration_point_measures_the_kernel_its_kind_names(kind) -> None:
    params = (("c_in", 16), ("c_out", 16), ("h", 10), ("k", 3), ("s", 1))
    sample, _ = measure_point(GridPoint(kind, params), threads=1, runs=1, warmup=0)
    assert sample.kind == kind
    # 16 x 144 x 100 (M_v, N_v, N_mvm), as its uint8 twin
    assert (sample.features["m"], sample.features["n"], sample.features["n_mvm"]) == (16, 144, 100)


def test_the_fork_that_keeps_an_output_int8_is_in_the_measured_operator_but_not_in_its_time(tmp_path) -> None:
    """An -s8out point's extra DQ of its output is a graph output no network has.  The front end fuses
    it into the measured conv (a DQ joins its producer), so it must be left out of the point's time."""
    from cimsplit.compiler.calibration import point_model, point_time
    from cimsplit.compiler.calibration_models import FORK_PREFIX, MEASURED_NODE
    from cimsplit.compiler.frontend import load

    point = GridPoint("int8:Conv-s8out", (("c_in", 16), ("c_out", 16), ("h", 10), ("k", 1), ("s", 1)))
    path = tmp_path / "point.onnx"
    onnx.save(point_model(point), path)
    measured = next(op for op in load(path).workload.operators if MEASURED_NODE in op.nodes)
    forks = [n for n in measured.nodes if n.startswith(FORK_PREFIX)]
    assert forks == [FORK_PREFIX + "0"]
    medians = {node: {"median_ns": 10.0 * (i + 1)} for i, node in enumerate(measured.nodes)}
    fork_ns = medians[forks[0]]["median_ns"]
    assert point_time(measured, medians) == sum(m["median_ns"] for m in medians.values()) - fork_ns


def _split_with_a_forked_output() -> onnx.GraphProto:
    """x -> Q -> DQ -> Split -> (a, b), each through its own Q -> DQ; a's DQ feeds one Relu, b's two (a C2f's
    Split: its second half feeds the next bottleneck and the Concat), so onnxruntime duplicates b's DQ."""
    z8, s = numpy_helper.from_array(np.array(0, np.int8), "z"), numpy_helper.from_array(np.array(0.05, np.float32), "s")
    make = helper.make_node
    nodes = [make("QuantizeLinear", ["x", "s", "z"], ["qx"], name="q_x"),
             make("DequantizeLinear", ["qx", "s", "z"], ["dx"], name="dq_x"),
             make("Split", ["dx", "halves"], ["a", "b"], name="split", axis=1),
             make("QuantizeLinear", ["a", "s", "z"], ["qa"], name="q_a"), make("DequantizeLinear", ["qa", "s", "z"], ["da"], name="dq_a"),
             make("QuantizeLinear", ["b", "s", "z"], ["qb"], name="q_b"), make("DequantizeLinear", ["qb", "s", "z"], ["db"], name="dq_b"),
             make("Relu", ["da"], ["ra"], name="ra"), make("Relu", ["db"], ["rb1"], name="rb1"),
             make("Relu", ["db"], ["rb2"], name="rb2")]
    halves = numpy_helper.from_array(np.array([2, 2], np.int64), "halves")
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 2]) for name in ("ra", "rb1", "rb2")]
    return helper.make_graph(nodes, "split_fork", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])], outputs,
                             initializer=[s, z8, halves])


def test_a_split_keeps_its_output_side_when_one_of_its_outputs_forks() -> None:
    graph = _split_with_a_forked_output()
    # Before, only the Split's first output was read (qa, converted): it had no kept side and was predicted as the
    # int8 Split onnxruntime runs when every output's pair converts (a fifth of the float one's time).
    assert int8_kernels(graph, "x86_64") == {"split": "-s8out", "rb1": "-s8in", "rb2": "-s8in"}
    assert int8_kernels(graph, "aarch64") == {"split": "-s8", "ra": "-s8in", "rb1": "-s8in", "rb2": "-s8in"}


@pytest.mark.skipif(not onnxruntime_converts_int8_pairs(), reason="onnxruntime keeps int8 pairs on this machine (not x86)")
def test_onnxruntime_runs_such_a_split_in_float() -> None:
    from cimsplit.compiler.ort_profiler import optimized_model

    model = helper.make_model(_split_with_a_forked_output(), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    optimized = optimized_model(model, "all", 1).graph
    producers = {out: node for node in optimized.node for out in node.output}
    split = next(node for node in optimized.node if node.op_type == "Split")
    assert producers[split.input[0]].op_type == "DequantizeLinear"  # float: the DQ before it still runs
