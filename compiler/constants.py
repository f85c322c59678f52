"""Which tensors are constant: weights and everything computed from constants only.

A tensor is constant when it is

* an initializer or the output of a ``Constant`` node,
* the output of ``Shape``/``Size`` (every activation shape is static once the
  graph inputs are fixed, so these are compile-time values), or
* the output of a deterministic default-domain node all of whose inputs are
  constant — this covers the weight chains exporters and quantizers write
  (``DequantizeLinear``, ``Transpose``, ``Reshape``, ``Cast``, ``Squeeze``,
  ``Unsqueeze``, ``Identity``) as well as shape arithmetic that was not folded
  (``Gather``/``Unsqueeze``/``Concat`` on a ``Shape``).

This is deliberately a superset of "reached from an initializer through
DQ/Transpose/Reshape/Cast": any node whose inputs are all constant computes the
same value on every run, so it is a weight the CIM can be programmed with, and
it must never become a schedulable operator.  Nodes with subgraphs (If, Loop,
Scan), custom-domain nodes and random generators are never constant.
The weight's logical shape is simply the static shape of the tensor the
GEMM reads, i.e. after the transpose/reshape chain.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

__all__ = ["constant_tensors", "constant_nodes", "STANDARD_DOMAINS", "QDQ_DOMAINS", "is_quantize_node"]

STANDARD_DOMAINS = frozenset({"", "ai.onnx"})
_QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
QDQ_DOMAINS = STANDARD_DOMAINS | {"com.microsoft"}  # ORT writes int16/int4 Q/DQ in com.microsoft


def is_quantize_node(node: onnx.NodeProto) -> bool:
    """QuantizeLinear / DequantizeLinear, in the ONNX domain or onnxruntime's com.microsoft."""
    return node.op_type in _QDQ_OPS and node.domain in QDQ_DOMAINS
_RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"})
_SHAPE_ONLY_OPS = frozenset({"Shape", "Size"})


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _is_foldable_kind(node: onnx.NodeProto) -> bool:
    if is_quantize_node(node):
        return True
    return node.domain in STANDARD_DOMAINS and node.op_type not in _RANDOM_OPS and not _has_subgraph(node)


def constant_tensors(graph: onnx.GraphProto, extra: Iterable[str] = ()) -> set[str]:
    """Names of constant tensors in ``graph`` (nodes must be topologically sorted).

    ``extra`` adds names known constant from outside (outer-scope constants of a
    subgraph).  One pass over the nodes: O(nodes + edges).
    """
    consts = {t.name for t in graph.initializer}
    consts.update(t.values.name for t in graph.sparse_initializer)
    consts.update(extra)
    for node in graph.node:
        if not _is_foldable_kind(node):
            continue
        inputs = [name for name in node.input if name]
        if node.op_type == "Constant" or node.op_type in _SHAPE_ONLY_OPS:
            consts.update(o for o in node.output if o)
        elif inputs and all(name in consts for name in inputs):
            consts.update(o for o in node.output if o)
    return consts


def constant_nodes(graph: onnx.GraphProto, consts: set[str]) -> list[onnx.NodeProto]:
    """Nodes whose every output is constant (they never become operators)."""
    return [n for n in graph.node if n.output and all((not o) or o in consts for o in n.output)]
