"""The model zoo: name -> ONNX model with deterministic random weights.

``build("resnet18")`` returns a float32 opset-17 model as ``torch.onnx.export``
would write it (Conv + BatchNormalization, weights as initializers);
``int8=True`` quantizes it to QDQ with onnxruntime (see :mod:`.quantize`).
Same arguments, same bytes: the weights come from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from cimsplit.errors import CimsplitError
from cimsplit.models.mobilenet_v2 import build_mobilenet_v2
from cimsplit.models.resnet import build_resnet18, build_resnet50
from cimsplit.models.yolov5 import build_yolov5n

__all__ = ["NAMES", "build", "describe", "default_image_size", "parameter_count"]


@dataclass(frozen=True)
class _Entry:
    builder: Callable[..., onnx.ModelProto]
    image_size: int
    size_multiple: int  # the input side must be a multiple of this (1 = any)
    description: str


_ZOO: dict[str, _Entry] = {
    "resnet18": _Entry(
        build_resnet18, 224, 1,
        "ResNet-18 (torchvision): 20 Conv + BN, BasicBlocks [2,2,2,2], Gemm 512->1000; input 'input' Nx3x224x224",
    ),
    "resnet50": _Entry(
        build_resnet50, 224, 1,
        "ResNet-50 (torchvision v1.5): 53 Conv + BN, Bottlenecks [3,4,6,3], Gemm 2048->1000; input 'input' Nx3x224x224",
    ),
    "mobilenet_v2": _Entry(
        build_mobilenet_v2, 224, 1,
        "MobileNetV2 1.0 (torchvision): 52 Conv (17 depthwise) + BN, ReLU6 as Clip, Gemm 1280->1000; input 'input' Nx3x224x224",
    ),
    "yolov5n": _Entry(
        build_yolov5n, 640, 32,
        "YOLOv5n v6+ (ultralytics): 60 Conv + BN + SiLU, C3/SPPF, export-style Detect at strides 8/16/32; input 'images' Nx3x640x640",
    ),
}

NAMES: tuple[str, ...] = tuple(_ZOO)


def _entry(name: str) -> _Entry:
    try:
        return _ZOO[name]
    except (KeyError, TypeError):
        raise CimsplitError(f"unknown zoo model {name!r}", hint=f"known models: {', '.join(NAMES)}") from None


def describe(name: str) -> str:
    """One-line description of a zoo model."""
    return _entry(name).description


def default_image_size(name: str) -> int:
    """Input side used when ``image_size`` is None (224 for classifiers, 640 for YOLO)."""
    return _entry(name).image_size


def _positive_int(value: object, what: str, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise CimsplitError(f"{what} must be a positive integer, got {value!r}", hint=f"pass {flag} N with N >= 1")
    return int(value)


def build(
    name: str, batch: int = 1, image_size: int | None = None, int8: bool = False, seed: int = 0,
    dynamic_batch: bool = False,
) -> onnx.ModelProto:
    """Build zoo model ``name`` for ``batch`` images of ``image_size`` x ``image_size``.

    ``dynamic_batch`` writes the symbolic dim ``batch`` instead of the number
    (``batch`` then only sizes int8 calibration, which uses batch 1).
    Raises CimsplitError for an unknown name or a bad size.
    """
    entry = _entry(name)
    batch = _positive_int(batch, "batch", "--batch")
    size = entry.image_size if image_size is None else _positive_int(image_size, "image size", "--image-size")
    if size % entry.size_multiple:
        raise CimsplitError(
            f"{name} needs an image size divisible by {entry.size_multiple}, got {size}",
            hint=f"try --image-size {max(entry.size_multiple, size // entry.size_multiple * entry.size_multiple)}",
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise CimsplitError(f"seed must be a non-negative integer, got {seed!r}", hint="pass --seed N with N >= 0")
    model = entry.builder(batch=batch, image_size=size, dynamic_batch=dynamic_batch, seed=int(seed))
    if int8:
        from cimsplit.models.quantize import quantize_qdq  # loads onnxruntime's quantizer only when asked

        model = quantize_qdq(model, seed=int(seed))
    return model


def parameter_count(model: onnx.ModelProto) -> int:
    """Learned parameters as PyTorch counts them: Conv/Gemm weights and biases, BN scale and shift.

    BN running statistics are buffers, not parameters; constants such as
    Clip bounds, Reshape shapes or YOLO grids are not parameters either.
    Quantized weights are counted through their DequantizeLinear. With this
    rule ResNet-18 has torchvision's 11,689,512 parameters.
    """
    sizes = {t.name: int(np.prod(t.dims, dtype=np.int64)) for t in model.graph.initializer}
    dequantized = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    counted: set[str] = set()
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm", "MatMul", "BatchNormalization"):
            for name in node.input[1:3]:
                name = dequantized.get(name, name)
                if name in sizes:
                    counted.add(name)
    return sum(sizes[n] for n in counted)
