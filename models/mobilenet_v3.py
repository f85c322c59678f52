"""MobileNetV3-Small (width 1.0) as torchvision defines it, in plain ONNX.

Reference: ``torchvision.models.mobilenetv3`` (Howard et al., "Searching for
MobileNetV3", ICCV 2019), ``mobilenet_v3_small()``:

- BatchNorm2d(eps=0.001) everywhere; features.0: Conv 3x3/2 (3 -> 16) + BN
  + Hardswish;
- eleven InvertedResidual blocks (``_mobilenet_v3_conf("mobilenet_v3_small")``,
  table below): [expand 1x1 + BN + act when expanded != input] + depthwise
  kxk/s + BN + act + [SqueezeExcitation(expanded, make_divisible(expanded
  // 4, 8)) with ReLU inside and Hardsigmoid as its scale activation] +
  project 1x1 + BN, with a residual Add when stride 1 and input == output;
- features.12: Conv 1x1 (96 -> 576) + BN + Hardswish; GlobalAveragePool,
  Flatten, classifier Linear 576 -> 1024, Hardswish, Dropout, Linear
  1024 -> 1000 (Gemm).

PyTorch exports Hardswish as ONNX ``HardSwish`` (opset >= 14) and
Hardsigmoid as ``HardSigmoid(alpha=1/6, beta=0.5)``. Conv count: 1 + 2 + 10
* 3 + 1 = 34, plus 2 per SE block (9 blocks) = 52, of which 11 depthwise;
parameters 2,542,856 as torchvision reports.
"""

from __future__ import annotations

import onnx

from cimsplit.models.graph_builder import GraphBuilder, float_output, image_input, make_divisible

__all__ = ["build_mobilenet_v3_small", "BLOCK_SETTING"]

NUM_CLASSES = 1000
BN_EPS = 1e-3
LAST_CHANNELS = 1024
RESIDUAL_BN_SCALE = 0.3  # see resnet.RESIDUAL_BN_SCALE
# (input, kernel, expanded, output, squeeze-excitation, activation, stride) — torchvision's table.
BLOCK_SETTING: tuple[tuple[int, int, int, int, bool, str, int], ...] = (
    (16, 3, 16, 16, True, "RE", 2),
    (16, 3, 72, 24, False, "RE", 2),
    (24, 3, 88, 24, False, "RE", 1),
    (24, 5, 96, 40, True, "HS", 2),
    (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 120, 48, True, "HS", 1),
    (48, 5, 144, 48, True, "HS", 1),
    (48, 5, 288, 96, True, "HS", 2),
    (96, 5, 576, 96, True, "HS", 1),
    (96, 5, 576, 96, True, "HS", 1),
)


class _MobileNetV3Builder:
    def __init__(self, seed: int) -> None:
        self.g = GraphBuilder("mobilenet_v3_small", seed)

    def conv_bn_act(
        self, prefix: str, x: str, c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1,
        act: str | None = "HS", gamma_scale: float = 1.0,
    ) -> str:
        """Conv2dNormActivation: ``prefix.0`` conv, ``.1`` BN, ``.2`` ReLU ("RE") or Hardswish ("HS")."""
        g = self.g
        x = g.conv(f"{prefix}.0", x, c_in, c_out, kernel, stride, groups=groups)
        x = g.batchnorm(f"{prefix}.1", x, c_out, eps=BN_EPS, gamma_scale=gamma_scale)
        if act is None:
            return x
        return g.op("Relu" if act == "RE" else "HardSwish", f"{prefix}.2", [x])

    def inverted_residual(self, prefix: str, x: str, setting: tuple[int, int, int, int, bool, str, int]) -> str:
        c_in, kernel, expanded, c_out, use_se, act, stride = setting
        out, layer = x, 0
        if expanded != c_in:
            out = self.conv_bn_act(f"{prefix}.block.{layer}", out, c_in, expanded, 1, act=act)
            layer += 1
        out = self.conv_bn_act(f"{prefix}.block.{layer}", out, expanded, expanded, kernel, stride, groups=expanded, act=act)
        layer += 1
        if use_se:
            out = self.g.squeeze_excitation(f"{prefix}.block.{layer}", out, expanded, make_divisible(expanded // 4, 8),
                                            activation="relu", scale_activation="hardsigmoid")
            layer += 1
        residual = stride == 1 and c_in == c_out
        out = self.conv_bn_act(f"{prefix}.block.{layer}", out, expanded, c_out, 1, act=None,
                               gamma_scale=RESIDUAL_BN_SCALE if residual else 1.0)
        return self.g.op("Add", f"{prefix}.add", [x, out]) if residual else out

    def build(self, batch: int, image_size: int, dynamic_batch: bool, seed: int) -> onnx.ModelProto:
        g = self.g
        x = self.conv_bn_act("features.0", "input", 3, 16, 3, 2)
        for index, setting in enumerate(BLOCK_SETTING, start=1):
            x = self.inverted_residual(f"features.{index}", x, setting)
        last_in = BLOCK_SETTING[-1][3]
        x = self.conv_bn_act(f"features.{len(BLOCK_SETTING) + 1}", x, last_in, 6 * last_in, 1)
        x = g.op("GlobalAveragePool", "avgpool", [x])
        x = g.op("Flatten", "flatten", [x], axis=1)
        x = g.gemm("classifier.0", x, 6 * last_in, LAST_CHANNELS)
        x = g.op("HardSwish", "classifier.1", [x])
        g.gemm("classifier.3", x, LAST_CHANNELS, NUM_CLASSES, out="output")
        batch_dim: int | str = "batch" if dynamic_batch else batch
        return g.model(
            [image_input("input", batch, image_size, dynamic_batch)],
            [float_output("output", [batch_dim, NUM_CLASSES])],
            doc=f"mobilenet_v3_small: torchvision architecture (width 1.0), random weights (seed {seed}), built by cimsplit.models",
        )


def build_mobilenet_v3_small(
    batch: int = 1, image_size: int = 224, dynamic_batch: bool = False, seed: int = 0,
) -> onnx.ModelProto:
    """MobileNetV3-Small, width multiplier 1.0, 1000 classes."""
    return _MobileNetV3Builder(seed).build(batch, image_size, dynamic_batch, seed)
