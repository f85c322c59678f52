"""What PyTorch's exporter adds with ``dynamic_axes``: a symbolic batch dim and shapes computed from it.

``torch.onnx.export(..., dynamic_axes={"x": {0: "batch"}})`` writes the batch dim of every input and
output as ``batch`` and every ``x.view(x.size(0), ...)`` as a shape subgraph,
``Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), rest))``, which no constant folding can remove
while the batch is unknown.  :func:`as_dynamic_export` makes a fuzz model so: its inputs and outputs
get the symbolic batch, each Reshape whose constant shape starts with the batch gets that subgraph,
a random 4-D activation gets a same-shape view through it, and another one passes an ``If`` on the
batch (``x if x.size(0) == 1 else relu(x)``, traced control flow), whose branches read it from the
outer scope.  The model is compiled with
``--input-shape`` (the batch it had) and checked against onnxruntime on the dynamic model.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BATCH = "batch"


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _view_shape(data: str, rest: list[int], tag: str, opset: int) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str]:
    """Nodes computing ``[data.shape[0], *rest]`` as PyTorch exports ``x.view(x.size(0), *rest)`` (Unsqueeze's axes an
    input from opset 13, an attribute before)."""
    zero, axes, tail = (numpy_helper.from_array(np.array(v, np.int64), f"{tag}_{k}")
                        for k, v in (("index", 0), ("axes", [0]), ("rest", rest)))
    names = [f"{tag}_{k}" for k in ("shape", "batch", "batch1", "target")]
    unsqueeze = (helper.make_node("Unsqueeze", [names[1], axes.name], [names[2]], name=f"{tag}_Unsqueeze") if opset >= 13
                 else helper.make_node("Unsqueeze", [names[1]], [names[2]], name=f"{tag}_Unsqueeze", axes=[0]))
    nodes = [
        helper.make_node("Shape", [data], [names[0]], name=f"{tag}_Shape"),
        helper.make_node("Gather", [names[0], zero.name], [names[1]], name=f"{tag}_Gather", axis=0),
        unsqueeze,
        helper.make_node("Concat", [names[2], tail.name], [names[3]], name=f"{tag}_Concat", axis=0),
    ]
    return nodes, [zero, *([axes] if opset >= 13 else []), tail], names[3]


def _if_on_batch(data: str, target: str, tag: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """``target = data if data.shape[0] == 1 else Relu(data)``, the branches reading ``data`` from the outer scope."""
    zero, one = (numpy_helper.from_array(np.array(v, np.int64), f"{tag}_{k}") for k, v in (("index", 0), ("one", 1)))
    def branch(op: str) -> onnx.GraphProto:
        out = helper.make_tensor_value_info(f"{tag}_{op.lower()}_out", TensorProto.FLOAT, None)
        return helper.make_graph([helper.make_node(op, [data], [out.name], name=f"{tag}_{op}")], f"{tag}_{op.lower()}", [], [out])
    nodes = [
        helper.make_node("Shape", [data], [f"{tag}_shape"], name=f"{tag}_Shape"),
        helper.make_node("Gather", [f"{tag}_shape", zero.name], [f"{tag}_batch"], name=f"{tag}_Gather", axis=0),
        helper.make_node("Equal", [f"{tag}_batch", one.name], [f"{tag}_cond"], name=f"{tag}_Equal"),
        helper.make_node("If", [f"{tag}_cond"], [target], name=f"{tag}_If", then_branch=branch("Identity"),
                         else_branch=branch("Relu")),
    ]
    return nodes, [zero, one]


def as_dynamic_export(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """``model`` (batch 1 on every input) with a symbolic batch and its views computed from it (a checked copy)."""
    rng = np.random.default_rng([seed, 2027])
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inferred = onnx.shape_inference.infer_shapes(out)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in inferred.graph.value_info
              if vi.type.tensor_type.elem_type == TensorProto.FLOAT and vi.type.tensor_type.HasField("shape")}
    constants = _constants(graph)
    opset = next(o.version for o in out.opset_import if o.domain in ("", "ai.onnx"))
    nodes: list[onnx.NodeProto] = []
    for i, node in enumerate(graph.node):
        target = constants.get(node.input[1]) if node.op_type == "Reshape" else None
        if target is not None and target.ndim == 1 and len(target) > 1 and target[0] == 1:
            view, values, name = _view_shape(node.input[0], [int(v) for v in target[1:]], f"view{i}", opset)
            nodes.extend(view)
            graph.initializer.extend(values)
            node.input[1] = name
        nodes.append(node)
    activations = [(i, t) for i, n in enumerate(nodes) for t in n.output
                   if len(shapes.get(t, [])) == 4 and all(shapes[t]) and shapes[t][0] == 1]
    picked = rng.choice(len(activations), size=min(2, len(activations)), replace=False) if activations else []
    for k in sorted(picked, key=lambda k: -activations[k][0]):  # from the last, so earlier positions stay valid
        i, tensor = activations[k]
        view_it = k == picked[0]
        before = f"{tensor}__before_{'view' if view_it else 'if'}"
        nodes[i].output[list(nodes[i].output).index(tensor)] = before
        if view_it:
            view, values, name = _view_shape(before, shapes[tensor][1:], "sameview", opset)
            view.append(helper.make_node("Reshape", [before, name], [tensor], name="sameview_Reshape"))
        else:
            view, values = _if_on_batch(before, tensor, "batchif")
        nodes[i + 1:i + 1] = view
        graph.initializer.extend(values)
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]
    for vi in [*graph.input, *graph.output]:
        dims = vi.type.tensor_type.shape.dim
        if dims and dims[0].dim_value == 1:
            dims[0].dim_param = BATCH
    onnx.checker.check_model(out, full_check=True)
    return out


def as_opset_11(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (opset 13-17 forms) written as an opset-11 exporter writes it (PaddlePaddle's default, older PyTorch):
    Split and Unsqueeze take their sizes and axes as attributes, Resize an (empty) roi input, HardSwish, which opset
    11 lacks, becomes x * HardSigmoid(x) (a checked copy; per-channel Q/DQ, which opset 11 lacks, are refused)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    constants = _constants(graph)
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type in ("Split", "Unsqueeze") and len(node.input) > 1:
            name = "split" if node.op_type == "Split" else "axes"
            values = [int(v) for v in constants[node.input[1]].reshape(-1)]
            node = helper.make_node(node.op_type, [node.input[0]], list(node.output), name=node.name,
                                    **{a.name: helper.get_attribute_value(a) for a in node.attribute}, **{name: values})
        elif node.op_type == "Resize" and node.input[1] == "":
            roi = numpy_helper.from_array(np.zeros(0, np.float32), f"{node.name}_roi")
            graph.initializer.append(roi)
            node.input[1] = roi.name
        elif node.op_type == "HardSwish":
            gate = f"{node.output[0]}_gate"
            nodes.append(helper.make_node("HardSigmoid", [node.input[0]], [gate], name=f"{node.name}_gate", alpha=1 / 6, beta=0.5))
            node = helper.make_node("Mul", [node.input[0], gate], [node.output[0]], name=node.name)
        elif node.op_type in ("QuantizeLinear", "DequantizeLinear") and any(a.name == "axis" for a in node.attribute):
            raise ValueError("per-channel Q/DQ need opset 13")
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    for opset in out.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = 11
    del graph.value_info[:]
    onnx.checker.check_model(out, full_check=True)
    return out
