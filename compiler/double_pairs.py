"""onnxruntime's ``DoubleQDQPairsRemover``, done to the model cimsplit costs and splits.

Where a chain ``Q1 -> DQ1 -> Q2 -> DQ2`` has two pairs of different scales, onnxruntime's level-1
optimizer (``core/optimizer/double_qdq_pairs_remover.cc``) removes the middle two nodes and gives Q1 and DQ2
one new scale and zero point: the intersection of the two pairs' real ranges, spread over the integer
range.  That changes values (a tensor then quantizes once, on a grid of its own), so where such a chain
is in the graph cimsplit splits, it must be merged the same way, or a cut in it would run both pairs
where the whole model runs one (fuzz seed 42889: an ``If`` on the batch folded at batch 1 left a pair right
after another; 0.0215 off).

The conditions are onnxruntime's: DQ1 reads Q1 and is read once, Q1 is read by DQ1 only, Q2 by DQ2 only,
none of the three writes a graph output; each pair (Q1, DQ1) and (Q2, DQ2) has explicit, constant,
scalar, equal scale and zero point; the zero points are of one 8- or 16-bit integer type, the scales float.
The new parameters, in float32 as onnxruntime computes them, for the integer range [qmin, qmax]::

    real_min = max((qmin - z1) * s1, (qmin - z2) * s2)      real_max = min((qmax - z1) * s1, (qmax - z2) * s2)
    scale = (real_max - real_min) / (qmax - qmin)          zero = round(qmin - real_min / scale)

(``round`` half away from zero); pairs of equal zero points and scales within 1e-20 keep theirs (onnxruntime
1.32 does; recomputed, (0.3, 99) would become 0.30000004).  onnxruntime checks the chains in topological
order, the graph as edited so far, and so does :func:`merge_double_pairs`.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["merge_double_pairs", "merged_parameters"]

_RANGES = {onnx.TensorProto.INT8: (-128, 127), onnx.TensorProto.UINT8: (0, 255), onnx.TensorProto.INT16: (-32768, 32767),
           onnx.TensorProto.UINT16: (0, 65535)}
_DOMAINS = ("", "ai.onnx", "com.microsoft")


def merged_parameters(s1: float, z1: int, s2: float, z2: int, zero_type: int) -> tuple[np.float32, int]:
    """The scale and zero point onnxruntime gives the pair left of two (module docstring), float32 arithmetic."""
    qmin, qmax = _RANGES[zero_type]
    f32 = np.float32
    real_min = max(f32(qmin - z1) * f32(s1), f32(qmin - z2) * f32(s2))
    real_max = min(f32(qmax - z1) * f32(s1), f32(qmax - z2) * f32(s2))
    scale = (real_max - real_min) / f32(qmax - qmin)
    x = float(f32(qmin) - real_min / scale)
    zero = int(math.copysign(math.floor(abs(x) + 0.5), x))  # std::round, exact for a float32 x
    dtype = onnx.helper.tensor_dtype_to_np_dtype(zero_type)
    return f32(scale), int(np.array(zero).astype(dtype))  # (a C++ narrowing cast: wraps on x86)


class _Chains:
    """The top-level graph's tensors: who writes each, who reads it, and the constant scalars."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.graph = model.graph
        self.constants = {t.name: t for t in self.graph.initializer}
        self.outputs = {vi.name for vi in self.graph.output}
        self.names = {n for node in self.graph.node for n in [*node.input, *node.output]} | set(self.constants)

    def index(self) -> None:
        """(Re)build the maps of writers and readers: once, and after each merge (a rare edit)."""
        self.producer = {name: node for node in self.graph.node for name in node.output}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in self.graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)

    def scalar(self, name: str) -> np.ndarray | None:
        tensor = self.constants.get(name)
        if tensor is None or len(tensor.dims) > 1 or (tensor.dims and tensor.dims[0] != 1):
            return None
        return numpy_helper.to_array(tensor).reshape(-1)

    def pair(self, q: onnx.NodeProto, dq: onnx.NodeProto) -> tuple[float, int, int] | None:
        """(scale, zero point, zero type) of a Q and DQ with explicit, constant, scalar, equal parameters."""
        if len(q.input) != 3 or len(dq.input) != 3 or not all([*q.input[1:], *dq.input[1:]]):
            return None
        values = [self.scalar(name) for name in (*q.input[1:], *dq.input[1:])]
        if any(v is None for v in values):
            return None
        q_scale, q_zero, dq_scale, dq_zero = values
        zero_type = self.constants[q.input[2]].data_type
        if (self.constants[dq.input[2]].data_type != zero_type or q_scale.dtype != np.float32 or dq_scale.dtype != np.float32
                or q_zero[0] != dq_zero[0] or q_scale[0] != dq_scale[0]):
            return None
        return float(q_scale[0]), int(q_zero[0]), zero_type

    def only_reader(self, node: onnx.NodeProto) -> onnx.NodeProto | None:
        """The one node reading ``node``'s output, which is no graph output (onnxruntime: one output edge), else None."""
        readers = self.readers.get(node.output[0], []) if node.output else []
        return readers[0] if len(readers) == 1 and node.output[0] not in self.outputs else None

    def set_params(self, node: onnx.NodeProto, scale: np.float32, zero: int) -> None:
        for i, value in ((1, scale), (2, zero)):
            old = self.constants[node.input[i]]
            array = numpy_helper.to_array(old).copy()
            array.reshape(-1)[0] = value
            name = f"DoubleQDQRemoved_{old.name}"
            k = 1
            while name in self.names:
                name, k = f"DoubleQDQRemoved_{old.name}_{k}", k + 1
            self.names.add(name)
            tensor = numpy_helper.from_array(array, name)
            self.graph.initializer.append(tensor)
            self.constants[name] = tensor
            node.input[i] = name


def _is(node: onnx.NodeProto | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and node.domain in _DOMAINS


def merge_double_pairs(model: onnx.ModelProto) -> int:
    """Merge, in place, the ``Q1 -> DQ1 -> Q2 -> DQ2`` chains onnxruntime merges (module docstring); how many."""
    chains = _Chains(model)
    chains.index()
    merged = 0
    for dq1 in list(model.graph.node):
        if not _is(dq1, "DequantizeLinear"):
            continue
        q1, q2 = chains.producer.get(dq1.input[0]), chains.only_reader(dq1)
        if not (_is(q1, "QuantizeLinear") and _is(q2, "QuantizeLinear") and chains.only_reader(q1) == dq1):
            continue
        dq2 = chains.only_reader(q2)
        if not _is(dq2, "DequantizeLinear"):
            continue
        first, second = chains.pair(q1, dq1), chains.pair(q2, dq2)
        if first is None or second is None or first[2] != second[2] or first[2] not in _RANGES:
            continue
        if first[1] != second[1] or abs(np.float32(first[0]) - np.float32(second[0])) >= 1e-20:  # (else kept, as in onnxruntime)
            scale, zero = merged_parameters(first[0], first[1], second[0], second[1], first[2])
            chains.set_params(q1, scale, zero)
            chains.set_params(dq2, scale, zero)
        dq2.input[0] = q1.output[0]
        model.graph.node.remove(dq1)
        model.graph.node.remove(q2)
        chains.index()
        merged += 1
    return merged
