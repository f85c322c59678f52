"""Build the workload DAG G=(V, E) of a simplified, shape-inferred model (DESIGN §2).

One operator per group of :func:`cimsplit.compiler.fusion.group_nodes`; its
anchor decides CIM capability and the GEMM lowering (:mod:`im2col`).  Edges
are activation tensors only: u -> v carries the elements of u's tensors that
v reads.  ``n_in``/``n_out`` count the activation elements entering/leaving
the operator (weights excluded; after fusion ``n_out`` is the fused
activation's output).  A tensor and its Q/DQ/Identity copies count once
(quantizers may give each reader its own DequantizeLinear of one
QuantizeLinear).  Byte counts (``Edge.bytes``, ``Operator.in_bytes``, ...)
use the element size of the tensor that actually moves: the split cuts a QDQ
model between QuantizeLinear and DequantizeLinear, so a tensor a
DequantizeLinear makes from an activation moves as its int8/uint8 input
(1 byte per element), a float32 one as 4.  Operators come in a deterministic topological order:
Kahn's algorithm, ties broken by the first node index of each group.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import defaultdict

import onnx

from cimsplit.compiler.constants import STANDARD_DOMAINS, constant_tensors, is_quantize_node
from cimsplit.compiler.fusion import Graph, Group, activation_inputs, group_nodes, is_transparent
from cimsplit.compiler.im2col import Lowering, is_gemm_node, lower
from cimsplit.compiler.simplify import tensor_shapes
from cimsplit.compiler.toposort import stable_topological_order
from cimsplit.compiler.workload import Edge, MovedTensor, Operator, Workload
from cimsplit.errors import CimsplitError

__all__ = ["build_workload"]

log = logging.getLogger(__name__)

CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})


def _elements(shape: tuple[int, ...] | None) -> int:
    return 0 if shape is None else math.prod(shape)


def _element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Tensor name -> ONNX element type, from the graph's inputs, value_info and outputs."""
    graph = model.graph
    return {vi.name: vi.type.tensor_type.elem_type for vi in list(graph.input) + list(graph.value_info)
            + list(graph.output) if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}


def _itemsize(elem_type: int | None) -> int:
    """Bytes per element of an ONNX element type (4, float32, when unknown)."""
    if not elem_type:
        return 4
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize


def _host_reason(node: onnx.NodeProto) -> str | None:
    """Why a node stays on the host before any GEMM analysis, or None."""
    if is_gemm_node(node):
        return None
    if is_quantize_node(node):
        return f"{node.op_type} runs on the host (not a Conv/Gemm/MatMul)"
    if node.domain not in STANDARD_DOMAINS:
        return f"custom-domain operator ({node.domain}::{node.op_type}) stays on the host as an opaque operator"
    if node.op_type in CONTROL_FLOW:
        return f"control flow ({node.op_type}) stays on the host as an opaque operator"
    return f"{node.op_type} runs on the host (not a Conv/Gemm/MatMul)"


def build_workload(model: onnx.ModelProto, crossbar_size: tuple[int, int] = (256, 256)) -> Workload:
    """The workload DAG of ``model`` (simplified, nodes named, shapes inferred)."""
    rows, cols = crossbar_size
    graph_proto = model.graph
    nodes = list(graph_proto.node)
    consts = constant_tensors(graph_proto)
    shapes = tensor_shapes(model)
    graph_inputs = [vi.name for vi in graph_proto.input if vi.name not in consts]
    graph_input_set = set(graph_inputs)
    graph_outputs = {vi.name for vi in graph_proto.output}
    graph = Graph.index(nodes, consts, graph_outputs)
    elem_types = _element_types(model)

    lowering: dict[int, Lowering] = {}
    for i, node in enumerate(nodes):
        if not graph.compute[i]:
            continue
        reason = _host_reason(node)
        lowering[i] = Lowering(None, reason) if reason else lower(node, consts, shapes, rows, cols)

    groups = group_nodes(graph, lambda i: lowering[i].gemm is not None)
    group_index = {m: gi for gi, g in enumerate(groups) for m in g.members}

    # Tensors crossing between groups; n_in / n_out / graph I/O per group.
    edge_tensors: dict[tuple[int, int], set[str]] = defaultdict(set)
    n_in = [0] * len(groups)
    graph_in = [0] * len(groups)
    roots: dict[str, str] = {}

    def root(name: str) -> str:
        """The tensor ``name`` is a Q/DQ/Identity copy of (dedicated Q/DQ pairs count once)."""
        if name not in roots:
            p = graph.producer.get(name)
            node = nodes[p] if p is not None else None
            roots[name] = root(node.input[0]) if node is not None and is_transparent(node) and node.input else name
        return roots[name]

    def crossing(name: str) -> str:
        """The tensor that crosses for ``name``: a DequantizeLinear of an activation moves as its input."""
        p = graph.producer.get(name)
        node = nodes[p] if p is not None else None
        if node is not None and node.op_type == "DequantizeLinear" and is_quantize_node(node) and node.input:
            return node.input[0]
        return name

    def moved_bytes(name: str) -> int:
        name = crossing(name)
        return _elements(shapes.get(name)) * _itemsize(elem_types.get(name))

    def moved(name: str) -> MovedTensor:
        name = crossing(name)
        return MovedTensor(tuple(shapes.get(name) or ()), _itemsize(elem_types.get(name)))

    in_bytes = [0] * len(groups)
    graph_in_bytes = [0] * len(groups)
    graph_in_moved: list[list[MovedTensor]] = [[] for _ in groups]
    for gi, group in enumerate(groups):
        seen: set[str] = set()
        members = set(group.members)
        for m in group.members:
            for name in activation_inputs(nodes[m], consts):
                p = graph.producer.get(name)
                if (p is not None and p in members) or root(name) in seen:
                    continue
                seen.add(root(name))
                n_in[gi] += _elements(shapes.get(name))
                in_bytes[gi] += moved_bytes(name)
                if p is not None:
                    edge_tensors[(group_index[p], gi)].add(name)
                elif name in graph_input_set:
                    graph_in[gi] += _elements(shapes.get(name))
                    graph_in_bytes[gi] += moved_bytes(name)
                    graph_in_moved[gi].append(moved(name))
    n_out = [0] * len(groups)
    graph_out = [0] * len(groups)
    out_bytes = [0] * len(groups)
    graph_out_bytes = [0] * len(groups)
    graph_out_moved: list[list[MovedTensor]] = [[] for _ in groups]
    for gi, group in enumerate(groups):
        members = set(group.members)
        counted: set[str] = set()
        for m in group.members:
            for out in nodes[m].output:
                if not out:
                    continue
                readers = graph.consumers.get(out, ())
                if (out in graph_outputs or any(c not in members for c in readers)) and root(out) not in counted:
                    counted.add(root(out))
                    n_out[gi] += _elements(shapes.get(out))
                    out_bytes[gi] += moved_bytes(out)
                if out in graph_outputs:
                    graph_out[gi] += _elements(shapes.get(out))
                    graph_out_bytes[gi] += moved_bytes(out)
                    graph_out_moved[gi].append(moved(out))

    order = _topological_order(groups, edge_tensors)
    operators = tuple(
        dataclasses.replace(
            _operator(groups[gi], nodes, lowering, n_in[gi], n_out[gi], graph_in[gi], graph_out[gi]),
            in_bytes=in_bytes[gi], out_bytes=out_bytes[gi],
            graph_input_bytes=graph_in_bytes[gi], graph_output_bytes=graph_out_bytes[gi],
            graph_inputs_moved=tuple(graph_in_moved[gi]), graph_outputs_moved=tuple(graph_out_moved[gi]),
            product_shape=_product_shape(nodes[groups[gi].anchor], lowering[groups[gi].anchor], consts, shapes),
        )
        for gi in order
    )
    position = {gi: k for k, gi in enumerate(order)}
    def edge(u: int, v: int, tensors: set[str]) -> Edge:
        distinct = {root(t): t for t in sorted(tensors)}.values()
        return Edge(src=nodes[groups[u].anchor].name, dst=nodes[groups[v].anchor].name,
                    elements=sum(_elements(shapes.get(t)) for t in distinct), tensors=tuple(sorted(tensors)),
                    bytes=sum(moved_bytes(t) for t in distinct), moved=tuple(moved(t) for t in distinct))

    edges = tuple(
        edge(u, v, tensors)
        for (u, v), tensors in sorted(edge_tensors.items(), key=lambda kv: (position[kv[0][0]], position[kv[0][1]]))
    )
    return Workload(
        operators=operators,
        edges=edges,
        crossbar_rows=rows,
        crossbar_cols=cols,
        inputs={name: shapes.get(name) or () for name in graph_inputs},
        outputs={vi.name: shapes.get(vi.name) or () for vi in graph_proto.output},
        constant_nodes=_used_constant_nodes(nodes, graph, consts),
    )


def _product_shape(node: onnx.NodeProto, low: Lowering, consts: set[str],
                   shapes: dict[str, tuple[int, ...] | None]) -> tuple[int, int, int] | None:
    """(rows, K, columns) of a product the host runs as a GEMM but the CIM does not, when the shapes are known:
    a MatMul whose operands are both activations, or a ConvTranspose (:func:`_transposed_conv_product`)."""
    if node.op_type == "ConvTranspose":
        return _transposed_conv_product(node, shapes)
    if node.op_type != "MatMul" or low.gemm is not None or len(node.input) != 2 or set(node.input) & consts:
        return None
    a, b, out = shapes.get(node.input[0]), shapes.get(node.input[1]), shapes.get(node.output[0])
    if not a or not b or not out or len(a) < 2 or len(b) < 2 or not all(d > 0 for d in (*a, *b, *out)):
        return None
    return (_elements(out) // b[-1], a[-1], b[-1])


def _transposed_conv_product(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...] | None]) -> tuple[int, int, int] | None:
    """A ConvTranspose's GEMM as onnxruntime's CPU kernel runs it (per group, a (C_out/g kH kW) x (C_in/g) weight
    by the input's H W pixels, then col2im): rows B H W g, K = C_in/g, columns C_out/g kH kW."""
    x, w = shapes.get(node.input[0]), shapes.get(node.input[1]) if len(node.input) > 1 else None
    if not x or not w or len(x) < 3 or len(w) != len(x) or not all(d > 0 for d in (*x, *w)):
        return None
    group = next((a.i for a in node.attribute if a.name == "group"), 1) or 1
    return (math.prod(x) // (x[1] // group), x[1] // group, math.prod(w[1:]))


def _used_constant_nodes(nodes: list[onnx.NodeProto], graph: Graph, consts: set[str]) -> tuple[str, ...]:
    """Constant nodes (other than ``Constant``/``Shape``/``Size``) whose outputs feed operators."""
    needed: set[str] = set()
    for i, node in enumerate(nodes):
        if graph.compute[i]:
            needed.update(n for n in node.input if n in consts)
    result: list[str] = []
    for i in range(len(nodes) - 1, -1, -1):
        node = nodes[i]
        if graph.compute[i] or not any(o in needed for o in node.output):
            continue
        needed.update(n for n in node.input if n)
        if node.op_type not in ("Constant", "Shape", "Size"):
            result.append(node.name)
    return tuple(reversed(result))


def _topological_order(groups: list[Group], edge_tensors: dict[tuple[int, int], set[str]]) -> list[int]:
    succ: dict[int, list[int]] = defaultdict(list)
    for u, v in edge_tensors:
        succ[u].append(v)
    order = stable_topological_order({gi: min(g.members) for gi, g in enumerate(groups)}, succ)
    if order is None:
        raise CimsplitError("the model's graph has a cycle between operators", hint="is the ONNX graph topologically valid?")
    return order


def _operator(group: Group, nodes: list[onnx.NodeProto], lowering: dict[int, Lowering],
              n_in: int, n_out: int, graph_in: int, graph_out: int) -> Operator:
    anchor = nodes[group.anchor]
    low = lowering[group.anchor]
    gemm = low.gemm
    return Operator(
        name=anchor.name,
        op_type=anchor.op_type,
        nodes=tuple(nodes[m].name for m in group.members),
        cim_capable=gemm is not None,
        reason=low.reason,
        m=gemm.m if gemm else None,
        n=gemm.n if gemm else None,
        n_mvm=gemm.n_mvm if gemm else None,
        crossbars=gemm.crossbars if gemm else None,
        n_in=n_in,
        n_out=n_out,
        graph_input_elements=graph_in,
        graph_output_elements=graph_out,
        weight_shape=gemm.weight_shape if gemm else None,
        window=_window(anchor),
    )


def _window(node: onnx.NodeProto) -> int:
    """Taps of a MaxPool's or AveragePool's window; 1 for any other node."""
    if node.op_type not in ("MaxPool", "AveragePool"):
        return 1
    kernel = next((list(a.ints) for a in node.attribute if a.name == "kernel_shape"), [])
    return math.prod(kernel) if kernel else 1
