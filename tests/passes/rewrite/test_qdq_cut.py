"""Split of QDQ models: the cut lies between QuantizeLinear and DequantizeLinear (issue 12).

Structure (where Q and DQ nodes go, which tensor crosses and its bytes), numbers (the
partitions chained at onnxruntime's full optimization level equal the whole model bit
for bit, and onnxruntime still fuses QLinearMatMul inside each partition), validity.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from graphs import kernels, qdq_dedicated, qdq_fork
from onnx import TensorProto, numpy_helper

from cimsplit.compiler.hardware import Hardware
from cimsplit.compiler.qdq_kernels import onnxruntime_converts_int8_pairs
from cimsplit.passes.rewrite.split import split
from cimsplit.passes.rewrite.unsigned_cuts import unsigned_cuts
from cimsplit.runtime.devices import session_options

BUS_BYTES_PER_S = 20.48e9
BUS_OWN = Hardware("test", bus_bandwidth_bytes_per_s=BUS_BYTES_PER_S)


# Devices as the annotate pass gives them: each Q/DQ on its operator's device.
FORK_DEVICES = {
    "dq_w1": "cim", "dq_w2": "cim", "q_x": "cim", "dq_x": "cim", "a": "cim", "q_a": "cim", "dq_a": "cim",
    "b": "host", "q_b": "host", "dq_b": "host", "c": "cim", "q_c": "cim", "dq_c": "cim",
}


def _session(model: onnx.ModelProto, optimized_path: str | None = None) -> ort.InferenceSession:
    options = session_options()
    if optimized_path:
        options.optimized_model_filepath = optimized_path
    return ort.InferenceSession(model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"])


def _zero_point_types(optimized: onnx.ModelProto) -> dict[str, int]:
    """Q/DQ node name -> element type of its zero point, in a graph onnxruntime optimized."""
    inits = {t.name: t.data_type for t in optimized.graph.initializer}
    return {n.name.removesuffix("/duplicated"): inits[n.input[2]] for n in optimized.graph.node
            if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input[2] in inits}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = _session(model)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in {i.name for i in session.get_inputs()}})))


def test_quantized_tensor_crosses_and_each_reader_gets_its_dequantizer() -> None:
    result = split(qdq_fork(), FORK_DEVICES, BUS_OWN)
    plan = result.plan
    assert [(p.name, p.nodes, p.inputs, p.outputs) for p in plan.partitions] == [
        # Q stays with its producer; dq_a is copied into both readers' partitions; dq_c writes
        # a graph output, so it goes to the host, where the graph outputs live, and a copy read by
        # nothing stays with q_c (the host's exports y2).
        ("cim_0", ("dq_w1", "dq_w2", "q_x", "dq_x", "a", "q_a", "dq_a", "c", "q_c", "dq_c"), ("x",), ("qa", "qc")),
        ("host_0", ("dq_a", "b", "q_b", "dq_b", "dq_c"), ("qa", "qc"), ("y1", "y2")),
    ]
    # The graph input crosses as float32 (4 bytes x 16), the quantized tensors as uint8 (1 byte x 16):
    # latency = bytes / 20.48 bytes/ns (eq. 4).
    assert [(t.tensor, t.src_device, t.dst_device, t.bytes, t.latency_ns) for t in plan.transfers] == [
        ("x", "host", "cim", 64, pytest.approx(64 / 20.48)),
        ("qa", "cim", "host", 16, pytest.approx(16 / 20.48)),
        ("qc", "cim", "host", 16, pytest.approx(16 / 20.48)),
    ]
    # The copy of dq_a on the host says so.
    host_dq = next(n for n in result.partitions["host_0"].graph.node if n.name == "dq_a")
    cim_dq = next(n for n in result.partitions["cim_0"].graph.node if n.name == "dq_a")
    assert result.partitions["host_0"].graph.input[0].type.tensor_type.elem_type == TensorProto.UINT8
    assert host_dq.input[0] == cim_dq.input[0] == "qa"
    for part in result.partitions.values():
        onnx.checker.check_model(part, full_check=True)
    onnx.checker.check_model(result.partitioned, full_check=True)


def test_element_bytes_override_charges_every_crossing_tensor_alike() -> None:
    plan = split(qdq_fork(), FORK_DEVICES, dataclasses.replace(BUS_OWN, element_bytes=2)).plan
    assert [t.bytes for t in plan.transfers] == [32, 32, 32]  # 16 elements x 2 bytes each


def test_annotation_stamps_the_copies_with_their_partitions_device() -> None:
    model = qdq_fork()
    for node in model.graph.node:
        node.metadata_props.add(key="cimsplit.device", value=FORK_DEVICES[node.name])
    result = split(model, FORK_DEVICES, BUS_OWN)
    for name, part in result.partitions.items():
        assert {p.value for n in part.graph.node for p in n.metadata_props if p.key == "cimsplit.device"} == {
            name.split("_")[0]}


@pytest.mark.parametrize("activations", [np.uint8, np.int8])
@pytest.mark.parametrize("devices", [
    FORK_DEVICES,
    {n: "host" for n in FORK_DEVICES},
    {n: "cim" for n in FORK_DEVICES},
    {**FORK_DEVICES, "b": "cim", "q_b": "cim", "dq_b": "cim", "dq_w2": "host", "c": "host", "q_c": "host", "dq_c": "host"},
])
def test_partitions_fuse_qlinear_and_equal_the_whole_model_bit_for_bit(devices, activations, tmp_path) -> None:
    model = qdq_fork(activations)
    result = split(model, devices, BUS_OWN)
    x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32) * 3
    expected = _run(model, {"x": x})
    _session(model, str(tmp_path / "whole.opt.onnx"))
    whole = [n.op_type for n in onnx.load(tmp_path / "whole.opt.onnx").graph.node]
    # uint8 activations: onnxruntime fuses both MatMuls.  int8 ones: it converts the pairs q_x -> dq_x
    # and q_c -> dq_c to uint8 (x86) but not q_a -> dq_a (dq_a has two readers), and does not fuse
    # MatMuls that mix the two; the partitions must run exactly those kernels.
    assert whole.count("QLinearMatMul") == (2 if activations == np.uint8 else 0)
    tensors, fused = {"x": x}, 0
    for spec in result.plan.partitions:
        part = result.partitions[spec.name]
        optimized = tmp_path / f"{spec.name}.opt.onnx"
        _session(part, str(optimized))
        fused += [n.op_type for n in onnx.load(optimized).graph.node].count("QLinearMatMul")
        tensors.update(_run(part, tensors))
    assert fused == whole.count("QLinearMatMul")
    # Every Q/DQ has the zero-point type in its partition that it has in the whole model.
    types = {}
    for spec in result.plan.partitions:
        types.update(_zero_point_types(onnx.load(tmp_path / f"{spec.name}.opt.onnx")))
    assert types == _zero_point_types(onnx.load(tmp_path / "whole.opt.onnx"))
    for name, value in expected.items():
        np.testing.assert_array_equal(tensors[name], value)
    got = _run(result.partitioned, {"x": x})
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value)


def test_cut_int8_pairs_become_uint8_where_onnxruntime_converts_them() -> None:
    """int8 activations under FORK_DEVICES: onnxruntime (x86) converts q_x -> dq_x, q_b -> dq_b and
    q_c -> dq_c, not q_a -> dq_a (dq_a feeds two nodes, so it is duplicated first).  Of those only
    q_c -> dq_c is cut (q_c on the CIM, dq_c with the graph outputs on the host): the split converts it."""
    model = qdq_fork(np.int8)
    plan = split(model, FORK_DEVICES, BUS_OWN).plan
    partition_of = {name: {spec.name for spec in plan.partitions if name in spec.nodes}
                    for spec in plan.partitions for name in spec.nodes}
    converted, tensors = unsigned_cuts(model, partition_of)
    assert tensors == ("qc",)
    zero_points = {t.name: t for t in converted.graph.initializer}
    q_c, dq_c = (next(n for n in converted.graph.node if n.name == name) for name in ("q_c", "dq_c"))
    assert q_c.input[2] == dq_c.input[2] == "qc_zero_point_u8"
    assert numpy_helper.to_array(zero_points["qc_zero_point_u8"]).tolist() == 128  # int8 zero point 0 + 128
    assert next(v for v in converted.graph.value_info if v.name == "qc").type.tensor_type.elem_type == TensorProto.UINT8
    assert unsigned_cuts(qdq_fork(np.uint8), partition_of) == (qdq_fork(np.uint8), ())
    # onnxruntime converts com.microsoft Q/DQ pairs too (MatchQNode; the quantizer's UseQDQContribOps)
    contrib = qdq_fork(np.int8)
    for node in contrib.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            node.domain = "com.microsoft"
    contrib.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    assert unsigned_cuts(contrib, partition_of)[1] == ("qc",)
    assert onnxruntime_converts_int8_pairs("x86_64") and not onnxruntime_converts_int8_pairs("aarch64")


def _conv_hardswish() -> onnx.ModelProto:
    """x -> Q/DQ -> Conv (int8 weights) -> Q/DQ -> HardSwish -> Q/DQ -> y, int8 activations, as onnxruntime's
    quantizer leaves a MobileNetV3 block (it does not quantize HardSwish)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (8, 4, 3, 3)).astype(np.int8), "wq")]
    for name, scale, zero in (("x", 0.02, 0), ("t", 0.05, 3), ("w", 0.01, 0), ("h", 0.03, 0)):
        inits += [numpy_helper.from_array(np.array(scale, np.float32), f"{name}_s"),
                  numpy_helper.from_array(np.array(zero, np.int8), f"{name}_z")]
    make = onnx.helper.make_node
    nodes = [make("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"], name="q_x"),
             make("DequantizeLinear", ["xq", "x_s", "x_z"], ["xd"], name="dq_x"),
             make("DequantizeLinear", ["wq", "w_s", "w_z"], ["wd"], name="dq_w"),
             make("Conv", ["xd", "wd"], ["t"], name="conv", pads=[1, 1, 1, 1]),
             make("QuantizeLinear", ["t", "t_s", "t_z"], ["tq"], name="q_t"),
             make("DequantizeLinear", ["tq", "t_s", "t_z"], ["td"], name="dq_t"),
             make("HardSwish", ["td"], ["h"], name="hardswish"),
             make("QuantizeLinear", ["h", "h_s", "h_z"], ["hq"], name="q_h"),
             make("DequantizeLinear", ["hq", "h_s", "h_z"], ["y"], name="dq_h")]
    graph = onnx.helper.make_graph(nodes, "conv_hardswish", [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                                   [onnx.helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def test_partitioned_onnx_runs_the_quantized_conv_before_a_hardswish() -> None:
    """In partitioned.onnx onnxruntime expands HardSwish (no CPU kernel) with the partition's function,
    before its QDQ passes; the expansion reads dq_t twice, dq_t is duplicated, and an int8 pair q_t -> dq_t
    would stay int8 and the Conv run in float (x86).  The split writes that pair as uint8.  (The duplicated
    DequantizeLinear stays: one more in partitioned.onnx than in the model.)"""
    model = _conv_hardswish()
    result = split(model, {n.name: "host" for n in model.graph.node}, BUS_OWN)
    assert kernels(model)["QLinearConv"] == 1
    assert kernels(result.partitions["host_0"]) == kernels(model)
    assert kernels(result.partitioned) == kernels(model) + Counter({"DequantizeLinear": 1})
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32) * 2
    np.testing.assert_array_equal(_run(result.partitioned, {"x": x})["y"], _run(model, {"x": x})["y"])
    zero_points = {t.name: t.data_type for t in result.partitions["host_0"].graph.initializer}
    q_t = next(n for n in result.partitions["host_0"].graph.node if n.name == "q_t")
    assert zero_points[q_t.input[2]] == (TensorProto.UINT8 if onnxruntime_converts_int8_pairs() else TensorProto.INT8)


def test_a_dedicated_pair_cut_stays_int8_as_onnxruntime_keeps_it(tmp_path) -> None:
    """qdq_dedicated as the front end gives it (q_a2 merged into q_a1), b on the CIM: qa1 crosses and also
    feeds dq_a2 on the host.  onnxruntime keeps that pair int8 in the whole model (a, b, c in float);
    each partition must too, where the dedicated pairs split apart would fuse c on the host."""
    from cimsplit.compiler.frontend import load

    path = tmp_path / "dedicated.onnx"
    onnx.save(qdq_dedicated(), path)
    model = load(path).model
    devices = {n.name: "host" for n in model.graph.node} | {"dq_w2": "cim", "b": "cim", "q_b": "cim"}
    result = split(model, devices, BUS_OWN)
    assert [(t.tensor, t.src_device, t.dst_device, t.bytes) for t in result.plan.transfers] == [
        ("qa1", "host", "cim", 16), ("qb", "cim", "host", 16)]
    ran = sum((kernels(part) for part in result.partitions.values()), Counter())
    whole = kernels(qdq_dedicated())
    assert (ran["QLinearMatMul"], ran["MatMul"]) == (whole["QLinearMatMul"], whole["MatMul"])
    if onnxruntime_converts_int8_pairs():
        assert (whole["QLinearMatMul"], whole["MatMul"]) == (0, 3)
    x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32) * 3
    tensors = {"x": x}
    for spec in result.plan.partitions:
        tensors.update(_run(result.partitions[spec.name], tensors))
    for name, value in _run(model, {"x": x}).items():
        np.testing.assert_array_equal(tensors[name], value)
