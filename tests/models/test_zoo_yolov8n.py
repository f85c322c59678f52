"""YOLOv8n builder: the v8 yaml at depth 0.33 / width 0.25, C2f, SPPF, anchor-free Detect with DFL decode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from _zoo_helpers import assert_sane, every_conv_feeds_batchnorm, inferred_shapes, initializer, inspect_json, op_counts, run

from cimsplit.models import zoo

PLAIN_CONVS = {f"model.22.cv{b}.{i}.2" for b in (2, 3) for i in range(3)} | {"model.22.dfl.conv"}


@pytest.fixture(scope="module")
def yolo_64() -> onnx.ModelProto:
    return zoo.build("yolov8n", image_size=64)


def c2f_convs(n: int) -> int:
    return 2 + 2 * n  # cv1, cv2 + (cv1, cv2) per Bottleneck


def test_yolov8n_conv_count_from_the_yaml(yolo_64: onnx.ModelProto) -> None:
    # yolov8.yaml repeats 3, 6, 6, 3 (backbone C2f) and 3 (head C2f) at depth 0.33 -> 1, 2, 2, 1 and 1.
    backbone = 5 + c2f_convs(1) + c2f_convs(2) + c2f_convs(2) + c2f_convs(1) + 2  # 5 Conv, 4 C2f, SPPF
    head = 2 + 4 * c2f_convs(1)  # Conv 16, 19 and C2f 12, 15, 18, 21
    detect = 3 * (2 + 2) + 3 * 2 + 1  # per level 2 Conv modules in cv2 and cv3, 2 plain biased Conv2d; DFL
    assert (backbone, head, detect) == (27, 18, 19)
    counts = op_counts(yolo_64)
    assert counts["Conv"] == backbone + head + detect == 64
    assert counts["BatchNormalization"] == 64 - 7 == 57
    assert counts["Sigmoid"] == 57 + 1 and counts["Mul"] == 57 + 1  # SiLUs; class sigmoid; box * strides
    assert counts["Add"] == (1 + 2 + 2 + 1) + 2  # backbone Bottleneck shortcuts; x2y2 and x1y1 + x2y2
    assert counts["Split"] == 8 + 1 + 1  # one chunk per C2f, box/cls, dist2bbox lt/rb
    assert counts["MaxPool"] == 3 and counts["Resize"] == 2 and counts["Softmax"] == 1
    assert counts["Concat"] == 8 + 1 + 4 + 3 + 1 + 1 + 1  # C2f, SPPF, head, per level, levels, dist2bbox, output
    assert every_conv_feeds_batchnorm(yolo_64, except_names=PLAIN_CONVS)


def test_yolov8n_channels_follow_width_025(yolo_64: onnx.ModelProto) -> None:
    assert initializer(yolo_64, "model.0.conv.weight").shape == (16, 3, 3, 3)
    assert initializer(yolo_64, "model.2.cv2.conv.weight").shape == (32, (2 + 1) * 16, 1, 1)  # C2f cat of 2 + n halves
    assert initializer(yolo_64, "model.12.cv1.conv.weight").shape == (128, 384, 1, 1)  # cat of 256 (up) + 128 (P4)
    assert initializer(yolo_64, "model.9.cv2.conv.weight").shape == (256, 4 * 128, 1, 1)
    for i, c_in in enumerate((64, 128, 256)):
        assert initializer(yolo_64, f"model.22.cv2.{i}.0.conv.weight").shape == (64, c_in, 3, 3)  # c2 = 64
        assert initializer(yolo_64, f"model.22.cv3.{i}.0.conv.weight").shape == (80, c_in, 3, 3)  # c3 = 80
        assert initializer(yolo_64, f"model.22.cv2.{i}.2.weight").shape == (64, 64, 1, 1)  # 4 * reg_max
    assert initializer(yolo_64, "model.22.dfl.conv.weight").ravel().tolist() == list(range(16))


def test_yolov8n_anchors_and_strides(yolo_64: onnx.ModelProto) -> None:
    # 64 px: 8x8 + 4x4 + 2x2 = 84 anchor points at cell centres (offset 0.5), in grid units
    anchors = initializer(yolo_64, "model.22.anchors")
    strides = initializer(yolo_64, "model.22.strides")
    assert anchors.shape == (1, 2, 84) and strides.shape == (1, 84)
    assert anchors[0, :, 0].tolist() == [0.5, 0.5] and anchors[0, :, 1].tolist() == [1.5, 0.5]  # x first
    assert anchors[0, :, 64 + 4].tolist() == [0.5, 1.5]  # level 1, row 1, column 0
    assert strides[0, [0, 63, 64, 79, 80, 83]].tolist() == [8, 8, 16, 16, 32, 32]


def test_yolov8n_output_at_640() -> None:
    shapes = inferred_shapes(zoo.build("yolov8n"))
    assert shapes["model.22.concat.0_out"] == [1, 144, 80, 80]  # 64 box + 80 class logits, stride 8
    assert shapes["model.22.dfl.softmax_out"] == [1, 16, 4, 8400]
    assert shapes["output0"] == [1, 84, 80 * 80 + 40 * 40 + 20 * 20]


def test_yolov8n_parameter_count_matches_ultralytics() -> None:
    # "YOLOv8n summary: 225 layers, 3157200 parameters, 3157184 gradients" (the 16 without gradient: DFL).
    assert zoo.parameter_count(zoo.build("yolov8n")) == 3_157_200


def test_yolov8n_runs_and_decodes(yolo_64: onnx.ModelProto) -> None:
    onnx.checker.check_model(yolo_64, full_check=True)
    (out,) = run(yolo_64)
    assert out.shape == (1, 84, 84) and out.dtype == np.float32
    assert_sane(out)
    assert ((out[:, 4:] > 0) & (out[:, 4:] < 1)).all()  # class scores through a sigmoid
    # DFL gives distances in [0, 15] grid cells per side: w, h in [0, 30] cells, centres within 7.5 cells of the anchor
    strides = initializer(yolo_64, "model.22.strides")[0]
    assert (out[0, 2:4] >= 0).all() and (out[0, 2:4] <= 30 * strides + 1e-3).all()


def test_yolov8n_workload(yolo_64: onnx.ModelProto, tmp_path: Path) -> None:
    doc = inspect_json(yolo_64, tmp_path)
    capable = [op for op in doc["operators"] if op["cim_capable"]]
    assert len(capable) == 64 and {op["op_type"] for op in capable} == {"Conv"}
    dfl = next(op for op in capable if op["name"].startswith("model.22.dfl.conv"))
    # DFL 1x1 conv 16 -> 1 over 4 sides x 84 anchors: M = 1, N = 16, N_mvm = 4 * 84, one crossbar
    assert (dfl["m"], dfl["n"], dfl["n_mvm"], dfl["crossbars"]) == (1, 16, 336, 1)
    assert (doc["totals"]["operators"], doc["totals"]["crossbars"]) == zoo.workload_size("yolov8n") == (118, 160)
