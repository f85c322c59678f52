"""ResNet-18/50 builders: torchvision's structure, counts by hand, valid ONNX, sane outputs."""

from __future__ import annotations

import onnx
import pytest
from _zoo_helpers import assert_sane, every_conv_feeds_batchnorm, inferred_shapes, initializer, op_counts, run

from cimsplit.models import zoo


@pytest.fixture(scope="module")
def resnet18_64() -> onnx.ModelProto:
    return zoo.build("resnet18", image_size=64)


@pytest.fixture(scope="module")
def resnet50_64() -> onnx.ModelProto:
    return zoo.build("resnet50", image_size=64)


def test_resnet18_op_counts(resnet18_64: onnx.ModelProto) -> None:
    counts = op_counts(resnet18_64)
    blocks = 2 + 2 + 2 + 2
    assert counts["Conv"] == 1 + 2 * blocks + 3 == 20  # stem + 2 per BasicBlock + downsample in layer2..4
    assert counts["BatchNormalization"] == 20  # one per Conv, not yet folded
    assert counts["Relu"] == 1 + 2 * blocks == 17  # stem + after bn1 and after the Add
    assert counts["Add"] == blocks == 8
    assert counts["Gemm"] == 1
    assert counts["MaxPool"] == counts["GlobalAveragePool"] == counts["Flatten"] == 1
    assert len(resnet18_64.graph.node) == 20 + 20 + 17 + 8 + 4
    assert every_conv_feeds_batchnorm(resnet18_64)


def test_resnet50_op_counts(resnet50_64: onnx.ModelProto) -> None:
    counts = op_counts(resnet50_64)
    blocks = 3 + 4 + 6 + 3
    assert counts["Conv"] == 1 + 3 * blocks + 4 == 53  # stem + 3 per Bottleneck + downsample in every stage
    assert counts["Relu"] == 1 + 3 * blocks == 49
    assert counts["Add"] == blocks == 16
    assert counts["Gemm"] == 1
    assert every_conv_feeds_batchnorm(resnet50_64)


def test_resnet_weights_follow_torchvision_shapes(resnet18_64: onnx.ModelProto, resnet50_64: onnx.ModelProto) -> None:
    assert initializer(resnet18_64, "conv1.weight").shape == (64, 3, 7, 7)
    assert initializer(resnet18_64, "layer2.0.downsample.0.weight").shape == (128, 64, 1, 1)
    assert initializer(resnet18_64, "fc.weight").shape == (1000, 512)  # Gemm transB=1: (out, in)
    assert initializer(resnet50_64, "layer1.0.conv3.weight").shape == (256, 64, 1, 1)  # expansion 4
    assert initializer(resnet50_64, "fc.weight").shape == (1000, 2048)
    fc = next(n for n in resnet18_64.graph.node if n.op_type == "Gemm")
    assert [a.i for a in fc.attribute if a.name == "transB"] == [1]
    # Positive running variance, so the front end's BN folding divides by sqrt(var + eps) > 0.
    assert (initializer(resnet50_64, "layer4.2.bn3.running_var") > 0).all()


def test_resnet18_spatial_sizes_at_224() -> None:
    shapes = inferred_shapes(zoo.build("resnet18"))
    # 224 -> conv1 /2 -> 112 -> maxpool /2 -> 56; layer2..4 halve: 28, 14, 7.
    assert shapes["maxpool_out"] == [1, 64, 56, 56]
    assert shapes["layer2.1.relu_1_out"] == [1, 128, 28, 28]
    assert shapes["layer4.1.relu_1_out"] == [1, 512, 7, 7]
    assert shapes["output"] == [1, 1000]


def test_resnet_parameter_counts_match_torchvision(resnet18_64: onnx.ModelProto, resnet50_64: onnx.ModelProto) -> None:
    # torchvision's documented num_params for resnet18 / resnet50 (BN running stats are buffers).
    assert zoo.parameter_count(resnet18_64) == 11_689_512
    assert zoo.parameter_count(resnet50_64) == 25_557_032


@pytest.mark.parametrize("fixture", ["resnet18_64", "resnet50_64"])
def test_resnet_is_valid_and_runs(fixture: str, request: pytest.FixtureRequest) -> None:
    model = request.getfixturevalue(fixture)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17
    assert model.graph.input[0].name == "input"
    (logits,) = run(model, batch=1)
    assert logits.shape == (1, 1000)
    assert_sane(logits)
