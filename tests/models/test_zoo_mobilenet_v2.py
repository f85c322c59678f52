"""MobileNetV2 builder: torchvision's inverted residuals, depthwise convs, ReLU6 as Clip."""

from __future__ import annotations

import onnx
import pytest
from _zoo_helpers import assert_sane, conv_groups, every_conv_feeds_batchnorm, inferred_shapes, initializer, op_counts, run

from cimsplit.models import zoo


@pytest.fixture(scope="module")
def mobilenet_64() -> onnx.ModelProto:
    return zoo.build("mobilenet_v2", image_size=64)


def test_mobilenet_v2_op_counts(mobilenet_64: onnx.ModelProto) -> None:
    counts = op_counts(mobilenet_64)
    # (t, c, n, s): (1,16,1,1) (6,24,2,2) (6,32,3,2) (6,64,4,2) (6,96,3,1) (6,160,3,2) (6,320,1,1)
    blocks = 1 + 2 + 3 + 4 + 3 + 3 + 1  # 17
    # stem + first block (dw, pw-linear: no expansion at t=1) + 16 blocks * (expand, dw, pw-linear) + last 1x1
    assert counts["Conv"] == 1 + 2 + (blocks - 1) * 3 + 1 == 52
    assert counts["BatchNormalization"] == 52
    # ReLU6 after stem, after dw (and expand) conv of every block, after the last conv; pw-linear has none.
    assert counts["Clip"] == 1 + 1 + (blocks - 1) * 2 + 1 == 35
    # Residual Add where stride 1 and c_in == c_out: the n-1 repeats of every setting.
    assert counts["Add"] == 0 + 1 + 2 + 3 + 2 + 2 + 0 == 10
    assert counts["Gemm"] == 1
    assert every_conv_feeds_batchnorm(mobilenet_64)


def test_mobilenet_v2_depthwise_convs(mobilenet_64: onnx.ModelProto) -> None:
    groups = conv_groups(mobilenet_64)
    depthwise = [g for g in groups if g > 1]
    assert len(depthwise) == 17  # one per inverted residual block
    # features.2 expands 16 -> 96 channels (t=6); its dw conv has group 96 and weight (96, 1, 3, 3).
    assert initializer(mobilenet_64, "features.2.conv.1.0.weight").shape == (96, 1, 3, 3)
    assert initializer(mobilenet_64, "features.1.conv.0.0.weight").shape == (32, 1, 3, 3)  # t=1: dw first
    assert initializer(mobilenet_64, "features.18.0.weight").shape == (1280, 320, 1, 1)
    assert initializer(mobilenet_64, "classifier.1.weight").shape == (1000, 1280)


def test_mobilenet_v2_relu6_bounds(mobilenet_64: onnx.ModelProto) -> None:
    clip = next(n for n in mobilenet_64.graph.node if n.op_type == "Clip")
    assert float(initializer(mobilenet_64, clip.input[1])) == 0.0
    assert float(initializer(mobilenet_64, clip.input[2])) == 6.0


def test_mobilenet_v2_spatial_sizes_at_224() -> None:
    shapes = inferred_shapes(zoo.build("mobilenet_v2"))
    # strides 2 (stem) * 2 * 2 * 2 * 2 = 32: 224 -> 7 at the last conv.
    assert shapes["features.18.2_out"] == [1, 1280, 7, 7]
    assert shapes["output"] == [1, 1000]


def test_mobilenet_v2_parameter_count_matches_torchvision(mobilenet_64: onnx.ModelProto) -> None:
    assert zoo.parameter_count(mobilenet_64) == 3_504_872  # torchvision's documented num_params


def test_mobilenet_v2_is_valid_and_runs(mobilenet_64: onnx.ModelProto) -> None:
    onnx.checker.check_model(mobilenet_64, full_check=True)
    (logits,) = run(mobilenet_64)
    assert logits.shape == (1, 1000)
    assert_sane(logits)
