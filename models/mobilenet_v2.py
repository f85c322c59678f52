"""MobileNetV2 (width 1.0) as torchvision defines it, in plain ONNX.

Reference: ``torchvision.models.mobilenetv2`` (Sandler et al., "MobileNetV2:
Inverted Residuals and Linear Bottlenecks", CVPR 2018):

- features.0: Conv 3x3/2 (3 -> 32) + BN + ReLU6;
- inverted residual settings (t, c, n, s) = (1,16,1,1) (6,24,2,2) (6,32,3,2)
  (6,64,4,2) (6,96,3,1) (6,160,3,2) (6,320,1,1); each block is
  [pw 1x1 expand (t*c_in) + BN + ReLU6 when t != 1] + dw 3x3/s (group =
  channels) + BN + ReLU6 + pw-linear 1x1 + BN, with a residual Add when
  stride 1 and c_in == c_out;
- features.18: Conv 1x1 (320 -> 1280) + BN + ReLU6;
- GlobalAveragePool, Flatten, Gemm(1280 -> 1000) (dropout vanishes in eval).

ReLU6 is written as ``Clip(x, 0, 6)`` with min/max as initializers, as the
PyTorch exporter does at opset >= 11. Conv count: 1 + 2 (first block) +
16*3 + 1 = 52, of which 17 depthwise (one per block).
"""

from __future__ import annotations

import numpy as np
import onnx

from cimsplit.models.graph_builder import GraphBuilder, float_output, image_input

__all__ = ["build_mobilenet_v2", "INVERTED_RESIDUAL_SETTING"]

NUM_CLASSES = 1000
LAST_CHANNELS = 1280
# (expand ratio t, output channels c, repeats n, first stride s) — torchvision's table.
INVERTED_RESIDUAL_SETTING: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
RESIDUAL_BN_SCALE = 0.3  # see resnet.RESIDUAL_BN_SCALE


class _MobileNetV2Builder:
    def __init__(self, seed: int) -> None:
        self.g = GraphBuilder("mobilenet_v2", seed)
        self.relu6_min = self.g.constant("relu6.min", np.array(0.0, dtype=np.float32))
        self.relu6_max = self.g.constant("relu6.max", np.array(6.0, dtype=np.float32))

    def conv_bn_relu6(self, prefix: str, x: str, c_in: int, c_out: int, kernel: int, stride: int, groups: int = 1) -> str:
        """torchvision's Conv2dNormActivation: modules ``prefix.0`` conv, ``.1`` BN, ``.2`` ReLU6."""
        g = self.g
        x = g.conv(f"{prefix}.0", x, c_in, c_out, kernel, stride, groups=groups)
        x = g.batchnorm(f"{prefix}.1", x, c_out)
        return g.op("Clip", f"{prefix}.2", [x, self.relu6_min, self.relu6_max])

    def inverted_residual(self, prefix: str, x: str, c_in: int, c_out: int, stride: int, expand_ratio: int) -> str:
        g = self.g
        hidden = int(round(c_in * expand_ratio))
        out, layer = x, 0
        if expand_ratio != 1:
            out = self.conv_bn_relu6(f"{prefix}.conv.{layer}", out, c_in, hidden, 1, 1)
            layer += 1
        out = self.conv_bn_relu6(f"{prefix}.conv.{layer}", out, hidden, hidden, 3, stride, groups=hidden)
        out = g.conv(f"{prefix}.conv.{layer + 1}", out, hidden, c_out, 1, 1)
        use_residual = stride == 1 and c_in == c_out
        out = g.batchnorm(f"{prefix}.conv.{layer + 2}", out, c_out, gamma_scale=RESIDUAL_BN_SCALE if use_residual else 1.0)
        if use_residual:
            out = g.op("Add", f"{prefix}.add", [x, out])
        return out

    def build(self, batch: int, image_size: int, dynamic_batch: bool, seed: int) -> onnx.ModelProto:
        g = self.g
        x = self.conv_bn_relu6("features.0", "input", 3, 32, 3, 2)
        c_in, index = 32, 1
        for t, c, n, s in INVERTED_RESIDUAL_SETTING:
            for i in range(n):
                x = self.inverted_residual(f"features.{index}", x, c_in, c, s if i == 0 else 1, t)
                c_in, index = c, index + 1
        x = self.conv_bn_relu6(f"features.{index}", x, c_in, LAST_CHANNELS, 1, 1)
        x = g.op("GlobalAveragePool", "avgpool", [x])
        x = g.op("Flatten", "flatten", [x], axis=1)
        g.gemm("classifier.1", x, LAST_CHANNELS, NUM_CLASSES, out="output")
        batch_dim: int | str = "batch" if dynamic_batch else batch
        return g.model(
            [image_input("input", batch, image_size, dynamic_batch)],
            [float_output("output", [batch_dim, NUM_CLASSES])],
            doc=f"mobilenet_v2: torchvision architecture (width 1.0), random weights (seed {seed}), built by cimsplit.models",
        )


def build_mobilenet_v2(batch: int = 1, image_size: int = 224, dynamic_batch: bool = False, seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2, width multiplier 1.0, 1000 classes."""
    return _MobileNetV2Builder(seed).build(batch, image_size, dynamic_batch, seed)
