"""YOLOv8n (ultralytics) in plain ONNX, exported the way ``model.export(format="onnx")`` does.

Sources (ultralytics/ultralytics, read through the project's code search):

- ``cfg/models/v8/yolov8.yaml``: nc 80, scale n = [depth 0.33, width 0.25,
  max_channels 1024]; the backbone/head table below.
- ``nn/tasks.py`` ``parse_model``: repeats n -> max(round(n * 0.33), 1)
  (3 -> 1, 6 -> 2), channels c -> make_divisible(min(c, 1024) * 0.25, 8).
- ``nn/modules/conv.py`` ``Conv`` = Conv2d(bias=False, autopad k//2) +
  BatchNorm2d(eps=0.001) + SiLU.
- ``nn/modules/block.py``: ``Bottleneck(c, c, shortcut, k=(3, 3), e=1.0)``
  = Conv 3x3 + Conv 3x3 (+ x if shortcut); ``C2f(c1, c2, n, shortcut)``
  with c = c2/2: y = cv1(x).chunk(2) (one Split), y += m_i(y[-1]) for each
  Bottleneck, cv2(cat(y)) with (2 + n) * c input channels; ``SPPF(c1, c2,
  5)`` = cv1 (c1 -> c1/2), three chained MaxPool 5/1/2, cv2(cat of 4);
  ``DFL(16)`` = a fixed Conv2d(16, 1, 1, bias=False) with weights 0..15
  (a parameter without gradient: counted in ultralytics' parameter total).
- ``nn/modules/head.py`` ``Detect`` with reg_max 16, c2 = max(16, ch0/4,
  64) = 64, c3 = max(ch0, min(nc, 100)) = 80: per level cv2 = Conv 3x3 ->
  Conv 3x3 -> Conv2d 1x1 (64 box logits), cv3 = Conv 3x3 -> Conv 3x3 ->
  Conv2d 1x1 (80 class logits); in export mode x_i = cat(cv2, cv3) viewed
  (b, 144, h*w), concatenated over levels, split (64, 80); the box part goes
  through DFL (view (b, 4, 16, a), transpose(2, 1), softmax(1), conv, view
  (b, 4, a)) and ``dist2bbox(xywh=True)`` against the anchor points
  (cell centres, offset 0.5) times the strides; ``output0`` = cat(box,
  sigmoid(cls)) of shape (b, 84, 8400) at 640.

Layers (index, module, channels at width 0.25, repeats at depth 0.33)::

    0 Conv 3x3/2 3->16        10 Upsample x2, 11 Concat [10, 6] -> 384
    1 Conv 3x3/2 16->32       12 C2f 384->128 n=1 (no shortcut)
    2 C2f 32 n=1              13 Upsample, 14 Concat [13, 4] -> 192
    3 Conv 3x3/2 32->64       15 C2f 192->64 (P3/8)
    4 C2f 64 n=2              16 Conv 3x3/2 64->64, 17 Concat [16, 12] -> 192
    5 Conv 3x3/2 64->128      18 C2f 192->128 (P4/16)
    6 C2f 128 n=2             19 Conv 3x3/2 128->128, 20 Concat [19, 9] -> 384
    7 Conv 3x3/2 128->256     21 C2f 384->256 (P5/32)
    8 C2f 256 n=1             22 Detect [15, 18, 21]
    9 SPPF 256->256 k=5

Conv count: backbone 5 + C2f (2 + 2n: 4, 6, 6, 4) + SPPF 2 = 27; head 2 +
4 C2f (n=1: 4 each) = 18; Detect 3 levels * 6 + DFL 1 = 19 — 64 in all.
"""

from __future__ import annotations

import numpy as np
import onnx

from cimsplit.models.graph_builder import GraphBuilder, float_output, image_input

__all__ = ["build_yolov8n", "NUM_CLASSES", "REG_MAX", "STRIDES"]

NUM_CLASSES = 80
REG_MAX = 16
STRIDES = (8, 16, 32)
BN_EPS = 1e-3
BOX_CHANNELS = 64  # Detect c2 = max(16, 64 // 4, 4 * REG_MAX)
CLS_CHANNELS = 80  # Detect c3 = max(64, min(NUM_CLASSES, 100))


class _Yolov8Builder:
    def __init__(self, seed: int) -> None:
        self.g = GraphBuilder("yolov8n", seed)

    # ---------------------------------------------------------- modules
    def conv(self, prefix: str, x: str, c_in: int, c_out: int, k: int = 1, s: int = 1) -> str:
        """``Conv``: Conv2d (no bias) + BN + SiLU, SiLU as x * Sigmoid(x)."""
        g = self.g
        y = g.conv(f"{prefix}.conv", x, c_in, c_out, k, s)
        y = g.batchnorm(f"{prefix}.bn", y, c_out, eps=BN_EPS)
        return g.op("Mul", f"{prefix}.act.mul", [y, g.op("Sigmoid", f"{prefix}.act.sigmoid", [y])])

    def c2f(self, prefix: str, x: str, c_in: int, c_out: int, n: int, shortcut: bool) -> str:
        g = self.g
        c = c_out // 2
        y = self.conv(f"{prefix}.cv1", x, c_in, 2 * c)
        parts = g.node("Split", f"{prefix}.split", [y, g.constant(f"{prefix}.split_sizes", np.array([c, c], dtype=np.int64))],
                       n_outputs=2, axis=1)
        for i in range(n):
            b = self.conv(f"{prefix}.m.{i}.cv1", parts[-1], c, c, 3)
            b = self.conv(f"{prefix}.m.{i}.cv2", b, c, c, 3)
            parts.append(g.op("Add", f"{prefix}.m.{i}.add", [parts[-1], b]) if shortcut else b)
        cat = g.op("Concat", f"{prefix}.concat", parts, axis=1)
        return self.conv(f"{prefix}.cv2", cat, (2 + n) * c, c_out)

    def sppf(self, prefix: str, x: str, c_in: int, c_out: int, k: int = 5) -> str:
        g = self.g
        hidden = c_in // 2
        pooled = [self.conv(f"{prefix}.cv1", x, c_in, hidden)]
        for i in range(3):
            pooled.append(g.op("MaxPool", f"{prefix}.m.{i}", [pooled[-1]], kernel_shape=[k, k], pads=[k // 2] * 4,
                               strides=[1, 1]))
        return self.conv(f"{prefix}.cv2", g.op("Concat", f"{prefix}.concat", pooled, axis=1), 4 * hidden, c_out)

    def upsample(self, name: str, x: str) -> str:
        """nn.Upsample(scale_factor=2, mode='nearest') as the exporter writes it at opset 17."""
        scales = self.g.constant(f"{name}.scales", np.array([1.0, 1.0, 2.0, 2.0], dtype=np.float32))
        return self.g.op("Resize", name, [x, "", scales], coordinate_transformation_mode="asymmetric",
                         cubic_coeff_a=-0.75, mode="nearest", nearest_mode="floor")

    # ------------------------------------------------------------ Detect
    def detect(self, feats: list[tuple[str, int]], image_size: int, batch_dim: int) -> str:
        g = self.g
        p = "model.22"
        no = NUM_CLASSES + 4 * REG_MAX
        flat = []
        for i, (x, c_in) in enumerate(feats):
            box = self.conv(f"{p}.cv2.{i}.0", x, c_in, BOX_CHANNELS, 3)
            box = self.conv(f"{p}.cv2.{i}.1", box, BOX_CHANNELS, BOX_CHANNELS, 3)
            box = g.conv(f"{p}.cv2.{i}.2", box, BOX_CHANNELS, 4 * REG_MAX, 1, bias=True)
            cls = self.conv(f"{p}.cv3.{i}.0", x, c_in, CLS_CHANNELS, 3)
            cls = self.conv(f"{p}.cv3.{i}.1", cls, CLS_CHANNELS, CLS_CHANNELS, 3)
            cls = g.conv(f"{p}.cv3.{i}.2", cls, CLS_CHANNELS, NUM_CLASSES, 1, bias=True)
            level = g.op("Concat", f"{p}.concat.{i}", [box, cls], axis=1)
            shape = g.constant(f"{p}.view_shape.{i}", np.array([batch_dim, no, -1], dtype=np.int64))
            flat.append(g.op("Reshape", f"{p}.view.{i}", [level, shape]))
        x = g.op("Concat", f"{p}.cat", flat, axis=2)
        sizes = g.constant(f"{p}.split_sizes", np.array([4 * REG_MAX, NUM_CLASSES], dtype=np.int64))
        box, cls = g.node("Split", f"{p}.split", [x, sizes], n_outputs=2, axis=1)

        # DFL: the expectation of a 16-bin distribution per box side, a fixed 1x1 conv with weights 0..15.
        anchors = sum((image_size // s) ** 2 for s in STRIDES)
        box = g.op("Reshape", f"{p}.dfl.view", [box, g.constant(f"{p}.dfl.view_shape", np.array([batch_dim, 4, REG_MAX, anchors], dtype=np.int64))])
        box = g.op("Transpose", f"{p}.dfl.transpose", [box], perm=[0, 2, 1, 3])
        box = g.op("Softmax", f"{p}.dfl.softmax", [box], axis=1)
        weight = g.constant(f"{p}.dfl.conv.weight", np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1))
        box = g.op("Conv", f"{p}.dfl.conv", [box, weight], dilations=[1, 1], group=1, kernel_shape=[1, 1],
                   pads=[0, 0, 0, 0], strides=[1, 1])
        box = g.op("Reshape", f"{p}.dfl.flatten", [box, g.constant(f"{p}.dfl.flatten_shape", np.array([batch_dim, 4, anchors], dtype=np.int64))])

        # dist2bbox(xywh=True) against make_anchors(offset 0.5), then times the strides.
        points, strides = [], []
        for s in STRIDES:
            n = image_size // s
            sy, sx = np.meshgrid(np.arange(n) + 0.5, np.arange(n) + 0.5, indexing="ij")
            points.append(np.stack((sx, sy), -1).reshape(-1, 2))
            strides.append(np.full((n * n, 1), s))
        anchor_points = g.constant(f"{p}.anchors", np.concatenate(points).T[None].astype(np.float32))  # (1, 2, A)
        stride_tensor = g.constant(f"{p}.strides", np.concatenate(strides).T.astype(np.float32))  # (1, A)
        lt, rb = g.node("Split", f"{p}.dist2bbox.chunk", [box, g.constant(f"{p}.dist2bbox.sizes", np.array([2, 2], dtype=np.int64))],
                        n_outputs=2, axis=1)
        x1y1 = g.op("Sub", f"{p}.dist2bbox.x1y1", [anchor_points, lt])
        x2y2 = g.op("Add", f"{p}.dist2bbox.x2y2", [anchor_points, rb])
        centre = g.op("Div", f"{p}.dist2bbox.centre", [g.op("Add", f"{p}.dist2bbox.sum", [x1y1, x2y2]),
                                                       g.constant(f"{p}.dist2bbox.two", np.array(2.0, dtype=np.float32))])
        wh = g.op("Sub", f"{p}.dist2bbox.wh", [x2y2, x1y1])
        dbox = g.op("Concat", f"{p}.dist2bbox.cat", [centre, wh], axis=1)
        dbox = g.op("Mul", f"{p}.mul_strides", [dbox, stride_tensor])
        return g.op("Concat", f"{p}.output", [dbox, g.op("Sigmoid", f"{p}.sigmoid", [cls])], out="output0", axis=1)

    def build(self, batch: int, image_size: int, dynamic_batch: bool, seed: int) -> onnx.ModelProto:
        g = self.g
        x = self.conv("model.0", "images", 3, 16, 3, 2)
        x = self.conv("model.1", x, 16, 32, 3, 2)
        x = self.c2f("model.2", x, 32, 32, 1, True)
        x = self.conv("model.3", x, 32, 64, 3, 2)
        p3 = self.c2f("model.4", x, 64, 64, 2, True)
        x = self.conv("model.5", p3, 64, 128, 3, 2)
        p4 = self.c2f("model.6", x, 128, 128, 2, True)
        x = self.conv("model.7", p4, 128, 256, 3, 2)
        x = self.c2f("model.8", x, 256, 256, 1, True)
        p5 = self.sppf("model.9", x, 256, 256, 5)

        x = g.op("Concat", "model.11", [self.upsample("model.10", p5), p4], axis=1)
        h12 = self.c2f("model.12", x, 384, 128, 1, False)
        x = g.op("Concat", "model.14", [self.upsample("model.13", h12), p3], axis=1)
        out_p3 = self.c2f("model.15", x, 192, 64, 1, False)
        x = g.op("Concat", "model.17", [self.conv("model.16", out_p3, 64, 64, 3, 2), h12], axis=1)
        out_p4 = self.c2f("model.18", x, 192, 128, 1, False)
        x = g.op("Concat", "model.20", [self.conv("model.19", out_p4, 128, 128, 3, 2), p5], axis=1)
        out_p5 = self.c2f("model.21", x, 384, 256, 1, False)

        self.detect([(out_p3, 64), (out_p4, 128), (out_p5, 256)], image_size, -1 if dynamic_batch else batch)
        anchors = sum((image_size // s) ** 2 for s in STRIDES)
        return g.model(
            [image_input("images", batch, image_size, dynamic_batch)],
            [float_output("output0", ["batch" if dynamic_batch else batch, 4 + NUM_CLASSES, anchors])],
            doc=f"yolov8n: ultralytics architecture, export-style Detect with DFL decode, random weights (seed {seed}), built by cimsplit.models",
        )


def build_yolov8n(batch: int = 1, image_size: int = 640, dynamic_batch: bool = False, seed: int = 0) -> onnx.ModelProto:
    """YOLOv8n for an image_size x image_size input (a multiple of 32)."""
    return _Yolov8Builder(seed).build(batch, image_size, dynamic_batch, seed)
