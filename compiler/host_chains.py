"""Chains of element-wise operators that onnxruntime runs as one kernel, read from its optimized graph.

A PyTorch export writes GELU as Div, Erf, Add, Mul, Mul and a transformer's last
residual Add before a LayerNormalization as two operators; onnxruntime fuses each
into one kernel (com.microsoft's ``Gelu``, ``SkipLayerNormalization``), which costs
nothing like the sum of its parts: ViT-Tiny's GELU on 197 x 768 elements takes
97 us as one kernel, 180 us predicted as its five operators; a
SkipLayerNormalization on 197 x 192 takes 190 us, where a LayerNormalization
alone takes 23 us and an Add 10 (on a Zen 4 core, one thread).  :func:`fused_chains` finds the
regions (:mod:`cimsplit.compiler.kernel_attribution`) whose one kernel does the
whole work of two or more element-wise operators, with the calibrated kind that
predicts that kernel (:data:`CHAIN_KINDS`, measured on the same patterns) at the
chain's output elements.  Nothing is measured here.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import onnx

from cimsplit.compiler.kernel_attribution import Region, attribute_kernels
from cimsplit.compiler.workload import Workload

__all__ = ["CHAIN_KINDS", "KERNEL_KINDS", "STAND_INS", "Chain", "calibrated", "fused_chains"]

CHAIN_KINDS = ("Gelu", "SkipLayerNormalization", "SiLU")
"""Calibrated kinds measured as a pattern onnxruntime fuses (float only: between the Q/DQ pairs of a
quantized model it fuses nothing), each point's time the sum of its operators'."""
KERNEL_KINDS = {"Gelu": "Gelu", "BiasGelu": "Gelu", "SkipLayerNormalization": "SkipLayerNormalization",
                "QuickGelu": "SiLU", "LayerNormalization": "LayerNormalization"}
"""The calibrated kind that predicts a fused kernel: its own pattern's (a SiLU's QuickGelu, x * sigmoid(x), also
after a conv: :func:`cimsplit.compiler.host_fused.kernel_kind`), or one pass of the kind it computes."""
STAND_INS = {"SiLU": "Sigmoid"}
"""What predicts a chain kind a calibration from before it lacks: a QuickGelu as one Sigmoid pass.  Measured as its
own kind, it runs 1.25-1.55x that pass (EfficientNet-B0 float: 0.49-0.57 ns per element, its Sigmoid points 0.33-0.45):
MLAS computes the logistic, then multiplies by x, two passes over each block."""


def calibrated(kind: str, fits: Collection[str]) -> str:
    """``kind``, or its stand-in (:data:`STAND_INS`) when a calibration lacks it."""
    return kind if kind in fits or kind not in STAND_INS else STAND_INS[kind]


@dataclass(frozen=True)
class Chain:
    """Operators one fused kernel runs, and what predicts it."""

    kind: str
    elements: float
    """Output elements of the chain (its operators' most)."""
    operators: tuple[str, ...]


def fused_chains(simplified: onnx.ModelProto, optimized: onnx.ModelProto, workload: Workload,
                 regions: Sequence[Region] | None = None) -> list[Chain]:
    """Every region whose one kernel is in :data:`KERNEL_KINDS` and does the work of two or more operators, each
    element-wise (no GEMM) and wholly inside it."""
    kernel_types = {node.name: node.op_type for node in optimized.graph.node}
    owner = {node: op for op in workload.operators for node in op.nodes}
    chains = []
    for region in attribute_kernels(simplified, optimized) if regions is None else regions:
        if len(region.kernels) != 1 or kernel_types[region.kernels[0][0]] not in KERNEL_KINDS:
            continue
        inside = set(region.nodes)
        ops = list({owner[node].name: owner[node] for node in region.nodes if node in owner}.values())
        if len(ops) < 2 or any(op.m is not None or op.product_shape is not None or not set(op.nodes) <= inside for op in ops):
            continue
        chains.append(Chain(KERNEL_KINDS[kernel_types[region.kernels[0][0]]], float(max(1, *(op.n_out for op in ops))),
                            tuple(op.name for op in ops)))
    return chains
