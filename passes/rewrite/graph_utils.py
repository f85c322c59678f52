"""Small read-only queries on ONNX graphs shared by the annotate and split passes."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import onnx

__all__ = [
    "node_inputs",
    "consumers_by_tensor",
    "producers_by_tensor",
    "value_infos",
    "elements",
    "element_bytes_of",
]


def _subgraph_outer_names(graph: onnx.GraphProto) -> list[str]:
    """Names a subgraph (If/Loop/Scan body) reads from its enclosing scope, in first-use order."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.name for t in graph.sparse_initializer}
    outer: list[str] = []
    for node in graph.node:
        for name in node_inputs(node):
            if name not in defined and name not in outer:
                outer.append(name)
        defined.update(o for o in node.output if o)
    for out in graph.output:
        if out.name not in defined and out.name not in outer:
            outer.append(out.name)
    return outer


def node_inputs(node: onnx.NodeProto) -> list[str]:
    """Every tensor a node reads: its explicit inputs, then outer-scope names its subgraphs use.

    Control-flow nodes read tensors of the enclosing graph implicitly; a split
    that ignored them would cut a dependency and write an invalid partition.
    """
    names = [i for i in node.input if i]
    for attr in node.attribute:
        graphs: Iterable[onnx.GraphProto] = ()
        if attr.type == onnx.AttributeProto.GRAPH:
            graphs = (attr.g,)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            graphs = attr.graphs
        for g in graphs:
            for name in _subgraph_outer_names(g):
                if name not in names:
                    names.append(name)
    return names


def consumers_by_tensor(nodes: Sequence[onnx.NodeProto]) -> dict[str, list[onnx.NodeProto]]:
    """Tensor name -> the nodes reading it, in node order (each node once)."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for name in dict.fromkeys(node_inputs(node)):
            consumers.setdefault(name, []).append(node)
    return consumers


def producers_by_tensor(nodes: Sequence[onnx.NodeProto]) -> dict[str, onnx.NodeProto]:
    """Tensor name -> the node writing it."""
    return {out: node for node in nodes for out in node.output if out}


def value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Tensor name -> ValueInfoProto from graph inputs, value_info and outputs (outputs win)."""
    graph = model.graph
    infos: dict[str, onnx.ValueInfoProto] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.type.HasField("tensor_type") or vi.name not in infos:
            infos[vi.name] = vi
    return infos


def shape_of(info: onnx.ValueInfoProto) -> tuple[int, ...]:
    """The fully known static shape of a tensor; raises ValueError otherwise."""
    if not info.type.HasField("tensor_type") or not info.type.tensor_type.HasField("shape"):
        raise ValueError(f"tensor {info.name!r} has no known shape")
    shape = []
    for dim in info.type.tensor_type.shape.dim:
        if not dim.HasField("dim_value"):
            raise ValueError(f"tensor {info.name!r} has a symbolic or unknown dimension")
        shape.append(dim.dim_value)
    return tuple(shape)


def elements(info: onnx.ValueInfoProto) -> int:
    """Element count of a tensor with a fully known static shape; raises ValueError otherwise."""
    return math.prod(shape_of(info))


def element_bytes_of(info: onnx.ValueInfoProto) -> int:
    """Bytes per element of a tensor's type: 1 for int8/uint8, 4 for float32, ..."""
    if not info.type.HasField("tensor_type") or not info.type.tensor_type.elem_type:
        raise ValueError(f"tensor {info.name!r} has no known element type")
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)).itemsize
