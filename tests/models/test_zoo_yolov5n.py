"""YOLOv5n builder: the v6.0 yaml at depth 0.33 / width 0.25, export-style Detect head."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _zoo_helpers import assert_sane, every_conv_feeds_batchnorm, inferred_shapes, initializer, op_counts, run

from cimsplit.models import zoo

DETECT_CONVS = {"model.24.m.0", "model.24.m.1", "model.24.m.2"}


@pytest.fixture(scope="module")
def yolo_128() -> onnx.ModelProto:
    return zoo.build("yolov5n", image_size=128)


def c3_convs(n: int) -> int:
    return 3 + 2 * n  # cv1, cv2, cv3 + (cv1, cv2) per Bottleneck


def test_yolov5n_conv_count_from_the_yaml(yolo_128: onnx.ModelProto) -> None:
    # yolov5n.yaml repeats 3, 6, 9, 3 (backbone C3) and 3 (head C3) at depth 0.33 -> 1, 2, 3, 1 and 1.
    backbone = 5 + c3_convs(1) + c3_convs(2) + c3_convs(3) + c3_convs(1) + 2  # 5 Conv, 4 C3, SPPF cv1+cv2
    head = 4 + 4 * c3_convs(1)  # Conv 10, 14, 18, 21 and C3 13, 17, 20, 23
    assert backbone == 33 and head == 24
    counts = op_counts(yolo_128)
    assert counts["Conv"] == backbone + head + 3 == 60
    # Every Conv module is Conv + BN + SiLU (Sigmoid, Mul); the 3 Detect convs are plain, biased.
    assert counts["BatchNormalization"] == 57
    assert counts["Sigmoid"] == 57 + 3  # + one sigmoid per Detect level
    assert counts["Mul"] == 57 + 3 * 4  # SiLU muls + xy*2, xy*stride, wh*2, wh*anchor per level
    assert counts["Add"] == (1 + 2 + 3 + 1) + 3  # backbone Bottleneck shortcuts + xy + grid per level
    assert counts["MaxPool"] == 3  # SPPF chains MaxPool(5) three times
    assert counts["Resize"] == 2
    assert counts["Concat"] == 4 + 4 + 1 + 4 + 3 + 1  # C3s 8, SPPF 1, head 4, per-level 3, final 1
    assert counts["Reshape"] == 6 and counts["Transpose"] == 3 and counts["Split"] == 3 and counts["Pow"] == 3
    assert every_conv_feeds_batchnorm(yolo_128, except_names=DETECT_CONVS)


def test_yolov5n_channels_follow_width_025(yolo_128: onnx.ModelProto) -> None:
    assert initializer(yolo_128, "model.0.conv.weight").shape == (16, 3, 6, 6)  # 64 * 0.25, 6x6/2 p2
    assert initializer(yolo_128, "model.7.conv.weight").shape == (256, 128, 3, 3)  # 1024 * 0.25
    assert initializer(yolo_128, "model.9.cv2.conv.weight").shape == (256, 4 * 128, 1, 1)  # SPPF cat of 4
    assert initializer(yolo_128, "model.13.cv1.conv.weight").shape == (64, 256, 1, 1)  # C3(256 -> 128), c_ = 64
    for i, c_in in enumerate((64, 128, 256)):
        assert initializer(yolo_128, f"model.24.m.{i}.weight").shape == (255, c_in, 1, 1)  # 3 * (80 + 5)
        assert initializer(yolo_128, f"model.24.m.{i}.bias").shape == (255,)


def test_yolov5n_detect_levels_at_640() -> None:
    model = zoo.build("yolov5n")
    shapes = inferred_shapes(model)
    assert shapes["model.24.m.0_out"] == [1, 255, 80, 80]  # stride 8
    assert shapes["model.24.m.1_out"] == [1, 255, 40, 40]  # stride 16
    assert shapes["model.24.m.2_out"] == [1, 255, 20, 20]  # stride 32
    assert shapes["model.24.m.0.permute_out"] == [1, 3, 80, 80, 85]
    assert shapes["output0"] == [1, 3 * (80 * 80 + 40 * 40 + 20 * 20), 85]  # 25200 boxes
    assert model.graph.input[0].name == "images"


def test_yolov5n_decode_grids(yolo_128: onnx.ModelProto) -> None:
    # Level 2 at 128 px: 4x4 cells; grid = (x, y) - 0.5, anchors in pixels (116,90 156,198 373,326).
    grid = initializer(yolo_128, "model.24.m.2.grid")
    assert grid.shape == (1, 3, 4, 4, 2)
    assert grid[0, 0, 1, 3].tolist() == [3 - 0.5, 1 - 0.5]  # row y=1, column x=3
    anchors = initializer(yolo_128, "model.24.m.2.anchor_grid")
    assert anchors[0, :, 0, 0].tolist() == [[116, 90], [156, 198], [373, 326]]


def test_yolov5n_parameter_count_matches_ultralytics(yolo_128: onnx.ModelProto) -> None:
    # "YOLOv5n summary: 214 layers, 1872157 parameters" (ultralytics model.info(), unfused).
    assert zoo.parameter_count(yolo_128) == 1_872_157


def test_yolov5n_is_valid_and_runs(yolo_128: onnx.ModelProto) -> None:
    onnx.checker.check_model(yolo_128, full_check=True)
    (boxes,) = run(yolo_128)
    assert boxes.shape == (1, 3 * (16 * 16 + 8 * 8 + 4 * 4), 85)
    assert boxes.dtype == np.float32
    assert_sane(boxes)
    # Objectness and class scores went through a sigmoid; centres lie within the image (+- a cell).
    assert ((boxes[..., 4:] > 0) & (boxes[..., 4:] < 1)).all()
    assert (boxes[..., :2] > -32).all() and (boxes[..., :2] < 128 + 32).all()
