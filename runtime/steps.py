"""A partition's operators as the plan schedules them: steps, and host partitions cut into pieces.

The plan times *operators* (one workload operator is one or a few ONNX nodes,
e.g. Conv + its fused Relu); the runtime executes *partitions*.  The written
partition files say which operator each node belongs to
(``cimsplit.operator`` in ``NodeProto.metadata_props``, see
``passes/rewrite/annotate.py``), so a partition reads back as a list of
:class:`Step`: the nodes of one operator, or one node of no scheduled
operator (a weight's DequantizeLinear, the copy of a cut DequantizeLinear),
which takes no time.

For timed runs a host partition is cut into **pieces**
(:func:`host_pieces`), each one onnxruntime session: a piece is a maximal run
of the partition's host operators that the schedule runs back to back and
whose inputs from other partitions have all arrived when the run begins, and
between whose operators the schedule puts no other host work (of this frame,
or in a stream of any frame: a gap in which the host idles or runs nothing
else keeps the piece whole, so a stream's modulo schedule does not split
partitions for nothing).  The
runtime starts a partition only when all its inputs are there and runs it in
one go; a host partition whose later operators wait in the schedule for a
CIM result (or that the schedule interleaves with other host work) would
otherwise hold its early operators back, or run them out of the planned
order.  A node of no scheduled operator is copied into every piece that
reads it (as the split copies a cut DequantizeLinear into every partition
that reads it, so int8 tensors stay the ones that cross).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["Step", "partition_steps", "Piece", "host_pieces", "OPERATOR_KEY", "UNSIGNED_KEY"]

OPERATOR_KEY = "cimsplit.operator"
"""The metadata key naming a node's workload operator (written by the annotate pass)."""
UNSIGNED_KEY = "cimsplit.unsigned"
"""The metadata of a QuantizeLinear whose int8 pair onnxruntime converts to uint8 (written by the split)."""

_TOLERANCE_NS = 1.0
"""Two schedule times closer than this are the same instant (they are sums of floats)."""


@dataclass(frozen=True)
class Step:
    """One scheduled operator of a partition (``operator`` None: nodes of no operator, no time)."""

    operator: str | None
    nodes: tuple[int, ...]
    """Indices into the partition model's nodes, in model order."""
    inputs: tuple[str, ...]
    """Activation tensors the step reads from outside itself (no initializers)."""
    outputs: tuple[str, ...]


def partition_steps(model: onnx.ModelProto, operators: Collection[str]) -> list[Step]:
    """The partition's nodes grouped by their operator (those in ``operators``), in model order."""
    weights = {t.name for t in model.graph.initializer}
    groups: dict[str | int, list[int]] = {}
    for i, node in enumerate(model.graph.node):
        op = next((p.value for p in node.metadata_props if p.key == OPERATOR_KEY), "")
        groups.setdefault(op if op in operators else i, []).append(i)
    steps = []
    for key, members in groups.items():
        produced: set[str] = set()
        inputs: list[str] = []
        outputs: list[str] = []
        for i in members:
            node = model.graph.node[i]
            for t in node.input:
                if t and t not in weights and t not in produced and t not in inputs:
                    inputs.append(t)
            produced.update(o for o in node.output if o)
            outputs.extend(o for o in node.output if o)
        steps.append(Step(key if isinstance(key, str) else None, tuple(members), tuple(inputs), tuple(outputs)))
    return steps


@dataclass(frozen=True)
class Piece:
    """A run of one host partition's operators, its own model; ``start_ns``/``duration_ns`` in the schedule."""

    name: str
    model: onnx.ModelProto
    operators: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    start_ns: float
    duration_ns: float


def host_pieces(name: str, model: onnx.ModelProto, outputs: Collection[str], times_ns: Mapping[str, tuple[float, float]],
                arrival_ns: Mapping[str, float], period_ns: float | None = None) -> list[Piece]:
    """Cut host partition ``name`` (``model``, exporting ``outputs``) into the pieces the schedule runs.

    ``times_ns``: every host operator of the plan -> (start, duration) in the
    schedule; ``arrival_ns``: tensor -> when it arrives on the host from
    elsewhere (missing: at the start); ``period_ns``: the shift between frames
    of a stream (its other frames' host work counts too), None for one frame.
    Pieces are in schedule order.
    """
    steps = partition_steps(model, times_ns)
    timed = sorted((s for s in steps if s.operator is not None), key=lambda s: (times_ns[s.operator][0], s.nodes[0]))  # type: ignore[index]
    produced_here = {t for s in steps for t in s.outputs}
    ready = _ready_ns(steps, arrival_ns)
    runs: list[list[Step]] = []
    run_start = run_end = 0.0
    for step in timed:
        start, duration = times_ns[step.operator]  # type: ignore[index]
        late = max((ready.get(t, 0.0) for t in step.inputs), default=0.0)
        members = {s.operator for s in runs[-1]} if runs else set()
        if (not runs or late > run_start + _TOLERANCE_NS
                or _interleaved(run_end, start, times_ns, period_ns, members)):  # type: ignore[arg-type]
            runs.append([])
            run_start = start
        runs[-1].append(step)
        run_end = start + duration
    if not runs:  # no scheduled operator at all (e.g. only the copy of a cut DequantizeLinear)
        runs.append([])
        run_start = max((arrival_ns.get(t, 0.0) for s in steps for t in s.inputs if t not in produced_here), default=0.0)
    members: list[set[int]] = [{i for s in run for i in s.nodes} for run in runs]
    own = _place_untimed(model, [s for s in steps if s.operator is None], members)
    if own and any(runs):  # a piece of their own, when their inputs have arrived
        members.append(own)
        run_start = max((ready.get(t, 0.0) for i in own for t in model.graph.node[i].input), default=0.0)
    else:
        members[0] |= own
    _share_dequantize(model, outputs, members)
    return _build(name, _unsigned_cuts(model, members), outputs, runs, members, times_ns, run_start)


def _ready_ns(steps: list[Step], arrival_ns: Mapping[str, float]) -> dict[str, float]:
    """Tensor -> when it can be read in the partition: a tensor from elsewhere on its arrival, one a node of no
    operator makes (the copy of a cut DequantizeLinear) when that node's inputs are there; a scheduled operator's
    output by the schedule's order (not listed).  A DQ copy of a late CIM result, read by an operator, holds that
    operator's piece back to the result (fuzz seed 779: the piece began before it, and its stream stopped with
    every piece waiting: the serial bus sent a transfer the piece makes before the result it waited on)."""
    ready = dict(arrival_ns)
    for step in steps:  # (model order: a chain of copies reads its predecessor's outputs)
        if step.operator is None:
            at = max((ready.get(t, 0.0) for t in step.inputs), default=0.0)
            ready.update((t, at) for t in step.outputs)
    return ready


def _interleaved(a: float, b: float, times_ns: Mapping[str, tuple[float, float]], period_ns: float | None,
                 run: set[str]) -> bool:
    """Whether the host has other work planned in [a, b): a host operator of this frame or, in a
    stream, of any frame (frame k runs operator u at k * period + start_u)."""
    gap = b - a
    if gap <= _TOLERANCE_NS:
        return False
    if period_ns:
        if gap >= period_ns:
            return True
        return any((start - a) % period_ns < gap - _TOLERANCE_NS for u, (start, _) in times_ns.items()
                   if not (u in run and abs(start - a) <= _TOLERANCE_NS))
    return any(a - _TOLERANCE_NS <= start < b - _TOLERANCE_NS for u, (start, _) in times_ns.items() if u not in run)


def _place_untimed(model: onnx.ModelProto, untimed: list[Step], members: list[set[int]]) -> set[int]:
    """A node of no operator joins every piece that reads its outputs (a copy each); one that no piece reads (it
    makes a partition output) joins the last piece that makes one of its inputs.  The rest, partition outputs
    computed from other partitions' tensors alone (the copy of a cut DequantizeLinear), are returned: they run
    when those arrive.  In the first piece, a DQ of a CIM result the schedule brings later held that piece
    back, and with it a transfer the serial bus sends before the one the DQ's input waits on: a stream of
    int8 fuzz seed 129 stopped with every piece waiting."""
    nodes = model.graph.node
    own: set[int] = set()
    for step in reversed(untimed):  # consumers first: a chain of them follows its last reader
        (i,) = step.nodes
        outputs = set(nodes[i].output)
        readers = [k for k, m in enumerate([*members, own]) if any(outputs & set(nodes[j].input) for j in m)]
        if not readers:
            inputs = set(nodes[i].input)
            makers = [k for k, m in enumerate(members) if any(inputs & set(nodes[j].output) for j in m)]
            readers = [max(makers)] if makers else [len(members)]
        for k in readers:
            (members[k] if k < len(members) else own).add(i)
    return own


def _share_dequantize(model: onnx.ModelProto, outputs: Collection[str], members: list[set[int]]) -> None:
    """An activation's DequantizeLinear read in another piece is copied into it (and leaves its own piece if nothing
    there reads it, it makes no partition output and the piece has more): the int8 tensor crosses between pieces,
    as the split makes it cross between partitions.  A float tensor crossing instead makes the reader's piece run
    its operator in float where the partition runs the quantized kernel (PP-OCR's recogniser int8 at
    ``--objective throughput``: 82 of its 117 pieces read one, and a stream's outputs differed from one frame's)."""
    nodes = model.graph.node
    weights = {t.name for t in model.graph.initializer}
    readers = _readers(model)
    for i, node in enumerate(nodes):
        if node.op_type != "DequantizeLinear" or node.input[0] in weights:
            continue
        reading = [k for k, m in enumerate(members) if m & readers.get(node.output[0], set())]
        for k, m in enumerate(members):
            if reading and i in m and len(m) > 1 and k not in reading and node.output[0] not in outputs:
                m.discard(i)
        for k in reading:
            members[k].add(i)


def _unsigned_cuts(model: onnx.ModelProto, members: list[set[int]]) -> onnx.ModelProto:
    """``model`` with each marked Q -> DQ pair (:data:`UNSIGNED_KEY`) whose DQ is in a piece its Q is not made uint8,
    as the split converts the pairs it cuts (``passes/rewrite/unsigned_cuts.py``): onnxruntime converts the pair in
    the whole partition, and a piece alone would not see it and run the S8S8 kernel, which saturates otherwise
    (ResNet-18 int8 at ``--objective throughput``: a stream's outputs differed from one frame's).  The conversion is
    exact: ``q + 128`` with the zero point ``zp + 128``."""
    nodes = model.graph.node
    readers = _readers(model)

    def pieces(i: int) -> set[int]:
        return {k for k, m in enumerate(members) if i in m}

    pairs = [(i, readers.get(node.output[0], set())) for i, node in enumerate(nodes) if _marked(node)]
    cut = [(i, dequantizers) for i, dequantizers in pairs if any(pieces(j) - pieces(i) for j in dequantizers)]
    if not cut:
        return model
    converted = onnx.ModelProto()
    converted.CopyFrom(model)
    graph = converted.graph
    zero_points = {t.name: t for t in graph.initializer}
    infos = {info.name: info for info in graph.value_info}
    for i, dequantizers in cut:
        q = graph.node[i]
        name = f"{q.output[0]}_zero_point_u8"
        shifted = numpy_helper.to_array(zero_points[q.input[2]]).astype(np.int16) + 128
        graph.initializer.append(numpy_helper.from_array(shifted.astype(np.uint8), name))
        for node in (q, *(graph.node[j] for j in dequantizers)):
            node.input[2] = name
        if q.output[0] in infos:
            infos[q.output[0]].type.tensor_type.elem_type = onnx.TensorProto.UINT8
    return converted


def _marked(node: onnx.NodeProto) -> bool:
    return node.op_type == "QuantizeLinear" and any(p.key == UNSIGNED_KEY and p.value == "1" for p in node.metadata_props)


def _readers(model: onnx.ModelProto) -> dict[str, set[int]]:
    """Tensor -> the indices of the nodes that read it."""
    readers: dict[str, set[int]] = {}
    for j, node in enumerate(model.graph.node):
        for t in node.input:
            readers.setdefault(t, set()).add(j)
    return readers


def _build(name: str, model: onnx.ModelProto, outputs: Collection[str], runs: list[list[Step]], members: list[set[int]],
           times_ns: Mapping[str, tuple[float, float]], only_start: float) -> list[Piece]:
    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model)
    infos = {vi.name: vi for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output)}
    weights = {t.name: t for t in graph.initializer}
    made = [{o for i in m for o in graph.node[i].output if o} for m in members]
    read = [{t for i in m for t in graph.node[i].input if t} for m in members]
    exported: set[str] = set()
    pieces = []
    for k, m in enumerate(members):
        order = sorted(m)
        inputs = [t for t in dict.fromkeys(t for i in order for t in graph.node[i].input if t)
                  if t not in made[k] and t not in weights]
        outs = [t for t in dict.fromkeys(o for i in order for o in graph.node[i].output if o)
                if t not in exported and ((t in outputs) or any(t in read[j] and t not in made[j] for j in range(len(members)) if j != k))]
        if not outs and order:  # its DequantizeLinear copied into its readers (_share_dequantize): it still runs, timed
            outs = [o for o in graph.node[order[-1]].output if o]
        exported.update(outs)
        sub = helper.make_graph(
            [graph.node[i] for i in order], f"{name}_{k}", [infos[t] for t in inputs], [infos[t] for t in outs],
            initializer=[weights[t] for t in sorted(read[k] & set(weights))],
        )
        piece_model = helper.make_model(sub, opset_imports=list(model.opset_import), ir_version=model.ir_version)
        ops = tuple(s.operator for s in runs[k]) if k < len(runs) else ()
        start = times_ns[ops[0]][0] if ops else only_start  # type: ignore[index]
        pieces.append(Piece(f"{name}.{k}" if len(members) > 1 else name, piece_model, ops,  # type: ignore[arg-type]
                            tuple(inputs), tuple(outs), start, sum(times_ns[o][1] for o in ops)))  # type: ignore[index]
    return pieces
