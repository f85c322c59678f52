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

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from cimsplit.compiler.qdq_kernels import QdqPair, converted_pairs

__all__ = ["unsigned_cuts"]


def unsigned_cuts(model: onnx.ModelProto, partition_of: dict[str, str]) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """``model`` with every cut int8 Q -> DQ pair onnxruntime would convert made uint8, and the tensors converted.

    ``partition_of`` maps node names to partition names; a pair is cut when
    its Q and DQ are in different partitions.
    """
    cut = [pair for pair in converted_pairs(model.graph).values()
           if partition_of.get(pair.quantize) != partition_of.get(pair.dequantize)]
    if not cut:
        return model, ()
    converted = onnx.ModelProto()
    converted.CopyFrom(model)
    _convert(converted, cut)
    return converted, tuple(pair.tensor for pair in cut)


def _convert(model: onnx.ModelProto, pairs: list[QdqPair]) -> None:
    graph = model.graph
    nodes = {node.name: node for node in graph.node}
    infos = {vi.name: vi for vi in graph.value_info}
    zero_points = {t.name: t for t in graph.initializer}
    taken = set(zero_points) | {o for node in graph.node for o in node.output}
    for pair in pairs:
        q, dq = nodes[pair.quantize], nodes[pair.dequantize]
        name, k = f"{pair.tensor}_zero_point_u8", 0
        while name in taken:
            k += 1
            name = f"{pair.tensor}_zero_point_u8_{k}"
        taken.add(name)
        shape = numpy_helper.to_array(zero_points[q.input[2]]).shape
        graph.initializer.append(numpy_helper.from_array(np.full(shape, pair.zero_point + 128, np.uint8), name))
        q.input[2] = dq.input[2] = name
        if pair.tensor in infos:
            infos[pair.tensor].type.tensor_type.elem_type = TensorProto.UINT8
        else:
            graph.value_info.append(onnx.helper.make_tensor_value_info(pair.tensor, TensorProto.UINT8, None))
