"""Which int8 QDQ pairs onnxruntime runs as uint8, and so which quantized kernels run.

On x86 onnxruntime rewrites an int8 ``QuantizeLinear -> DequantizeLinear``
(ONNX or com.microsoft domain: ``MatchQNode`` in ``qdq_util.cc``)
pair to uint8 before it fuses QDQ groups (``QDQS8ToU8Transformer``, run
unless ``session.qdqisint8allowed`` is set; see onnxruntime's
``core/optimizer/qdq_transformer/qdq_s8_to_u8.cc``): both zero points become
``zp + 128``, and the consumer runs a U8S8 kernel.  It converts a pair only
when the Q output feeds exactly one node input, that of the DQ, and is no
graph output, and both zero points are equal constant int8 scalars.  Before
that, ``EnsureUniqueDQForNodeUnit`` gives every consumer of a DQ its own copy
unless the DQ feeds no node or one node input and no graph output
(``ensure_unique_dq_for_node_unit.cc``); a duplicated DQ leaves its Q with
several DQs, and the pair int8.  On ARM onnxruntime keeps int8 pairs.

A Conv or Gemm whose int8 input pair stays int8 runs a kernel four to nine
times slower per MAC than one whose pair is converted (ResNet-18 int8 on
this machine: 22-47 ps/MAC against 5 ps/MAC), so the split cuts pairs the way
onnxruntime converts them (:mod:`cimsplit.passes.rewrite.unsigned_cuts`) and
the host model tells the kernels apart (:func:`int8_kernels`).  A kept
output pair slows a kernel down too: onnxruntime does not fuse a quantized
Conv whose uint8 input meets an int8 output (YOLOv5n's SiLU forks every
conv output).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

import onnx
from onnx import TensorProto, numpy_helper

from cimsplit.compiler.constants import QDQ_DOMAINS

__all__ = ["QdqPair", "onnxruntime_converts_int8_pairs", "onnxruntime_runs_nchwc", "converted_pairs", "int8_kernels", "readers_of"]

_X86 = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})


@dataclass(frozen=True)
class QdqPair:
    """An int8 Q -> DQ pair onnxruntime converts to uint8 (on x86)."""

    quantize: str
    dequantize: str
    tensor: str
    zero_point: int


def _x86(machine: str | None) -> bool:
    return (machine or platform.machine()).lower() in _X86


def onnxruntime_converts_int8_pairs(machine: str | None = None) -> bool:
    """True on x86 (``platform.machine()`` or ``machine``), where onnxruntime's default converts int8 pairs."""
    return _x86(machine)


def onnxruntime_runs_nchwc(machine: str | None = None) -> bool:
    """True on x86, where onnxruntime runs float convs in its blocked NCHWc layout (MLAS's AVX2 and AVX-512 kernels)."""
    return _x86(machine)


def _int8_scalar(name: str, initializers: dict[str, TensorProto]) -> int | None:
    tensor = initializers.get(name)
    if tensor is None or tensor.data_type != TensorProto.INT8:
        return None
    values = numpy_helper.to_array(tensor)
    return int(values.reshape(-1)[0]) if values.size == 1 else None


def readers_of(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Tensor -> one entry per node input that reads it (a node reading a tensor twice counts twice)."""
    edges: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            edges.setdefault(name, []).append(node)
    return edges


def converted_pairs(graph: onnx.GraphProto) -> dict[str, QdqPair]:
    """The int8 pairs onnxruntime's default converts to uint8 on x86, by the tensor between Q and DQ."""
    initializers = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    edges = readers_of(graph)
    pairs: dict[str, QdqPair] = {}
    for q in graph.node:
        if q.op_type != "QuantizeLinear" or q.domain not in QDQ_DOMAINS or len(q.input) != 3:
            continue
        tensor = q.output[0]
        readers = edges.get(tensor, [])
        if tensor in outputs or len(readers) != 1:
            continue
        dq = readers[0]
        if dq.op_type != "DequantizeLinear" or dq.domain not in QDQ_DOMAINS or len(dq.input) != 3 or dq.input[0] != tensor:
            continue
        dq_edges = len(edges.get(dq.output[0], []))
        if dq_edges > 1 or (dq_edges == 1 and dq.output[0] in outputs):
            continue  # the DQ is duplicated per consumer first, which leaves its Q with several DQs
        zero_point = _int8_scalar(q.input[2], initializers)
        if zero_point is None or zero_point != _int8_scalar(dq.input[2], initializers):
            continue
        pairs[tensor] = QdqPair(q.name, dq.name, tensor, zero_point)
    return pairs


_FUSED = frozenset({"Relu", "Clip", "LeakyRelu"})
"""Activations onnxruntime folds into a quantized kernel between it and its output QuantizeLinear."""


def int8_kernels(graph: onnx.GraphProto, machine: str | None = None) -> dict[str, str]:
    """Node -> which of its int8 sides onnxruntime keeps int8: ``-s8in``, ``-s8out`` or ``-s8`` (both).

    The input side is any data input a DequantizeLinear of an int8 activation
    makes (a residual Add whose shortcut, its second input, is a kept pair runs
    in float like one whose first is; a weight's DQ reads a constant and is no
    side); the output side the QuantizeLinear that quantizes any of its outputs
    (through a folded Relu/Clip; one kept output of a Split is enough for
    onnxruntime to run it in float between its DequantizeLinear and
    QuantizeLinears).  A side is kept when its pair is not converted
    (:func:`converted_pairs`; every pair on a machine where onnxruntime keeps
    int8, ARM).  Nodes with neither side kept are left out.
    """
    initializers = {t.name: t for t in graph.initializer}
    producers = {out: n for n in graph.node for out in n.output}
    consumers = readers_of(graph)
    pairs = converted_pairs(graph) if onnxruntime_converts_int8_pairs(machine) else {}

    def int8_kept(q_or_dq: onnx.NodeProto, tensor: str) -> bool:
        zero_point = initializers.get(q_or_dq.input[2]) if len(q_or_dq.input) > 2 else None
        return zero_point is not None and zero_point.data_type == TensorProto.INT8 and tensor not in pairs

    def kept_input(name: str) -> bool:
        dq = producers.get(name)
        return (dq is not None and dq.op_type == "DequantizeLinear" and dq.input[0] not in initializers
                and int8_kept(dq, dq.input[0]))

    def kept_output(out: str) -> bool:
        readers = consumers.get(out, [])
        while len(readers) == 1 and readers[0].op_type in _FUSED:
            readers = consumers.get(readers[0].output[0], [])
        return any(r.op_type == "QuantizeLinear" and int8_kept(r, r.output[0]) for r in readers)

    kernels = {}
    for node in graph.node:
        kept_in = any(kept_input(name) for name in node.input if name)
        kept_out = any(kept_output(out) for out in node.output if out)
        if kept_in or kept_out:
            kernels[node.name] = "-s8" if kept_in and kept_out else "-s8in" if kept_in else "-s8out"
    return kernels
