"""partitioned.onnx loads in onnxruntime when a partition holds an operator it refuses inside a function."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.hardware import Hardware
from cimsplit.passes.rewrite.graph_utils import value_infos
from cimsplit.passes.rewrite.inline_partitions import _LOADS, KEY_PARTITION, loads_in_function
from cimsplit.passes.rewrite.split import PARTITION_DOMAIN, split

BUS = Hardware("test", element_bytes=1, bus_bandwidth_bytes_per_s=20.48e9)


def _qoperator_conv_concat() -> onnx.ModelProto:
    """QOperator format, as onnxruntime's quantizer writes it (uint8 activations):

        x -> q: QuantizeLinear -> xq -> conv: QLinearConv (W int8, 2 x 2 x 1 x 1) -> cq
        cat: com.microsoft QLinearConcat(cq, xq; axis 1) -> yq -> dq: DequantizeLinear -> y
    """
    rng = np.random.default_rng(0)
    consts = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(128, np.uint8), "z"),
        numpy_helper.from_array(np.array(0.07, np.float32), "s_conv"),
        numpy_helper.from_array(np.array(0.06, np.float32), "s_cat"),
        numpy_helper.from_array(rng.integers(-60, 60, (2, 2, 1, 1)).astype(np.int8), "W"),
        numpy_helper.from_array(np.array([0.02, 0.03], np.float32), "s_w"),
        numpy_helper.from_array(np.zeros(2, np.int8), "z_w"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
        helper.make_node("QLinearConv", ["xq", "s", "z", "W", "s_w", "z_w", "s_conv", "z"], ["cq"], name="conv"),
        helper.make_node("QLinearConcat", ["s_cat", "z", "cq", "s_conv", "z", "xq", "s", "z"], ["yq"],
                         name="cat", domain="com.microsoft", axis=1),
        helper.make_node("DequantizeLinear", ["yq", "s_cat", "z"], ["y"], name="dq"),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        initializer=consts,
        value_info=[helper.make_tensor_value_info(t, TensorProto.UINT8, shape)
                    for t, shape in (("xq", [1, 2, 4, 4]), ("cq", [1, 2, 4, 4]), ("yq", [1, 4, 4, 4]))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


DEVICES = {"q": "host", "conv": "cim", "cat": "host", "dq": "host"}
CONCAT = ("com.microsoft", "QLinearConcat")


def _loads(model: onnx.ModelProto) -> bool:
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - refused, whatever onnxruntime's reason
        return False
    return True


def test_the_probe_says_what_onnxruntime_does_with_the_partition_function(monkeypatch) -> None:
    """onnxruntime 1.32 refuses a QLinearConcat in a function (its schema infers Y as the float Y_scale);
    whatever the version, the probe's answer is what loading the partition as a function gives."""
    model = _qoperator_conv_concat()
    nodes = {n.name: n for n in model.graph.node}
    weights = {t.name: t for t in model.graph.initializer}
    infos, opsets = value_infos(model), list(model.opset_import)
    monkeypatch.delitem(_LOADS, CONCAT, raising=False)
    answer = loads_in_function(nodes["cat"], infos, weights, opsets)
    assert _loads(split(model, DEVICES, BUS).partitioned)
    monkeypatch.setitem(_LOADS, CONCAT, True)  # every partition a function
    assert _loads(split(model, DEVICES, BUS).partitioned) == answer
    add = helper.make_node("QLinearAdd", ["cq", "s_conv", "z", "xq", "s", "z", "s_cat", "z"], ["aq"],
                           name="add", domain="com.microsoft")
    infos["aq"] = helper.make_tensor_value_info("aq", TensorProto.UINT8, [1, 2, 4, 4])
    assert loads_in_function(add, infos, weights, opsets)
    assert loads_in_function(nodes["conv"], infos, weights, opsets)  # standard: not asked


def test_a_partition_onnxruntime_refuses_as_a_function_is_inlined_and_equals_the_model(monkeypatch) -> None:
    model = _qoperator_conv_concat()
    monkeypatch.setitem(_LOADS, CONCAT, False)
    result = split(model, DEVICES, BUS)
    holder = next(spec.name for spec in result.plan.partitions if "cat" in spec.nodes)
    top = result.partitioned
    functions = {f.name for f in top.functions if f.domain == PARTITION_DOMAIN}
    assert functions == {spec.name for spec in result.plan.partitions} - {holder}
    inlined = [n for n in top.graph.node if any(p.key == KEY_PARTITION for p in n.metadata_props)]
    assert [(n.op_type, {p.key: p.value for p in n.metadata_props}[KEY_PARTITION]) for n in inlined] == [
        ("QLinearConcat", holder), ("DequantizeLinear", holder)]
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 4)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(top.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], expected[0])
