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
from cimsplit.models.efficientnet import build_efficientnet_b0
from cimsplit.models.googlenet import build_googlenet
from cimsplit.models.graph_builder import EMBEDDINGS_KEY
from cimsplit.models.mobilenet_v2 import build_mobilenet_v2
from cimsplit.models.mobilenet_v3 import build_mobilenet_v3_small
from cimsplit.models.resnet import build_resnet18, build_resnet50
from cimsplit.models.vit import build_vit_tiny
from cimsplit.models.yolov5 import build_yolov5n
from cimsplit.models.yolov8 import build_yolov8n

__all__ = ["NAMES", "build", "describe", "default_image_size", "parameter_count", "workload_size"]


@dataclass(frozen=True)
class _Entry:
    builder: Callable[..., onnx.ModelProto]
    image_size: int
    size_multiple: int  # the input side must be a multiple of this (1 = any)
    description: str
    operators: int  # workload operators of the float model, as `cimsplit inspect` counts them
    crossbars: int  # crossbars of its CIM-capable operators at 256x256 (eq. 1)


_ZOO: dict[str, _Entry] = {
    "resnet18": _Entry(
        build_resnet18, 224, 1,
        "ResNet-18 (torchvision): 20 Conv + BN, BasicBlocks [2,2,2,2], Gemm 512->1000; input 'input' Nx3x224x224",
        operators=40, crossbars=201,
    ),
    "resnet50": _Entry(
        build_resnet50, 224, 1,
        "ResNet-50 (torchvision v1.5): 53 Conv + BN, Bottlenecks [3,4,6,3], Gemm 2048->1000; input 'input' Nx3x224x224",
        operators=89, crossbars=422,
    ),
    "mobilenet_v2": _Entry(
        build_mobilenet_v2, 224, 1,
        "MobileNetV2 1.0 (torchvision): 52 Conv (17 depthwise) + BN, ReLU6 as Clip, Gemm 1280->1000; input 'input' Nx3x224x224",
        operators=65, crossbars=142,
    ),
    "yolov5n": _Entry(
        build_yolov5n, 640, 32,
        "YOLOv5n v6+ (ultralytics): 60 Conv + BN + SiLU, C3/SPPF, export-style Detect at strides 8/16/32; input 'images' Nx3x640x640",
        operators=122, crossbars=95,
    ),
    "yolov8n": _Entry(
        build_yolov8n, 640, 32,
        "YOLOv8n (ultralytics): 64 Conv (57 + BN + SiLU), C2f/SPPF, anchor-free Detect with DFL decode; input 'images' Nx3x640x640",
        operators=118, crossbars=160,
    ),
    "googlenet": _Entry(
        build_googlenet, 224, 1,
        "GoogLeNet / Inception v1 (torchvision, no aux heads): 57 Conv + BN + ReLU, 9 Inception blocks, Gemm 1024->1000; input 'input' Nx3x224x224",
        operators=82, crossbars=195,
    ),
    "efficientnet_b0": _Entry(
        build_efficientnet_b0, 224, 1,
        "EfficientNet-B0 (torchvision): 16 MBConv with squeeze-excitation, SiLU, 81 Conv (16 depthwise), Gemm 1280->1000; input 'input' Nx3x224x224",
        operators=125, crossbars=240,
    ),
    "mobilenet_v3_small": _Entry(
        build_mobilenet_v3_small, 224, 1,
        "MobileNetV3-Small (torchvision): 11 bnecks, 9 with SE, Hardswish, 52 Conv (11 depthwise), Gemm 576->1024->1000; input 'input' Nx3x224x224",
        operators=80, crossbars=107,
    ),
    "vit_tiny": _Entry(
        build_vit_tiny, 224, 16,
        "ViT-Tiny/16 (timm): patch Conv, 12 x (LayerNorm, 3-head attention, GELU MLP), 48 weight MatMuls, Gemm 192->1000; input 'input' Nx3x224x224",
        operators=320, crossbars=127,
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


def workload_size(name: str) -> tuple[int, int]:
    """(operators, crossbars at 256x256) of the float model, as ``cimsplit inspect`` reports them.

    Both depend on the weights' shapes only, not on the image size or batch;
    tests check them against the front end.
    """
    entry = _entry(name)
    return entry.operators, entry.crossbars


def default_image_size(name: str) -> int:
    """Input side used when ``image_size`` is None (224 for classifiers, 640 for YOLO)."""
    return _entry(name).image_size


def _positive_int(value: object, what: str, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise CimsplitError(f"{what} must be a positive integer, got {value!r}", hint=f"pass {flag} N with N >= 1")
    return int(value)


def build(
    name: str, batch: int = 1, image_size: int | None = None, int8: bool = False, seed: int = 0,
    dynamic_batch: bool = False, activations: str = "int8", per_channel: bool = True,
) -> onnx.ModelProto:
    """Build zoo model ``name`` for ``batch`` images of ``image_size`` x ``image_size``.

    ``dynamic_batch`` writes the symbolic dim ``batch`` instead of the number
    (``batch`` then only sizes int8 calibration, which uses batch 1).
    ``int8`` quantizes with ``activations`` ``"int8"`` (S8S8) or ``"uint8"``
    (U8S8) and per-channel or per-tensor weight scales (:mod:`.quantize`).
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
    if activations not in ("int8", "uint8"):
        raise CimsplitError(f"activations must be int8 or uint8, got {activations!r}", hint="pass --activations uint8|int8")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise CimsplitError(f"seed must be a non-negative integer, got {seed!r}", hint="pass --seed N with N >= 0")
    model = entry.builder(batch=batch, image_size=size, dynamic_batch=dynamic_batch, seed=int(seed))
    if int8:
        from cimsplit.models.quantize import quantize_qdq  # loads onnxruntime's quantizer only when asked

        model = quantize_qdq(model, seed=int(seed), activations=activations, per_channel=per_channel)
    return model


def parameter_count(model: onnx.ModelProto) -> int:
    """Learned parameters as PyTorch counts them.

    Conv/Gemm/MatMul weights and biases, BN and LayerNorm scale and shift,
    the bias ``Add`` right after a weight MatMul (nn.Linear on a 3-d input),
    and the learned tensors the builder lists in the model's metadata
    (``EMBEDDINGS_KEY``: ViT's class token and position embedding). BN
    running statistics are buffers, not parameters; constants such as Clip
    bounds, Reshape shapes or YOLO grids are not parameters either.
    Quantized weights are counted through their DequantizeLinear. With this
    rule ResNet-18 has torchvision's 11,689,512 parameters.
    """
    sizes = {t.name: int(np.prod(t.dims, dtype=np.int64)) for t in model.graph.initializer}
    dequantized = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}

    def initializer_of(name: str) -> str | None:
        name = dequantized.get(name, name)
        return name if name in sizes else None

    counted: set[str] = set()
    weight_matmuls: set[str] = set()
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm", "MatMul", "BatchNormalization", "LayerNormalization"):
            learned = {n for n in map(initializer_of, node.input[1:3]) if n is not None}
            counted |= learned
            if node.op_type == "MatMul" and learned:
                weight_matmuls.add(node.output[0])
    for node in model.graph.node:
        if node.op_type == "Add" and node.input[0] in weight_matmuls and initializer_of(node.input[1]):
            counted.add(initializer_of(node.input[1]))
    listed = next((p.value for p in model.metadata_props if p.key == EMBEDDINGS_KEY), "")
    counted |= {n for n in listed.split(",") if n in sizes}
    return sum(sizes[n] for n in counted)
