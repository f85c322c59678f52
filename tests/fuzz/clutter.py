"""Exporter clutter for fuzz models: no-op nodes on random activations and weights as Constant nodes.

PyTorch, PaddlePaddle and quantization-aware exports carry nodes that compute nothing (an Identity
on an output, a Dropout left in, a Reshape or Cast to what the tensor already is, a Mul by one, an
Add of zero, a Pad of nothing) and weights written as ``Constant`` nodes instead of initializers.
:func:`add_clutter` puts such nodes into a model after it was generated (and quantized), drawn from
their own seeded stream, so a seed's model without clutter stays as it was.  The reference is
onnxruntime on the cluttered model itself, so the split must run exactly what onnxruntime runs.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NO_OPS = ("Identity", "Dropout", "Reshape", "Cast", "Mul", "Add", "Pad")


def _no_op(kind: str, source: str, target: str, shape: list[int], tag: str) -> tuple[onnx.NodeProto, list]:
    """The node ``target = kind(source)`` that leaves a float tensor of ``shape`` as it is, and the constant it reads."""
    value = {"Reshape": np.array(shape, np.int64), "Mul": np.array(1.0, np.float32), "Add": np.array(0.0, np.float32),
             "Pad": np.zeros(2 * len(shape), np.int64)}.get(kind)
    constants = [] if value is None else [numpy_helper.from_array(value, f"{tag}_0")]
    attributes = {"to": TensorProto.FLOAT} if kind == "Cast" else {}
    node = helper.make_node(kind, [source, *(c.name for c in constants)], [target], name=tag, **attributes)
    return node, constants


def add_clutter(model: onnx.ModelProto, seed: int, count: int = 3) -> onnx.ModelProto:
    """``model`` with up to ``count`` no-op nodes after random float activations (tensors computed from a graph
    input) and about a third of its float weights as ``Constant`` nodes (a checked copy)."""
    rng = np.random.default_rng([seed, 2026])  # its own stream: the model's draws are untouched
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inferred = onnx.shape_inference.infer_shapes(out)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in
              [*inferred.graph.value_info, *inferred.graph.output]
              if vi.type.tensor_type.elem_type == TensorProto.FLOAT and vi.type.tensor_type.HasField("shape")}
    activations = {vi.name for vi in graph.input}
    for node in graph.node:  # (a weight's DequantizeLinear or a constant's arithmetic is no activation)
        if activations.intersection(node.input):
            activations.update(node.output)
    candidates = [(i, t) for i, node in enumerate(graph.node) for t in node.output
                  if t in activations and t in shapes and shapes[t] and all(shapes[t])]
    picked = sorted(rng.choice(len(candidates), size=min(count, len(candidates)), replace=False)) if candidates else []
    nodes = list(graph.node)
    for k, j in enumerate(reversed(picked)):  # from the last, so earlier positions stay valid
        i, tensor = candidates[j]
        kind = NO_OPS[int(rng.integers(len(NO_OPS)))]
        before = f"{tensor}__before_clutter{k}"
        nodes[i].output[list(nodes[i].output).index(tensor)] = before
        node, constants = _no_op(kind, before, tensor, shapes[tensor], f"clutter{k}_{kind}")
        nodes.insert(i + 1, node)
        graph.initializer.extend(constants)
    weights = [t for t in graph.initializer if t.data_type == TensorProto.FLOAT and len(t.dims) >= 1 and rng.random() < 1 / 3]
    for w in weights:
        nodes.insert(0, helper.make_node("Constant", [], [w.name], name=f"{w.name}_constant", value=w))
        graph.initializer.remove(w)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(out, full_check=True)
    return out
