"""onnxruntime's DoubleQDQPairsRemover, done by cimsplit's front end (compiler/double_pairs)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from graphs import optimized
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.double_pairs import merge_double_pairs, merged_parameters


def test_merged_parameters_by_hand() -> None:
    """int8, (0.1, -28) and (0.2, 50): real ranges [-10, 15.5] and [-35.6, 15.4], so [-10, 15.4]: scale 25.4 / 255,
    zero round(-128 + 10 / scale) = round(-27.606) = -28.  uint8, (0.1, 100) and (0.2, 178): [-10, 15.5] and [-35.6, 15.4],
    zero round(0 + 100.394) = 100.  A range inside the other gives the inner pair back."""
    scale, zero = merged_parameters(0.1, -28, 0.2, 50, TensorProto.INT8)
    assert scale == pytest.approx(25.4 / 255, rel=1e-6) and scale.dtype == np.float32 and zero == -28
    scale, zero = merged_parameters(0.1, 100, 0.2, 178, TensorProto.UINT8)
    assert scale == pytest.approx(25.4 / 255, rel=1e-6) and zero == 100
    scale, zero = merged_parameters(0.05, 0, 0.1, 0, TensorProto.INT8)  # [-6.4, 6.35] inside [-12.8, 12.7]
    assert scale == pytest.approx(0.05, rel=1e-6) and zero == 0


def _chain(s1: float, z1: int, s2: float, z2: int, dtype: type = np.int8, dq1_also_read: bool = False,
           q1_is_output: bool = False) -> onnx.ModelProto:
    """x -> Relu -> Q1 -> DQ1 -> Q2 -> DQ2 -> Neg -> y (DQ1 also read by a Sigmoid -> z, or Q1's output also a graph output)."""
    opset = 21 if np.dtype(dtype).itemsize == 2 else 17  # (16-bit zero points from opset 21)
    inits = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in
             (("s1", s1, np.float32), ("z1", z1, dtype), ("s2", s2, np.float32), ("z2", z2, dtype))]
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "s1", "z1"], ["a"], name="q1"),
             helper.make_node("DequantizeLinear", ["a", "s1", "z1"], ["b"], name="dq1"),
             helper.make_node("QuantizeLinear", ["b", "s2", "z2"], ["c"], name="q2"),
             helper.make_node("DequantizeLinear", ["c", "s2", "z2"], ["d"], name="dq2"),
             helper.make_node("Neg", ["d"], ["y"], name="neg")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])]
    if dq1_also_read:
        nodes.append(helper.make_node("Sigmoid", ["b"], ["z"], name="sigmoid"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [64]))
    if q1_is_output:
        outputs.append(helper.make_tensor_value_info("a", TensorProto.INT8 if dtype == np.int8 else TensorProto.UINT8, [64]))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset == 21 else 8
    return model


def _run(model: onnx.ModelProto, x: np.ndarray, optimize: bool) -> list[np.ndarray]:
    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})


def _params(model: onnx.ModelProto) -> list[tuple[str, float, int]]:
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return [(n.op_type, float(constants[n.input[1]]), int(constants[n.input[2]]))
            for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]


@pytest.mark.parametrize(("s1", "z1", "s2", "z2", "dtype"), (
    (0.1, -28, 0.2, 50, np.int8), (0.1, 100, 0.2, 178, np.uint8), (0.0371, 5, 0.0137, -9, np.int8),
    (0.3, 99, 0.3, 99, np.int8), (0.001, 5, 0.001, 10000, np.int16), (0.001, 5, 0.0003, 60000, np.uint16)))
def test_a_double_pair_is_merged_to_onnxruntimes_parameters_and_values(s1: float, z1: int, s2: float, z2: int,
                                                                     dtype: type) -> None:
    """The merged chain has onnxruntime's level-1 Q and DQ with their parameters to the bit (equal pairs keep theirs:
    (0.3, 99), which recomputed would be 0.30000004; 16-bit pairs too), and runs unoptimized to onnxruntime's outputs, bit for bit."""
    model = _chain(s1, z1, s2, z2, dtype)
    merged = onnx.ModelProto()
    merged.CopyFrom(model)
    assert merge_double_pairs(merged) == 1
    onnx.checker.check_model(merged, full_check=True)
    assert [n.name for n in merged.graph.node] == ["relu", "q1", "dq2", "neg"]
    assert _params(merged) == _params(optimized(model, basic_only=True))
    x = (np.random.default_rng(0).standard_normal(64) * 20).astype(np.float32)
    np.testing.assert_array_equal(_run(merged, x, optimize=False)[0], _run(model, x, optimize=True)[0])


@pytest.mark.parametrize("where", ("dq1_also_read", "q1_is_output"))
def test_a_double_pair_onnxruntime_keeps_stays(where: str) -> None:
    """A middle DQ read twice, or a first Q writing a graph output: onnxruntime keeps all four nodes, and so does cimsplit."""
    model = _chain(0.1, -28, 0.2, 50, **{where: True})
    assert merge_double_pairs(model) == 0 and len(model.graph.node) == 6 + (where == "dq1_also_read")
    assert sum(n.op_type == "QuantizeLinear" for n in optimized(model, basic_only=True).graph.node) == 2
