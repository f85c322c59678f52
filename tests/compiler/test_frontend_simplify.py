"""Simplification: exporter clutter folds away, outputs stay equal, shapes and names are complete."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from graphs import clean_cnn, control_flow_and_custom, kernels, pytorch_style, qdq_dedicated, quantize_qdq, save, silu_net

from cimsplit.compiler.frontend import load
from cimsplit.compiler.simplify import name_nodes, tensor_shapes


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def seeded(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def shape_view(loaded) -> list[tuple]:  # noqa: ANN001
    return [(op.cim_capable, op.m, op.n, op.n_mvm, op.crossbars, op.n_in, op.n_out) for op in loaded.workload.operators]


def test_pytorch_style_export_lowers_like_the_clean_graph(tmp_path: Path) -> None:
    for batch in (1, 2):
        clean = load(save(clean_cnn(batch), tmp_path, f"clean{batch}.onnx"))
        torch_like = load(save(pytorch_style(), tmp_path, "torch.onnx"), {"x": (batch, 3, 8, 8)})
        assert shape_view(torch_like) == shape_view(clean)
        conv = torch_like.workload.operators[0]
        # Conv+BN+Relu is one operator: M = 4, N = 27, N_mvm = 8*8*batch
        assert (conv.m, conv.n, conv.n_mvm) == (4, 27, 64 * batch)
        assert torch_like.input_shapes == {"x": (batch, 3, 8, 8)}
    ops = {n.op_type for n in torch_like.model.graph.node}
    assert not ops & {"Identity", "BatchNormalization", "Shape", "Gather", "Unsqueeze", "Concat", "Constant"}


def test_simplified_model_gives_the_original_outputs(tmp_path: Path) -> None:
    original = pytorch_style()
    loaded = load(save(original, tmp_path), {"x": (2, 3, 8, 8)})
    x = seeded((2, 3, 8, 8))
    (want,) = run(original, {"x": x})
    (got,) = run(loaded.model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_simplified_qdq_model_gives_the_original_outputs(tmp_path: Path) -> None:
    path = quantize_qdq(silu_net(), tmp_path)
    original = onnx.load(str(path))
    loaded = load(path)
    x = seeded((1, 8, 6, 6), seed=3)
    (want,) = run(original, {"x": x})
    (got,) = run(loaded.model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    dq_before = sum(n.op_type == "DequantizeLinear" for n in original.graph.node)
    dq_after = sum(n.op_type == "DequantizeLinear" for n in loaded.model.graph.node)
    assert dq_after == dq_before  # no DequantizeLinear folded away


def test_every_tensor_has_a_static_shape_and_every_node_a_unique_name(tmp_path: Path) -> None:
    loaded = load(save(pytorch_style(), tmp_path), {"x": (1, 3, 8, 8)})
    model = loaded.model
    shapes = tensor_shapes(model)
    produced = [o for n in model.graph.node for o in n.output if o]
    assert produced and all(shapes[o] is not None for o in produced)
    names = [n.name for n in model.graph.node]
    assert all(names) and len(set(names)) == len(names)
    assert [vi.name for vi in model.graph.input] == ["x"]
    assert [vi.name for vi in model.graph.output] == ["y"]
    onnx.checker.check_model(model, full_check=True)


def test_name_nodes_keeps_names_and_fixes_empty_and_duplicate_ones() -> None:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["a"], ["b"], name="r"),
         onnx.helper.make_node("Relu", ["b"], ["c"], name="r"),
         onnx.helper.make_node("Relu", ["c"], ["d"]),
         onnx.helper.make_node("Relu", ["d"], ["e"], name="Relu_2")],
        "g", [], [])
    name_nodes(graph)
    assert [n.name for n in graph.node] == ["r", "r_1", "Relu_2_1", "Relu_2"]


def test_fingerprint_ignores_weights_and_file_but_not_shapes(tmp_path: Path) -> None:
    a = load(save(clean_cnn(), tmp_path, "a.onnx"))
    again = load(save(clean_cnn(), tmp_path, "other_name.onnx"))
    assert a.fingerprint == again.fingerprint and len(a.fingerprint) == 16
    other_weights = clean_cnn()
    for init in other_weights.graph.initializer:
        arr = onnx.numpy_helper.to_array(init) + 1.0
        init.CopyFrom(onnx.numpy_helper.from_array(arr.astype(np.float32), init.name))
    assert load(save(other_weights, tmp_path, "w.onnx")).fingerprint == a.fingerprint
    assert load(save(clean_cnn(batch=2), tmp_path, "b2.onnx")).fingerprint != a.fingerprint


def test_custom_op_and_control_flow_model_loads(tmp_path: Path) -> None:
    loaded = load(save(control_flow_and_custom(), tmp_path))
    assert {op.op_type for op in loaded.workload.operators} >= {"If", "Loop", "Scan", "MyOp"}
    assert loaded.workload.operator(next(op.name for op in loaded.workload.operators if op.op_type == "MyOp")).n_out == 256


def test_equal_nodes_merge_in_a_float_model_but_not_in_a_qdq_one(tmp_path: Path) -> None:
    """x -> Tanh -> t;  t -> Flatten -> Gemm W1 -> y1 and t -> Flatten -> Gemm W2 -> y2.  Float, the two
    Flattens are one (onnxslim's common-subexpression elimination).  Quantized, each Flatten has its own
    Q -> DQ after it and the Gemms run as QGemm; merged, the one DQ would have two readers, onnxruntime
    would copy it and not convert the pair, and one Gemm ran in float: the split's kernels differ from
    the model's (fuzz seed 289, 0.115 off on an AVX2 host)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), w) for w in ("W1", "W2")]
    nodes = [helper.make_node("Tanh", ["x"], ["t"], name="tanh"),
             helper.make_node("Flatten", ["t"], ["f1"], name="flat1"),
             helper.make_node("Flatten", ["t"], ["f2"], name="flat2"),
             helper.make_node("Gemm", ["f1", "W1"], ["y1"], name="g1"),
             helper.make_node("Gemm", ["f2", "W2"], ["y2"], name="g2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 4]) for y in ("y1", "y2")],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    float_model = load(save(model, tmp_path, "float.onnx")).model
    assert sum(n.op_type == "Flatten" for n in float_model.graph.node) == 1
    path = quantize_qdq(model, tmp_path, per_channel=False)
    quantized = load(path).model
    assert sum(n.op_type == "Flatten" for n in quantized.graph.node) == 2
    assert kernels(quantized) == kernels(path)  # onnxruntime runs the simplified model as the model


def _module_functions() -> onnx.ModelProto:
    """Two calls of a model-local function Block(x, w) = Relu(Conv(x, w)), the second nested in another
    function, as PyTorch's ``export_modules_as_functions`` writes modules."""
    helper, opset = onnx.helper, [onnx.helper.make_opsetid("", 17)]
    block = helper.make_function("mods", "Block", ["x", "w"], ["y"], [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu")], opset)
    outer = helper.make_function("mods", "Outer", ["x", "w"], ["y"], [
        helper.make_node("Block", ["x", "w"], ["y"], domain="mods", name="inner")], [*opset, helper.make_opsetid("mods", 1)])
    rng = np.random.default_rng(0)
    weights = [onnx.numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("w1", (16, 8, 3, 3)), ("w2", (16, 16, 3, 3)))]
    graph = helper.make_graph([helper.make_node("Block", ["x", "w1"], ["h"], domain="mods", name="b1"),
                               helper.make_node("Outer", ["h", "w2"], ["y"], domain="mods", name="b2")], "mods",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 16, 16, 16])], weights)
    model = helper.make_model(graph, opset_imports=[*opset, helper.make_opsetid("mods", 1)])
    model.ir_version = 8
    model.functions.extend([block, outer])
    return model


def test_model_local_functions_are_inlined_into_operators_to_place(tmp_path: Path) -> None:
    model = _module_functions()
    loaded = load(save(model, tmp_path, "mods.onnx"))
    assert not loaded.model.functions
    assert [n.op_type for n in loaded.model.graph.node] == ["Conv", "Relu", "Conv", "Relu"]
    # Conv+Relu per block: M = 16 filters, N = 8*3*3 = 72 and 16*3*3 = 144 rows, N_mvm = 16*16 pixels
    assert [(op.cim_capable, op.m, op.n, op.n_mvm) for op in loaded.workload.operators] == [(True, 16, 72, 256), (True, 16, 144, 256)]
    x = seeded((1, 8, 16, 16))
    np.testing.assert_array_equal(run(loaded.model, {"x": x})[0], run(model, {"x": x})[0])


def test_equal_quantizers_merge_as_onnxruntime_merges_them(tmp_path: Path) -> None:
    """qdq_dedicated: q_a1 and q_a2 quantize ta alike.  onnxruntime's common-subexpression elimination
    merges them into one Q with two DQs, a pair it keeps int8 (x86: a, b and c all run in float); the
    front end merges them too, so converted_pairs and the split see the Q onnxruntime runs."""
    from cimsplit.compiler.qdq_kernels import converted_pairs

    model = qdq_dedicated()
    loaded = load(save(model, tmp_path, "dedicated.onnx"))
    quantizers = [(n.name, list(n.input), list(n.output)) for n in loaded.model.graph.node if n.op_type == "QuantizeLinear"]
    assert quantizers == [("q_x", ["x", "s", "z"], ["qx"]), ("q_a1", ["ta", "s", "z"], ["qa1"]),
                          ("q_b", ["tb", "s", "z"], ["qb"]), ("q_c", ["tc", "s", "z"], ["qc"])]
    assert [n.input[0] for n in loaded.model.graph.node if n.name in ("dq_a1", "dq_a2")] == ["qa1", "qa1"]
    assert sorted(converted_pairs(loaded.model.graph)) == ["qb", "qc", "qx"]
    assert kernels(loaded.model) == kernels(model)
    x = seeded((1, 16))
    for got, expected in zip(run(loaded.model, {"x": x}), run(model, {"x": x})):
        np.testing.assert_array_equal(got, expected)



def test_a_same_shape_reshape_stays_in_a_qdq_model(tmp_path: Path) -> None:
    """x -> Q/DQ -> xd;  xd -> Reshape (to x's own shape) -> Q/DQ -> AveragePool -> Q/DQ -> y  and
    xd -> Concat(xd, xd) -> Q/DQ -> y2 (scale 0.02, zero point 14).  onnxruntime keeps the Reshape and runs the
    pool as QLinearAveragePool; with the Reshape removed (onnxslim's no-op elimination) the pair before the pool
    went too and the pool ran in float, y one step (0.02) off (fuzz seed 5154): the simplified model must run
    the model's kernels, to the bit."""
    from onnx import TensorProto, helper, numpy_helper

    def qdq(source: str, target: str) -> list[onnx.NodeProto]:
        return [helper.make_node("QuantizeLinear", [source, "s", "z"], [f"{target}_q"], name=f"q_{target}"),
                helper.make_node("DequantizeLinear", [f"{target}_q", "s", "z"], [target], name=f"dq_{target}")]

    shape = [1, 1, 7, 7]
    nodes = [*qdq("x", "xd"), helper.make_node("Reshape", ["xd", "shape"], ["r"], name="reshape"), *qdq("r", "rd"),
             helper.make_node("AveragePool", ["rd"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
             *qdq("p", "y"), helper.make_node("Concat", ["xd", "xd"], ["c"], name="concat", axis=1), *qdq("c", "y2")]
    inits = [numpy_helper.from_array(np.array(shape, np.int64), "shape"), numpy_helper.from_array(np.array(0.02, np.float32), "s"),
             numpy_helper.from_array(np.array(14, np.int8), "z")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4]),
                               helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 2, 7, 7])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = save(model, tmp_path, "qdq.onnx")
    simplified = load(path).model
    assert sum(n.op_type == "Reshape" for n in simplified.graph.node) == 1
    assert kernels(simplified) == kernels(path)
    assert kernels(path)["QLinearAveragePool"] == 1
    feeds = {"x": seeded((1, 1, 7, 7))}
    for got, want in zip(run(simplified, feeds), run(model, feeds)):
        np.testing.assert_array_equal(got, want)
