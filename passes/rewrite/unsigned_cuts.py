"""Cut int8 QDQ pairs as onnxruntime would have converted them: to uint8 (x86).

The split cuts a pair when its Q and DQ land in different partitions: each
partition alone no longer shows the pair, so onnxruntime would leave it int8
and the consumer would run the S8S8 kernel the whole model does not run —
several times slower, and not always bit-identical (U8S8 kernels on AVX2
saturate differently).  :func:`unsigned_cuts` converts exactly the cut pairs
onnxruntime converts in the whole model (:func:`cimsplit.compiler.qdq_kernels.converted_pairs`),
so that every partition runs the kernels of the whole model.  The conversion
is exact: ``q_u8 = q_s8 + 128`` for every input, and
``(q_u8 - (zp + 128)) * s = (q_s8 - zp) * s``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from cimsplit.compiler.qdq_kernels import QdqPair, converted_pairs, readers_of

__all__ = ["unsigned_cuts"]


def unsigned_cuts(model: onnx.ModelProto, partitions_of: Mapping[str, set[str]],
                  whole: onnx.ModelProto | None = None) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """``model`` with every cut int8 Q -> DQ pair onnxruntime would convert made uint8, and the tensors converted.

    ``partitions_of`` maps node names to the partitions that hold them (a DQ on a
    boundary is copied into its readers' partitions); a pair is cut when a DQ
    reading its tensor is in a partition its Q is not.  ``whole``: the model
    onnxruntime would run whole, whose pairs are the ones it converts (default
    ``model``).  A sliced model is not that model: both parts of a sliced
    operator read the one DQ of its input, a DQ with two readers that
    onnxruntime would duplicate and not convert, where the whole model's DQ has
    one reader and is converted (ViT-Tiny S8S8 per tensor: a KS-sliced qkv
    MatMul ran DQ + float MatMul in its parts, QLinearMatMul whole, 0.25 off).
    Every DQ of the pair's tensor is converted with its Q.
    """
    readers = readers_of(model.graph)
    quantizers = {node.name for node in model.graph.node if node.op_type == "QuantizeLinear"}
    cut = []
    for pair in converted_pairs((whole or model).graph).values():
        dequantizers = readers.get(pair.tensor, [])
        if (pair.quantize not in quantizers or not dequantizers
                or any(d.op_type != "DequantizeLinear" or d.input[0] != pair.tensor for d in dequantizers)):
            continue  # the slicing rewrite replaced the pair (a sliced operator's output): leave it as it is
        home = partitions_of.get(pair.quantize, set())
        if any(partitions_of.get(d.name, set()) - home for d in dequantizers):
            cut.append((pair, [d.name for d in dequantizers]))
    if not cut:
        return model, ()
    converted = onnx.ModelProto()
    converted.CopyFrom(model)
    _convert(converted, cut)
    return converted, tuple(pair.tensor for pair, _ in cut)


def _convert(model: onnx.ModelProto, pairs: list[tuple[QdqPair, list[str]]]) -> None:
    graph = model.graph
    nodes = {node.name: node for node in graph.node}
    infos = {vi.name: vi for vi in graph.value_info}
    zero_points = {t.name: t for t in graph.initializer}
    taken = set(zero_points) | {o for node in graph.node for o in node.output}
    for pair, dequantizers in pairs:
        q = nodes[pair.quantize]
        name, k = f"{pair.tensor}_zero_point_u8", 0
        while name in taken:
            k += 1
            name = f"{pair.tensor}_zero_point_u8_{k}"
        taken.add(name)
        shape = numpy_helper.to_array(zero_points[q.input[2]]).shape
        graph.initializer.append(numpy_helper.from_array(np.full(shape, pair.zero_point + 128, np.uint8), name))
        q.input[2] = name
        for dq in dequantizers:
            nodes[dq].input[2] = name
        if pair.tensor in infos:
            infos[pair.tensor].type.tensor_type.elem_type = TensorProto.UINT8
        else:
            graph.value_info.append(onnx.helper.make_tensor_value_info(pair.tensor, TensorProto.UINT8, None))
