"""MobileNetV3-Small builder: torchvision's table, Hardswish, squeeze-and-excitation with Hardsigmoid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from _zoo_helpers import assert_sane, conv_groups, inferred_shapes, initializer, inspect_json, op_counts, run

from cimsplit.models import zoo
from cimsplit.models.mobilenet_v3 import BLOCK_SETTING


@pytest.fixture(scope="module")
def mnv3_32() -> onnx.ModelProto:
    return zoo.build("mobilenet_v3_small", image_size=32)


def test_mobilenet_v3_structure(mnv3_32: onnx.ModelProto) -> None:
    se_blocks = sum(1 for s in BLOCK_SETTING if s[4])
    expand_blocks = sum(1 for s in BLOCK_SETTING if s[2] != s[0])
    assert (len(BLOCK_SETTING), se_blocks, expand_blocks) == (11, 9, 10)
    counts = op_counts(mnv3_32)
    # stem + (expand?) + depthwise + project per block + last conv, and SE fc1 + fc2
    assert counts["Conv"] == 1 + expand_blocks + 2 * 11 + 1 + 2 * se_blocks == 52
    assert counts["BatchNormalization"] == 52 - 2 * se_blocks  # SE convs are biased, no BN
    assert sum(1 for g in conv_groups(mnv3_32) if g > 1) == 11  # one depthwise per block
    # Hardswish: stem, last conv, classifier, and expand + depthwise of the 8 "HS" blocks
    assert counts["HardSwish"] == 3 + 2 * 8
    assert counts["HardSigmoid"] == se_blocks and counts["Mul"] == se_blocks  # SE scale and x * scale
    assert counts["Relu"] == 1 + 2 * 2 + se_blocks == 14  # "RE" blocks 1-3: depthwise (+ expand in 2, 3); one per SE
    assert counts["Add"] == 6  # stride 1, in == out: blocks 3, 5, 6, 8, 10, 11
    assert counts["Gemm"] == 2


def test_mobilenet_v3_se_widths(mnv3_32: onnx.ModelProto) -> None:
    # squeeze = make_divisible(expanded // 4, 8): 16 -> 8, 96 -> 24, 240 -> 64, 120 -> 32, 144 -> 40, 288 -> 72, 576 -> 144
    assert initializer(mnv3_32, "features.1.block.1.fc1.weight").shape == (8, 16, 1, 1)
    assert initializer(mnv3_32, "features.5.block.2.fc1.weight").shape == (64, 240, 1, 1)
    assert initializer(mnv3_32, "features.7.block.2.fc2.weight").shape == (120, 32, 1, 1)
    assert initializer(mnv3_32, "features.11.block.2.fc1.weight").shape == (144, 576, 1, 1)
    hsig = next(n for n in mnv3_32.graph.node if n.op_type == "HardSigmoid")
    assert {a.name: round(a.f, 6) for a in hsig.attribute} == {"alpha": round(1 / 6, 6), "beta": 0.5}


def test_mobilenet_v3_shapes_at_224() -> None:
    shapes = inferred_shapes(zoo.build("mobilenet_v3_small"))
    assert shapes["features.0.2_out"] == [1, 16, 112, 112]
    assert shapes["features.1.block.2.1_out"] == [1, 16, 56, 56]
    assert shapes["features.11.add_out"] == [1, 96, 7, 7]  # strides 2, 2, 2, 2, 2 -> 224 / 32
    assert shapes["features.12.2_out"] == [1, 576, 7, 7]
    assert shapes["output"] == [1, 1000]


def test_mobilenet_v3_parameter_count_matches_torchvision() -> None:
    assert zoo.parameter_count(zoo.build("mobilenet_v3_small")) == 2_542_856  # torchvision mobilenet_v3_small()


def test_mobilenet_v3_runs(mnv3_32: onnx.ModelProto) -> None:
    onnx.checker.check_model(mnv3_32, full_check=True)
    (logits,) = run(mnv3_32)
    assert logits.shape == (1, 1000) and logits.dtype == np.float32
    assert_sane(logits)


def test_mobilenet_v3_workload(mnv3_32: onnx.ModelProto, tmp_path: Path) -> None:
    doc = inspect_json(mnv3_32, tmp_path)
    capable = [op for op in doc["operators"] if op["cim_capable"]]
    assert len(capable) == 52 + 2
    # HardSwish, Relu and the SE HardSigmoid fuse into their Conv; SE's x * scale stays on the host.
    assert sorted({op["op_type"] for op in doc["operators"] if not op["cim_capable"]}) == [
        "Add", "Flatten", "GlobalAveragePool", "Mul"]
    # 54 GEMMs + 10 GlobalAveragePool (9 SE + head) + 9 Mul + 6 Add + Flatten; the classifier's Hardswish fuses
    assert doc["totals"]["operators"] == 54 + 10 + 9 + 6 + 1 == 80
    # classifier.0 576 -> 1024: ceil(1024/256) * ceil(576/256) = 4 * 3; classifier.3: 4 * 4
    by_name = {op["name"]: op for op in capable}
    assert (by_name["classifier.0"]["crossbars"], by_name["classifier.3"]["crossbars"]) == (12, 16)
    assert (doc["totals"]["operators"], doc["totals"]["crossbars"]) == zoo.workload_size("mobilenet_v3_small") == (80, 107)
