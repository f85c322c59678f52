"""Cut int8 QDQ pairs as onnxruntime would have converted them: to uint8 (x86).

On x86 onnxruntime rewrites an int8 ``QuantizeLinear -> DequantizeLinear``
pair to uint8 before it fuses QDQ groups (``QDQS8ToU8Transformer``, run
unless ``session.qdqisint8allowed`` is set; see onnxruntime's
``core/optimizer/qdq_transformer/qdq_s8_to_u8.cc``): both zero points become
``zp + 128`` as uint8, so the consumer runs a U8S8 kernel instead of a much
slower S8S8 one (5x on ResNet-18 here).  It converts a pair only when the Q
output feeds exactly one node input, that of the DQ, and is no graph output,
and both zero points are equal constant int8 scalars.  Before that,
``EnsureUniqueDQForNodeUnit`` gives every consumer of a DQ its own copy
unless the DQ feeds no node or one node input and no graph output
(``ensure_unique_dq_for_node_unit.cc``); a duplicated DQ leaves its Q with
several DQs, and the pair unconverted.

The split cuts a pair when Q and DQ land in different partitions: each
partition alone no longer shows the pair, so onnxruntime would leave it int8
and the consumer would run the S8S8 kernel the whole model does not run —
slower, and not always bit-identical (U8S8 kernels on AVX2 saturate
differently).  :func:`unsigned_cuts` applies the conversion to exactly the cut
pairs onnxruntime would have converted, so that every partition runs the
kernels of the whole model.  The conversion is exact: ``q_u8 = q_s8 + 128``
for every input, and ``(q_u8 - (zp + 128)) * s = (q_s8 - zp) * s``.  On ARM
onnxruntime keeps int8 pairs (no conversion), and so does this.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

__all__ = ["unsigned_cuts", "onnxruntime_converts_int8_pairs"]

_X86 = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})


def onnxruntime_converts_int8_pairs(machine: str | None = None) -> bool:
    """True on x86, where onnxruntime's default converts int8 QDQ pairs to uint8 (``qdqisint8allowed`` off)."""
    return (machine or platform.machine()).lower() in _X86


def _int8_scalar(name: str, initializers: dict[str, TensorProto]) -> int | None:
    tensor = initializers.get(name)
    if tensor is None or tensor.data_type != TensorProto.INT8:
        return None
    values = numpy_helper.to_array(tensor)
    return int(values.reshape(-1)[0]) if values.size == 1 else None


def unsigned_cuts(model: onnx.ModelProto, partition_of: dict[str, str]) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """``model`` with every cut int8 Q -> DQ pair onnxruntime would convert made uint8, and the tensors converted.

    ``partition_of`` maps node names to partition names; a pair is cut when
    its Q and DQ are in different partitions.  A DQ copied into several
    partitions never qualifies (its Q would feed several DQs).
    """
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    edges: dict[str, list[onnx.NodeProto]] = {}  # tensor -> one entry per node input that reads it
    for node in graph.node:
        for name in node.input:
            edges.setdefault(name, []).append(node)
    pairs = []
    for q in graph.node:
        if q.op_type != "QuantizeLinear" or q.domain not in ("", "ai.onnx") or len(q.input) != 3:
            continue
        tensor = q.output[0]
        readers = edges.get(tensor, [])
        if tensor in outputs or len(readers) != 1:
            continue
        dq = readers[0]
        if dq.op_type != "DequantizeLinear" or dq.domain not in ("", "ai.onnx") or len(dq.input) != 3 or dq.input[0] != tensor:
            continue
        dq_edges = len(edges.get(dq.output[0], []))
        if dq_edges > 1 or (dq_edges == 1 and dq.output[0] in outputs):
            continue  # onnxruntime duplicates such a DQ per consumer first, which leaves the pair int8
        zp_q, zp_dq = _int8_scalar(q.input[2], initializers), _int8_scalar(dq.input[2], initializers)
        if zp_q is None or zp_q != zp_dq or partition_of.get(q.name) == partition_of.get(dq.name):
            continue
        pairs.append((q, dq, zp_q))
    if not pairs:
        return model, ()
    converted = onnx.ModelProto()
    converted.CopyFrom(model)
    _convert(converted, [(q.name, dq.name, zp) for q, dq, zp in pairs])
    return converted, tuple(q.output[0] for q, _, _ in pairs)


def _convert(model: onnx.ModelProto, pairs: Iterable[tuple[str, str, int]]) -> None:
    graph = model.graph
    nodes = {node.name: node for node in graph.node}
    infos = {vi.name: vi for vi in graph.value_info}
    taken = {t.name for t in graph.initializer} | {o for node in graph.node for o in node.output}
    for q_name, dq_name, zero_point in pairs:
        q, dq = nodes[q_name], nodes[dq_name]
        tensor = q.output[0]
        name, k = f"{tensor}_zero_point_u8", 0
        while name in taken:
            k += 1
            name = f"{tensor}_zero_point_u8_{k}"
        taken.add(name)
        shape = numpy_helper.to_array(next(t for t in graph.initializer if t.name == q.input[2])).shape
        graph.initializer.append(numpy_helper.from_array(np.full(shape, zero_point + 128, np.uint8), name))
        q.input[2] = dq.input[2] = name
        if tensor in infos:
            infos[tensor].type.tensor_type.elem_type = TensorProto.UINT8
        else:
            graph.value_info.append(onnx.helper.make_tensor_value_info(tensor, TensorProto.UINT8, None))
