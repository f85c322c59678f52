"""GoogLeNet builder: torchvision's Inception v1 without aux heads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from _zoo_helpers import assert_sane, every_conv_feeds_batchnorm, inferred_shapes, initializer, inspect_json, op_counts, run

from cimsplit.models import zoo
from cimsplit.models.googlenet import INCEPTION_SETTING


@pytest.fixture(scope="module")
def googlenet_32() -> onnx.ModelProto:
    return zoo.build("googlenet", image_size=32)


def test_googlenet_structure(googlenet_32: onnx.ModelProto) -> None:
    counts = op_counts(googlenet_32)
    inceptions = sum(1 for _, s in INCEPTION_SETTING if s is not None)
    assert inceptions == 9
    assert counts["Conv"] == 3 + 6 * inceptions == 57  # conv1-3, then 6 BasicConv2d per Inception
    assert counts["BatchNormalization"] == counts["Relu"] == 57
    assert counts["MaxPool"] == 4 + inceptions  # maxpool1-4 + one in each branch4
    assert counts["Concat"] == inceptions and counts["Gemm"] == 1
    assert every_conv_feeds_batchnorm(googlenet_32)
    # torchvision's branch3 is 1x1 -> 3x3 (not the paper's 5x5): 4a is Inception(480, 192, 96, 208, 16, 48, 64)
    assert initializer(googlenet_32, "inception4a.branch3.1.conv.weight").shape == (48, 16, 3, 3)
    assert initializer(googlenet_32, "inception4a.branch4.1.conv.weight").shape == (64, 480, 1, 1)
    assert initializer(googlenet_32, "fc.weight").shape == (1000, 1024)


def test_googlenet_shapes_at_224() -> None:
    shapes = inferred_shapes(zoo.build("googlenet"))
    assert shapes["conv1.relu_out"] == [1, 64, 112, 112]
    assert shapes["maxpool1_out"] == [1, 64, 56, 56]  # ceil((112 - 3) / 2) + 1
    assert shapes["inception3b.concat_out"] == [1, 128 + 192 + 96 + 64, 28, 28]
    assert shapes["inception4e.concat_out"] == [1, 256 + 320 + 128 + 128, 14, 14]
    assert shapes["maxpool4_out"] == [1, 832, 7, 7]
    assert shapes["inception5b.concat_out"] == [1, 384 + 384 + 128 + 128, 7, 7]
    assert shapes["output"] == [1, 1000]


def test_googlenet_parameter_count_matches_torchvision() -> None:
    # torchvision.models.googlenet(aux_logits=False, init_weights=True): 6,624,904 parameters.
    assert zoo.parameter_count(zoo.build("googlenet")) == 6_624_904


def test_googlenet_runs(googlenet_32: onnx.ModelProto) -> None:
    onnx.checker.check_model(googlenet_32, full_check=True)
    (logits,) = run(googlenet_32)
    assert logits.shape == (1, 1000) and logits.dtype == np.float32
    assert_sane(logits)


def test_googlenet_workload(googlenet_32: onnx.ModelProto, tmp_path: Path) -> None:
    doc = inspect_json(googlenet_32, tmp_path)
    capable = [op for op in doc["operators"] if op["cim_capable"]]
    assert {op["op_type"] for op in capable} == {"Conv", "Gemm"} and len(capable) == 58
    assert all(len(op["nodes"]) == 2 for op in capable if op["op_type"] == "Conv")  # Conv(+BN) + Relu fused
    host = sorted({op["op_type"] for op in doc["operators"] if not op["cim_capable"]})
    assert host == ["Concat", "Flatten", "GlobalAveragePool", "MaxPool"]
    # 57 Convs + 13 MaxPool + 9 Concat + avgpool, flatten, fc
    assert doc["totals"]["operators"] == 57 + 13 + 9 + 3 == 82
    # fc 1024 -> 1000: ceil(1000/256) * ceil(1024/256) = 4 * 4; 5b branch2 3x3 192 -> 384: 2 * ceil(1728/256) = 2 * 7
    by_name = {op["name"]: op for op in capable}
    assert by_name["fc"]["crossbars"] == 16
    assert next(op for op in capable if op["name"].startswith("inception5b.branch2.1"))["crossbars"] == 14
    assert (doc["totals"]["operators"], doc["totals"]["crossbars"]) == zoo.workload_size("googlenet") == (82, 195)
