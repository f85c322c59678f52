"""GoogLeNet (Inception v1) as torchvision defines it, in plain ONNX, without the auxiliary heads.

Reference: ``torchvision.models.googlenet`` (Szegedy et al., "Going Deeper
with Convolutions", CVPR 2015), as built with ``aux_logits=False`` and
``transform_input=False`` (the eval-mode graph a user exports):

- ``BasicConv2d`` = Conv2d(bias=False) + BatchNorm2d(eps=0.001) + ReLU;
- conv1 7x7/2 p3 (3 -> 64), maxpool1 3/2 (ceil), conv2 1x1 (64 -> 64),
  conv3 3x3 p1 (64 -> 192), maxpool2 3/2 (ceil);
- inception 3a, 3b, maxpool3 3/2, 4a-4e, maxpool4 2/2, 5a, 5b (all pools
  ceil_mode=True), each ``Inception(in, ch1x1, ch3x3red, ch3x3, ch5x5red,
  ch5x5, pool_proj)`` with four branches concatenated on channels:
  branch1 1x1; branch2 1x1 -> 3x3; branch3 1x1 -> 3x3 (torchvision keeps a
  3x3 here where the paper has 5x5, for its pretrained weights: see the
  "TODO" in its source); branch4 MaxPool 3/1 p1 (ceil) -> 1x1;
- AdaptiveAvgPool2d(1) as GlobalAveragePool, Flatten, Dropout (vanishes in
  eval), Linear 1024 -> 1000 as Gemm.

Conv count: 3 + 9 * 6 = 57 (all followed by BN + ReLU), 1 Gemm; parameters
6,624,904 as torchvision reports for ``googlenet(aux_logits=False)``.
"""

from __future__ import annotations

import onnx

from cimsplit.models.graph_builder import GraphBuilder, float_output, image_input

__all__ = ["build_googlenet", "INCEPTION_SETTING"]

NUM_CLASSES = 1000
BN_EPS = 1e-3  # BasicConv2d's BatchNorm2d(eps=0.001)
# name -> (in, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj); None marks a max pool (kernel 3, or 2 before 5a).
INCEPTION_SETTING: tuple[tuple[str, tuple[int, ...] | None], ...] = (
    ("inception3a", (192, 64, 96, 128, 16, 32, 32)),
    ("inception3b", (256, 128, 128, 192, 32, 96, 64)),
    ("maxpool3", None),
    ("inception4a", (480, 192, 96, 208, 16, 48, 64)),
    ("inception4b", (512, 160, 112, 224, 24, 64, 64)),
    ("inception4c", (512, 128, 128, 256, 24, 64, 64)),
    ("inception4d", (512, 112, 144, 288, 32, 64, 64)),
    ("inception4e", (528, 256, 160, 320, 32, 128, 128)),
    ("maxpool4", None),
    ("inception5a", (832, 256, 160, 320, 32, 128, 128)),
    ("inception5b", (832, 384, 192, 384, 48, 128, 128)),
)


class _GoogLeNetBuilder:
    def __init__(self, seed: int) -> None:
        self.g = GraphBuilder("googlenet", seed)

    def basic_conv(self, prefix: str, x: str, c_in: int, c_out: int, kernel: int, stride: int = 1) -> str:
        g = self.g
        x = g.conv(f"{prefix}.conv", x, c_in, c_out, kernel, stride)
        x = g.batchnorm(f"{prefix}.bn", x, c_out, eps=BN_EPS)
        return g.op("Relu", f"{prefix}.relu", [x])

    def maxpool(self, name: str, x: str, kernel: int, stride: int, pad: int = 0) -> str:
        return self.g.op("MaxPool", name, [x], ceil_mode=1, kernel_shape=[kernel, kernel], pads=[pad] * 4,
                         strides=[stride, stride])

    def inception(self, prefix: str, x: str, setting: tuple[int, ...]) -> str:
        c_in, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj = setting
        b1 = self.basic_conv(f"{prefix}.branch1", x, c_in, ch1x1, 1)
        b2 = self.basic_conv(f"{prefix}.branch2.0", x, c_in, ch3x3red, 1)
        b2 = self.basic_conv(f"{prefix}.branch2.1", b2, ch3x3red, ch3x3, 3)
        b3 = self.basic_conv(f"{prefix}.branch3.0", x, c_in, ch5x5red, 1)
        b3 = self.basic_conv(f"{prefix}.branch3.1", b3, ch5x5red, ch5x5, 3)
        b4 = self.maxpool(f"{prefix}.branch4.0", x, 3, 1, pad=1)
        b4 = self.basic_conv(f"{prefix}.branch4.1", b4, c_in, pool_proj, 1)
        return self.g.op("Concat", f"{prefix}.concat", [b1, b2, b3, b4], axis=1)

    def build(self, batch: int, image_size: int, dynamic_batch: bool, seed: int) -> onnx.ModelProto:
        g = self.g
        x = self.basic_conv("conv1", "input", 3, 64, 7, 2)
        x = self.maxpool("maxpool1", x, 3, 2)
        x = self.basic_conv("conv2", x, 64, 64, 1)
        x = self.basic_conv("conv3", x, 64, 192, 3)
        x = self.maxpool("maxpool2", x, 3, 2)
        channels = 192
        for name, setting in INCEPTION_SETTING:
            if setting is None:
                x = self.maxpool(name, x, 2 if name == "maxpool4" else 3, 2)
            else:
                x = self.inception(name, x, setting)
                channels = setting[1] + setting[3] + setting[5] + setting[6]
        x = g.op("GlobalAveragePool", "avgpool", [x])
        x = g.op("Flatten", "flatten", [x], axis=1)
        g.gemm("fc", x, channels, NUM_CLASSES, out="output")
        batch_dim: int | str = "batch" if dynamic_batch else batch
        return g.model(
            [image_input("input", batch, image_size, dynamic_batch)],
            [float_output("output", [batch_dim, NUM_CLASSES])],
            doc=f"googlenet: torchvision Inception v1 without aux heads, random weights (seed {seed}), built by cimsplit.models",
        )


def build_googlenet(batch: int = 1, image_size: int = 224, dynamic_batch: bool = False, seed: int = 0) -> onnx.ModelProto:
    """GoogLeNet (Inception v1), 1000 classes, no auxiliary classifiers."""
    return _GoogLeNetBuilder(seed).build(batch, image_size, dynamic_batch, seed)
