"""Group the compute nodes of a simplified model into operators (DESIGN §2).

Rules, applied in one pass over the nodes in topological order:

1. Constant nodes (see :mod:`cimsplit.compiler.constants`) and shape-only
   nodes never join a group.
2. Quantize/dequantize fusion.  ``QuantizeLinear``, ``DequantizeLinear``,
   ``DynamicQuantizeLinear`` and ``Identity`` on an *activation* are not
   operators of their own: such a node joins the group of the node that
   produced its data input (so ``Conv -> Q -> DQ`` is one operator, the
   ``Conv``).  When its data input is a graph input, the Q/DQ chain joins the
   group of its single consumer (``x -> Q -> DQ -> Conv`` is the ``Conv``);
   with several consumers the chain stays a host operator of its own.
   Hence an int8 QDQ model yields the same operators, GEMM shapes, element
   counts and crossbar totals as its float version.
3. Activation fusion.  An element-wise activation (Relu, Clip, LeakyRelu,
   Sigmoid, HardSigmoid, HardSwish, Tanh) that is the only consumer of a
   CIM-capable group's output joins that group; so does the SiLU pair
   ``x * Sigmoid(x)`` (Sigmoid and Mul sharing x, Q/DQ between them allowed).
   At most one activation (or SiLU pair) per group.
4. Bias fusion.  An ``Add`` of a constant that is the only consumer of a
   CIM-capable group's output joins that group, before any activation: it is
   the GEMM's bias, which exporters write as ``MatMul -> Add`` (PyTorch's
   Linear on 3-D inputs, PaddlePaddle's fc); ``Gemm`` carries it inline.
5. Every other compute node anchors a group of its own.

The anchor is listed first in a group, then the fused nodes in node order.
The pass touches each node and tensor a bounded number of times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import onnx

from cimsplit.compiler.constants import STANDARD_DOMAINS, is_quantize_node

__all__ = ["ACTIVATIONS", "TRANSPARENT", "Group", "Graph", "group_nodes", "is_transparent", "activation_inputs"]

ACTIVATIONS = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh"})
TRANSPARENT = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Identity"})


@dataclass
class Group:
    anchor: int
    members: list[int] = field(default_factory=list)
    fused_activation: bool = False
    fused_bias: bool = False


@dataclass
class Graph:
    """Index of a topologically sorted node list: producers, consumers, graph outputs."""

    nodes: Sequence[onnx.NodeProto]
    consts: set[str]
    graph_outputs: set[str]
    producer: dict[str, int] = field(default_factory=dict)
    consumers: dict[str, list[int]] = field(default_factory=dict)
    compute: list[bool] = field(default_factory=list)

    @classmethod
    def index(cls, nodes: Sequence[onnx.NodeProto], consts: set[str], graph_outputs: set[str]) -> Graph:
        g = cls(nodes, consts, graph_outputs)
        g.compute = [not (n.output and all((not o) or o in consts for o in n.output)) for n in nodes]
        for i, node in enumerate(nodes):
            if not g.compute[i]:
                continue
            for out in node.output:
                if out:
                    g.producer[out] = i
            for name in dict.fromkeys(activation_inputs(node, consts)):
                g.consumers.setdefault(name, []).append(i)
        return g

    def consumers_of(self, i: int) -> set[int]:
        return {c for out in self.nodes[i].output if out for c in self.consumers.get(out, ())}


def _subgraph_free_names(graph: onnx.GraphProto) -> list[str]:
    """Names a subgraph reads from its enclosing scope."""
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    free: list[str] = []
    for node in graph.node:
        for name in list(node.input) + _nested_free_names(node):
            if name and name not in defined:
                free.append(name)
        defined.update(node.output)
    for vi in graph.output:
        if vi.name not in defined:
            free.append(vi.name)
    return free


def _nested_free_names(node: onnx.NodeProto) -> list[str]:
    names: list[str] = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            names.extend(_subgraph_free_names(attr.g))
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for sub in attr.graphs:
                names.extend(_subgraph_free_names(sub))
    return names


def activation_inputs(node: onnx.NodeProto, consts: set[str]) -> list[str]:
    """Non-constant tensors a node reads, including outer-scope names used by its subgraphs."""
    names = [n for n in node.input if n and n not in consts]
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        names.extend(n for n in _nested_free_names(node) if n not in consts)
    return names


def is_transparent(node: onnx.NodeProto) -> bool:
    """Q/DQ (any domain onnxruntime writes them in), DynamicQuantizeLinear, Identity."""
    return is_quantize_node(node) or (node.op_type in TRANSPARENT and node.domain in STANDARD_DOMAINS)


def group_nodes(graph: Graph, capable: Callable[[int], bool]) -> list[Group]:
    """Partition the compute nodes into groups (rules in the module docstring)."""
    nodes = graph.nodes
    group_of: dict[int, Group] = {}
    groups: list[Group] = []
    pending: dict[int, Group] = {}  # node index -> group it will join (SiLU's Mul)
    pre: dict[int, list[int]] = {}  # consumer index -> Q/DQ chain on a graph input it absorbs
    absorbed: set[int] = set()

    def join(i: int, group: Group) -> None:
        group.members.append(i)
        group_of[i] = group

    def new_group(i: int) -> Group:
        group = Group(anchor=i, members=[i])
        group_of[i] = group
        groups.append(group)
        for j in pre.pop(i, ()):
            join(j, group)
        return group

    for i, node in enumerate(nodes):
        if not graph.compute[i] or i in absorbed:
            continue
        if i in pending:
            group = pending.pop(i)
            for j in [i, *pre.pop(i, ())]:
                join(j, group)
            continue
        if is_transparent(node):
            p = graph.producer.get(node.input[0]) if node.input else None
            if p is not None and p in group_of:
                join(i, group_of[p])
                continue
            chain, target = _forward_chain(graph, i)
            if target is not None:
                absorbed.update(chain)
                pre.setdefault(target, []).extend(chain)
                continue
            new_group(i)
            continue
        if node.op_type == "Add" and node.domain in ("", "ai.onnx"):
            group = _bias_group(graph, i, group_of, capable)
            if group is not None:
                join(i, group)
                group.fused_bias = True
                continue
        if node.op_type in ACTIVATIONS and node.domain in ("", "ai.onnx"):
            fused = _try_fuse_activation(graph, i, group_of, capable)
            if fused is not None:
                group, mul = fused
                join(i, group)
                group.fused_activation = True
                if mul is not None:
                    pending[mul] = group
                continue
        new_group(i)
    for group in groups:
        group.members = [group.anchor] + sorted(m for m in group.members if m != group.anchor)
    return groups


def _forward_chain(graph: Graph, start: int) -> tuple[list[int], int | None]:
    """A Q/DQ chain from a graph input and the single compute node it feeds (or None)."""
    chain = [start]
    cur = start
    while True:
        consumers = graph.consumers_of(cur)
        if any(out in graph.graph_outputs for out in graph.nodes[cur].output):
            return chain, None
        if len(consumers) != 1:
            return chain, None
        (nxt,) = consumers
        if is_transparent(graph.nodes[nxt]):
            chain.append(nxt)
            cur = nxt
            continue
        return chain, nxt


def _exits(graph: Graph, group: Group) -> set[str]:
    """Tensors a group produces that are read outside it or are graph outputs."""
    members = set(group.members)
    exits = set()
    for m in members:
        for out in graph.nodes[m].output:
            if not out:
                continue
            if out in graph.graph_outputs or any(c not in members for c in graph.consumers.get(out, ())):
                exits.add(out)
    return exits


def _bias_group(graph: Graph, i: int, group_of: dict[int, Group], capable: Callable[[int], bool]) -> Group | None:
    """The capable group whose output ``Add`` ``i`` adds a constant bias to, or None."""
    inputs = [name for name in graph.nodes[i].input if name]
    data = [name for name in inputs if name not in graph.consts]
    if len(inputs) != 2 or len(data) != 1:
        return None
    p = graph.producer.get(data[0])
    group = group_of.get(p) if p is not None else None
    if group is None or group.fused_bias or group.fused_activation or not capable(group.anchor):
        return None
    exits = _exits(graph, group)
    if exits != {data[0]} or exits & graph.graph_outputs:
        return None
    return group if set(graph.consumers.get(data[0], ())) == {i} else None


def _try_fuse_activation(
    graph: Graph, i: int, group_of: dict[int, Group], capable: Callable[[int], bool]
) -> tuple[Group, int | None] | None:
    """The group activation ``i`` fuses into (and SiLU's Mul to fuse later), or None."""
    node = graph.nodes[i]
    if not node.input or any(name not in graph.consts for name in node.input[1:] if name):
        return None  # Clip with run-time bounds: not element-wise on one tensor
    p = graph.producer.get(node.input[0])
    if p is None or p not in group_of:
        return None
    group = group_of[p]
    if group.fused_activation or not capable(group.anchor):
        return None
    exits = _exits(graph, group)
    if not exits or exits & graph.graph_outputs:
        return None
    readers = {c for e in exits for c in graph.consumers.get(e, ())}
    if readers == {i}:
        return group, None
    if node.op_type != "Sigmoid" or len(readers) != 2:
        return None
    (mul,) = readers - {i}
    mul_node = graph.nodes[mul]
    if mul_node.op_type != "Mul" or mul_node.domain not in ("", "ai.onnx"):
        return None
    # Follow the Sigmoid's output through Q/DQ to the Mul.
    cur = i
    while True:
        if any(out in graph.graph_outputs for out in graph.nodes[cur].output):
            return None
        consumers = graph.consumers_of(cur)
        if len(consumers) != 1:
            return None
        (nxt,) = consumers
        if nxt == mul:
            break
        if not is_transparent(graph.nodes[nxt]):
            return None
        cur = nxt
    mul_inputs = set(mul_node.input)
    if not (mul_inputs & exits) or graph.nodes[cur].output[0] not in mul_inputs:
        return None
    return group, mul
