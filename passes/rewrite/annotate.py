"""Annotate pass: stamp every node with its device and modeled timing (DESIGN §5).

The partitioner decides per *operator*; the split pass works per ONNX *node*.
This module turns the decision into a per-node :class:`NodePlacement` and
writes it into ``NodeProto.metadata_props`` so that it shows in Netron and
survives onnx tooling:

``cimsplit.device``    ``host`` | ``cim``
``cimsplit.operator``  the workload operator the node belongs to ("" if none)
``cimsplit.start_ns``  modeled start of that operator
``cimsplit.finish_ns`` modeled finish of that operator
``cimsplit.reason``    why the operator sits there (``cimsplit explain``), when explained
``cimsplit.forced_makespan_ns`` the makespan with it forced to the other device
                       (``none`` where impossible), when explained

A node that belongs to no operator (a leftover ``Constant`` the front end did
not fold, say) goes with the device of its first consumer in topological order,
or to the host when nothing consumes it on the CIM; it is given zero duration
at its consumer's start.  That keeps the split robust without inventing work.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

from cimsplit.compiler.workload import Workload
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.rewrite.graph_utils import consumers_by_tensor

__all__ = [
    "HOST",
    "CIM",
    "DEVICES",
    "NodePlacement",
    "placements_from_schedule",
    "complete_placements",
    "annotate",
    "read_annotations",
]

log = logging.getLogger(__name__)

HOST = "host"
CIM = "cim"
DEVICES = (HOST, CIM)

KEY_DEVICE = "cimsplit.device"
KEY_OPERATOR = "cimsplit.operator"
KEY_START = "cimsplit.start_ns"
KEY_FINISH = "cimsplit.finish_ns"
KEY_REASON = "cimsplit.reason"
KEY_FORCED = "cimsplit.forced_makespan_ns"
KEYS = (KEY_DEVICE, KEY_OPERATOR, KEY_START, KEY_FINISH, KEY_REASON, KEY_FORCED)


@dataclass(frozen=True)
class NodePlacement:
    """Where one ONNX node runs and when its operator is modeled to run."""

    device: str
    operator: str
    start_ns: float
    finish_ns: float

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, not {self.device!r}")


def placements_from_schedule(workload: Workload, schedule: Schedule) -> dict[str, NodePlacement]:
    """Node name -> placement, from the operators' nodes and the partitioner's schedule.

    ``schedule`` is indexed like ``workload.operators`` (the partition problem
    keeps the workload order).
    """
    if len(schedule.on_host) != len(workload.operators):
        raise ValueError("the schedule must have one entry per workload operator")
    placements: dict[str, NodePlacement] = {}
    for v, op in enumerate(workload.operators):
        device = HOST if schedule.on_host[v] else CIM
        for node in op.nodes:
            placements[node] = NodePlacement(device, op.name, float(schedule.start_ns[v]), float(schedule.finish_ns[v]))
    return placements


def complete_placements(model: onnx.ModelProto, placements: Mapping[str, NodePlacement]) -> dict[str, NodePlacement]:
    """Give every node of ``model`` a placement; unplaced nodes follow their first consumer.

    Walks the nodes backwards (reverse topological order), so a chain of
    unplaced nodes (Constant -> Reshape -> placed node) all follow the placed
    node at its end.  Nodes nothing placed consumes go to the host.
    """
    nodes = list(model.graph.node)
    names = [n.name for n in nodes]
    if any(not name for name in names) or len(set(names)) != len(names):
        raise ValueError("every node must have a unique non-empty name (run the front end's simplification first)")
    unknown = sorted(set(placements) - set(names))
    if unknown:
        raise ValueError(f"placements name nodes that are not in the model: {unknown[:5]}")
    consumers = consumers_by_tensor(nodes)
    index = {name: i for i, name in enumerate(names)}
    complete: dict[str, NodePlacement] = dict(placements)
    for node in reversed(nodes):
        if node.name in complete:
            continue
        users = sorted({index[c.name] for out in node.output if out for c in consumers.get(out, ())})
        follow = next((complete[names[i]] for i in users if names[i] in complete), None)
        if follow is None:
            complete[node.name] = NodePlacement(HOST, "", 0.0, 0.0)
        else:
            complete[node.name] = NodePlacement(follow.device, "", follow.start_ns, follow.start_ns)
        log.debug("node %s belongs to no operator: placed on %s", node.name, complete[node.name].device)
    return {name: complete[name] for name in names}


def _format_ns(value: float) -> str:
    """Shortest round-tripping text of a float (``repr``): deterministic and exact."""
    return repr(float(value))


def annotate(model: onnx.ModelProto, placements: Mapping[str, NodePlacement],
             reasons: Mapping[str, tuple[str, float | None]] | None = None) -> onnx.ModelProto:
    """A copy of ``model`` whose nodes carry their placement in ``metadata_props``.

    Existing ``cimsplit.*`` entries are replaced; other metadata is kept.
    Nodes missing from ``placements`` are completed by :func:`complete_placements`.
    ``reasons`` maps operator names to (reason, forced makespan in ns or ``None``),
    stamped on every node of the operator.
    """
    placements = complete_placements(model, placements)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        placement = placements[node.name]
        stamp(node, placement)
        if reasons and placement.operator in reasons:
            reason, forced_ns = reasons[placement.operator]
            node.metadata_props.add(key=KEY_REASON, value=reason)
            node.metadata_props.add(key=KEY_FORCED, value="none" if forced_ns is None else _format_ns(forced_ns))
    return out


def stamp(node: onnx.NodeProto, placement: NodePlacement) -> None:
    """Write ``placement`` into ``node.metadata_props`` in place (replacing older stamps)."""
    kept = [(p.key, p.value) for p in node.metadata_props if p.key not in KEYS]
    del node.metadata_props[:]
    for key, value in kept:
        node.metadata_props.add(key=key, value=value)
    node.metadata_props.add(key=KEY_DEVICE, value=placement.device)
    node.metadata_props.add(key=KEY_OPERATOR, value=placement.operator)
    node.metadata_props.add(key=KEY_START, value=_format_ns(placement.start_ns))
    node.metadata_props.add(key=KEY_FINISH, value=_format_ns(placement.finish_ns))


def read_annotations(nodes: Sequence[onnx.NodeProto]) -> dict[str, NodePlacement]:
    """Node name -> placement, read back from ``metadata_props`` (nodes without a stamp are skipped)."""
    placements: dict[str, NodePlacement] = {}
    for node in nodes:
        props = {p.key: p.value for p in node.metadata_props}
        if KEY_DEVICE in props:
            placements[node.name] = NodePlacement(
                props[KEY_DEVICE], props.get(KEY_OPERATOR, ""),
                float(props.get(KEY_START, 0.0)), float(props.get(KEY_FINISH, 0.0)),
            )
    return placements
