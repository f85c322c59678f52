"""A conv's fused activation, predicted by the kernels onnxruntime runs for it (compiler/host_fused.py)."""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_fused import QUANTIZED_SILU, activation_kernels, activation_nodes, kernel_kind, quantized_silu
from cimsplit.compiler.host_model import KERNEL_SUFFIXES, HostModel, KindFit
from cimsplit.compiler.host_prediction import predict_latencies
from cimsplit.compiler.ort_profiler import optimized_model
from cimsplit.compiler.qdq_kernels import onnxruntime_converts_int8_pairs
from cimsplit.models.quantize import quantize_qdq

x86 = pytest.mark.skipif(not onnxruntime_converts_int8_pairs(), reason="onnxruntime keeps int8 pairs off x86")


def _conv_then(activation: str, quantized: bool = True) -> onnx.ModelProto:
    """x (8 x 10 x 10) -> 1x1 conv (16 channels) -> SiLU (Sigmoid, Mul) or ``activation`` -> 1x1 conv, quantized S8S8
    (QDQ) unless not ``quantized``."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 8, 1, 1)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((8, 16, 1, 1)) * 0.3).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1")]
    if activation == "SiLU":
        nodes += [helper.make_node("Sigmoid", ["c"], ["g"], name="sigmoid"), helper.make_node("Mul", ["c", "g"], ["a"], name="mul")]
    else:
        nodes += [helper.make_node(activation, ["c"], ["a"], name="act")]
    nodes += [helper.make_node("Conv", ["a", "w2"], ["y"], name="conv2")]
    graph = helper.make_graph(nodes, "conv_act", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    return quantize_qdq(model) if quantized else model


def test_kernel_kinds() -> None:
    assert [kernel_kind(t) for t in ("QuantizeLinear", "DequantizeLinear", "QLinearSigmoid", "Sigmoid", "QuickGelu")] == [
        "glue:QuantizeLinear", "glue:DequantizeLinear", "int8:Sigmoid", "Sigmoid", "SiLU"]


@x86
def test_a_kept_silu_runs_float_sigmoid_and_mul_with_their_q_dq(tmp_path: Path) -> None:
    """The conv's output feeds Sigmoid and Mul (one DQ, two readers: its pair stays int8), so onnxruntime runs the conv
    and its SiLU in float: Sigmoid, its Q and DQ, Mul (reading 2 x 1600 elements) with the copy of the conv's DQ it
    reads, and Mul's Q; the next conv reads Mul's DQ in its QLinearConv (its region, not the activation's)."""
    onnx.save(_conv_then("SiLU"), tmp_path / "m.onnx")
    loaded = load(tmp_path / "m.onnx")
    found = activation_kernels(loaded.model, optimized_model(loaded.model), loaded.workload)
    conv1 = next(op.name for op in loaded.workload.operators if "conv1" in op.nodes)
    n = 16 * 10 * 10.0
    assert sorted(found) == [conv1]
    assert sorted((kind, f["n_in"], f["n_out"]) for kind, f in found[conv1]) == sorted([
        ("Sigmoid", n, n), ("glue:QuantizeLinear", n, n), ("glue:DequantizeLinear", n, n),
        ("Mul", 2 * n, n), ("glue:DequantizeLinear", n, n), ("glue:QuantizeLinear", n, n)])


def test_a_folded_relu_runs_nothing(tmp_path: Path) -> None:
    """onnxruntime folds the Relu into the QLinearConv's output range: no kernel is the activation's (it was predicted
    as an int8:Relu point's time at N_out)."""
    onnx.save(_conv_then("Relu"), tmp_path / "m.onnx")
    loaded = load(tmp_path / "m.onnx")
    found = activation_kernels(loaded.model, optimized_model(loaded.model), loaded.workload)
    conv1 = next(op.name for op in loaded.workload.operators if "conv1" in op.nodes)
    assert found == {conv1: []}


@pytest.mark.parametrize("activation, expected", [
    ("Relu", []),  # applied in the conv kernel's registers
    ("Clip", [("Clip", 1600.0, 1600.0)]),  # folded into the FusedConv, applied in a pass over its 16 x 10 x 10 outputs
    ("SiLU", [("SiLU", 1600.0, 1600.0)]),  # onnxruntime's QuickGelu: x * sigmoid(x) in one kernel
    ("HardSwish", [("HardSigmoid", 1600.0, 1600.0)]),  # folded: x * HardSigmoid(x) in one pass, not its function body
])
def test_a_float_activation_costs_its_kernels_or_its_pass_over_the_output(tmp_path: Path, activation: str,
                                                                           expected: list) -> None:
    onnx.save(_conv_then(activation, quantized=False), tmp_path / "m.onnx")
    loaded = load(tmp_path / "m.onnx")
    optimized = optimized_model(loaded.model)
    if activation != "SiLU":  # onnxruntime fuses the activation into the conv: no node of its own is left
        assert not any(node.op_type == activation for node in optimized.graph.node)
    found = activation_kernels(loaded.model, optimized, loaded.workload)
    conv1 = next(op.name for op in loaded.workload.operators if "conv1" in op.nodes)
    assert {name: sorted((kind, f["n_in"], f["n_out"]) for kind, f in kinds) for name, kinds in found.items()} == {
        conv1: expected}


def test_a_calibration_without_the_silu_kind_predicts_its_kernel_as_one_sigmoid_pass(tmp_path: Path) -> None:
    """Conv (100 ns) then SiLU on 1600 elements: 10 + 0.5 ns per element as its own kind, 10 + 0.25 as a Sigmoid pass."""
    onnx.save(_conv_then("SiLU", quantized=False), tmp_path / "m.onnx")
    loaded = load(tmp_path / "m.onnx")

    def fit(kind: str, form: str, coefficients: tuple) -> KindFit:
        return KindFit(kind, form, coefficients, 10, 0.0, {}, {})

    fits = {"Conv": fit("Conv", "relative-linear", (100.0, 0.0, 0.0, 0.0, 0.0)),
            "Sigmoid": fit("Sigmoid", "relative-elements", (10.0, 0.0, 0.25))}
    board = HostModel(ort_version="", cpu="", machine={"machine": platform.machine()}, threads=1, level="all", int8=False,
                      fits=fits, campaign={"points": 3})
    conv1 = next(op.name for op in loaded.workload.operators if "conv1" in op.nodes)
    before, _ = predict_latencies(loaded.workload, loaded.model, board)
    board = HostModel(**{**board.__dict__, "fits": {**fits, "SiLU": fit("SiLU", "relative-elements", (10.0, 0.0, 0.5))}})
    after, _ = predict_latencies(loaded.workload, loaded.model, board)
    assert (before[conv1], after[conv1]) == (100.0 + 10.0 + 0.25 * 1600, 100.0 + 10.0 + 0.5 * 1600)


@x86
def test_a_quantized_silu_is_predicted_as_its_chain_when_the_board_has_it(tmp_path: Path) -> None:
    """conv1 (100 ns) and its int8 SiLU on 1600 elements: without the chain kind, its six kernels from their own
    kinds (Sigmoid 10 + 0.25 n = 410, two Q and two DQ 5 + 0.1 n = 165 each, Mul 10 + 0.05 x 3200 + 0.05 x 1600 = 250:
    1320 ns); with it, the chain's 20 + 1.0 n = 1620 ns.  A U8S8 model's SiLU runs other kernels, and a float SiLU
    (QuickGelu) is not quantized: neither is predicted as the chain."""
    onnx.save(_conv_then("SiLU"), tmp_path / "m.onnx")
    loaded = load(tmp_path / "m.onnx")
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    conv1 = next(op for op in loaded.workload.operators if "conv1" in op.nodes)
    assert quantized_silu(conv1, types) and [types[n] for n in activation_nodes(conv1, types)][:1] == ["Sigmoid"]

    def fit(kind: str, form: str, coefficients: tuple) -> KindFit:
        return KindFit(kind, form, coefficients, 10, 0.0, {}, {})

    fits = {kind: fit(kind, "relative-linear", (100.0, 0.0, 0.0, 0.0, 0.0)) for kind in ["int8:Conv", *(f"int8:Conv{s}" for s in KERNEL_SUFFIXES)]}
    fits |= {"Sigmoid": fit("Sigmoid", "relative-elements", (10.0, 0.0, 0.25)), "Mul": fit("Mul", "relative-elements", (10.0, 0.05, 0.05)),
             **{k: fit(k, "relative-elements", (5.0, 0.0, 0.1)) for k in ("glue:QuantizeLinear", "glue:DequantizeLinear")}}
    board = HostModel(ort_version="", cpu="", machine={"machine": platform.machine()}, threads=1, level="all", int8=True,
                      fits=fits, campaign={"points": 3})
    before, _ = predict_latencies(loaded.workload, loaded.model, board)
    board = HostModel(**{**board.__dict__, "fits": {**fits, QUANTIZED_SILU: fit(QUANTIZED_SILU, "relative-elements", (20.0, 0.0, 1.0))}})
    after, _ = predict_latencies(loaded.workload, loaded.model, board)
    assert (before[conv1.name], after[conv1.name]) == pytest.approx((100.0 + 1320.0, 100.0 + 1620.0))
    # U8S8: onnxruntime runs the SiLU as QLinearSigmoid and QLinearMul, which their own kinds predict (10 + 0.5 n each)
    fits |= {k: fit(k, "relative-elements", (10.0, 0.0, 0.5)) for k in ("int8:Sigmoid", "int8:Mul")}
    board = HostModel(**{**board.__dict__, "fits": {**fits, QUANTIZED_SILU: fit(QUANTIZED_SILU, "relative-elements", (20.0, 0.0, 1.0))}})
    onnx.save(quantize_qdq(_conv_then("SiLU", quantized=False), activations="uint8"), tmp_path / "u8.onnx")
    u8 = load(tmp_path / "u8.onnx")
    u8_conv1 = next(op for op in u8.workload.operators if "conv1" in op.nodes)
    assert quantized_silu(u8_conv1, {node.name: node.op_type for node in u8.model.graph.node})
    assert predict_latencies(u8.workload, u8.model, board)[0][u8_conv1.name] == pytest.approx(100.0 + 2 * (10.0 + 0.5 * 1600))
    onnx.save(_conv_then("SiLU", quantized=False), tmp_path / "f.onnx")
    float_model = load(tmp_path / "f.onnx")
    float_types = {node.name: node.op_type for node in float_model.model.graph.node}
    assert not any(quantized_silu(op, float_types) for op in float_model.workload.operators)
