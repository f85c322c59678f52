"""YOLOv5n (ultralytics v6.0+ architecture) in plain ONNX, exported the way ``export.py`` does.

Sources used (ultralytics/yolov5, read through the project's code search):

- ``models/yolov5n.yaml``: nc 80, depth_multiple 0.33, width_multiple 0.25,
  anchors P3/8 (10,13 16,30 33,23), P4/16 (30,61 62,45 59,119),
  P5/32 (116,90 156,198 373,326); the v6.0 backbone/head table below.
- ``models/yolo.py`` ``parse_model``: repeats n -> max(round(n * 0.33), 1)
  (3 -> 1, 6 -> 2, 9 -> 3), channels c -> make_divisible(c * 0.25, 8)
  (64 -> 16, 128 -> 32, 256 -> 64, 512 -> 128, 1024 -> 256).
- ``models/common.py``: ``Conv`` = Conv2d(bias=False, pad=k//2 unless given)
  + BatchNorm2d + SiLU; ``Bottleneck(c, c, shortcut, e=1.0)`` = Conv 1x1 +
  Conv 3x3 (+ x if shortcut); ``C3(c1, c2, n, shortcut)`` with c_ = c2/2:
  cv3(cat(m(cv1(x)), cv2(x))); ``SPPF(c1, c2, 5)`` with c_ = c1/2:
  cv2(cat(x, m(x), m(m(x)), m(m(m(x))))) after x = cv1(x), MaxPool 5/1/2.
- ``models/yolo.py`` ``Detect`` in export mode: per level a biased Conv 1x1
  to na*(nc+5) = 3*85 = 255 channels, view(bs, 3, 85, ny, nx).permute(0, 1,
  3, 4, 2), sigmoid, split (2, 2, 81) on the last axis, xy = (xy*2 + grid) *
  stride with grid = (x, y) - 0.5, wh = (wh*2)**2 * anchor_grid (anchors in
  pixels), concat, view(bs, 3*ny*nx, 85); the three levels are concatenated
  into ``output0`` of shape (bs, 3*(80^2 + 40^2 + 20^2), 85) at 640.

The decode is the full one (grids and anchor grids are initializers for the
chosen image size), so every op of a real export appears. BN eps is 1e-3 and
SiLU is ``x * Sigmoid(x)`` (Sigmoid + Mul), as YOLOv5 exports it.

Layers (index, module, channels at width 0.25, repeats at depth 0.33)::

    0 Conv 6x6/2 p2 3->16      10 Conv 1x1 256->128
    1 Conv 3x3/2 16->32        11 Resize nearest x2
    2 C3 32 n=1                12 Concat [11, 6] -> 256
    3 Conv 3x3/2 32->64        13 C3 256->128 n=1 no shortcut
    4 C3 64 n=2                14 Conv 1x1 128->64
    5 Conv 3x3/2 64->128       15 Resize, 16 Concat [15, 4] -> 128
    6 C3 128 n=3               17 C3 128->64 no shortcut (P3/8)
    7 Conv 3x3/2 128->256      18 Conv 3x3/2 64->64, 19 Concat [18, 14] -> 128
    8 C3 256 n=1               20 C3 128->128 no shortcut (P4/16)
    9 SPPF 256->256 k=5        21 Conv 3x3/2 128->128, 22 Concat [21, 10] -> 256
                               23 C3 256->256 no shortcut (P5/32)
                               24 Detect: Conv 1x1 64/128/256 -> 255

Conv count: backbone 5 Conv + C3 (3+2n each: 5, 7, 9, 5) + SPPF 2 = 33;
head 4 Conv + 4 C3 (n=1: 5 each) = 24; Detect 3 — 60 in all.
"""

from __future__ import annotations

import numpy as np
import onnx

from cimsplit.models.graph_builder import GraphBuilder, float_output, image_input

__all__ = ["build_yolov5n", "NUM_CLASSES", "ANCHORS", "STRIDES"]

NUM_CLASSES = 80
NUM_OUTPUTS = NUM_CLASSES + 5  # x, y, w, h, objectness, classes
ANCHORS: tuple[tuple[float, ...], ...] = (
    (10, 13, 16, 30, 33, 23),
    (30, 61, 62, 45, 59, 119),
    (116, 90, 156, 198, 373, 326),
)
STRIDES = (8, 16, 32)
NUM_ANCHORS = 3
BN_EPS = 1e-3  # yolov5's initialize_weights sets BatchNorm2d eps = 1e-3


class _YoloBuilder:
    def __init__(self, seed: int) -> None:
        self.g = GraphBuilder("yolov5n", seed)

    # ------------------------------------------------------------ common.py
    def conv(self, prefix: str, x: str, c_in: int, c_out: int, k: int = 1, s: int = 1, p: int | None = None) -> str:
        """``Conv``: Conv2d (no bias) + BN + SiLU, SiLU as x * Sigmoid(x)."""
        g = self.g
        y = g.conv(f"{prefix}.conv", x, c_in, c_out, k, s, pad=p)
        y = g.batchnorm(f"{prefix}.bn", y, c_out, eps=BN_EPS)
        sig = g.op("Sigmoid", f"{prefix}.act.sigmoid", [y])
        return g.op("Mul", f"{prefix}.act.mul", [y, sig])

    def bottleneck(self, prefix: str, x: str, c: int, shortcut: bool) -> str:
        y = self.conv(f"{prefix}.cv1", x, c, c, 1, 1)
        y = self.conv(f"{prefix}.cv2", y, c, c, 3, 1)
        return self.g.op("Add", f"{prefix}.add", [x, y]) if shortcut else y

    def c3(self, prefix: str, x: str, c_in: int, c_out: int, n: int, shortcut: bool = True) -> str:
        hidden = c_out // 2
        a = self.conv(f"{prefix}.cv1", x, c_in, hidden, 1, 1)
        for i in range(n):
            a = self.bottleneck(f"{prefix}.m.{i}", a, hidden, shortcut)
        b = self.conv(f"{prefix}.cv2", x, c_in, hidden, 1, 1)
        cat = self.g.op("Concat", f"{prefix}.concat", [a, b], axis=1)
        return self.conv(f"{prefix}.cv3", cat, 2 * hidden, c_out, 1, 1)

    def sppf(self, prefix: str, x: str, c_in: int, c_out: int, k: int = 5) -> str:
        g = self.g
        hidden = c_in // 2
        x = self.conv(f"{prefix}.cv1", x, c_in, hidden, 1, 1)
        pooled = [x]
        for i in range(3):
            pooled.append(g.op("MaxPool", f"{prefix}.m.{i}", [pooled[-1]], kernel_shape=[k, k], pads=[k // 2] * 4, strides=[1, 1]))
        cat = g.op("Concat", f"{prefix}.concat", pooled, axis=1)
        return self.conv(f"{prefix}.cv2", cat, 4 * hidden, c_out, 1, 1)

    def upsample(self, name: str, x: str) -> str:
        """nn.Upsample(scale_factor=2, mode='nearest') as the exporter writes it at opset 17."""
        g = self.g
        scales = g.constant(f"{name}.scales", np.array([1.0, 1.0, 2.0, 2.0], dtype=np.float32))
        return g.op(
            "Resize", name, [x, "", scales], coordinate_transformation_mode="asymmetric",
            cubic_coeff_a=-0.75, mode="nearest", nearest_mode="floor",
        )

    # ------------------------------------------------------------- yolo.py
    def detect_level(self, i: int, x: str, c_in: int, size: int, batch_dim: int) -> str:
        """One Detect level: conv, reshape/permute, sigmoid, grid decode, flatten."""
        g = self.g
        p = f"model.24.m.{i}"
        ny = nx = size // STRIDES[i]
        y = g.conv(p, x, c_in, NUM_ANCHORS * NUM_OUTPUTS, 1, 1, pad=0, bias=True)
        shape5 = g.constant(f"{p}.view_shape", np.array([batch_dim, NUM_ANCHORS, NUM_OUTPUTS, ny, nx], dtype=np.int64))
        y = g.op("Reshape", f"{p}.view", [y, shape5])
        y = g.op("Transpose", f"{p}.permute", [y], perm=[0, 1, 3, 4, 2])
        y = g.op("Sigmoid", f"{p}.sigmoid", [y])
        sizes = g.constant(f"{p}.split_sizes", np.array([2, 2, NUM_CLASSES + 1], dtype=np.int64))
        xy, wh, conf = g.node("Split", f"{p}.split", [y, sizes], n_outputs=3, axis=4)

        # grid = stack(xv, yv) - 0.5, shape (1, na, ny, nx, 2); y = 2x - 0.5 offset.
        yv, xv = np.meshgrid(np.arange(ny, dtype=np.float32), np.arange(nx, dtype=np.float32), indexing="ij")
        grid = np.broadcast_to(np.stack((xv, yv), 2) - 0.5, (1, NUM_ANCHORS, ny, nx, 2))
        anchor_grid = np.broadcast_to(
            np.asarray(ANCHORS[i], dtype=np.float32).reshape(1, NUM_ANCHORS, 1, 1, 2), (1, NUM_ANCHORS, ny, nx, 2),
        )
        two = g.constant(f"{p}.two", np.array(2.0, dtype=np.float32))
        stride = g.constant(f"{p}.stride", np.array(float(STRIDES[i]), dtype=np.float32))
        grid_c = g.constant(f"{p}.grid", grid.astype(np.float32))
        anchor_c = g.constant(f"{p}.anchor_grid", anchor_grid.astype(np.float32))

        xy = g.op("Mul", f"{p}.xy_mul2", [xy, two])
        xy = g.op("Add", f"{p}.xy_add_grid", [xy, grid_c])
        xy = g.op("Mul", f"{p}.xy_mul_stride", [xy, stride])
        wh = g.op("Mul", f"{p}.wh_mul2", [wh, two])
        wh = g.op("Pow", f"{p}.wh_pow", [wh, two])
        wh = g.op("Mul", f"{p}.wh_mul_anchor", [wh, anchor_c])
        y = g.op("Concat", f"{p}.concat", [xy, wh, conf], axis=4)
        shape3 = g.constant(f"{p}.flat_shape", np.array([batch_dim, NUM_ANCHORS * ny * nx, NUM_OUTPUTS], dtype=np.int64))
        return g.op("Reshape", f"{p}.flatten", [y, shape3])

    def build(self, batch: int, image_size: int, dynamic_batch: bool, seed: int) -> onnx.ModelProto:
        g = self.g
        x = self.conv("model.0", "images", 3, 16, 6, 2, p=2)
        x = self.conv("model.1", x, 16, 32, 3, 2)
        x = self.c3("model.2", x, 32, 32, 1)
        x = self.conv("model.3", x, 32, 64, 3, 2)
        p3 = self.c3("model.4", x, 64, 64, 2)
        x = self.conv("model.5", p3, 64, 128, 3, 2)
        p4 = self.c3("model.6", x, 128, 128, 3)
        x = self.conv("model.7", p4, 128, 256, 3, 2)
        x = self.c3("model.8", x, 256, 256, 1)
        x = self.sppf("model.9", x, 256, 256, 5)

        h10 = self.conv("model.10", x, 256, 128, 1, 1)
        x = self.upsample("model.11", h10)
        x = g.op("Concat", "model.12", [x, p4], axis=1)
        x = self.c3("model.13", x, 256, 128, 1, shortcut=False)
        h14 = self.conv("model.14", x, 128, 64, 1, 1)
        x = self.upsample("model.15", h14)
        x = g.op("Concat", "model.16", [x, p3], axis=1)
        out_p3 = self.c3("model.17", x, 128, 64, 1, shortcut=False)
        x = self.conv("model.18", out_p3, 64, 64, 3, 2)
        x = g.op("Concat", "model.19", [x, h14], axis=1)
        out_p4 = self.c3("model.20", x, 128, 128, 1, shortcut=False)
        x = self.conv("model.21", out_p4, 128, 128, 3, 2)
        x = g.op("Concat", "model.22", [x, h10], axis=1)
        out_p5 = self.c3("model.23", x, 256, 256, 1, shortcut=False)

        reshape_batch = -1 if dynamic_batch else batch
        levels = [
            self.detect_level(i, feat, c, image_size, reshape_batch)
            for i, (feat, c) in enumerate(((out_p3, 64), (out_p4, 128), (out_p5, 256)))
        ]
        g.op("Concat", "model.24.concat", levels, out="output0", axis=1)
        boxes = NUM_ANCHORS * sum((image_size // s) ** 2 for s in STRIDES)
        return g.model(
            [image_input("images", batch, image_size, dynamic_batch)],
            [float_output("output0", ["batch" if dynamic_batch else batch, boxes, NUM_OUTPUTS])],
            doc=f"yolov5n: ultralytics v6.0+ architecture, export-style Detect, random weights (seed {seed}), built by cimsplit.models",
        )


def build_yolov5n(batch: int = 1, image_size: int = 640, dynamic_batch: bool = False, seed: int = 0) -> onnx.ModelProto:
    """YOLOv5n for an image_size x image_size input (a multiple of 32)."""
    return _YoloBuilder(seed).build(batch, image_size, dynamic_batch, seed)
