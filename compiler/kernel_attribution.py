"""Which nodes of the simplified model each kernel of ONNX Runtime's optimized graph came from.

With graph optimizations on, ONNX Runtime runs another graph than the one it
was given: DequantizeLinear -> Conv -> QuantizeLinear becomes one QLinearConv,
Conv + Relu one fused Conv, NCHWc layouts add ReorderInput/ReorderOutput and
QLinear kernels add Transposes.  ``SessionOptions.optimized_model_filepath``
saves that graph; its node names are those of the profiler's
``<node>_kernel_time`` events.  Fused nodes keep the names of the tensors they
still produce, so the two graphs are matched through tensor names:

* a *boundary* tensor is produced (or fed as a graph input) in both graphs with
  the same element type; an output of an optimized node that keeps the name
  and operator type of a simplified node is that node's output of the same
  position, under whatever name (ORT renames int8 tensors it converts to uint8);
* cutting both graphs at the boundary tensors leaves connected *pieces* (nodes
  joined through non-boundary tensors; initializers join nothing);
* an optimized piece produces boundary tensors, and the simplified pieces that
  produce those same tensors form, with it, one *region*: the simplified nodes
  whose work the region's kernels do.  Glue kernels (reorders, transposes,
  casts) lie inside the piece of the kernel that needs them, so they are
  charged with it;
* kernels that pass renamed tensors (the ``reorder_token`` chain of the NCHWc
  layout, a fused SiLU, a ``QLinear<Op>`` named after its ``<Op>``) are matched through their names: ONNX Runtime names an
  NCHWc node ``<tensor>_nchwc`` after the tensor it computes (a Conv that adds
  a residual computes that Add, and its activation after it) and a fusion
  ``<node>/<Name>Fusion/`` after its last node.  Without that, a float CNN's
  whole NCHWc chain was one region, split by the weights below.

A DequantizeLinear read by several node inputs joins none of its readers: ONNX
Runtime gives each reader its own copy first (``EnsureUniqueDQForNodeUnit``,
``<dq>/duplicated``), so each copy is glue of its own reader's kernel, and a
reader that runs on the int8 tensor (an int8 MaxPool, a QLinearConcat) drops its
copy.  Joined through the shared tensor, the readers were one region and
their kernels' time was split among them by their level-off times (YOLOv5n
int8's SPPF: two int8 MaxPools' 2.1 ms and a Concat's 83 us charged as 1.2 ms
and 0.8 ms).

Simplified nodes computed from constants only (a weight's DequantizeLinear)
take no share of a region's time.  When ORT folds them they cost nothing; when
one runs as its own kernel, its region holds constant nodes only and its time
goes to the regions that read its outputs.  A region's time is split among its
other nodes by weights the caller gives (the nodes' times with optimizations
off), equally when every weight is 0.  Nothing here measures anything.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import onnx

__all__ = ["ATTRIBUTION_VERSION", "CALIBRATION_ATTRIBUTIONS", "Region", "attribute_kernels", "constant_nodes", "shared_dequantized",
           "split_region_times"]

ATTRIBUTION_VERSION = 5
"""Bumped when the charging of kernels to nodes changes, so profiles cached with another one are measured again
and calibrations made with another one are flagged (2: NCHWc, fused-SiLU and QLinearConv kernels matched by name;
3: a shared DequantizeLinear joins none of its readers; 4: a calibration point's fork DequantizeLinear, which keeps
a pair int8, is not charged to the point; 5: the kernels of a function onnxruntime inlines, HardSwish's, are charged
to it, :func:`cimsplit.compiler.ort_profiler._name_as_traced`)."""
CALIBRATION_ATTRIBUTIONS = frozenset({4, 5})
"""Versions that charge every calibration point alike (5 differs from 4 only where a function is inlined, and no
point has one: tests/compiler/test_calibration.py)."""

log = logging.getLogger(__name__)

_NCHWC_DOMAIN = "com.microsoft.nchwc"
_NCHWC_SUFFIX = "_nchwc"


@dataclass(frozen=True)
class Region:
    """Simplified nodes and the optimized-graph kernels (with the fraction of each) that do their work."""

    nodes: tuple[str, ...]
    """Nodes that share the region's time (constant-only nodes excluded)."""
    kernels: tuple[tuple[str, float], ...]
    """(optimized node name, fraction of its time charged here); fractions of one kernel sum to 1."""


class _Union:
    def __init__(self, items: Iterable[str]) -> None:
        self.parent = {item: item for item in items}

    def find(self, item: str) -> str:
        root = item
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[item] != root:
            self.parent[item], item = root, self.parent[item]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)  # the smaller name is the root: deterministic


def _producers(graph: onnx.GraphProto) -> dict[str, str]:
    return {out: node.name for node in graph.node for out in node.output if out}


def _elem_types(graph: onnx.GraphProto) -> dict[str, int]:
    return {
        vi.name: vi.type.tensor_type.elem_type
        for vi in (*graph.input, *graph.value_info, *graph.output)
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type
    }


def constant_nodes(graph: onnx.GraphProto) -> set[str]:
    """Nodes whose inputs all come from initializers or other constant-only nodes (graph order is topological)."""
    constant_tensors = {init.name for init in graph.initializer}
    result: set[str] = set()
    for node in graph.node:
        if all(not name or name in constant_tensors for name in node.input):
            result.add(node.name)
            constant_tensors.update(out for out in node.output if out)
    return result


def shared_dequantized(graph: onnx.GraphProto) -> set[str]:
    """Outputs of DequantizeLinear nodes read by more than one node input (ORT duplicates those DQs per reader)."""
    readers: dict[str, int] = defaultdict(int)
    for node in graph.node:
        for name in node.input:
            readers[name] += 1
    return {node.output[0] for node in graph.node
            if node.op_type == "DequantizeLinear" and node.output and readers[node.output[0]] > 1}


def _pieces(graph: onnx.GraphProto, boundary: set[str]) -> _Union:
    """Join every node with the producers of its non-boundary inputs."""
    producers = _producers(graph)
    pieces = _Union(node.name for node in graph.node)
    for node in graph.node:
        for name in node.input:
            if name in producers and name not in boundary:
                pieces.union(node.name, producers[name])
    return pieces


def _nchwc_output(node: onnx.NodeProto, s_nodes: Mapping[str, onnx.NodeProto], s_producers: Mapping[str, str],
                  s_consumers: Mapping[str, list[str]]) -> str | None:
    """The simplified tensor an NCHWc kernel computes (its output is a renamed ``reorder_token``), or None.

    ONNX Runtime names an NCHWc node after the tensor it replaces, ``<tensor>_nchwc``
    (a Conv's output, or its fused activation's); a Conv that also adds a residual
    (a 4th, ``Sum`` input) computes that Add's output, and then the activation after it.
    """
    if node.domain != _NCHWC_DOMAIN or not node.name.endswith(_NCHWC_SUFFIX) or len(node.output) != 1:
        return None
    tensor = node.name.removesuffix(_NCHWC_SUFFIX)
    if tensor not in s_producers:
        return None

    def follow(op_types: Iterable[str]) -> str | None:
        readers = s_consumers.get(tensor, [])
        if len(readers) == 1 and s_nodes[readers[0]].op_type in op_types and s_nodes[readers[0]].output:
            return s_nodes[readers[0]].output[0]
        return None

    if node.op_type == "Conv" and len(node.input) > 3 and node.input[3]:
        summed = follow(("Add", "Sum"))
        if summed is None:
            return None
        tensor = summed
        activation = next((a.s.decode() for a in node.attribute if a.name == "activation"), "")
        if activation:
            tensor = follow((activation,)) or tensor
    return tensor


def _fusion_output(node: onnx.NodeProto, s_nodes: Mapping[str, onnx.NodeProto]) -> str | None:
    """The simplified tensor a fused kernel named ``<node>/<Name>Fusion/`` computes (that node's output), or None.

    ONNX Runtime names the node of such a fusion after its last node (SiLU's Mul for
    ``QuickGelu``), whose output the fused kernel then makes under another name.
    """
    head, _, tail = node.name.partition("/")
    last = s_nodes.get(head)
    if not tail.endswith("Fusion/") or last is None or len(node.output) != 1 or len(last.output) != 1:
        return None
    return last.output[0]


def _qlinear_output(node: onnx.NodeProto, s_nodes: Mapping[str, onnx.NodeProto], s_consumers: Mapping[str, list[str]],
                    o_names: set[str]) -> str | None:
    """The simplified tensor a QLinearConv named ``<conv>_token_<n>`` computes (its output is renamed), or None.

    It is the QuantizeLinear output after that Conv, or after the activation
    (Clip, Relu) ONNX Runtime folded into the quantization range (no kernel
    keeps its name).
    """
    head, sep, tail = node.name.rpartition("_token_")
    conv = s_nodes.get(head)
    if (node.op_type != "QLinearConv" or not sep or not tail.isdigit() or conv is None or conv.op_type != "Conv"
            or len(node.output) != 1 or not conv.output):
        return None

    quantize = _only_reader(conv.output[0], ("QuantizeLinear",), s_nodes, s_consumers)
    return None if quantize is None else _past_folded(quantize.output[0], s_nodes, s_consumers, o_names)


def _qlinear_twin_output(node: onnx.NodeProto, s_nodes: Mapping[str, onnx.NodeProto],
                         s_consumers: Mapping[str, list[str]], o_names: set[str]) -> str | None:
    """The simplified tensor the kernel of a QDQ node unit named after its ``<Op>`` node computes, or None.

    ONNX Runtime names the QLinearAdd, QLinearConcat, QLinearSigmoid ... of a QDQ
    node unit, and the ``<Op>`` it runs on the 8-bit tensor when it drops the unit's
    Q/DQ (Transpose, Reshape, MaxPool), after the unit's node; its output, that
    node's QuantizeLinear output, is renamed or retyped (int8 -> uint8), so without
    this two adjacent quantized ops (QLinearAdd -> QLinearSigmoid) were one region.
    """
    twin = s_nodes.get(node.name)
    if (twin is None or node.op_type not in (twin.op_type, "QLinear" + twin.op_type)
            or len(node.output) != 1 or not twin.output):
        return None
    quantize = _only_reader(twin.output[0], ("QuantizeLinear",), s_nodes, s_consumers)
    return None if quantize is None else _past_folded(quantize.output[0], s_nodes, s_consumers, o_names)


def _only_reader(tensor: str, op_types: tuple[str, ...], s_nodes: Mapping[str, onnx.NodeProto],
                 s_consumers: Mapping[str, list[str]]) -> onnx.NodeProto | None:
    readers = s_consumers.get(tensor, [])
    found = s_nodes[readers[0]] if len(readers) == 1 else None
    return found if found is not None and found.op_type in op_types and found.output else None


def _past_folded(tensor: str, s_nodes: Mapping[str, onnx.NodeProto], s_consumers: Mapping[str, list[str]],
                 o_names: set[str]) -> str:
    """A quantized ``tensor``, or past the ``DequantizeLinear -> Clip/Relu -> QuantizeLinear`` runs after it that
    ONNX Runtime folded into its quantization (no kernel keeps the activation's name)."""
    while True:
        dequantize = _only_reader(tensor, ("DequantizeLinear",), s_nodes, s_consumers)
        activation = dequantize and _only_reader(dequantize.output[0], ("Clip", "Relu"), s_nodes, s_consumers)
        again = (activation and activation.name not in o_names
                 and _only_reader(activation.output[0], ("QuantizeLinear",), s_nodes, s_consumers))
        if not again:
            return tensor
        tensor = again.output[0]


def attribute_kernels(
    simplified: onnx.ModelProto,
    optimized: onnx.ModelProto,
    optimized_types: Mapping[str, int] | None = None,
) -> tuple[Region, ...]:
    """Regions of ``simplified`` nodes and the ``optimized`` kernels that do their work (module docstring).

    ``optimized_types``: tensor name -> ONNX element type of the optimized
    graph's tensors (e.g. from the profiler's ``output_type_shape``); the
    optimized model's own ``value_info`` is used where it is missing.  Node
    names of ``simplified`` must be unique; duplicate names in ``optimized``
    are one kernel for the trace too, so they are joined.
    """
    s_graph, o_graph = simplified.graph, optimized.graph
    s_producers, o_producers = _producers(s_graph), _producers(o_graph)
    s_types = _elem_types(s_graph)
    o_types = {**_elem_types(o_graph), **(optimized_types or {})}
    s_available = set(s_producers) | {vi.name for vi in s_graph.input}
    o_available = set(o_producers) | {vi.name for vi in o_graph.input}
    alias = {  # optimized tensor name -> simplified tensor name
        name: name for name in s_available & o_available
        if name not in s_types or name not in o_types or s_types[name] == o_types[name]
    }
    s_nodes = {node.name: node for node in s_graph.node}
    o_names = {node.name for node in o_graph.node}
    for node in o_graph.node:
        twin = s_nodes.get(node.name)
        if twin is None or twin.op_type != node.op_type or twin.domain != node.domain or len(twin.output) != len(node.output):
            continue
        for o_name, s_name in zip(node.output, twin.output):
            if o_name and s_name and alias.get(o_name, s_name) == s_name:
                alias[o_name] = s_name
    s_consumers: dict[str, list[str]] = defaultdict(list)
    for node in s_graph.node:
        for name in node.input:
            s_consumers[name].append(node.name)
    for node in o_graph.node:
        made = (_nchwc_output(node, s_nodes, s_producers, s_consumers) or _fusion_output(node, s_nodes)
                or _qlinear_output(node, s_nodes, s_consumers, o_names)
                or _qlinear_twin_output(node, s_nodes, s_consumers, o_names))
        if made is not None and node.output[0] not in alias:
            alias[node.output[0]] = made
        elif node.op_type == "QuantizeLinear" and node.output and node.output[0] in alias:
            alias[node.output[0]] = _past_folded(alias[node.output[0]], s_nodes, s_consumers, o_names)
    s_boundary, o_boundary = set(alias.values()), set(alias)
    s_pieces, o_pieces = _pieces(s_graph, s_boundary | shared_dequantized(s_graph)), _pieces(o_graph, o_boundary)
    by_name: dict[str, str] = {}
    for node in o_graph.node:  # one trace event name, one kernel
        if node.name in by_name:
            o_pieces.union(by_name[node.name], node.name)
        by_name.setdefault(node.name, node.name)

    # The simplified pieces each optimized piece produces boundary tensors of are one region.
    o_outputs: dict[str, set[str]] = defaultdict(set)
    o_inputs: dict[str, set[str]] = defaultdict(set)
    for node in o_graph.node:
        root = o_pieces.find(node.name)
        o_outputs[root].update(alias[name] for name in node.output if name in alias and alias[name] in s_producers)
        o_inputs[root].update(alias[name] for name in node.input if name in alias)
    kernels_of: dict[str, list[str]] = defaultdict(list)
    for name in dict.fromkeys(node.name for node in o_graph.node):
        kernels_of[o_pieces.find(name)].append(name)
    owners: dict[str, list[str]] = {}
    for root, produced in o_outputs.items():
        targets = [s_producers[name] for name in sorted(produced)]
        if not targets:  # nothing it makes is a simplified tensor: charge it to the readers of its inputs
            targets = [reader for name in sorted(o_inputs[root]) for reader in s_consumers.get(name, ())]
        for target in targets[1:]:
            s_pieces.union(targets[0], target)
        owners[root] = targets[:1]
    for root in kernels_of:
        owners.setdefault(root, [])

    constants = constant_nodes(s_graph)
    position = {node.name: index for index, node in enumerate(s_graph.node)}
    outputs_of = {node.name: [out for out in node.output if out] for node in s_graph.node}
    members: dict[str, list[str]] = defaultdict(list)
    for node in s_graph.node:
        members[s_pieces.find(node.name)].append(node.name)
    charges: dict[str, dict[str, float]] = defaultdict(dict)  # region root -> kernel -> fraction
    for root, kernels in kernels_of.items():
        if not owners[root]:
            log.debug("kernels %s match no simplified node; their time is not charged", ", ".join(kernels))
            continue
        region = s_pieces.find(owners[root][0])
        for kernel in kernels:
            charges[region][kernel] = charges[region].get(kernel, 0.0) + 1.0
    # A region of constant-only nodes that runs (a weight's DequantizeLinear) is charged to its readers.
    for region in sorted(charges):
        if any(node not in constants for node in members[region]):
            continue
        readers = sorted({
            s_pieces.find(reader)
            for node in members[region]
            for out in outputs_of[node]
            for reader in s_consumers.get(out, ())
            if s_pieces.find(reader) != region
        })
        readers = [reader for reader in readers if any(node not in constants for node in members[reader])]
        if not readers:
            continue
        moved = charges.pop(region)
        for reader in readers:
            for kernel, fraction in moved.items():
                charges[reader][kernel] = charges[reader].get(kernel, 0.0) + fraction / len(readers)
    regions = []
    for root in sorted(members, key=lambda r: position[members[r][0]]):
        shared = tuple(node for node in members[root] if node not in constants)
        if not shared:
            continue
        regions.append(Region(nodes=shared, kernels=tuple(sorted(charges.get(root, {}).items()))))
    return tuple(regions)


def split_region_times(
    regions: Iterable[Region], kernel_ns: Mapping[str, float], weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """node -> ns: each region's kernel time split among its nodes by ``weights`` (equally if they are all 0)."""
    result: dict[str, float] = {}
    for region in regions:
        total_ns = sum(kernel_ns.get(kernel, 0.0) * fraction for kernel, fraction in region.kernels)
        shares = [max(float((weights or {}).get(node, 0.0)), 0.0) for node in region.nodes]
        if sum(shares) <= 0:
            shares = [1.0] * len(region.nodes)
        scale = total_ns / sum(shares)
        for node, share in zip(region.nodes, shares):
            result[node] = share * scale
    return result

