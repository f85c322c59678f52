"""Group same-device nodes into partitions whose graph is acyclic (DESIGN §5).

Putting every CIM node in one partition can form a cycle through the host:
``cim_a -> host_b -> cim_c`` makes {a, c} both feed and depend on {b}.  The
rule used here, in two steps:

1. **Segment.**  Walk the nodes in a topological order that stays on the
   current device while it can: among the ready nodes, take the lowest-index
   one on the current device; when none is ready, switch to the device of the
   lowest-index ready node.  A new segment starts at every switch.  Segments
   are contiguous runs of one topological order, so the segment graph is
   acyclic by construction.
2. **Merge.**  Visit the segments in order; merge each later segment of the
   same device into the earliest group that it can join without a cycle.
   Merging groups A and B creates a cycle exactly when some path of length
   two or more joins them (A -> X -> ... -> B, or back), since such a path
   would enter and leave the merged group; a direct edge A -> B is harmless.
   The check runs on the group graph after all earlier merges, so the final
   group graph is acyclic; the visits repeat until no merge is possible, so
   no two groups of one device are left that could merge without a cycle.
3. **Weights.**  Nodes that compute from weights only (a leftover
   ``Constant``, the ``DequantizeLinear`` of a QDQ weight) would be ready at
   the very start and land in the first segment, far from their use; they sit
   out steps 1-2 and then join *every* group that reads them, one copy per
   group as in step 4.  So no weight crosses the bus (a row-sliced Conv's two
   parts each dequantize the whole weight on their own device) and each
   partition sees ``DQ(weight) -> op``, the pattern onnxruntime fuses.  A copy's
   inputs are weights or copies in the same group, so the order stays
   topological.
4. **Quantized cuts.**  A ``DequantizeLinear`` of an activation (its data
   input is not a weight) sits out steps 1-2 too: for them its consumers read
   its data input straight from the ``QuantizeLinear`` (or graph input)
   before it.  Afterwards it joins *every* group that reads its output, one
   copy per group (copies keep the node's name; each partition is its own
   model), so a partition boundary of a QDQ model lies between Q and DQ: the
   tensor that crosses is the int8/uint8 one, and each partition sees the
   ``DQ -> op -> Q`` pattern that onnxruntime fuses into QLinearConv, QGemm,
   QLinearAdd, ...  The group that makes its input gets a copy too, read by
   nothing (one dequantization of the tensor per run), so that there the Q
   still feeds a DQ as in the whole model: onnxruntime removes a ``DQ -> Q``
   pair of equal scales whose Q writes a graph output and nothing else, and
   then does not fuse the quantized kernel before it (a Conv -> Relu on the
   CIM ran a float Conv where the whole model runs QLinearConv; on AVX2
   without VNNI their outputs differ).  A DQ that writes a graph output also
   lands on the host (the graph outputs live there): in a host group that
   reads it, else in its producer's group when that is a host group, else in
   the first host group after it, else in a host group of its own at the end.

The groups are then ordered topologically (ties by their first node's index)
and named per device in that order: ``host_0``, ``cim_0``, ``host_1``, ...

Tensors cross devices through transfers: one per tensor and destination
device.  Graph inputs and outputs live on the host (DESIGN §3), so a CIM
partition reading a graph input, or writing a graph output, gets a transfer
too.  Bytes and latency follow the cost model (eq. 4):
``bytes = elements * b`` and ``latency_ns = bytes / B_shared * 1e9``, where b
is the element size of the tensor that crosses (1 byte for int8/uint8, 4 for
float32) unless an ``element_bytes`` override is given; the burst bus model
adds bursts x CAS (:func:`cimsplit.compiler.costs.transfer_ns`).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from cimsplit.compiler.constants import is_quantize_node
from cimsplit.compiler.costs import row_bursts, transfer_ns
from cimsplit.compiler.hardware import Hardware
from cimsplit.compiler.toposort import stable_topological_order
from cimsplit.passes.rewrite.graph_utils import element_bytes_of, elements, node_inputs, shape_of, value_infos
from cimsplit.runtime.plan import TransferRecord as TransferSpec  # one record: the split's transfers are plan.json's

__all__ = ["PartitionSpec", "TransferSpec", "SplitPlan", "group_nodes", "plan_split", "HOST"]

HOST = "host"


@dataclass(frozen=True)
class PartitionSpec:
    """One partition: its nodes (in model order) and the activation tensors at its boundary."""

    name: str
    device: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    """Activation tensors read from outside, in first-use order (weights excluded)."""
    outputs: tuple[str, ...]
    """Tensors written here and read by another partition or the graph's outputs."""
    initializers: tuple[str, ...]
    """Initializers (weights) the partition's nodes read."""


@dataclass(frozen=True)
class SplitPlan:
    """Partitions in execution (topological) order and the transfers between them."""

    partitions: tuple[PartitionSpec, ...]
    transfers: tuple[TransferSpec, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def partition(self, name: str) -> PartitionSpec:
        for part in self.partitions:
            if part.name == name:
                return part
        raise KeyError(name)


def _node_edges(nodes: list[onnx.NodeProto]) -> list[set[int]]:
    """Successor sets between node indices through activation tensors."""
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    succs: list[set[int]] = [set() for _ in nodes]
    for v, node in enumerate(nodes):
        for name in node_inputs(node):
            u = producer.get(name)
            if u is not None and u != v:
                succs[u].add(v)
    return succs


def _segments(devices: list[str], succs: list[set[int]], active: set[int]) -> list[list[int]]:
    """Step 1: contiguous same-device runs of a device-sticky topological order of the ``active`` nodes."""
    n = len(devices)
    indegree = [0] * n
    for u in active:
        for v in succs[u]:
            indegree[v] += 1
    ready: dict[str, list[int]] = {}
    for v in sorted(active):
        if indegree[v] == 0:
            heapq.heappush(ready.setdefault(devices[v], []), v)
    segments: list[list[int]] = []
    current: str | None = None
    for _ in range(len(active)):
        if current is None or not ready.get(current):
            heads = [(heap[0], dev) for dev, heap in ready.items() if heap]
            if not heads:
                raise ValueError("the model's graph has a cycle")
            current = min(heads)[1]
            segments.append([])
        v = heapq.heappop(ready[current])
        segments[-1].append(v)
        for w in sorted(succs[v]):
            indegree[w] -= 1
            if indegree[w] == 0:
                heapq.heappush(ready.setdefault(devices[w], []), w)
    return segments


_RANDOM = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def _constant_nodes(nodes: list[onnx.NodeProto], graph_inputs: set[str]) -> set[int]:
    """Nodes that compute from weights only (Constant, a weight's DequantizeLinear, ...).

    Random generators read no tensor but are not weights: each run draws anew, so a copy
    per partition would not compute the same tensor.
    """
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    const: set[int] = set()
    for v, node in enumerate(nodes):
        reads = node_inputs(node)
        if node.op_type not in _RANDOM and all(t not in graph_inputs and (t not in producer or producer[t] in const) for t in reads):
            const.add(v)
    return const


def _reaches_long(graph: dict[int, set[int]], a: int, b: int) -> bool:
    """True if a path of length >= 2 leads from group a to group b."""
    stack = [x for x in graph[a] if x != b]
    seen = set(stack)
    while stack:
        x = stack.pop()
        for y in graph[x]:
            if y == b:
                return True
            if y not in seen:
                seen.add(y)
                stack.append(y)
    return False


def _activation_dequantizers(nodes: list[onnx.NodeProto], constant: set[int]) -> set[int]:
    """DequantizeLinear nodes whose data input is an activation (not computed from weights only)."""
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    return {
        v for v, node in enumerate(nodes)
        if node.op_type == "DequantizeLinear" and is_quantize_node(node) and v not in constant
        and node.input and producer.get(node.input[0], -1) not in constant
    }


def _through(succs: list[set[int]], cut: set[int]) -> list[set[int]]:
    """Successor sets with the ``cut`` nodes bypassed: a cut node's readers hang off its producer."""
    bypassed: list[set[int]] = []
    for u, out in enumerate(succs):
        if u in cut:
            bypassed.append(set())
            continue
        direct = out - cut
        for d in out & cut:
            direct |= succs[d]
        bypassed.append(direct - {u})
    return bypassed


def group_nodes(model: onnx.ModelProto, devices: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """Steps 1-4 of the module rule: (device, node names in model order) per group, in execution order.

    A cut DequantizeLinear (step 4) may be listed in several groups.
    """
    nodes = list(model.graph.node)
    dev = [devices[node.name] for node in nodes]
    succs = _node_edges(nodes)
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = {i.name for i in model.graph.input if i.name not in initializers}
    graph_outputs = {o.name for o in model.graph.output}
    constant = _constant_nodes(nodes, graph_inputs)
    cut = _activation_dequantizers(nodes, constant)
    reads = _through(succs, cut)
    # Weight-only nodes join the groups that read them at the end (step 3) instead of the
    # first segment, where they would be ready.
    deferred = sorted(v for v in constant if succs[v])
    segments = _segments(dev, reads, set(range(len(nodes))) - set(deferred) - cut)

    group_of = [-1] * len(nodes)  # -1: deferred or cut, placed in steps 3-4
    for g, seg in enumerate(segments):
        for v in seg:
            group_of[v] = g
    members: dict[int, list[int]] = {g: list(seg) for g, seg in enumerate(segments)}
    gdev = {g: dev[seg[0]] for g, seg in enumerate(segments)}
    graph: dict[int, set[int]] = {g: set() for g in members}
    for u in range(len(nodes)):
        for v in reads[u]:
            if group_of[u] >= 0 and group_of[v] >= 0 and group_of[u] != group_of[v]:
                graph[group_of[u]].add(group_of[v])

    merged = True
    while merged:  # a merge can turn a blocking path a -> x -> b into an edge a -> b: repeat to a fixpoint
        merged = False
        for b in range(len(segments)):
            for a in sorted(members):
                if a >= b or b not in members or gdev[a] != gdev[b]:
                    continue
                if _reaches_long(graph, a, b) or _reaches_long(graph, b, a):
                    continue
                # Merge b into a: a takes b's nodes and edges.
                for v in members.pop(b):
                    group_of[v] = a
                    members[a].append(v)
                out_b = graph.pop(b)
                graph[a] |= out_b - {a}
                for g, out in graph.items():
                    if b in out:
                        out.discard(b)
                        if g != a:
                            out.add(a)
                graph[a].discard(a)
                merged = True
                break

    # Topological order of groups, ties by their first node index.
    order = stable_topological_order({g: min(m) for g, m in members.items()}, graph)
    if order is None:  # pragma: no cover - the merge rule forbids it
        raise AssertionError("partition graph is cyclic")
    # Step 4 (its groups first: step 3 copies a weight into the groups of the cut DQs that
    # read it, e.g. a scale made by a Constant): a cut DequantizeLinear joins every group
    # that reads it and its producer's group.  Its readers already depended on its producer's
    # group, so no new group edge appears; a graph output's copy on the host goes after its
    # producer in the order.
    position = {g: k for k, g in enumerate(order)}
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    copies: dict[int, set[int]] = {}  # deferred or cut node -> the groups it joins
    for d in sorted(cut):
        p = producer.get(nodes[d].input[0])
        targets = {group_of[w] for w in succs[d]} | ({group_of[p]} if p is not None else set())
        if any(o in graph_outputs for o in nodes[d].output) and all(gdev[g] != HOST for g in targets):
            after = position[group_of[p]] if p is not None else -1
            host = next((g for g in order[after + 1:] if gdev[g] == HOST), None)
            if host is None:
                host = max(members) + 1
                members[host], gdev[host] = [], HOST
                order.append(host)
            targets.add(host)
        copies[d] = targets
    # Step 3: a deferred node joins every group that reads it, directly or through deferred
    # or cut nodes (visited in reverse, so their groups are known).  Its own inputs are
    # weights or deferred nodes copied into the same groups: no new group edge appears.
    for v in reversed(deferred):
        copies[v] = set().union(*(copies[w] if w in copies else {group_of[w]} for w in succs[v]))
    for v, groups in copies.items():
        for g in groups:
            members[g].append(v)
    return [(gdev[g], [nodes[v].name for v in sorted(members[g])]) for g in order]


def plan_split(model: onnx.ModelProto, devices: Mapping[str, str], hardware: Hardware) -> SplitPlan:
    """Partitions and transfers for ``model`` under the node -> device map ``devices``.

    ``devices`` must name every node (see :func:`cimsplit.passes.rewrite.annotate.complete_placements`).
    Transfers are priced by ``hardware``'s bus (:func:`cimsplit.compiler.costs.transfer_ns`);
    its ``element_bytes`` overrides the element size of every transfer, None takes each
    crossing tensor's own (1 byte for int8/uint8, 4 for float32).
    """
    missing = [n.name for n in model.graph.node if n.name not in devices]
    if missing:
        raise ValueError(f"no device for nodes {missing[:5]}")
    graph = model.graph
    nodes = {node.name: node for node in graph.node}
    initializers = {t.name for t in graph.initializer}
    graph_inputs = tuple(i.name for i in graph.input if i.name not in initializers)
    graph_outputs = tuple(o.name for o in graph.output)
    infos = value_infos(model)

    groups = group_nodes(model, devices)
    counters: dict[str, int] = {}
    named: list[tuple[str, str, list[str]]] = []
    for device, members in groups:
        k = counters.get(device, 0)
        counters[device] = k + 1
        named.append((f"{device}_{k}", device, members))

    # A cut DequantizeLinear's output is made in every partition that reads it; only the
    # first host copy of a graph output exports it (group_nodes puts one on the host).
    home: dict[str, str] = {name: HOST for name in graph_inputs}  # tensor -> device that holds it first
    owner: dict[str, str] = {}  # tensor -> the partition that exports it
    reads: dict[str, list[str]] = {}  # partition -> tensors read, first-use order
    for part, device, members in named:
        produced: set[str] = set()
        used: list[str] = []
        for name in members:
            for t in node_inputs(nodes[name]):
                if t not in produced and t not in used:
                    used.append(t)
            produced.update(o for o in nodes[name].output if o)
        reads[part] = used
        for t in sorted(produced):
            if t not in owner or (t in graph_outputs and home[t] != HOST and device == HOST):
                home[t] = device
                owner[t] = part

    readers: dict[str, list[str]] = {}
    for part, _, _ in named:
        for t in reads[part]:
            readers.setdefault(t, []).append(part)

    specs: list[PartitionSpec] = []
    for part, device, members in named:
        inputs = tuple(t for t in reads[part] if t not in initializers)
        weights = tuple(t for t in reads[part] if t in initializers)
        outputs = []
        for name in members:
            for t in nodes[name].output:
                exported = t in graph_outputs or any(r != part for r in readers.get(t, ()))
                if t and owner.get(t) == part and exported:
                    outputs.append(t)
        specs.append(PartitionSpec(part, device, tuple(members), inputs, tuple(outputs), weights))

    # Transfers: one per (tensor, destination device), ordered by when the tensor appears.
    part_device = {spec.name: spec.device for spec in specs}
    wanted: list[tuple[str, str]] = []
    ordered_tensors = list(graph_inputs) + [t for spec in specs for t in spec.outputs]
    for t in ordered_tensors:
        destinations = [part_device[r] for r in readers.get(t, ())]
        if t in graph_outputs:
            destinations.append(HOST)
        for dst in dict.fromkeys(destinations):
            if dst != home.get(t, HOST) and (t, dst) not in wanted:
                wanted.append((t, dst))
    transfers = []
    for i, (t, dst) in enumerate(wanted):
        if t not in infos:
            raise ValueError(f"tensor {t!r} crosses devices but has no value_info (shape inference must know it)")
        itemsize = hardware.element_bytes or element_bytes_of(infos[t])
        size_bytes = elements(infos[t]) * itemsize
        latency_ns = transfer_ns(size_bytes, hardware, row_bursts(shape_of(infos[t]), itemsize, hardware.burst_bytes))
        transfers.append(TransferSpec(f"transfer_{i}", t, home.get(t, HOST), dst, size_bytes, latency_ns))
    return SplitPlan(tuple(specs), tuple(transfers), graph_inputs, graph_outputs)
