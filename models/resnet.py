"""ResNet-18 and ResNet-50 as torchvision defines them (ResNet v1.5), in plain ONNX.

Reference: ``torchvision.models.resnet`` (He et al., "Deep Residual Learning
for Image Recognition", CVPR 2016, with the stride on the 3x3 conv of the
bottleneck, i.e. v1.5):

- stem: Conv 7x7/2 pad 3 (3 -> 64, no bias) + BN + ReLU + MaxPool 3x3/2 pad 1;
- four stages of 64, 128, 256, 512 planes, strides 1, 2, 2, 2, with
  [2, 2, 2, 2] BasicBlocks (ResNet-18, expansion 1) or [3, 4, 6, 3]
  Bottlenecks (ResNet-50, expansion 4); the first block of a stage whose
  stride or width changes has a downsample branch Conv 1x1/s + BN;
- GlobalAveragePool, Flatten(axis=1), Gemm(512*expansion -> 1000, transB=1).

Node names follow the torchvision module paths (``layer2.0.downsample.0``).
Conv counts: ResNet-18 = 1 + 8*2 + 3 = 20, ResNet-50 = 1 + 16*3 + 4 = 53.
"""

from __future__ import annotations

import onnx

from cimsplit.models.graph_builder import GraphBuilder, float_output, image_input

__all__ = ["build_resnet18", "build_resnet50"]

NUM_CLASSES = 1000
# The last BN of each residual branch gets a smaller scale so that the sum
# x + f(x) does not double the activation variance at every block.
RESIDUAL_BN_SCALE = 0.3


def _basic_block(g: GraphBuilder, x: str, prefix: str, c_in: int, planes: int, stride: int) -> str:
    out = g.conv(f"{prefix}.conv1", x, c_in, planes, 3, stride)
    out = g.batchnorm(f"{prefix}.bn1", out, planes)
    out = g.op("Relu", f"{prefix}.relu", [out])
    out = g.conv(f"{prefix}.conv2", out, planes, planes, 3, 1)
    out = g.batchnorm(f"{prefix}.bn2", out, planes, gamma_scale=RESIDUAL_BN_SCALE)
    identity = _downsample(g, x, prefix, c_in, planes, stride)
    out = g.op("Add", f"{prefix}.add", [out, identity])
    return g.op("Relu", f"{prefix}.relu_1", [out])


def _bottleneck(g: GraphBuilder, x: str, prefix: str, c_in: int, planes: int, stride: int) -> str:
    c_out = planes * 4
    out = g.conv(f"{prefix}.conv1", x, c_in, planes, 1, 1)
    out = g.batchnorm(f"{prefix}.bn1", out, planes)
    out = g.op("Relu", f"{prefix}.relu", [out])
    out = g.conv(f"{prefix}.conv2", out, planes, planes, 3, stride)
    out = g.batchnorm(f"{prefix}.bn2", out, planes)
    out = g.op("Relu", f"{prefix}.relu_1", [out])
    out = g.conv(f"{prefix}.conv3", out, planes, c_out, 1, 1)
    out = g.batchnorm(f"{prefix}.bn3", out, c_out, gamma_scale=RESIDUAL_BN_SCALE)
    identity = _downsample(g, x, prefix, c_in, c_out, stride)
    out = g.op("Add", f"{prefix}.add", [out, identity])
    return g.op("Relu", f"{prefix}.relu_2", [out])


def _downsample(g: GraphBuilder, x: str, prefix: str, c_in: int, c_out: int, stride: int) -> str:
    """Identity, or Conv 1x1/stride + BN when the shape changes (torchvision's rule)."""
    if stride == 1 and c_in == c_out:
        return x
    out = g.conv(f"{prefix}.downsample.0", x, c_in, c_out, 1, stride, pad=0)
    return g.batchnorm(f"{prefix}.downsample.1", out, c_out)


def _resnet(
    name: str, block: str, layers: tuple[int, int, int, int], batch: int, image_size: int, dynamic_batch: bool, seed: int,
) -> onnx.ModelProto:
    g = GraphBuilder(name, seed)
    expansion = 1 if block == "basic" else 4
    make_block = _basic_block if block == "basic" else _bottleneck

    x = g.conv("conv1", "input", 3, 64, 7, 2, pad=3)
    x = g.batchnorm("bn1", x, 64)
    x = g.op("Relu", "relu", [x])
    x = g.op("MaxPool", "maxpool", [x], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])

    c_in = 64
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers), start=1):
        stride = 1 if stage == 1 else 2
        for i in range(blocks):
            x = make_block(g, x, f"layer{stage}.{i}", c_in, planes, stride if i == 0 else 1)
            c_in = planes * expansion

    x = g.op("GlobalAveragePool", "avgpool", [x])
    x = g.op("Flatten", "flatten", [x], axis=1)
    g.gemm("fc", x, 512 * expansion, NUM_CLASSES, out="output")
    batch_dim: int | str = "batch" if dynamic_batch else batch
    return g.model(
        [image_input("input", batch, image_size, dynamic_batch)],
        [float_output("output", [batch_dim, NUM_CLASSES])],
        doc=f"{name}: torchvision architecture, random weights (seed {seed}), built by cimsplit.models",
    )


def build_resnet18(batch: int = 1, image_size: int = 224, dynamic_batch: bool = False, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18: BasicBlock stages [2, 2, 2, 2]."""
    return _resnet("resnet18", "basic", (2, 2, 2, 2), batch, image_size, dynamic_batch, seed)


def build_resnet50(batch: int = 1, image_size: int = 224, dynamic_batch: bool = False, seed: int = 0) -> onnx.ModelProto:
    """ResNet-50: Bottleneck stages [3, 4, 6, 3]."""
    return _resnet("resnet50", "bottleneck", (3, 4, 6, 3), batch, image_size, dynamic_batch, seed)
