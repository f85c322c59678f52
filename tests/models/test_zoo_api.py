"""zoo.build / describe / NAMES: determinism, batch and size handling, refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from _zoo_helpers import initializer, inspect_json, run

from cimsplit.errors import CimsplitError
from cimsplit.models import zoo


def test_names_and_descriptions() -> None:
    assert zoo.NAMES == (
        "resnet18", "resnet50", "mobilenet_v2", "yolov5n",
        "yolov8n", "googlenet", "efficientnet_b0", "mobilenet_v3_small", "vit_tiny",
    )
    for name in zoo.NAMES:
        text = zoo.describe(name)
        assert text and "\n" not in text
    assert zoo.default_image_size("resnet18") == 224
    assert zoo.default_image_size("yolov5n") == zoo.default_image_size("yolov8n") == 640
    assert zoo.default_image_size("vit_tiny") == 224


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "yolov5n", "yolov8n", "vit_tiny"])
def test_same_seed_same_bytes(name: str) -> None:
    size = 128 if name.startswith("yolo") else 64
    first = zoo.build(name, image_size=size, seed=3).SerializeToString()
    assert zoo.build(name, image_size=size, seed=3).SerializeToString() == first


def test_other_seed_other_weights_same_structure() -> None:
    a = zoo.build("mobilenet_v2", image_size=64, seed=0)
    b = zoo.build("mobilenet_v2", image_size=64, seed=1)
    assert [(n.name, n.op_type) for n in a.graph.node] == [(n.name, n.op_type) for n in b.graph.node]
    assert not np.array_equal(initializer(a, "features.0.0.weight"), initializer(b, "features.0.0.weight"))


@pytest.mark.parametrize("name", zoo.NAMES)
def test_exporter_conventions(name: str) -> None:
    size = 64 if name.startswith("yolo") else 32
    model = zoo.build(name, image_size=size)
    names = [n.name for n in model.graph.node]
    assert all(names) and len(set(names)) == len(names)  # unique, non-empty node names
    assert model.opset_import[0].domain == "" and model.opset_import[0].version == 17
    assert model.ir_version == 8
    assert {t.data_type for t in model.graph.initializer} <= {onnx.TensorProto.FLOAT, onnx.TensorProto.INT64}
    assert model.graph.input[0].name == ("images" if name.startswith("yolo") else "input")
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, size, size]
    assert all(o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for o in model.graph.output)


def test_batch_and_dynamic_batch() -> None:
    fixed = zoo.build("yolov5n", batch=2, image_size=64)
    assert fixed.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2
    (boxes,) = run(fixed, batch=2)
    assert boxes.shape == (2, 3 * (8 * 8 + 4 * 4 + 2 * 2), 85)

    dynamic = zoo.build("yolov5n", image_size=64, dynamic_batch=True)
    onnx.checker.check_model(dynamic, full_check=True)
    assert dynamic.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert dynamic.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    (boxes3,) = run(dynamic, batch=3)
    assert boxes3.shape == (3, 3 * (8 * 8 + 4 * 4 + 2 * 2), 85)  # 3 anchors * (8x8 + 4x4 + 2x2 cells) at 64 px


def test_unknown_name_lists_the_zoo() -> None:
    with pytest.raises(CimsplitError) as err:
        zoo.build("resnet101")
    assert "resnet101" in str(err.value)
    assert all(name in err.value.one_line() for name in zoo.NAMES)
    with pytest.raises(CimsplitError):
        zoo.describe("vgg16")


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"name": "resnet18", "batch": 0}, "batch"),
        ({"name": "resnet18", "batch": -2}, "batch"),
        ({"name": "resnet18", "batch": True}, "batch"),
        ({"name": "resnet18", "image_size": 0}, "image size"),
        ({"name": "mobilenet_v2", "image_size": -224}, "image size"),
        ({"name": "yolov5n", "image_size": 100}, "divisible by 32"),
        ({"name": "resnet18", "seed": -1}, "seed"),
    ],
)
def test_bad_sizes_are_refused(kwargs: dict, word: str) -> None:
    with pytest.raises(CimsplitError, match=word):
        zoo.build(**kwargs)


@pytest.mark.slow  # ResNet-18's 40 and 201 are also hand-checked in tests/compiler/test_frontend_zoo.py
@pytest.mark.parametrize("name", zoo.NAMES[:4])
def test_workload_size_of_the_first_four(name: str, tmp_path: Path) -> None:
    """``zoo --list``'s figures are the front end's (the newer models check theirs in their own files)."""
    doc = inspect_json(zoo.build(name, image_size=64 if name.startswith("yolo") else 32), tmp_path)
    assert (doc["totals"]["operators"], doc["totals"]["crossbars"]) == zoo.workload_size(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.NAMES)
def test_workload_size_does_not_depend_on_the_image_size(name: str, tmp_path: Path) -> None:
    doc = inspect_json(zoo.build(name), tmp_path)  # the default (full) size; the fast tests use 32 or 64 px
    assert (doc["totals"]["operators"], doc["totals"]["crossbars"]) == zoo.workload_size(name)
