"""Partitions onnxruntime cannot load as model-local functions: written inline in ``partitioned.onnx``.

onnxruntime type-checks the body of a model-local function when it loads the
model (onnx's function inference, then each node's type constraints), which it
does not do for a top-level node.  A contrib schema whose inference is wrong
fails only there: ``com.microsoft`` QLinearConcat infers ``Y``'s element type
from its input 0, the float ``Y_scale`` (``propagateElemTypeFromInputToOutput(ctx,
0, 0)`` in onnxruntime's ``contrib_ops/quantization_defs.cc``), so a partition
holding one (QOperator-format YOLOv8n, ViT-Tiny) is refused with "Y has
unsupported type tensor(float)" while the same node loads at top level.

Whether an operator loads inside a function is asked of onnxruntime itself: the
first node of each kind, alone in a function, loaded without optimization; the
answer is kept per ``(domain, op_type)`` for the process.  Only operators outside
the standard domains are asked (for the standard ones onnxruntime's inference is
onnx's own, the same in a function and at top level).  A partition with an
operator that does not load is inlined with ``onnx.inliner``; its nodes carry
``cimsplit.partition`` = the partition's name.  Inlining is always exact (the
same nodes, renamed apart), so a wrong "does not load" only costs the grouping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx
import onnx.inliner
import onnxruntime as ort
from onnx import helper

from cimsplit.compiler.constants import STANDARD_DOMAINS

__all__ = ["KEY_PARTITION", "loads_in_function", "tag_partition", "inline_partitions"]

KEY_PARTITION = "cimsplit.partition"
_PROBE_DOMAIN = "ai.cimsplit.probe"
_LOADS: dict[tuple[str, str], bool] = {}


def loads_in_function(node: onnx.NodeProto, infos: Mapping[str, onnx.ValueInfoProto],
                      weights: Mapping[str, onnx.TensorProto], opsets: Sequence[onnx.OperatorSetIdProto]) -> bool:
    """Whether onnxruntime loads ``node``'s kind inside a model-local function (True for standard operators)."""
    if node.domain in STANDARD_DOMAINS:
        return True
    key = (node.domain, node.op_type)
    if key not in _LOADS:
        _LOADS[key] = _probe(node, infos, weights, opsets)
    return _LOADS[key]


def _probe(node: onnx.NodeProto, infos: Mapping[str, onnx.ValueInfoProto],
           weights: Mapping[str, onnx.TensorProto], opsets: Sequence[onnx.OperatorSetIdProto]) -> bool:
    inputs = [t for t in dict.fromkeys(node.input) if t]
    outputs = [t for t in node.output if t]
    fed = [t for t in inputs if t not in weights]
    if any(t not in infos for t in fed + outputs):
        return True  # nothing to ask onnxruntime with; the partition stays a function
    probe = helper.make_function(_PROBE_DOMAIN, "Probe", inputs, outputs, [node], list(opsets))
    graph = helper.make_graph(
        [helper.make_node("Probe", inputs, outputs, domain=_PROBE_DOMAIN)], "probe",
        [infos[t] for t in fed], [infos[t] for t in outputs],
        initializer=[weights[t] for t in inputs if t in weights],
    )
    model = helper.make_model(graph, opset_imports=[*opsets, helper.make_opsetid(_PROBE_DOMAIN, 1)],
                              functions=[probe])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - any refusal means: do not put this kind in a function
        return False
    return True


def tag_partition(node: onnx.NodeProto, partition: str) -> onnx.NodeProto:
    """A copy of ``node`` naming the partition it belongs to, for when the partition is inlined."""
    tagged = onnx.NodeProto()
    tagged.CopyFrom(node)
    tagged.metadata_props.add(key=KEY_PARTITION, value=partition)
    return tagged


def inline_partitions(model: onnx.ModelProto, domain: str, names: Sequence[str]) -> onnx.ModelProto:
    """``model`` with the calls of the partition functions ``names`` replaced by their bodies."""
    if not names:
        return model
    return onnx.inliner.inline_selected_functions(model, [(domain, name) for name in names], exclude=False)
