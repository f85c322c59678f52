"""The rewrites onnxruntime makes to a QDQ graph before fusing it, made by cimsplit's front end (ort_rewrites)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from graphs import kernels, optimized
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.ort_rewrites import drop_no_ops, fuse_pads, propagate_quantizers, restore_quantizers, standard_quantizers

SCALE, ZERO = "s", "z"


def _model(nodes: list[onnx.NodeProto], outputs: dict[str, list[int]], extra: dict[str, np.ndarray] | None = None,
           x_shape: tuple[int, ...] = (1, 4, 6, 6)) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    constants = {SCALE: np.array(0.02, np.float32), ZERO: np.array(3, np.int8),
                 "wq": rng.integers(-20, 20, (8, 4, 3, 3)).astype(np.int8), "ws": np.array(0.01, np.float32),
                 "wz": np.array(0, np.int8), **(extra or {})}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
                              [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _q(source: str, target: str) -> onnx.NodeProto:
    return helper.make_node("QuantizeLinear", [source, SCALE, ZERO], [target], name=f"q_{target}")


def _dq(source: str, target: str) -> onnx.NodeProto:
    return helper.make_node("DequantizeLinear", [source, SCALE, ZERO], [target], name=f"dq_{target}")


def _conv(source: str, target: str) -> list[onnx.NodeProto]:
    return [helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], [f"{target}_w"], name=f"dqw_{target}"),
            helper.make_node("Conv", [source, f"{target}_w"], [target], name=f"conv_{target}", pads=[1, 1, 1, 1])]


def _outputs(model: onnx.ModelProto) -> list[np.ndarray]:
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})


def _edited(model: onnx.ModelProto, edit) -> onnx.ModelProto:  # noqa: ANN001
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    edit(copy)
    onnx.checker.check_model(copy, full_check=True)
    return copy


def test_the_no_ops_onnxruntime_removes_are_removed_and_the_rest_kept() -> None:
    """x -> Q/DQ -> Identity -> Dropout -> Cast(float) -> Add 0 -> Sub 0 -> Mul 1 -> Div 1 -> [a] Mul 2 -> Sub(0 - .)
    -> Cast(float16) -> Cast(float) -> Reshape (same shape) -> Identity -> y (a graph output)."""
    steps = [("Identity", []), ("Dropout", []), ("Cast", []), ("Add", ["zero"]), ("Sub", ["zero"]), ("Mul", ["one"]),
             ("Div", ["one"]), ("Mul", ["two"])]
    nodes, tensor = [_q("x", "xq"), _dq("xq", "t0")], "t0"
    for k, (op, constant) in enumerate(steps, 1):
        attrs = {"to": TensorProto.FLOAT} if op == "Cast" else {}
        nodes.append(helper.make_node(op, [tensor, *constant], [f"t{k}"], name=f"{op.lower()}{k}", **attrs))
        tensor = f"t{k}"
    nodes += [helper.make_node("Sub", ["zero", tensor], ["u1"], name="sub_from_zero"),
              helper.make_node("Cast", ["u1"], ["u2"], name="to_half", to=TensorProto.FLOAT16),
              helper.make_node("Cast", ["u2"], ["u3"], name="to_float", to=TensorProto.FLOAT),
              helper.make_node("Reshape", ["u3", "shape"], ["u4"], name="reshape"),
              helper.make_node("Identity", ["u4"], ["y"], name="last")]
    model = _model(nodes, {"y": [1, 4, 6, 6]}, {"zero": np.array(0.0, np.float32), "one": np.array([1.0], np.float32),
                                                 "two": np.array(2.0, np.float32), "shape": np.array([1, 4, 6, 6], np.int64)})
    edited = _edited(model, drop_no_ops)
    assert [n.name for n in edited.graph.node] == ["q_xq", "dq_t0", "mul8", "sub_from_zero", "to_half", "to_float", "reshape", "last"]
    assert list(edited.graph.node[2].input) == ["t0", "two"]
    np.testing.assert_array_equal(_outputs(edited)[0], _outputs(model)[0])


def test_a_cast_after_contrib_quantizers_is_known_to_change_nothing() -> None:
    """x -> Q/DQ (com.microsoft) -> Conv -> Cast(float) -> Q/DQ (com.microsoft) -> y: onnx infers no type after a
    contrib DQ, yet the Cast is to the float the Conv writes, and onnxruntime removes it; so does drop_no_ops
    (fuzz seed 8519 with exporter clutter kept it, and a cut there split the Conv from its Q)."""
    nodes = [_q("x", "xq"), _dq("xq", "xd"), *_conv("xd", "c"),
             helper.make_node("Cast", ["c"], ["cf"], name="cast", to=TensorProto.FLOAT), _q("cf", "cq"), _dq("cq", "y")]
    model = _model(nodes, {"y": [1, 8, 6, 6]})
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    for node in model.graph.node:
        if node.op_type.endswith("Linear") and node.name != "dqw_c":
            node.domain = "com.microsoft"
    edited = _edited(model, drop_no_ops)
    assert [n.name for n in edited.graph.node] == ["q_xq", "dq_xd", "dqw_c", "conv_c", "q_cq", "dq_y"]
    assert list(edited.graph.node[4].input)[:1] == ["c"]
    np.testing.assert_array_equal(_outputs(edited)[0], _outputs(model)[0])


def test_contrib_quantizers_are_standard_for_inference_and_put_back() -> None:
    """standard_quantizers moves com.microsoft Q/DQ to the standard domain (by their outputs), restore_quantizers
    puts exactly those back; an int16 contrib pair, which the standard schema has only from opset 21, stays."""
    nodes = [_q("x", "xq"), _dq("xq", "xd"), *_conv("xd", "c"), _q("c", "cq"), _dq("cq", "y")]
    model = _model(nodes, {"y": [1, 8, 6, 6]})
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    for node in model.graph.node:
        if node.name in ("q_xq", "dq_xd", "q_cq"):
            node.domain = "com.microsoft"
    standard, contrib = standard_quantizers(model)
    assert contrib == {"xq", "xd", "cq"} and {n.domain for n in standard.graph.node} == {""}
    assert [n.domain for n in model.graph.node] == ["com.microsoft", "com.microsoft", "", "", "com.microsoft", ""]
    assert [n.domain for n in restore_quantizers(standard, contrib).graph.node] == [n.domain for n in model.graph.node]
    wide = _edited(model, lambda m: m.graph.initializer.extend([numpy_helper.from_array(np.array(3, np.int16), "z16")]))
    for node in wide.graph.node:
        if node.name in ("q_xq", "dq_xd"):
            node.input[2] = "z16"
    assert standard_quantizers(wide) == (wide, frozenset())


def test_a_quantizer_is_carried_back_over_reshape_and_transpose_to_the_conv() -> None:
    """x -> Q/DQ -> Conv -> c -> Transpose -> Reshape -> Q/DQ -> y: two pairs, on c and on the Transpose's output,
    as onnxruntime inserts them (the same kernels run, QLinearConv among them), outputs equal to the bit."""
    nodes = [_q("x", "xq"), _dq("xq", "xd"), *_conv("xd", "c"),
             helper.make_node("Transpose", ["c"], ["t"], name="transpose", perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["r"], name="reshape"), _q("r", "rq"), _dq("rq", "y")]
    model = _model(nodes, {"y": [1, 36, 8]}, {"shape": np.array([1, 36, 8], np.int64)})
    edited = _edited(model, propagate_quantizers)
    assert [(n.op_type, list(n.input)[:1], list(n.output)) for n in edited.graph.node[4:10]] == [
        ("QuantizeLinear", ["c"], ["c_q_to_dq"]), ("DequantizeLinear", ["c_q_to_dq"], ["c_post_dq"]),
        ("Transpose", ["c_post_dq"], ["t"]),
        ("QuantizeLinear", ["t"], ["t_q_to_dq"]), ("DequantizeLinear", ["t_q_to_dq"], ["t_post_dq"]),
        ("Reshape", ["t_post_dq"], ["r"])]
    assert kernels(edited) == kernels(model) and kernels(model)["QLinearConv"] == 1
    np.testing.assert_array_equal(_outputs(edited)[0], _outputs(model)[0])


def _quantizers(model: onnx.ModelProto) -> list[tuple[str, str]]:
    return sorted((n.op_type, n.name) for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear"))


def test_a_dequantizer_is_carried_forward_to_every_reader() -> None:
    """x -> Q/DQ -> MaxPool -> m -> Transpose -> t -> Conv -> Q/DQ -> y1: pairs on m and t.  With m also read by a
    Relu (y2), m gets one Q and a DQ for each reader (m_dq for the Transpose, m_dq1 for the Relu) and t its pair, as
    onnxruntime 1.32 inserts them (fuzz seed 209 with a dynamic batch: cimsplit inserted nothing there).  The same
    Q/DQ nodes as onnxruntime's level-1 graph, the same kernels as for the model, outputs equal to the bit."""
    def nodes(branch: bool) -> list[onnx.NodeProto]:
        return [_q("x", "xq"), _dq("xq", "xd"), helper.make_node("MaxPool", ["xd"], ["m"], name="pool", kernel_shape=[1, 1]),
                helper.make_node("Transpose", ["m"], ["t"], name="transpose", perm=[0, 1, 3, 2]), *_conv("t", "c"),
                _q("c", "cq"), _dq("cq", "y1"), *([helper.make_node("Relu", ["m"], ["y2"], name="relu")] if branch else [])]

    for branch, dequantizers in ((False, ["m_dq", "t_dq"]), (True, ["m_dq", "m_dq1", "t_dq"])):
        model = _model(nodes(branch), {"y1": [1, 8, 6, 6], **({"y2": [1, 4, 6, 6]} if branch else {})})
        edited = _edited(model, propagate_quantizers)
        inserted = [n.name for n in edited.graph.node if n.name.startswith(("m_", "t_"))]
        assert sorted(inserted) == sorted(["m_q", "t_q", *dequantizers])
        readers = {n.name: n.op_type for n in edited.graph.node for d in edited.graph.node if d.output[0] in n.input and d.name == "m_dq1"}
        assert readers == ({"relu": "Relu"} if branch else {})
        assert _quantizers(edited) == _quantizers(optimized(model, basic_only=True)) == _quantizers(optimized(edited, basic_only=True))
        assert kernels(edited) == kernels(model)
        for got, want in zip(_outputs(edited), _outputs(model)):
            np.testing.assert_array_equal(got, want)


def _pad_net(child: str = "Conv", pads: list[int] = (0, 0, 1, 1, 0, 0, 1, 1), value: float = 0.0, attrs: dict | None = None,
             cast: bool = False, second_reader: bool = False) -> onnx.ModelProto:
    """x[1,4,6,6] -> Pad(pads, value) [-> Cast to float] -> child [-> y] (and Relu(pad) -> z when ``second_reader``)."""
    nodes = [helper.make_node("Pad", ["x", "pads", "value"], ["p"], name="pad")]
    source = "p"
    if cast:
        nodes.append(helper.make_node("Cast", ["p"], ["c"], name="cast", to=TensorProto.FLOAT))
        source = "c"
    inputs = [source, "w"] if child == "Conv" else [source]
    kernel = {"kernel_shape": [1, 1]} if child != "Conv" else {}
    nodes.append(helper.make_node(child, inputs, ["y"], name="child", **kernel, **(attrs or {})))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if second_reader:
        nodes.append(helper.make_node("Relu", ["p"], ["z"], name="relu"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads"), numpy_helper.from_array(np.array(value, np.float32), "value"),
             numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w")]
    graph = helper.make_graph(nodes, "pad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_pads_fuse_exactly_where_onnxruntimes_pad_fusion_fuses_them() -> None:
    """A Pad is folded into the Conv it feeds only where onnxruntime's level-1 PadFusion folds it (in a QDQ model that
    decides whether the Conv runs as a QLinearConv): not before a Conv with ``auto_pad`` VALID, which onnxslim fuses
    too, nor into a pool, nor with a second reader, a padded channel or a nonzero value."""
    cases = {
        "conv without pads": (_pad_net(), True),
        "conv with pads": (_pad_net(attrs={"pads": [0, 0, 0, 0]}), True),
        "conv auto_pad VALID": (_pad_net(attrs={"auto_pad": "VALID"}), False),
        "channel padded": (_pad_net(pads=[0, 1, 1, 1, 0, 0, 1, 1]), False),
        "value one": (_pad_net(value=1.0), False),
        "negative": (_pad_net(pads=[0, 0, -1, 0, 0, 0, 1, 1]), False),
        "two readers": (_pad_net(second_reader=True), False),
        "maxpool with pads": (_pad_net("MaxPool", attrs={"pads": [0, 0, 0, 0]}), False),
        "cast, then conv": (_pad_net(cast=True), True),
    }
    for name, (model, fused) in cases.items():
        ours = onnx.ModelProto()
        ours.CopyFrom(model)
        assert fuse_pads(ours) == int(fused), name
        theirs = optimized(model, basic_only=True)
        assert any(n.op_type == "Pad" for n in theirs.graph.node) is (not fused), name
        if fused:
            child = next(n for n in ours.graph.node if n.name == "child")
            assert list(next(a for a in child.attribute if a.name == "pads").ints) == [1, 1, 1, 1], name
            feeds = {"x": np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)}
            run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
                   for m in (model, ours)]
            np.testing.assert_array_equal(*run)
