"""Layout glue: the kernels onnxruntime adds where a conv's blocked layout (int8 NHWC, float NCHWc) meets another.

On x86 onnxruntime runs a fused int8 conv (QLinearConv) in NHWC and keeps that
layout from one such conv to the next.  Where the chain meets an op it runs in
float (a residual Add whose other input stays int8, a conv of the ``-s8out``
kind), it inserts, in the region :mod:`cimsplit.compiler.kernel_attribution`
charges to the conv, a uint8 Transpose back to NCHW and a standalone
DequantizeLinear, or DequantizeLinear -> float Transpose -> QuantizeLinear ->
DequantizeLinear (MobileNetV2 int8: a 144 -> 24 1x1 conv at 56x56 runs its
kernel in 72 us and its glue in 61 us).  Float convs have theirs too: the NCHWc reorder into a blocked conv whose input an op in
plain NCHW made (:data:`REORDER_KINDS`).  A calibration point's conv sits
between two convs of its own kind, so no glue is charged to it (the chain's
ends are its neighbours'): a calibrated GEMM kind predicts the kernel alone,
and :func:`layout_glue` adds what the model's own graph inserts, each kernel
predicted by its element-count kind (``glue:DequantizeLinear``,
``glue:QuantizeLinear``, ``glue:Transpose-u8``, ``glue:Transpose-f32``).

Which kernels: for a GEMM operator, the Transpose kernels of its region (one that computes its anchor,
perhaps with the DequantizeLinear of the producer's output it reads: MobileNetV2 int8's depthwise convs after a
``-s8in`` conv, 20-25 % of their time) and the Q/DQ kernels joined to them by a tensor, unless they touch a graph
input or output: a calibration point has those too (an image conv reads the graph input through a Transpose), so
its kind's fit already holds them.  For an operator without a weight (element-wise, pooling, layout, an
activation MatMul), every Transpose and every Q/DQ of an activation in its region, wherever they are: an int8
element point reads a conv and is the graph's output, so onnxruntime puts a Transpose out of the NHWC chain and
the output's DequantizeLinear in its region (an int8 Reshape at 16 x 132 x 132: its kernel 4 us, the Transpose 19 us, the
DequantizeLinear 45 us) where a network's runs inside a quantized chain without either; calibration does not
charge them to the point (:func:`glue_kernels`), and the predictor adds the network's own.  Never a Transpose
of the model's own (a Transpose operator's work), nor a weight's DequantizeLinear.  Elements: the size of a tensor
of the model the kernel, or the glue joined to it, reads or writes; else the operator's output (N_out) for a kernel
downstream of its compute kernel or in a region of its nodes after its anchor, its input (N_in) otherwise; the
kernel's charged fraction (a kernel shared by regions) scales it.  The
graph is ONNX Runtime's own optimized graph: nothing is measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import onnx

from cimsplit.compiler.kernel_attribution import Region, attribute_kernels
from cimsplit.compiler.loader import declared_dims
from cimsplit.compiler.qdq_kernels import readers_of
from cimsplit.compiler.workload import Operator, Workload

__all__ = ["GLUE_PREFIX", "GLUE_KINDS", "REORDER_KINDS", "NCHWC_DOMAIN", "Glue", "layout_glue", "glue_kernels"]

GLUE_PREFIX = "glue:"
GLUE_KINDS = ("glue:DequantizeLinear", "glue:QuantizeLinear", "glue:Transpose-u8", "glue:Transpose-f32")
REORDER_KINDS = ("glue:ReorderInput",)
"""The float NCHWc layout's glue: onnxruntime runs a squeeze-and-excitation block's scaling Mul in plain NCHW, between
blocked convs, and reorders its output into the next conv's blocks; profiling charges that ReorderInput to the conv
(EfficientNet-B0's projection convs ran 10-20 % above their points without it).  The ReorderOutputs before such an op
are not glue: charged to the convs before it as well, they took EfficientNet-B0's conv error 10.8 -> 15.4 % and
MobileNetV3-Small's 12.3 -> 18.9 % (``bench/results/predictor_reorder_glue_tried_zen3.txt``), while the ReorderInput
alone took them 10.8 -> 9.1 % and 10.4 -> 7.6 % on the same profiles (``predictor_error_zen3_s31_fused.txt``)."""
NCHWC_DOMAIN = "com.microsoft.nchwc"
_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})


class Glue(NamedTuple):
    """One glue kernel of an operator's region: its name in the optimized graph, its kind, the elements it moves."""

    kernel: str
    kind: str
    elements: float


def _transpose_kind(node: onnx.NodeProto, producers: Mapping[str, onnx.NodeProto], types: Mapping[str, int]) -> str:
    """A Transpose moves floats when its input is a float tensor or a DequantizeLinear's output, else uint8."""
    source = node.input[0]
    if source in types:
        return "glue:Transpose-f32" if types[source] == onnx.TensorProto.FLOAT else "glue:Transpose-u8"
    producer = producers.get(source)
    return "glue:Transpose-f32" if producer is not None and producer.op_type == "DequantizeLinear" else "glue:Transpose-u8"


def glue_kernels(simplified: onnx.ModelProto, optimized: onnx.ModelProto, workload: Workload,
                 regions: Sequence[Region] | None = None) -> dict[str, list[Glue]]:
    """Operator -> its :class:`Glue` kernels, for the operators whose region holds layout glue
    (``regions``: :func:`~.kernel_attribution.attribute_kernels` of the two graphs, when the caller has them)."""
    graph = optimized.graph
    nodes = {node.name: node for node in graph.node}
    producers = {out: node for node in graph.node for out in node.output if out}
    constants = {init.name for init in graph.initializer}
    types = {vi.name: vi.type.tensor_type.elem_type for vi in [*graph.value_info, *graph.input, *graph.output]
             if vi.type.HasField("tensor_type")}
    boundary = {vi.name for vi in [*graph.input, *graph.output]}
    readers = readers_of(graph)
    simplified_nodes = {node.name: node for node in simplified.graph.node}
    simplified_readers = readers_of(simplified.graph)
    sizes = _static_sizes(simplified.graph)
    owner = {node: op for op in workload.operators for node in op.nodes}
    glue: dict[str, list[Glue]] = {}
    for region in attribute_kernels(simplified, optimized) if regions is None else regions:
        _add_reorders(glue, region, owner, nodes, boundary, sizes)
        op = _glue_owner(region, owner, simplified_nodes)
        if op is None:
            continue
        # A region of the operator's nodes without its anchor holds its output's Q/DQ (or its input's).
        output_side = op.nodes[0] not in region.nodes and bool(
            set(region.nodes) & _downstream([op.nodes[0]], simplified_nodes, simplified_readers))
        fraction = dict(region.kernels)
        names = [name for name in fraction if name in nodes]
        movers = {name for name in names if _moves(nodes[name], constants)
                  and getattr(simplified_nodes.get(name), "op_type", "") != "Transpose"}  # not the model's own
        if op.m is None:
            chosen = movers  # an element operator's: all of it (module docstring)
        else:  # a GEMM operator's: the transposes and the Q/DQ kernels joined to them
            chosen = {name for name in movers if nodes[name].op_type == "Transpose"}
            touching = {t for name in chosen for t in (*nodes[name].input[:1], *nodes[name].output)}
            changed = bool(chosen)
            while changed:  # directly or through another Q/DQ
                changed = False
                for name in sorted(movers - chosen):
                    if nodes[name].input[0] in touching or any(out in touching for out in nodes[name].output):
                        chosen.add(name)
                        touching.update([nodes[name].input[0], *nodes[name].output])
                        changed = True
            if any(_at_edge(nodes[name], producers, readers, boundary) for name in chosen):
                continue  # a GEMM point has the glue at the graph's edge too (an image conv's input)
        downstream = _downstream([n for n in names if n not in chosen and nodes[n].op_type not in _QDQ | {"Transpose"}], nodes, readers)
        for name in sorted(chosen):
            node = nodes[name]
            kind = _transpose_kind(node, producers, types) if node.op_type == "Transpose" else GLUE_PREFIX + node.op_type
            elements = _elements(node, nodes, producers, readers, sizes) or (
                op.n_out if output_side or name in downstream else op.n_in)
            glue.setdefault(op.name, []).append(Glue(name, kind, float(max(elements, 1)) * fraction[name]))
    return glue


def _moves(node: onnx.NodeProto, constants: set[str]) -> bool:
    """A kernel that only moves or converts data: a Transpose, or a Q/DQ of an activation (not a weight's)."""
    return node.op_type == "Transpose" or (node.op_type in _QDQ and any(i and i not in constants for i in node.input[:1]))


def _static_sizes(graph: onnx.GraphProto) -> dict[str, int]:
    """Tensor -> elements, for the tensors of ``graph`` whose shape is static."""
    return {vi.name: math.prod(dims) for vi in [*graph.value_info, *graph.input, *graph.output]
            if (dims := declared_dims(vi)) and None not in dims}


def _elements(node: onnx.NodeProto, nodes: Mapping[str, onnx.NodeProto], producers: Mapping[str, onnx.NodeProto],
              readers: Mapping[str, list[onnx.NodeProto]], sizes: Mapping[str, int]) -> int | None:
    """Elements a glue kernel moves: the size of a tensor of the simplified model it or the glue kernels joined to
    it read or write (a Transpose, Q or DQ keeps the count), None when none is known."""
    seen: set[str] = set()
    frontier = [node]
    while frontier:
        current = frontier.pop()
        if current.name in seen or not (current.op_type == "Transpose" or current.op_type in _QDQ):
            continue
        seen.add(current.name)
        tensors = [current.input[0], *current.output]
        known = [sizes[t] for t in tensors if t in sizes]
        if known:
            return known[0]
        frontier += [p for p in [producers.get(current.input[0])] if p is not None]
        frontier += [r for out in current.output for r in readers.get(out, ())]
    return None


def _add_reorders(glue: dict[str, list[Glue]], region: Region, owner: Mapping[str, Operator],
                  nodes: Mapping[str, onnx.NodeProto], boundary: set[str], sizes: Mapping[str, int]) -> None:
    """The NCHWc reorders into the region's one GEMM operator (with an Add onnxruntime fused into its conv, the
    region is both's), but from the graph's input: a point's image conv has that one too."""
    gemms = {owner[node].name: owner[node] for node in region.nodes if node in owner and owner[node].m is not None}
    if len(gemms) != 1:
        return
    (op,) = gemms.values()
    for name, fraction in region.kernels:
        node = nodes.get(name)
        if node is not None and node.domain == NCHWC_DOMAIN and GLUE_PREFIX + node.op_type in REORDER_KINDS \
                and node.input[0] not in boundary:
            elements = sizes.get(node.input[0], op.n_in)
            glue.setdefault(op.name, []).append(Glue(name, GLUE_PREFIX + node.op_type, float(max(elements, 1)) * fraction))


def _glue_owner(region: Region, owner: Mapping[str, Operator], nodes: Mapping[str, onnx.NodeProto]) -> Operator | None:
    """The operator a region's glue belongs to: the one whose anchor it computes, when every other node of the
    region is a neighbour's Q/DQ (the producer's output DequantizeLinear the kernel reads), or the one that owns
    every node of a region without an anchor (its output's Q/DQ); else None.  A Transpose operator has none: a
    Transpose in its region is its own work, wherever onnxruntime moved it."""
    ops = {owner[node].name: owner[node] for node in region.nodes if node in owner}
    anchored = [op for op in ops.values() if op.nodes[0] in region.nodes]
    if len(anchored) == 1:
        found = anchored[0]
        if not all(node in found.nodes or (node in nodes and nodes[node].op_type in _QDQ) for node in region.nodes):
            return None
    elif len(ops) == 1 and all(node in owner for node in region.nodes):
        found = next(iter(ops.values()))
    else:
        return None
    return None if found.op_type == "Transpose" or found.op_type in _QDQ else found


def _at_edge(node: onnx.NodeProto, producers: Mapping[str, onnx.NodeProto],
             readers: Mapping[str, list[onnx.NodeProto]], boundary: set[str]) -> bool:
    """True when a chain of Q/DQ/Transpose kernels joins ``node`` to a graph input or output."""
    glue = _QDQ | {"Transpose"}
    seen: set[str] = set()
    frontier = [node]
    while frontier:
        current = frontier.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        tensors = [current.input[0], *current.output]
        if any(t in boundary for t in tensors):
            return True
        frontier += [p for p in [producers.get(current.input[0])] if p is not None and p.op_type in glue]
        frontier += [r for out in current.output for r in readers.get(out, ()) if r.op_type in glue]
    return False


def _downstream(sources: list[str], by_name: Mapping[str, onnx.NodeProto],
                readers: Mapping[str, list[onnx.NodeProto]]) -> set[str]:
    """Names of the nodes that read, directly or not, an output of a node in ``sources``."""
    seen: set[str] = set()
    frontier = [by_name[s] for s in sources if s in by_name]
    while frontier:
        node = frontier.pop()
        for out in node.output:
            for reader in readers.get(out, ()):
                if reader.name not in seen:
                    seen.add(reader.name)
                    frontier.append(reader)
    return seen


def layout_glue(model: onnx.ModelProto, workload: Workload, *, level: str = "all",
                threads: int = 1) -> dict[str, list[tuple[str, float]]]:
    """Operator -> [(glue kind, elements)]: :func:`glue_kernels` on the graph onnxruntime builds for ``model`` at
    ``level`` (a session, no run)."""
    from cimsplit.compiler.ort_profiler import optimized_model

    found = glue_kernels(model, optimized_model(model, level, threads), workload)
    return {op: [(g.kind, g.elements) for g in glue] for op, glue in found.items()}
