"""A short hash of a model's structure, independent of weight values and names.

Covers node op types, domains, attribute values (tensor attributes by dtype and
dims only; subgraphs recursively), the wiring of tensors by position, graph
input/output shapes and dtypes, and initializer shapes and dtypes — not weight
values, not node or tensor names, not the file name.  Two exports of the same
architecture with different weights share a fingerprint; a host profile keyed
by it stays valid for both.
"""

from __future__ import annotations

import hashlib
import json

import onnx

__all__ = ["fingerprint"]


def _tensor_sig(t: onnx.TensorProto) -> list:
    return ["tensor", int(t.data_type), [int(d) for d in t.dims]]


def _attr_value(attr: onnx.AttributeProto) -> object:
    kind = attr.type
    if kind == onnx.AttributeProto.TENSOR:
        return _tensor_sig(attr.t)
    if kind == onnx.AttributeProto.TENSORS:
        return [_tensor_sig(t) for t in attr.tensors]
    if kind == onnx.AttributeProto.GRAPH:
        return _graph_sig(attr.g)
    if kind == onnx.AttributeProto.GRAPHS:
        return [_graph_sig(g) for g in attr.graphs]
    if kind == onnx.AttributeProto.SPARSE_TENSOR:
        return ["sparse", [int(d) for d in attr.sparse_tensor.dims]]
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
    if isinstance(value, float):
        return repr(value)
    return value if isinstance(value, (int, str)) else repr(value)


def _type_sig(vi: onnx.ValueInfoProto) -> list:
    tt = vi.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else "?" for d in tt.shape.dim] if tt.HasField("shape") else None
    return [int(tt.elem_type), dims]


def _graph_sig(graph: onnx.GraphProto) -> dict:
    ids: dict[str, str] = {}
    inputs = []
    for k, vi in enumerate(graph.input):
        ids[vi.name] = f"i{k}"
        inputs.append(_type_sig(vi))
    weights = []
    for k, t in enumerate(graph.initializer):
        ids.setdefault(t.name, f"w{k}")
        weights.append(_tensor_sig(t))
    nodes = []
    for k, node in enumerate(graph.node):
        wiring = [ids.get(name, "outer") if name else "" for name in node.input]
        for j, out in enumerate(node.output):
            if out:
                ids[out] = f"n{k}.{j}"
        attrs = sorted((a.name, _attr_value(a)) for a in node.attribute)
        nodes.append([node.domain, node.op_type, wiring, len(node.output), attrs])
    outputs = [[ids.get(vi.name, "?"), _type_sig(vi)] for vi in graph.output]
    return {"inputs": inputs, "weights": weights, "nodes": nodes, "outputs": outputs}


def fingerprint(model: onnx.ModelProto) -> str:
    """16 hex digits of sha256 over the structure described in the module docstring."""
    opsets = sorted([op.domain, int(op.version)] for op in model.opset_import)
    text = json.dumps({"opsets": opsets, "graph": _graph_sig(model.graph)}, sort_keys=True, default=repr,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
