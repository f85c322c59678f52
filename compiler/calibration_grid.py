"""The calibration grid: which micro-benchmarks a campaign measures, in which order.

Conv over C_in x C_out x spatial size x kernel 1/3/5/7 x stride 1/2 (and 1x1
convs on one pixel, as after a global pool; a seeded sample of convs with
power-of-two channel counts, as most networks have; and patch convs, stride =
kernel, as transformers' stems), depthwise Conv (alone and with
the Clip onnxruntime folds into it, float only), Gemm (M_v x N_v x batch),
MatMul of two activations (batch x rows x depth x columns, attention's
products), stride-2 ConvTranspose (a decoder's upsampling), and the non-GEMM
operators over element counts.  The spatial
sizes (10, 18, 36, 68, 132 and a large 260) are none of the zoo's (7 ... 224, 20 ... 640), so
no zoo model's GEMM shape (M_v, N_v, N_mvm) is in it; :func:`grid` also drops
any point in ``held_out``.  Points are interleaved across kinds (each kind's
own points in a seeded shuffle), so a campaign cut short by its time budget
still covers every kind with a spread of sizes.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from cimsplit.compiler.calibration_models import BLOCKED_KINDS, IMAGE_CHANNELS, GridPoint, conv_pad
from cimsplit.compiler.host_chains import CHAIN_KINDS
from cimsplit.compiler.host_fused import QUANTIZED_SILU
from cimsplit.compiler.host_glue import GLUE_KINDS, GLUE_PREFIX, REORDER_KINDS
from cimsplit.compiler.host_model import INT8_PREFIX, KERNEL_SUFFIXES, RUNS_IN_FLOAT, anchor_kind, plain_kind
from cimsplit.compiler.qdq_kernels import onnxruntime_converts_int8_pairs, onnxruntime_runs_nchwc

__all__ = ["GridPoint", "grid", "gemm_descriptors", "gemm_key", "has_weights", "SPATIAL", "LARGE", "POOLED", "ELEMENT_OPS",
           "EXPORT_OPS", "QUANTIZED_EXPORT_OPS", "SQUEEZED", "WIDE", "TRANSPOSED_KERNELS", "TRANSPOSED_POINTS",
           "FUSED_DEPTHWISE", "ROW_KINDS", "ROW_LENGTHS", "STEM_KERNELS"]

SPATIAL = (10, 18, 36, 68, 132)
LARGE = 260
"""A map larger than :data:`SPATIAL`'s, as a detector's at 640 x 640 (320 and 160 in its first layers): every kind but
attention's gets its points there, all that fit in :data:`MAX_MACS` and :data:`MAX_ELEMENTS` (a conv's maps in
:data:`MAX_DEPTHWISE_ELEMENTS`), in no sample.  Fitted on sizes up to 132 only, twelve convs at 260 ran -8 to +27 %
over their prediction (mean +8 %; the same twelve at 100: -12 to +4 %, mean -1 %), YOLOv5n's stem at 640 17 %."""
POOLED = 1
"""The spatial size of 1x1 Conv points on a pooled tensor (squeeze-and-excitation, heads after a global pool)."""
CONV_IN = (3, 16, 40, 88, 176, 344, 680, 1360)
CONV_OUT = (16, 40, 88, 176, 344, 680, 1360)
"""Up to the channel counts of a network's last layers (MobileNetV2's 960 and 1280, ResNet-50's 2048 at 7 x 7): a fit
extrapolated from 344 in and 680 out under-predicted those by 15-30 %."""
POWER_OF_TWO = (32, 64, 128, 256, 512, 1024, 2048)
POWER_OF_TWO_POINTS = 300
"""Convs with power-of-two channel counts (k 1 and 3, strides 1 and 2, at the grid's spatial sizes): onnxruntime's
kernels run whole 16-channel blocks and 4-block filter sets on them, faster per MAC than on the channel counts above
(mostly partial blocks).  Fitted without them, ResNet-50's float pointwise convs were predicted 6-10 % high though
each, measured as a point, was within 3 % of its time in the network; with 300 of them ResNet-50 float's conv
error went from 7.8 to 5.5 % and MobileNetV2 float's from 8.9 to 6.9 % (same board, same profiles)."""
STEM_KERNELS = (4, 8, 16)
DOWNSAMPLING_POINTS = 60
"""Patch convs (stride = kernel, no padding): a vision transformer's stem on the image (16 x 16; 4 x 4 for Swin and
ConvNeXt) and a seeded sample of ConvNeXt's 2 x 2 downsamplings between stages.  Predicted from the grid's
kernels of 1-7, ViT-Tiny int8's 16 x 16 stem was 20 % under its time as a point (36 % under in the network)."""
SQUEEZED = (2, 4, 6, 12)
WIDE = (24, 40, 72, 120, 200, 320, 480, 720)
"""Squeeze-and-excitation convs on one pixel: a wide side squeezed to a few channels and back (MobileNetV3's,
EfficientNet's, PP-LCNet's, which squeeze to a quarter).  Below the grid's 16 output channels a fit extrapolated
(PP-OCRv5's 8 -> 2 and 2 -> 8 convs, 8 us profiled: 24-58 us predicted); a conv of at most four input channels
also takes the image's path (:func:`.host_regression.conv_regimes`), as these do.  Their own queue, last."""
DEPTHWISE = (16, 40, 88, 176, 344, 680, 1360)
MAX_DEPTHWISE_ELEMENTS = 12e6
FUSED_DEPTHWISE = "Conv-depthwise+Clip"
"""A depthwise conv with the Clip (ReLU6) onnxruntime folds into it (MobileNetV2's): float only, the quantizer folds
a Clip into the int8 range."""
GEMM_M = (10, 100, 500, 1500)
GEMM_N = (40, 200, 700, 1800, 3000)
GEMM_BATCH = (1, 3, 17, 60, 250)
"""Rows of a weight product: a classifier's 1, a transformer's tokens (ViT-Tiny's 197, predicted from rows <= 17: half its
time, a log-space fit extrapolated)."""
MATMUL_BATCH = (1, 4)
MATMUL_ROWS = (16, 60, 260)
MATMUL_DEPTH = (16, 40, 100)
MATMUL_COLUMNS = (16, 60, 260)
"""A MatMul of two activations, (b, m, k) x (b, k, n): attention's, whose heads are the batch."""
ELEMENT_CHANNELS = (16, 40, 88, 176, 344)
MAX_MACS = 250e6
MAX_ELEMENTS = 3e6
ELEMENT_POINTS = 12
"""Points per non-GEMM kind (a three-column fit needs few)."""
ELEMENT_OPS = (
    "Relu", "Clip", "Sigmoid", "HardSigmoid", "Tanh", "LeakyRelu", "Add", "Mul", "Sub", "Div", "Pow",
    "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Reshape", "Transpose", "Concat", "Split", "Slice",
    "Resize", "Softmax", "Erf", "LayerNormalization", "Squeeze", "Gather", "Softmax-last", "Softmax-second-last",
)
"""Not HardSwish: onnxruntime runs its function body (HardSigmoid, Mul), and a HardSwish is predicted as those
two kinds (:mod:`.host_prediction`; an int8 one's HardSigmoid in its int8 kind), or as one HardSigmoid pass when
folded into its conv (:mod:`.host_fused`).  ``Softmax`` is over channels (a detector
head's), ``Softmax-last`` over the last axis (attention's), ``Softmax-second-last`` over the one before it
(:func:`.host_variants.op_variants`)."""
EXPORT_OPS = ("ReduceMean", "Sqrt", "Unsqueeze", "Pad", "BatchNormalization", "PRelu", "Softplus", "Exp")
"""Kinds exporters leave that the zoo has not: a LayerNormalization decomposed into ReduceMean, Sub, Pow,
Add, Sqrt, Div (PyTorch below opset 17, PaddlePaddle's paddle2onnx: PP-OCR's recognisers), the Unsqueeze of
a view, explicit padding, a BatchNormalization no conv precedes (DenseNet's), PReLU (face and PaddlePaddle
models), Mish's Softplus, an Exp.  Float only but :data:`QUANTIZED_EXPORT_OPS`: onnxruntime's quantizer leaves the
others float (an int8 model's are float kinds).  Drawn from their own random stream, so that the other kinds' points
and order stay as they were."""
QUANTIZED_EXPORT_OPS = frozenset({"Unsqueeze", "Pad", "ReduceMean", "BatchNormalization"})
"""The :data:`EXPORT_OPS` onnxruntime's quantizer puts between Q/DQ pairs (PP-OCR's int8 recognisers have int8
ReduceMean and BatchNormalization operators)."""
ROW_KINDS = frozenset({"LayerNormalization", "Softmax-last", "SkipLayerNormalization", "ReduceMean"})
"""Kinds that work along the last axis, measured on rows as long as a transformer's (:data:`ROW_LENGTHS`)."""
ROW_LENGTHS = (50, 100, 176, 344, 680)
"""The last axis of a :data:`ROW_KINDS` point, by its :data:`SPATIAL` size (about as many elements as that
size's square: ``c x round(h^2 / d) x d``): widths and token counts of transformers, none of the zoo's.
On the square maps' rows (10-132 elements) a LayerNormalization cost 1.6-1.7 ns per element up to
111,456 elements, ViT-Tiny's (192 wide) 0.6-0.7; predicted from them, its 25 took 1.62 ms for 0.75."""
TRANSPOSED_KERNELS = (2, 3, 4)
"""Kernels of the ConvTranspose points, stride 2, each doubling the map: the 2 x 2 upsampling of U-Nets and text
detectors (PP-OCR's, DBNet's), the 3 x 3 of segmentation decoders and GANs' 4 x 4."""
TRANSPOSED_IN = (8, 16, 40, 88, 176, 344)
TRANSPOSED_OUT = (1, 4, 16, 40, 88, 176, 344)
"""Down to the one output channel of a detector's probability map (PP-OCR's last ConvTranspose: 24 -> 1, which a
fit on 16 or more output channels predicted 39 % low)."""
TRANSPOSED_POINTS = 80
_WEIGHTS = {"Conv": 4, "Conv-depthwise": 2, FUSED_DEPTHWISE: 2, "Gemm": 1}


def gemm_key(m: int, n: int, n_mvm: int) -> tuple[int, int, int]:
    """The GEMM descriptors a held-out shape is compared by."""
    return (int(m), int(n), int(n_mvm))


def _out(size: int, k: int, s: int) -> int:
    return (size + 2 * conv_pad(k, s) - k) // s + 1


def _conv_points(sizes: tuple[int, ...] = (POOLED, *SPATIAL)) -> list[GridPoint]:
    points = []
    for c_in in CONV_IN:
        for c_out in CONV_OUT:
            for h in sizes:
                for k in ((1,) if h == POOLED else (1, 3, 5, 7)):
                    for s in ((1,) if h == POOLED else (1, 2)):
                        macs = c_out * c_in * k * k * _out(h, k, s) ** 2
                        image_wide = c_in == IMAGE_CHANNELS and c_out > 680  # a first layer has few outputs
                        if macs <= MAX_MACS and not (k > 3 and c_in * c_out > 176 * 176) and not image_wide:
                            points.append(GridPoint("Conv", (("c_in", c_in), ("c_out", c_out), ("h", h), ("k", k), ("s", s))))
    return points


def _power_of_two_convs(sizes: tuple[int, ...]) -> list[GridPoint]:
    return [GridPoint("Conv", (("c_in", c_in), ("c_out", c_out), ("h", h), ("k", k), ("s", s)))
            for c_in in POWER_OF_TWO for c_out in POWER_OF_TWO for h in sizes for k in (1, 3) for s in (1, 2)
            if c_out * c_in * k * k * _out(h, k, s) ** 2 <= MAX_MACS]


def _power_of_two_points(rng: np.random.Generator) -> list[GridPoint]:
    points = _power_of_two_convs(SPATIAL)
    return [points[i] for i in sorted(rng.permutation(len(points))[:POWER_OF_TWO_POINTS])]


def _patch(c_in: int, c_out: int, out: int, k: int) -> GridPoint:
    return GridPoint("Conv", (("c_in", c_in), ("c_out", c_out), ("h", out * k), ("k", k), ("s", k)))


def _patch_points(rng: np.random.Generator) -> list[GridPoint]:
    """Patch convs to maps of the grid's first four sizes: stems on an image (up to 680 outputs), 2 x 2 downsamplings."""
    stems = [_patch(IMAGE_CHANNELS, c_out, out, k) for k in STEM_KERNELS for c_out in CONV_OUT[:-1] for out in SPATIAL[:4]
             if c_out * IMAGE_CHANNELS * k * k * out * out <= MAX_MACS]
    downsamplings = [_patch(c_in, c_out, out, 2) for c_in in CONV_IN[1:] for c_out in CONV_OUT for out in SPATIAL[:4]
                     if c_out * c_in * 4 * out * out <= MAX_MACS]
    return stems + [downsamplings[i] for i in sorted(rng.permutation(len(downsamplings))[:DOWNSAMPLING_POINTS])]


def _squeeze_points() -> list[GridPoint]:
    return [GridPoint("Conv", (("c_in", c_in), ("c_out", c_out), ("h", POOLED), ("k", 1), ("s", 1)))
            for narrow in SQUEEZED for wide in WIDE for c_in, c_out in ((wide, narrow), (narrow, wide))]


def _depthwise_points(kind: str = "Conv-depthwise") -> list[GridPoint]:
    return [GridPoint(kind, (("c", c), ("h", h), ("k", k), ("s", s)))
            for c in DEPTHWISE for h in SPATIAL for k in (3, 5, 7) for s in (1, 2) if c * h * h <= MAX_DEPTHWISE_ELEMENTS]


def _large_conv_points() -> list[GridPoint]:
    """Convs at :data:`LARGE` whose input and output maps hold at most :data:`MAX_DEPTHWISE_ELEMENTS` (as a network's
    first layers: few channels)."""
    return [p for p in _conv_points((LARGE,)) + _power_of_two_convs((LARGE,))
            if max(p.get("c_in") * LARGE ** 2, p.get("c_out") * _out(LARGE, p.get("k"), p.get("s")) ** 2) <= MAX_DEPTHWISE_ELEMENTS]


def _large_depthwise_points(kind: str) -> list[GridPoint]:
    return [GridPoint(kind, (("c", c), ("h", LARGE), ("k", k), ("s", s))) for c in DEPTHWISE for k in (3, 5, 7) for s in (1, 2)
            if c * LARGE ** 2 <= MAX_DEPTHWISE_ELEMENTS and c * k * k * _out(LARGE, k, s) ** 2 <= MAX_MACS]


def _transposed_points(rng: np.random.Generator) -> list[GridPoint]:
    """A seeded sample of stride-2 ConvTranspose points (:data:`TRANSPOSED_KERNELS`), MACs within :data:`MAX_MACS`."""
    points = [GridPoint("ConvTranspose", (("c_in", c_in), ("c_out", c_out), ("h", h), ("k", k)))
              for c_in in TRANSPOSED_IN for c_out in TRANSPOSED_OUT for h in SPATIAL for k in TRANSPOSED_KERNELS
              if h * h * c_in * c_out * k * k <= MAX_MACS]
    return [points[i] for i in sorted(rng.permutation(len(points))[:TRANSPOSED_POINTS])]


def _gemm_points() -> list[GridPoint]:
    return [GridPoint("Gemm", (("m", m), ("n", n), ("b", b))) for m in GEMM_M for n in GEMM_N for b in GEMM_BATCH]


def _matmul_points() -> list[GridPoint]:
    return [GridPoint("MatMul", (("b", b), ("m", m), ("k", k), ("n", n)))
            for b in MATMUL_BATCH for m in MATMUL_ROWS for k in MATMUL_DEPTH for n in MATMUL_COLUMNS]


def _element_params(op: str, c: int, h: int) -> tuple[tuple[str, int], ...]:
    """A ``c x h x h`` element point's shape (a :data:`BLOCKED_KINDS` one's channels the nearest multiple of 16,
    which onnxruntime's NCHWc pools need, as a CNN's channels are); a :data:`ROW_KINDS` one's ``c x rows x d``
    (``w`` = d)."""
    if op in BLOCKED_KINDS:
        return (("c", 16 * max(1, round(c / 16))), ("h", h))
    if op not in ROW_KINDS:
        return (("c", c), ("h", h))
    d = ROW_LENGTHS[SPATIAL.index(h)]
    return (("c", c), ("h", max(1, round(h * h / d))), ("w", d))


def _element_points(op: str, rng: np.random.Generator) -> list[GridPoint]:
    shapes = [(c, h) for c in ELEMENT_CHANNELS for h in SPATIAL if c * h * h <= MAX_ELEMENTS]
    variants = 2 if op == "MaxPool" else 1
    points = [GridPoint(op, _element_params(op, c, h), variant=i % variants) for i, (c, h) in enumerate(shapes)]
    chosen = rng.permutation(len(points))[:ELEMENT_POINTS]
    return [points[i] for i in sorted(chosen)] + _large_element_points(op)


def _large_element_points(op: str) -> list[GridPoint]:
    """An element kind's points at :data:`LARGE` (none for :data:`ROW_KINDS`: attention's rows are short)."""
    if op in ROW_KINDS:
        return []
    variants = 2 if op == "MaxPool" else 1
    return [GridPoint(op, _element_params(op, c, LARGE), variant=i % variants)
            for i, c in enumerate(c for c in ELEMENT_CHANNELS if c * LARGE * LARGE <= MAX_ELEMENTS)]


def gemm_descriptors(point: GridPoint) -> tuple[int, int, int] | None:
    """(M_v, N_v, N_mvm) of a GEMM point as im2col lowers it (None for element-wise points)."""
    kind = plain_kind(anchor_kind(point.kind)).removeprefix(INT8_PREFIX)
    if kind == "Conv":
        k, s = point.get("k"), point.get("s")
        return gemm_key(point.get("c_out"), point.get("c_in") * k * k, _out(point.get("h"), k, s) ** 2)
    if kind == "Conv-depthwise":
        c, k, s = point.get("c"), point.get("k"), point.get("s")
        return gemm_key(c, k * k, _out(point.get("h"), k, s) ** 2 * c)
    if kind == "Gemm":
        return gemm_key(point.get("m"), point.get("n"), point.get("b"))
    if kind == "MatMul":
        return gemm_key(point.get("n"), point.get("k"), point.get("b") * point.get("m"))
    if kind == "ConvTranspose":  # the GEMM onnxruntime runs before its col2im (workload_builder)
        return gemm_key(point.get("c_out") * point.get("k") ** 2, point.get("c_in"), point.get("h") ** 2)
    return None


def has_weights(point: GridPoint) -> bool:
    """A point whose operator reads a constant weight (what :func:`flushed` evicts): a GEMM point but a MatMul of
    two activations."""
    return gemm_descriptors(point) is not None and plain_kind(point.kind).removeprefix(INT8_PREFIX) != "MatMul"


def grid(int8: bool = False, seed: int = 0, held_out: Iterable[tuple[int, int, int]] = ()) -> list[GridPoint]:
    """Every calibration point, in campaign order (deterministic for a seed).

    ``int8`` adds the ``int8:`` kinds, and on x86 their variants whose int8 input, output or both
    stay int8 (``-s8in``, ``-s8out``, ``-s8``).
    """
    rng = np.random.default_rng(seed)
    excluded = set(held_out)
    per_kind: dict[str, list[GridPoint]] = {
        "Conv": _conv_points() + _power_of_two_points(np.random.default_rng(seed + 2))  # (own streams, as the glue's)
        + _patch_points(np.random.default_rng(seed + 4)) + _large_conv_points(),
        "Conv-depthwise": _depthwise_points() + _large_depthwise_points("Conv-depthwise"),
        FUSED_DEPTHWISE: _depthwise_points(FUSED_DEPTHWISE) + _large_depthwise_points(FUSED_DEPTHWISE), "Gemm": _gemm_points(),
    }
    for op in ELEMENT_OPS:
        per_kind[op] = _element_points(op, rng)
    per_kind["MatMul"] = _matmul_points()
    own_order = {"SiLU": np.random.default_rng(seed + 8)}  # kinds shuffled by their own stream: the others' order stays
    chain_rng = np.random.default_rng(seed + 3)  # (own stream: the other kinds' points stay as they were)
    for op in CHAIN_KINDS:  # float only (:mod:`.host_chains`)
        per_kind[op] = _element_points(op, chain_rng)
    if int8 and onnxruntime_converts_int8_pairs():  # the layout glue of the NHWC int8 chain (host_glue)
        glue_rng = np.random.default_rng(seed + 1)  # its own stream: the other kinds' order stays as it was
        for kind in GLUE_KINDS:
            per_kind[kind] = [GridPoint(kind, p.params) for p in _element_points("Relu", glue_rng)]
    export_rng = np.random.default_rng(seed + 5)  # last, from their own stream (:data:`EXPORT_OPS`)
    for op in EXPORT_OPS:
        per_kind[op] = _element_points(op, export_rng)
    per_kind["squeeze"] = _squeeze_points()  # (a queue of Conv points of its own, last: the others' order stays)
    per_kind["ConvTranspose"] = _transposed_points(np.random.default_rng(seed + 6))  # (its own stream, after them)
    if onnxruntime_runs_nchwc():  # the float NCHWc layout's glue (host_glue), float or int8
        own_order.update((kind, np.random.default_rng(seed + 7)) for kind in REORDER_KINDS)
        for kind in REORDER_KINDS:
            per_kind[kind] = [GridPoint(kind, _element_params("MaxPool", p.get("c"), p.get("h")))  # (whole blocks)
                              for p in _element_points("Relu", own_order[kind])]
    queues: list[tuple[int, list[GridPoint]]] = []
    for kind, points in per_kind.items():
        points = [p for p in points if gemm_descriptors(p) not in excluded]
        order = [points[i] for i in own_order.get(kind, rng).permutation(len(points))]
        queues.append((_WEIGHTS.get(kind, 1), order))
        float_only = kind in CHAIN_KINDS or kind in RUNS_IN_FLOAT or (kind in EXPORT_OPS and kind not in QUANTIZED_EXPORT_OPS)
        if int8 and not kind.startswith(GLUE_PREFIX) and kind == anchor_kind(kind) and not float_only:
            queues.append((_WEIGHTS.get(kind, 1), [GridPoint(INT8_PREFIX + p.kind, p.params, p.variant) for p in order]))
            if onnxruntime_converts_int8_pairs():
                for suffix in KERNEL_SUFFIXES:
                    queues.append((_WEIGHTS.get(kind, 1), [GridPoint(INT8_PREFIX + p.kind + suffix, p.params, p.variant)
                                                    for p in order]))
    if int8:  # a quantized conv's SiLU, as the nodes after a conv (:data:`~.host_fused.QUANTIZED_SILU`), own stream, last
        queues.append((1, [GridPoint(QUANTIZED_SILU, p.params) for p in _element_points("Relu", np.random.default_rng(seed + 9))]))
    ordered: list[GridPoint] = []
    while any(points for _, points in queues):
        for weight, points in queues:
            ordered.extend(points[:weight])
            del points[:weight]
    return ordered
