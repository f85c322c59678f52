"""Which variant of its kind a node runs as, where attributes change the kernel's cost: a Softmax's axis."""

from __future__ import annotations

import onnx

__all__ = ["LAST_AXIS", "SECOND_LAST_AXIS", "op_variants"]

LAST_AXIS = "-last"
SECOND_LAST_AXIS = "-second-last"
_SOFTMAX_OPS = frozenset({"Softmax", "QLinearSoftmax"})


def op_variants(model: onnx.ModelProto, optimized: onnx.ModelProto | None = None) -> dict[str, str]:
    """Node -> the variant of its kind its attributes make: a Softmax over contiguous rows (:data:`LAST_AXIS`) or over
    the axis before the last (:data:`SECOND_LAST_AXIS`).

    A Softmax over its input's last axis (or any from opset 11's, which flattens the axes from it on)
    reads contiguous rows; over another axis onnxruntime transposes that axis last and back, several
    times the work (ViT-Tiny's attention Softmax, predicted from points over channels: 20x its time) -- a
    swap of the last two axes three times faster than a move past two or more (int8: 3 against 10 ns per
    element).  The axis is read where onnxruntime runs the node, in ``optimized`` when given: its transpose
    optimizer moves Transposes through a Softmax (YOLOv8n int8's DFL Softmax, over axis 1 of 4 in the
    model, runs as a QLinearSoftmax over axis 2: 1.7 ms, predicted 5.3 from its model axis).
    """
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in (*model.graph.input, *model.graph.value_info)
             if vi.type.tensor_type.HasField("shape")}
    run = {node.name: node for node in optimized.graph.node if node.op_type in _SOFTMAX_OPS} if optimized is not None else {}
    variants = {}
    for node in model.graph.node:
        if node.op_type != "Softmax" or node.domain not in ("", "ai.onnx"):
            continue
        ran = run.get(node.name, node)
        attributes = {a.name: a.i for a in ran.attribute}
        semantics = attributes.get("opset", opset)  # (a QLinearSoftmax records the opset it follows)
        axis = attributes.get("axis", -1 if semantics >= 13 else 1)
        rank = ranks.get(node.input[0])
        trailing = (rank - 1 - axis % rank) if rank else (-1 - axis if axis < 0 else None)
        if semantics < 13 or trailing == 0:
            variants[node.name] = LAST_AXIS
        elif trailing == 1:
            variants[node.name] = SECOND_LAST_AXIS
    return variants
