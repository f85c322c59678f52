"""Split pass: write each partition as its own ONNX model, plus the stitched top level (DESIGN §5).

Input: the simplified (annotated) model and a :class:`SplitPlan` from
:mod:`cimsplit.passes.rewrite.partitions`.  Output, in memory:

- one ``ModelProto`` per partition: its nodes (with their ``cimsplit.*``
  metadata), the weights it reads as initializers, its boundary tensors as
  inputs/outputs with the model's full value_info;
- ``partitioned.onnx``: a top-level graph of partition calls and transfer
  nodes that plain onnxruntime runs.  Partitions are model-local functions in
  domain ``ai.cimsplit.partitions``; a transfer is a call of the function
  ``ai.cimsplit::Transfer`` (attributes ``src_device``, ``dst_device``,
  ``bytes``, ``latency_ns``) whose body is ``Identity``.  Functions cannot
  hold initializers, so weights stay top-level initializers and are passed to
  the partition calls as extra inputs.  A partition holding an operator that
  onnxruntime cannot load inside a function is written inline, its nodes
  tagged ``cimsplit.partition`` (:mod:`.inline_partitions`).

Naming in the top-level graph: a tensor keeps its name on the device that
produces it (the host for graph inputs), and its copy on device ``d`` is
``<name>__on_<d>``; a graph output must carry its own name on the host, so a
CIM-produced graph output is called ``<name>__on_cim`` inside the top level
until its transfer to the host writes ``<name>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import onnx
from onnx import helper

from cimsplit.compiler.hardware import Hardware
from cimsplit.compiler.qdq_kernels import onnxruntime_converts_int8_pairs
from cimsplit.passes.rewrite.annotate import KEY_DEVICE
from cimsplit.passes.rewrite.graph_utils import value_infos
from cimsplit.passes.rewrite.inline_partitions import inline_partitions, loads_in_function, tag_partition
from cimsplit.passes.rewrite.partitions import HOST, PartitionSpec, SplitPlan, plan_split
from cimsplit.passes.rewrite.unsigned_cuts import unsigned_cuts

__all__ = [
    "PARTITION_DOMAIN",
    "TRANSFER_DOMAIN",
    "TRANSFER_OP",
    "SplitResult",
    "split",
    "partition_model",
    "partitioned_model",
]

PARTITION_DOMAIN = "ai.cimsplit.partitions"
TRANSFER_DOMAIN = "ai.cimsplit"
TRANSFER_OP = "Transfer"


@dataclass(frozen=True)
class SplitResult:
    plan: SplitPlan
    partitions: dict[str, onnx.ModelProto]
    """Partition name -> standalone model, in execution order."""
    partitioned: onnx.ModelProto
    """The stitched top-level model (partition calls + transfers)."""


def split(model: onnx.ModelProto, devices: Mapping[str, str], hardware: Hardware,
          whole: onnx.ModelProto | None = None) -> SplitResult:
    """Group, then write partitions and the top level; every model passes ``onnx.checker`` full check.

    Transfers are priced by ``hardware``'s bus (see :func:`plan_split`).  Cut int8 QDQ
    pairs become uint8 where onnxruntime would convert them in ``whole`` (the model
    before slicing; default ``model``) (:mod:`.unsigned_cuts`).
    """
    plan = plan_split(model, devices, hardware)
    if onnxruntime_converts_int8_pairs():
        partitions_of: dict[str, set[str]] = {}
        for spec in plan.partitions:
            for name in spec.nodes:
                partitions_of.setdefault(name, set()).add(spec.name)
        model, converted = unsigned_cuts(model, partitions_of, whole)
        if converted:  # the same partitions; they now read the new uint8 zero points
            plan = plan_split(model, devices, hardware)
    partitions = {spec.name: partition_model(model, spec) for spec in plan.partitions}
    return SplitResult(plan, partitions, partitioned_model(model, plan))


def _copy_info(info: onnx.ValueInfoProto, name: str | None = None) -> onnx.ValueInfoProto:
    out = onnx.ValueInfoProto()
    out.CopyFrom(info)
    if name is not None:
        out.name = name
    return out


def _info(infos: Mapping[str, onnx.ValueInfoProto], tensor: str) -> onnx.ValueInfoProto:
    if tensor not in infos:
        raise ValueError(f"tensor {tensor!r} is on a partition boundary but has no value_info")
    return infos[tensor]


def partition_model(model: onnx.ModelProto, spec: PartitionSpec) -> onnx.ModelProto:
    """One partition as a standalone model that checks and infers shapes on its own."""
    graph = model.graph
    infos = value_infos(model)
    nodes = {node.name: node for node in graph.node}
    weights = {t.name: t for t in graph.initializer}
    part_nodes = [_on_device(nodes[name], spec.device) for name in spec.nodes]
    produced = {o for node in part_nodes for o in node.output if o}
    boundary = set(spec.inputs) | set(spec.outputs)
    internal = [
        _copy_info(vi) for vi in graph.value_info
        if vi.name in produced and vi.name not in boundary
    ]
    part_graph = helper.make_graph(
        part_nodes,
        spec.name,
        [_copy_info(_info(infos, t)) for t in spec.inputs],
        [_copy_info(_info(infos, t)) for t in spec.outputs],
        initializer=[weights[t] for t in spec.initializers],
        value_info=internal,
    )
    out = helper.make_model(
        part_graph,
        opset_imports=list(model.opset_import),
        producer_name="cimsplit",
        doc_string=f"cimsplit partition {spec.name} on {spec.device}",
    )
    out.ir_version = model.ir_version
    out.functions.extend(model.functions)
    return out


def _on_device(node: onnx.NodeProto, device: str) -> onnx.NodeProto:
    """``node``, or a copy stamped with ``device`` when its annotation names another one.

    A cut DequantizeLinear is copied into the partitions of its readers
    (:mod:`.partitions`, step 4), whatever device its operator was placed on.
    """
    stamped = next((p.value for p in node.metadata_props if p.key == KEY_DEVICE), device)
    if stamped == device:
        return node
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    for prop in copy.metadata_props:
        if prop.key == KEY_DEVICE:
            prop.value = device
    return copy


def _name_on(tensor: str, device: str, home: str, graph_outputs: set[str], taken: set[str]) -> str:
    """The top-level graph's name for ``tensor`` held on ``device`` (see module docstring).

    A copy's name that the model already uses gets a numeric suffix.
    """
    original = device == HOST if tensor in graph_outputs else device == home
    if original:
        return tensor
    name, k = f"{tensor}__on_{device}", 1
    while name in taken:
        name, k = f"{tensor}__on_{device}_{k}", k + 1
    return name


def _transfer_function(opsets: list[onnx.OperatorSetIdProto]) -> onnx.FunctionProto:
    default = next((o.version for o in opsets if o.domain in ("", "ai.onnx")), 17)
    return helper.make_function(
        TRANSFER_DOMAIN,
        TRANSFER_OP,
        inputs=["x"],
        outputs=["y"],
        nodes=[helper.make_node("Identity", ["x"], ["y"], name="copy")],
        opset_imports=[helper.make_opsetid("", default)],
        attributes=["src_device", "dst_device", "bytes", "latency_ns"],
        doc_string="An explicit copy between devices; a plain Identity for onnxruntime.",
    )


def partitioned_model(model: onnx.ModelProto, plan: SplitPlan) -> onnx.ModelProto:
    """The top-level model: partition calls and transfer nodes, runnable in plain onnxruntime."""
    graph = model.graph
    nodes = {node.name: node for node in graph.node}
    infos = value_infos(model)
    outputs = set(plan.outputs)
    taken = {t for node in graph.node for t in list(node.input) + list(node.output)}
    taken |= {i.name for i in graph.input} | {t.name for t in graph.initializer}
    home = {t: HOST for t in plan.inputs}
    for spec in plan.partitions:
        for t in spec.outputs:
            home[t] = spec.device

    by_tensor: dict[str, list] = {}
    for tr in plan.transfers:
        by_tensor.setdefault(tr.tensor, []).append(tr)

    copies: dict[str, str] = {}
    """Each top-level tensor a node writes -> the model's tensor it holds."""

    def transfer_nodes(tensor: str) -> list[onnx.NodeProto]:
        made = []
        for tr in by_tensor.get(tensor, ()):
            target = _name_on(tensor, tr.dst_device, home[tensor], outputs, taken)
            copies[target] = tensor
            made.append(helper.make_node(
                TRANSFER_OP,
                [_name_on(tensor, tr.src_device, home[tensor], outputs, taken)],
                [target],
                name=tr.name,
                domain=TRANSFER_DOMAIN,
                src_device=tr.src_device,
                dst_device=tr.dst_device,
                bytes=int(tr.bytes),
                latency_ns=float(tr.latency_ns),
            ))
        return made

    weights = {t.name: t for t in graph.initializer}
    opsets = list(model.opset_import)
    inlined = [spec.name for spec in plan.partitions
               if not all(loads_in_function(nodes[name], infos, weights, opsets) for name in spec.nodes)]
    top_nodes: list[onnx.NodeProto] = []
    for t in plan.inputs:
        top_nodes.extend(transfer_nodes(t))
    functions: list[onnx.FunctionProto] = []
    used_weights: list[str] = []
    for spec in plan.partitions:
        params = list(spec.inputs) + list(spec.initializers)
        body = [_on_device(nodes[name], spec.device) for name in spec.nodes]
        if spec.name in inlined:
            body = [tag_partition(node, spec.name) for node in body]
        functions.append(helper.make_function(
            PARTITION_DOMAIN,
            spec.name,
            inputs=params,
            outputs=list(spec.outputs),
            nodes=body,
            opset_imports=opsets,
            doc_string=f"partition {spec.name} on {spec.device}",
        ))
        args = [_name_on(t, spec.device, home.get(t, HOST), outputs, taken) for t in spec.inputs] + list(spec.initializers)
        results = [_name_on(t, spec.device, home[t], outputs, taken) for t in spec.outputs]
        copies.update(zip(results, spec.outputs))
        top_nodes.append(helper.make_node(spec.name, args, results, name=spec.name, domain=PARTITION_DOMAIN))
        for w in spec.initializers:
            if w not in used_weights:
                used_weights.append(w)
        for t in spec.outputs:
            top_nodes.extend(transfer_nodes(t))

    # Every tensor between the calls declared: onnx cannot infer what a partition's contrib operator
    # (QOperator's com.microsoft QLinearAdd) writes, and a Transfer's body wants its input's type.
    ends = set(plan.inputs) | set(plan.outputs)
    between = {top: tensor for top, tensor in copies.items() if top not in ends}
    top = helper.make_graph(
        top_nodes,
        f"{graph.name or 'model'}_partitioned",
        [_copy_info(_info(infos, t)) for t in plan.inputs],
        [_copy_info(_info(infos, t)) for t in plan.outputs],
        initializer=[weights[w] for w in used_weights],
        value_info=[_copy_info(_info(infos, tensor), top) for top, tensor in between.items()],
    )
    extra = [helper.make_opsetid(TRANSFER_DOMAIN, 1), helper.make_opsetid(PARTITION_DOMAIN, 1)]
    out = helper.make_model(top, opset_imports=opsets + extra, producer_name="cimsplit",
                            doc_string="cimsplit partitioned model: partition calls and transfers")
    out.ir_version = max(model.ir_version, 8)  # model-local functions need IR >= 8
    out.functions.extend(list(model.functions) + functions + [_transfer_function(opsets)])
    return inline_partitions(out, PARTITION_DOMAIN, inlined)
