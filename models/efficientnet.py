"""EfficientNet-B0 as torchvision defines it, in plain ONNX.

Reference: ``torchvision.models.efficientnet`` (Tan & Le, "EfficientNet:
Rethinking Model Scaling for CNNs", ICML 2019), ``efficientnet_b0()``
(width 1.0, depth 1.0, BatchNorm2d with PyTorch's default eps 1e-5):

- features.0: Conv 3x3/2 (3 -> 32) + BN + SiLU;
- features.1-7: MBConv stages (expand ratio, kernel, stride, in, out,
  layers) = (1,3,1,32,16,1) (6,3,2,16,24,2) (6,5,2,24,40,2) (6,3,2,40,80,3)
  (6,5,1,80,112,3) (6,5,2,112,192,4) (6,3,1,192,320,1); each MBConv is
  [expand 1x1 + BN + SiLU when the ratio is not 1] + depthwise kxk/s + BN +
  SiLU + SqueezeExcitation(expanded, max(1, in // 4)) with SiLU inside and
  Sigmoid as its scale + project 1x1 + BN, with a residual Add (stochastic
  depth is the identity in eval) when stride 1 and in == out;
- features.8: Conv 1x1 (320 -> 1280) + BN + SiLU; GlobalAveragePool,
  Flatten, Dropout, Linear 1280 -> 1000 (Gemm).

SiLU is ``x * Sigmoid(x)`` (Sigmoid + Mul), as PyTorch exports it at opset
17. Conv count: 1 + 4 (first MBConv: depthwise, SE fc1 and fc2, project) +
15 * 5 (expand added) + 1 = 81, of which 16 depthwise; parameters 5,288,548
as torchvision reports.
"""

from __future__ import annotations

import onnx

from cimsplit.models.graph_builder import GraphBuilder, float_output, image_input, make_divisible

__all__ = ["build_efficientnet_b0", "STAGE_SETTING"]

NUM_CLASSES = 1000
STEM_CHANNELS = 32
LAST_CHANNELS = 1280
RESIDUAL_BN_SCALE = 0.3  # see resnet.RESIDUAL_BN_SCALE
# (expand ratio, kernel, first stride, input, output, layers) — torchvision's MBConvConfig table for B0.
STAGE_SETTING: tuple[tuple[int, int, int, int, int, int], ...] = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)


class _EfficientNetBuilder:
    def __init__(self, seed: int) -> None:
        self.g = GraphBuilder("efficientnet_b0", seed)

    def conv_bn_act(
        self, prefix: str, x: str, c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1,
        silu: bool = True, gamma_scale: float = 1.0,
    ) -> str:
        """Conv2dNormActivation: ``prefix.0`` conv, ``.1`` BN, ``.2`` SiLU (Sigmoid + Mul)."""
        g = self.g
        x = g.conv(f"{prefix}.0", x, c_in, c_out, kernel, stride, groups=groups)
        x = g.batchnorm(f"{prefix}.1", x, c_out, gamma_scale=gamma_scale)
        if not silu:
            return x
        return g.op("Mul", f"{prefix}.2.mul", [x, g.op("Sigmoid", f"{prefix}.2.sigmoid", [x])])

    def mbconv(self, prefix: str, x: str, expand_ratio: int, kernel: int, stride: int, c_in: int, c_out: int) -> str:
        expanded = make_divisible(c_in * expand_ratio, 8)
        out, layer = x, 0
        if expanded != c_in:
            out = self.conv_bn_act(f"{prefix}.block.{layer}", out, c_in, expanded, 1)
            layer += 1
        out = self.conv_bn_act(f"{prefix}.block.{layer}", out, expanded, expanded, kernel, stride, groups=expanded)
        out = self.g.squeeze_excitation(f"{prefix}.block.{layer + 1}", out, expanded, max(1, c_in // 4),
                                        activation="silu", scale_activation="sigmoid")
        residual = stride == 1 and c_in == c_out
        out = self.conv_bn_act(f"{prefix}.block.{layer + 2}", out, expanded, c_out, 1, silu=False,
                               gamma_scale=RESIDUAL_BN_SCALE if residual else 1.0)
        return self.g.op("Add", f"{prefix}.add", [x, out]) if residual else out

    def build(self, batch: int, image_size: int, dynamic_batch: bool, seed: int) -> onnx.ModelProto:
        g = self.g
        x = self.conv_bn_act("features.0", "input", 3, STEM_CHANNELS, 3, 2)
        for stage, (t, k, s, c_in, c_out, layers) in enumerate(STAGE_SETTING, start=1):
            for i in range(layers):
                x = self.mbconv(f"features.{stage}.{i}", x, t, k, s if i == 0 else 1, c_in if i == 0 else c_out, c_out)
        x = self.conv_bn_act(f"features.{len(STAGE_SETTING) + 1}", x, STAGE_SETTING[-1][4], LAST_CHANNELS, 1)
        x = g.op("GlobalAveragePool", "avgpool", [x])
        x = g.op("Flatten", "flatten", [x], axis=1)
        g.gemm("classifier.1", x, LAST_CHANNELS, NUM_CLASSES, out="output")
        batch_dim: int | str = "batch" if dynamic_batch else batch
        return g.model(
            [image_input("input", batch, image_size, dynamic_batch)],
            [float_output("output", [batch_dim, NUM_CLASSES])],
            doc=f"efficientnet_b0: torchvision architecture, random weights (seed {seed}), built by cimsplit.models",
        )


def build_efficientnet_b0(batch: int = 1, image_size: int = 224, dynamic_batch: bool = False, seed: int = 0) -> onnx.ModelProto:
    """EfficientNet-B0, 1000 classes."""
    return _EfficientNetBuilder(seed).build(batch, image_size, dynamic_batch, seed)
