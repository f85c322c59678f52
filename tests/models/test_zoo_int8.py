"""int8 QDQ zoo models: onnxruntime's static quantizer, valid, runnable, close to float."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import onnx
import pytest
from _zoo_helpers import assert_sane, op_counts, run

from cimsplit.models import zoo


@pytest.fixture(scope="module")
def resnet18_int8(tmp_path_factory: pytest.TempPathFactory) -> onnx.ModelProto:
    """Built from inside an empty folder, to check that quantizing leaves no file in the cwd."""
    cwd = tmp_path_factory.mktemp("cwd")
    before = os.getcwd()
    os.chdir(cwd)
    try:
        model = zoo.build("resnet18", image_size=64, int8=True)
    finally:
        os.chdir(before)
    assert list(cwd.iterdir()) == []  # temporaries live in a TemporaryDirectory
    return model


def test_int8_is_qdq_with_per_channel_int8_weights(resnet18_int8: onnx.ModelProto) -> None:
    counts = op_counts(resnet18_int8)
    assert counts["QuantizeLinear"] > 0 and counts["DequantizeLinear"] > 0
    assert counts["Conv"] == 20 and counts["Gemm"] == 1  # the compute ops stay, fed by DequantizeLinear
    assert counts["BatchNormalization"] == 0  # folded by quant_pre_process before quantization
    inits = {t.name: t for t in resnet18_int8.graph.initializer}
    conv1 = next(n for n in resnet18_int8.graph.node if n.op_type == "Conv")
    weight_dq = next(n for n in resnet18_int8.graph.node if n.output[0] == conv1.input[1])
    assert weight_dq.op_type == "DequantizeLinear"
    assert inits[weight_dq.input[0]].data_type == onnx.TensorProto.INT8
    assert list(inits[weight_dq.input[1]].dims) == [64]  # one scale per output channel
    # Activations are QInt8 too (S8S8): every QuantizeLinear's zero point is int8.
    zero_points = Counter(inits[n.input[2]].data_type for n in resnet18_int8.graph.node if n.op_type == "QuantizeLinear")
    assert set(zero_points) == {onnx.TensorProto.INT8}


def test_int8_is_valid_runs_and_tracks_float(resnet18_int8: onnx.ModelProto) -> None:
    onnx.checker.check_model(resnet18_int8, full_check=True)
    assert resnet18_int8.ir_version == 8 and resnet18_int8.opset_import[0].version >= 17
    (q,) = run(resnet18_int8, seed=7)
    (f,) = run(zoo.build("resnet18", image_size=64), seed=7)
    assert q.shape == f.shape == (1, 1000)
    assert_sane(q)
    assert np.corrcoef(q.ravel(), f.ravel())[0, 1] > 0.99  # 8-bit error is small next to the signal
    assert zoo.parameter_count(resnet18_int8) > 11_000_000  # weights counted through DequantizeLinear


def test_int8_is_deterministic(resnet18_int8: onnx.ModelProto) -> None:
    again = zoo.build("resnet18", image_size=64, int8=True)  # same seed: same calibration, same scales
    assert again.SerializeToString() == resnet18_int8.SerializeToString()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "size"), [
    ("resnet50", 64), ("mobilenet_v2", 64), ("yolov5n", 128),
    ("yolov8n", 64), ("googlenet", 32), ("efficientnet_b0", 32), ("mobilenet_v3_small", 32), ("vit_tiny", 32),
])
def test_int8_other_models_run(name: str, size: int) -> None:
    model = zoo.build(name, image_size=size, int8=True)
    onnx.checker.check_model(model, full_check=True)
    assert op_counts(model)["DequantizeLinear"] > 0
    (out,) = run(model)
    assert_sane(out)



def test_u8s8_per_tensor_configuration() -> None:
    model = zoo.build("resnet18", image_size=32, int8=True, activations="uint8", per_channel=False)
    inits = {t.name: t for t in model.graph.initializer}
    # U8S8: every activation QuantizeLinear has a uint8 zero point; weights stay int8, one scale each.
    zero_points = {inits[n.input[2]].data_type for n in model.graph.node if n.op_type == "QuantizeLinear"}
    assert zero_points == {onnx.TensorProto.UINT8}
    conv1 = next(n for n in model.graph.node if n.op_type == "Conv")
    weight_dq = next(n for n in model.graph.node if n.output[0] == conv1.input[1])
    assert inits[weight_dq.input[0]].data_type == onnx.TensorProto.INT8
    assert list(inits[weight_dq.input[1]].dims) == []  # one scale for the whole tensor
    assert "U8S8 per-tensor" in model.doc_string


def test_the_quantizers_per_tensor_fallback_for_a_rank_one_weight_is_a_debug_line(caplog: pytest.LogCaptureFixture) -> None:
    from onnx import TensorProto, helper, numpy_helper

    from cimsplit.models.quantize import quantize_qdq

    gamma = numpy_helper.from_array(np.linspace(0.5, 1.5, 8, dtype=np.float32), "gamma")
    beta = numpy_helper.from_array(np.zeros(8, np.float32), "beta")
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1)], "ln",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])], [gamma, beta])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with caplog.at_level("DEBUG"):
        quantized = quantize_qdq(model)
    fallbacks = [r for r in caplog.records if "out-of-range for weight 'gamma'" in r.getMessage()]
    assert [(r.name, r.levelname) for r in fallbacks] == [("cimsplit.models.quantize", "DEBUG")]
    inits = {t.name: t for t in quantized.graph.initializer}
    gamma_dq = next(n for n in quantized.graph.node if n.op_type == "DequantizeLinear" and "gamma" in n.input[0])
    assert list(inits[gamma_dq.input[1]].dims) == []  # quantized per tensor, as the quantizer says
