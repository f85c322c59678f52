"""Slicing candidates of CIM-capable operators (TSO, DESIGN §8) and their costs.

An operator can be sliced when its ONNX nodes have the plain shape the rewrite
(:mod:`cimsplit.passes.rewrite.slicing`) handles -- :func:`anatomy` decides for
both, so a candidate is always rewritable:

- the anchor is a ``Conv`` (2-D), ``Gemm`` or ``MatMul`` with its weight on the
  right, reading one activation tensor that enters the operator from outside,
  and the operator hands exactly one tensor on;
- KS (output channels): ``Conv`` with ``group = 1`` or a ``Gemm``/``MatMul``
  whose weight (and bias) is an initializer or a ``DequantizeLinear`` of
  initializers quantized per tensor or (not a ``MatMul``: see :func:`_per_channel_dq`)
  per output channel;
- OFM (output rows): a ``Conv`` with explicit pads (``auto_pad`` NOTSET or VALID).

Candidates (a small set, so that the placement model stays small).  KS splits
at crossbar-row boundaries: the CIM part computes the first M_cim = k·rows of
the M output channels (k = 1..K-1, K = ceil(M / rows)), on
ceil(M_cim / rows)·ceil(N_v / cols) crossbars (eq. 1); at most four k, evenly
spread, when K - 1 > 4.  OFM: the CIM part computes the first R of the H_out
output rows, R = H_out/4, H_out/2 and 3·H_out/4 rounded (distinct, 0 < R <
H_out), on all the operator's crossbars.

Costs.  CIM part: eq. 2-3 on the slice (KS: the whole input, M_cim/M of the
output; OFM: the input band with its halo, R/H_out of the MVMs and of the
output).  Host part: the operator's profiled host latency scaled by its share
of the MACs ((M - M_cim)/M, or (H_out - R)/H_out): Conv and GEMM kernels are
compute-bound, so their time is close to linear in the MACs (the fixed cost
of one kernel call is not modelled).  Join: the Concat on the host, modelled
as a copy that reads and writes the output once at :data:`HOST_COPY_BYTES_PER_S`.
Transfers: :func:`~cimsplit.compiler.costs.transfer_ns` of the bytes that
cross, with the slice's row bursts (:func:`~cimsplit.compiler.costs.row_bursts`,
counted only under the burst bus model) -- KS: the whole input, as the unsliced
edge; OFM: each part's band; the CIM part's output back to the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import onnx

from cimsplit.compiler.constants import constant_tensors
from cimsplit.compiler.costs import Costs, cim_latency_ns, crossbars_needed, moved_bytes, row_bursts, transfer_ns
from cimsplit.compiler.simplify import tensor_shapes
from cimsplit.compiler.workload import Operator, Workload

__all__ = ["HOST_COPY_BYTES_PER_S", "Anatomy", "SliceCost", "anatomy", "conv_geometry", "ofm_bands",
           "slice_costs"]

HOST_COPY_BYTES_PER_S = 10e9
"""Host memory copy rate of the join (Concat): 10 GB/s, one x86 core's streaming copy."""
_MAX_KS = 4
_OFM_FRACTIONS = (0.25, 0.5, 0.75)


@dataclass(frozen=True)
class SliceCost:
    """One slicing candidate of an operator, costed (times in ns)."""

    operator: str
    kind: str
    split: int
    """KS: output channels of the CIM part (the first ones); OFM: its output rows (the top band)."""
    t_host_ns: float
    t_cim_ns: float
    crossbars: int
    t_join_ns: float
    t_back_ns: float
    t_in_cim_ns: float | None
    """What the CIM part reads, when it crosses to the CIM (None: the whole input, as the edge)."""
    t_in_host_ns: float | None
    """What the host part reads, when it crosses to the host (None: the whole input)."""
    t_graph_in_ns: float
    """The graph input the CIM part reads, if the operator reads one (0 under ``--paper-exact``)."""


@dataclass(frozen=True)
class Anatomy:
    """The nodes of a sliceable operator as the rewrite sees them."""

    anchor: onnx.NodeProto
    nodes: tuple[onnx.NodeProto, ...]
    """The operator's nodes in model order (the anchor and what is fused into it)."""
    entry: str
    """The activation tensor entering the operator from outside."""
    exit: str
    """The one tensor the operator hands on."""
    ks_axis: int | None
    """Output-channel axis of the weight when KS is possible, else None."""
    out_axis: int
    """Axis of the output the KS parts are concatenated on."""
    channel_constants: tuple[tuple[str, str, int], ...] = ()
    """(node, constant, axis) for each constant a fused node (a bias ``Add``) reads along the output
    channels: KS cuts it on that axis of its own, as it cuts the weight."""


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _sliceable_constant(name: str, producers: dict[str, onnx.NodeProto], inits: dict[str, onnx.TensorProto],
                        axis: int) -> bool:
    """An initializer, or a DequantizeLinear of initializers per tensor or per channel along ``axis``."""
    if name in inits:
        return True
    node = producers.get(name)
    if node is None or node.op_type != "DequantizeLinear" or not all(i in inits for i in node.input if i):
        return False
    if len(node.input) < 2 or math.prod(inits[node.input[1]].dims) == 1:
        return True  # per tensor
    rank = len(inits[node.input[0]].dims)
    return int(_attr(node, "axis", 1)) % rank == axis % rank


def _per_channel_dq(name: str, producers: dict[str, onnx.NodeProto], inits: dict[str, onnx.TensorProto]) -> bool:
    """True when ``name`` is a DequantizeLinear with a scale per channel.

    onnxruntime runs a QDQ MatMul with such a weight as DequantizeLinear + a float GEMM (its
    QLinearMatMul takes a weight scale per tensor), and the weight is not an initializer the GEMM can
    pack ahead: MLAS then sums a narrow part (64 of ViT-Tiny's 576 qkv columns) in another order than
    the whole, a float ulp that a following QuantizeLinear can turn into a whole step (ViT-Tiny int8,
    S8S8 per channel: 2 of 12,608 values of one block's qkv).  KS on such an operator would break the
    int8 bit-identity, so it is not offered.  Per-channel Conv and Gemm run as QLinearConv and QGemm
    (integers, checked in onnxruntime's optimized graph): they keep KS.
    """
    node = producers.get(name)
    return (node is not None and node.op_type == "DequantizeLinear" and len(node.input) > 1
            and node.input[1] in inits and math.prod(inits[node.input[1]].dims) > 1)


@dataclass(frozen=True)
class _Graph:
    """What :func:`anatomy` looks up, indexed once per model."""

    by_name: dict[str, onnx.NodeProto]
    index: dict[str, int]
    consts: set[str]
    inits: dict[str, onnx.TensorProto]
    producers: dict[str, onnx.NodeProto]
    readers: dict[str, set[str]]
    """Tensor -> names of the nodes that read it."""
    outputs: set[str]
    shapes: dict

    @classmethod
    def of(cls, model: onnx.ModelProto, shapes: dict | None = None) -> _Graph:
        graph = model.graph
        readers: dict[str, set[str]] = {}
        for n in graph.node:
            for i in n.input:
                readers.setdefault(i, set()).add(n.name)
        return cls({n.name: n for n in graph.node}, {n.name: k for k, n in enumerate(graph.node)},
                   constant_tensors(graph), {t.name: t for t in graph.initializer},
                   {o: n for n in graph.node for o in n.output if o}, readers, {o.name for o in graph.output},
                   tensor_shapes(model) if shapes is None else shapes)


def anatomy(model: onnx.ModelProto | _Graph, op: Operator) -> Anatomy | None:
    """How ``op`` would be sliced, or None when it cannot be (see the module docstring)."""
    if not op.cim_capable or op.op_type not in ("Conv", "Gemm", "MatMul"):
        return None
    g = model if isinstance(model, _Graph) else _Graph.of(model)
    shapes, consts, inits, producers = g.shapes, g.consts, g.inits, g.producers
    if any(name not in g.by_name for name in op.nodes):
        return None
    nodes = tuple(sorted((g.by_name[name] for name in op.nodes), key=lambda n: g.index[n.name]))
    anchor = g.by_name.get(op.name)
    if anchor is None or anchor.domain not in ("", "ai.onnx"):
        return None
    made = {o for n in nodes for o in n.output if o}
    entries = sorted({i for n in nodes for i in n.input if i and i not in made and i not in consts})
    names = set(op.nodes)
    exits = sorted({o for n in nodes for o in n.output if o and (o in g.outputs or g.readers.get(o, set()) - names)})
    if len(entries) != 1 or len(exits) != 1:
        return None
    if op.op_type == "Conv":
        w = anchor.input[1]
        if len(shapes.get(w) or ()) != 4:
            return None
        ks_axis: int | None = 0 if int(_attr(anchor, "group", 1)) == 1 else None
        bias_axis, out_axis = 0, 1
    elif op.op_type == "Gemm":
        if anchor.input[0] in consts or anchor.input[1] not in consts or int(_attr(anchor, "transA", 0)):
            return None
        w = anchor.input[1]
        ks_axis = 0 if int(_attr(anchor, "transB", 0)) else 1
        bias_axis, out_axis = -1, 1
    else:
        if anchor.input[0] in consts or anchor.input[1] not in consts or len(shapes.get(anchor.input[1]) or ()) != 2:
            return None
        w = anchor.input[1]
        ks_axis, bias_axis, out_axis = 1, -1, -1
    if ks_axis is not None and not _sliceable_constant(w, producers, inits, ks_axis):
        ks_axis = None
    if ks_axis is not None and op.op_type == "MatMul" and _per_channel_dq(w, producers, inits):
        ks_axis = None  # a float GEMM on a weight computed at run time: its parts are not bit-identical
    if ks_axis is not None and len(anchor.input) > 2 and anchor.input[2]:
        if not _sliceable_constant(anchor.input[2], producers, inits, 0 if bias_axis == 0 else
                                   len(shapes.get(anchor.input[2]) or (1,)) - 1):
            ks_axis = None
    channel = _channel_constants(nodes, anchor, shapes, consts, exits[0], out_axis) if ks_axis is not None else []
    if channel is None or not all(_sliceable_constant(c, producers, inits, a) for _, c, a in channel):
        ks_axis, channel = None, []
    return Anatomy(anchor, nodes, entries[0], exits[0], ks_axis, out_axis, tuple(channel))


def _channel_constants(nodes: tuple[onnx.NodeProto, ...], anchor: onnx.NodeProto, shapes: dict, consts: set[str],
                       exit_: str, out_axis: int) -> list[tuple[str, str, int]] | None:
    """The constants fused nodes read along the output channels (numpy broadcasting: a constant of rank r
    lines up with the last r axes of the output), or None when one cannot be told (unknown shapes, or a
    quantize node with a scale per channel)."""
    out_shape = shapes.get(exit_)
    if out_shape is None:
        return None
    rank, m = len(out_shape), out_shape[out_axis]
    found = []
    for node in nodes:
        if node is anchor:
            continue
        for name in node.input:
            if not name or name not in consts:
                continue
            shape = shapes.get(name)
            if shape is None:
                return None
            if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
                if math.prod(shape) != 1:
                    return None
                continue
            axis = out_axis % rank - (rank - len(shape))
            if axis >= 0 and shape[axis] != 1:
                if shape[axis] != m:
                    return None
                found.append((node.name, name, axis))
    return found


@dataclass(frozen=True)
class ConvGeometry:
    h_in: int
    h_out: int
    kernel: int
    stride: int
    dilation: int
    pad_top: int


def conv_geometry(anchor: onnx.NodeProto, shapes: dict) -> ConvGeometry | None:
    """The row geometry of a 2-D Conv with explicit pads, or None."""
    if _attr(anchor, "auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID"):
        return None
    x, y, w = shapes.get(anchor.input[0]), shapes.get(anchor.output[0]), shapes.get(anchor.input[1])
    if x is None or y is None or w is None or len(x) != 4:
        return None
    pads = list(_attr(anchor, "pads", [0, 0, 0, 0]))  # type: ignore[call-overload]
    strides = list(_attr(anchor, "strides", [1, 1]))  # type: ignore[call-overload]
    dilations = list(_attr(anchor, "dilations", [1, 1]))  # type: ignore[call-overload]
    return ConvGeometry(h_in=x[2], h_out=y[2], kernel=w[2], stride=strides[0], dilation=dilations[0], pad_top=pads[0])


def ofm_bands(g: ConvGeometry, split: int) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """Input rows and pads of the two OFM parts: ((row0, row1, pad_top, pad_bottom) of output rows
    [0, split), the same of [split, H_out)).  Output rows [a, b) read padded input rows
    a·s - pad_top .. (b-1)·s - pad_top + (k-1)·d + 1; what falls outside [0, H_in) becomes padding."""
    extent = (g.kernel - 1) * g.dilation + 1

    def band(a: int, b: int) -> tuple[int, int, int, int]:
        first, end = a * g.stride - g.pad_top, (b - 1) * g.stride - g.pad_top + extent
        row0, row1 = max(0, first), min(g.h_in, end)
        return row0, row1, row0 - first, end - row1

    return band(0, split), band(split, g.h_out)


def _ks_splits(m: int, rows: int) -> list[int]:
    k_total = math.ceil(m / rows)
    ks = list(range(1, k_total))
    if len(ks) > _MAX_KS:
        ks = sorted({max(1, min(k_total - 1, round(i * k_total / (_MAX_KS + 1)))) for i in range(1, _MAX_KS + 1)})
    return [k * rows for k in ks]


def _ofm_splits(h_out: int) -> list[int]:
    return sorted({r for r in (round(f * h_out) for f in _OFM_FRACTIONS) if 0 < r < h_out})


def slice_costs(model: onnx.ModelProto, workload: Workload, costs: Costs, kinds: tuple[str, ...] = ("ks", "ofm"),
                paper_exact: bool = False) -> tuple[SliceCost, ...]:
    """Every slicing candidate of ``kinds`` of the workload's operators, costed for ``costs.hardware``."""
    if not kinds:
        return ()
    hw = costs.hardware
    indexed = _Graph.of(model)
    shapes = indexed.shapes
    by_cost = {c.name: c for c in costs.operators}
    out: list[SliceCost] = []
    for op in workload.operators:
        cost = by_cost[op.name]
        if cost.t_cim_ns is None or op.m is None or op.n is None or op.n_mvm is None:
            continue
        shape = anatomy(indexed, op)
        if shape is None:
            continue
        graph_in = op.graph_input_elements > 0 and not paper_exact

        in_shape, out_shape = tuple(shapes.get(shape.entry) or ()), tuple(shapes.get(shape.exit) or ())

        def crossing(part_shape: tuple[int, ...], natural: int | None, total: int) -> float:
            """eq. 4 (and its bursts, under the burst bus model) for a slice of a tensor of ``total`` elements."""
            elements = math.prod(part_shape)
            size = moved_bytes(elements, _scaled(natural, elements, total), hw)
            bursts = row_bursts(part_shape, size // elements if elements else 1, hw.burst_bytes)
            return transfer_ns(size, hw, bursts)

        out_total_bytes = op.out_bytes if op.out_bytes is not None else 4 * op.n_out
        t_join = 2 * out_total_bytes / HOST_COPY_BYTES_PER_S * 1e9
        if "ks" in kinds and shape.ks_axis is not None:
            for m_cim in _ks_splits(op.m, hw.crossbar_rows):
                n_out_cim = op.n_out * m_cim // op.m
                t_cim = cim_latency_ns(_part(op, op.n_in, op.n_mvm, n_out_cim), hw)
                assert t_cim is not None
                out.append(SliceCost(
                    operator=op.name, kind="ks", split=m_cim, t_host_ns=cost.t_host_ns * (op.m - m_cim) / op.m,
                    t_cim_ns=t_cim, crossbars=crossbars_needed(m_cim, op.n, hw), t_join_ns=t_join,
                    t_back_ns=crossing(_resized(out_shape, shape.out_axis, m_cim), op.out_bytes, op.n_out),
                    t_in_cim_ns=None, t_in_host_ns=None,
                    t_graph_in_ns=crossing(in_shape, op.in_bytes, op.n_in) if graph_in else 0.0))
        if "ofm" in kinds and op.op_type == "Conv":
            g = conv_geometry(shape.anchor, shapes)
            x_shape = shapes.get(shape.anchor.input[0])
            if g is None or x_shape is None or g.h_out < 2:
                continue
            for r in _ofm_splits(g.h_out):
                (a0, a1, _, _), (b0, b1, _, _) = ofm_bands(g, r)
                if a1 <= a0 or b1 <= b0:
                    continue  # a part whose rows are all padding reads no input row: no Conv computes it
                in_cim = op.n_in * (a1 - a0) // g.h_in
                n_out_cim = op.n_out * r // g.h_out
                t_cim = cim_latency_ns(_part(op, in_cim, op.n_mvm * r // g.h_out, n_out_cim), hw)
                assert t_cim is not None
                out.append(SliceCost(
                    operator=op.name, kind="ofm", split=r, t_host_ns=cost.t_host_ns * (g.h_out - r) / g.h_out,
                    t_cim_ns=t_cim, crossbars=cost.crossbars, t_join_ns=t_join,
                    t_back_ns=crossing(_resized(out_shape, 2, r), op.out_bytes, op.n_out),
                    t_in_cim_ns=crossing(_resized(in_shape, 2, a1 - a0), op.in_bytes, op.n_in),
                    t_in_host_ns=crossing(_resized(in_shape, 2, b1 - b0), op.in_bytes, op.n_in),
                    t_graph_in_ns=crossing(_resized(in_shape, 2, a1 - a0), op.in_bytes, op.n_in) if graph_in else 0.0))
    return tuple(out)


def _resized(shape: tuple[int, ...], axis: int, size: int) -> tuple[int, ...]:
    """``shape`` with dimension ``axis`` set to ``size`` (the slice of a tensor along that axis)."""
    out = list(shape)
    out[axis] = size
    return tuple(out)


def _part(op: Operator, n_in: int, n_mvm: int, n_out: int) -> Operator:
    """``op`` cut to a slice of ``n_in`` input and ``n_out`` output elements and ``n_mvm`` MVMs (eq. 2-3 read these)."""
    return replace(op, n_in=n_in, n_mvm=n_mvm, n_out=n_out, in_bytes=_scaled(op.in_bytes, n_in, op.n_in),
                   out_bytes=_scaled(op.out_bytes, n_out, op.n_out))


def _scaled(natural_bytes: int | None, elements: int, total: int) -> int | None:
    """Bytes of ``elements`` of a tensor of ``total`` elements and ``natural_bytes`` bytes."""
    if natural_bytes is None or total == 0:
        return None
    return natural_bytes * elements // total
