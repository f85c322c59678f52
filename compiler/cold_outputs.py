"""What a copy operator pays in a network to write a new buffer, from its point's times as it is and flushed.

A calibration point rewrites the same output buffer at every run, so it finds it in cache.  In a network an
operator that cannot run in place (a Concat, Split, Resize, pool, Transpose, Softmax: :data:`COPY_OPS`) writes
a buffer the arena hands it, last touched some layers before: the larger the buffer, the likelier the layers in
between evicted it from the core's L2.  Such a point is also profiled :func:`~.cache_flush.flushed` (its input
just written, its outputs cold), and kept at :func:`in_network_ns`: its time as it is plus the output's share of
what the flush adds, ``min(1, output bytes / L2)``.  On an Intel Xeon (2 MiB L2), against the float zoo's
profiles, that took the copy operators' mean error from 53 to 32 % on YOLOv8n, 49 to 26 % on ViT-Tiny and 40 to
28 % on GoogLeNet, and lowered it on the others (``bench/results/element_cold_outputs_spr_s38.txt``), where the
flushed time itself over-predicted ViT-Tiny's 38-150 k-element Transposes 2-5x and the time as it is
under-predicted YOLOv8n's C2f Concats and Splits 2-3x; a board so measured, against one whose same samples keep
their time as they are, moved no zoo sum away from its profile and 9 of 18 towards it by 0.5-4.4 points (YOLOv8n
-15.2 -> -10.8 %, ``predictor_error_spr_s38_cold.txt``).  Element-wise operators are left as they are: onnxruntime
runs many in place, on a buffer just written (ResNet's Relus took a third of their points' time).  The layout glue
(:mod:`.host_glue`: the Q/DQ and Transpose kernels onnxruntime adds where layouts meet) writes new buffers too, and
is measured and mixed so (:data:`UINT8_GLUE` writes a byte an element): a flushed DequantizeLinear takes 3-7x its
time as it is, YOLOv8n int8's C2f DequantizeLinears 2-4x their points'.  Against the same samples kept as they
are, ResNet-50 int8's sum went -19.5 -> -10.4 %, ViT-Tiny int8's -30.8 -> -26.2, the int8 rows' mean error down on
7 of 9, ResNet-18/50 int8's up 0.4 and 2.2 points (their residual Adds' glue over-predicted;
``predictor_error_spr_s38_glue.txt``).
"""

from __future__ import annotations

from cimsplit.compiler.host_model import INT8_PREFIX, KERNEL_SUFFIXES, plain_kind

__all__ = ["COPY_OPS", "UINT8_GLUE", "is_copy_kind", "output_bytes", "in_network_ns"]

COPY_OPS = frozenset({"Concat", "Split", "Slice", "Resize", "MaxPool", "AveragePool", "Transpose", "Softmax", "Pad", "Gather"})
"""Operators that write a new buffer of another shape than their input's: never in place."""


def is_copy_kind(kind: str) -> bool:
    """A kind of :data:`COPY_OPS`, float or int8, with any axis variant (``Softmax-last``) or kernel variant."""
    base = plain_kind(kind).removeprefix(INT8_PREFIX)
    for suffix in KERNEL_SUFFIXES:
        base = base.removesuffix(suffix)
    return base.split("-")[0] in COPY_OPS


UINT8_GLUE = frozenset({"glue:QuantizeLinear", "glue:Transpose-u8"})
"""Layout-glue kinds (:mod:`.host_glue`, measured so too) that write uint8; the others write floats."""


def output_bytes(kind: str, n_out: float) -> float:
    """Bytes the operator writes: a byte per element for an int8 kind whose kernel is quantized (or uint8 glue), four
    for a float kind or one onnxruntime runs in float between its Q/DQ kernels (``-s8in``, ``-s8out``, ``-s8``)."""
    quantized = kind in UINT8_GLUE or (kind.startswith(INT8_PREFIX) and not kind.endswith(KERNEL_SUFFIXES))
    return n_out * (1 if quantized else 4)


def in_network_ns(kind: str, n_out: float, hot_ns: float, flushed_ns: float, l2_bytes: int) -> float:
    """A copy operator's time in a network from its point's as it is and flushed (module docstring)."""
    share = min(1.0, output_bytes(kind, n_out) / max(l2_bytes, 1))
    return hot_ns + max(0.0, flushed_ns - hot_ns) * share
