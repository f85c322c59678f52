"""EfficientNet-B0 builder: torchvision's MBConv table with squeeze-and-excitation and SiLU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from _zoo_helpers import assert_sane, conv_groups, inferred_shapes, initializer, inspect_json, op_counts, run

from cimsplit.models import zoo
from cimsplit.models.efficientnet import STAGE_SETTING


@pytest.fixture(scope="module")
def effnet_32() -> onnx.ModelProto:
    return zoo.build("efficientnet_b0", image_size=32)


def test_efficientnet_structure(effnet_32: onnx.ModelProto) -> None:
    blocks = sum(s[5] for s in STAGE_SETTING)
    assert blocks == 16
    counts = op_counts(effnet_32)
    # stem + last conv; per MBConv expand (not in stage 1) + depthwise + SE fc1, fc2 + project
    assert counts["Conv"] == 2 + (blocks - 1) + 4 * blocks == 81
    assert sum(1 for g in conv_groups(effnet_32) if g > 1) == blocks
    assert counts["BatchNormalization"] == 81 - 2 * blocks
    assert counts["GlobalAveragePool"] == blocks + 1  # one per SE + the head
    # SiLU (Sigmoid + Mul) after stem, last conv, expand, depthwise and inside SE; SE's scale Sigmoid, x * scale
    silu = 2 + (blocks - 1) + 2 * blocks
    assert counts["Sigmoid"] == silu + blocks == 65 and counts["Mul"] == silu + blocks
    # residual where stride 1 and in == out: the repeats of stages 2-6 (1 + 1 + 2 + 2 + 3)
    assert counts["Add"] == 9
    assert counts["Gemm"] == 1


def test_efficientnet_widths(effnet_32: onnx.ModelProto) -> None:
    # features.2.0: 16 -> 24, expand 6 * 16 = 96, SE squeeze max(1, 16 // 4) = 4
    assert initializer(effnet_32, "features.2.0.block.0.0.weight").shape == (96, 16, 1, 1)
    assert initializer(effnet_32, "features.2.0.block.1.0.weight").shape == (96, 1, 3, 3)
    assert initializer(effnet_32, "features.2.0.block.2.fc1.weight").shape == (4, 96, 1, 1)
    # features.6.1: 192 -> 192, 5x5 depthwise on 1152, squeeze 48
    assert initializer(effnet_32, "features.6.1.block.1.0.weight").shape == (1152, 1, 5, 5)
    assert initializer(effnet_32, "features.6.1.block.2.fc2.weight").shape == (1152, 48, 1, 1)
    assert initializer(effnet_32, "features.8.0.weight").shape == (1280, 320, 1, 1)


def test_efficientnet_shapes_at_224() -> None:
    shapes = inferred_shapes(zoo.build("efficientnet_b0"))
    assert shapes["features.1.0.block.2.1_out"] == [1, 16, 112, 112]
    assert shapes["features.3.1.add_out"] == [1, 40, 28, 28]
    assert shapes["features.7.0.block.3.1_out"] == [1, 320, 7, 7]
    assert shapes["output"] == [1, 1000]


def test_efficientnet_parameter_count_matches_torchvision() -> None:
    assert zoo.parameter_count(zoo.build("efficientnet_b0")) == 5_288_548  # torchvision efficientnet_b0()


def test_efficientnet_runs(effnet_32: onnx.ModelProto) -> None:
    onnx.checker.check_model(effnet_32, full_check=True)
    (logits,) = run(effnet_32)
    assert logits.shape == (1, 1000) and logits.dtype == np.float32
    assert_sane(logits)


def test_efficientnet_workload(effnet_32: onnx.ModelProto, tmp_path: Path) -> None:
    doc = inspect_json(effnet_32, tmp_path)
    capable = [op for op in doc["operators"] if op["cim_capable"]]
    assert len(capable) == 82
    # SiLU pairs and the SE Sigmoid fuse into their Conv
    assert all(len(op["nodes"]) in (1, 2, 3) for op in capable)
    assert sorted({op["op_type"] for op in doc["operators"] if not op["cim_capable"]}) == [
        "Add", "Flatten", "GlobalAveragePool", "Mul"]
    # 82 GEMMs + 17 GlobalAveragePool + 16 SE Muls + 9 Adds + Flatten
    assert doc["totals"]["operators"] == 82 + 17 + 16 + 9 + 1 == 125
    # classifier 1280 -> 1000: ceil(1000/256) * ceil(1280/256) = 4 * 5
    assert {op["name"]: op for op in capable}["classifier.1"]["crossbars"] == 20
    assert (doc["totals"]["operators"], doc["totals"]["crossbars"]) == zoo.workload_size("efficientnet_b0") == (125, 240)
