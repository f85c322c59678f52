"""Rewrite sliced operators (TSO): two parts on sliced weights or row bands, joined by a Concat on the host.

For an operator the placement sliced (``Schedule.slicing``), its nodes (the
anchor Conv/Gemm/MatMul and what is fused into it, :func:`cimsplit.compiler.slicing.anatomy`)
are copied twice, ``<node>/cim`` and ``<node>/host``, every tensor they make
renamed ``<tensor>__cim`` / ``<tensor>__host``:

- KS: each copy's anchor reads its share of the weight (and bias) along the
  output-channel axis, and so does a fused bias ``Add`` of its constant (a
  PyTorch Linear's ``MatMul -> Add``) -- an initializer slice, or a new DequantizeLinear of the
  sliced quantized weight with its per-channel scales and zero points sliced the
  same way (per-tensor ones shared), so each part is still ``DQ -> Conv -> Q``.  For
  a MatMul or Gemm on float or 16-bit activations, a per-tensor weight scale and zero
  point become per-column ones of the part's width, all equal (the same arithmetic),
  so that each part's DQ reads its own: onnxruntime merges equal one-value initializers
  (``ConstantSharing``) and folds ``DQ -> MatMul`` into MatMulNBits only when the
  scale has one reader, so two parts sharing it in one graph (``partitioned.onnx``)
  ran float MatMuls where the model and the partition files run MatMulNBits;
- OFM: each copy reads a ``Slice`` of the entry rows with the halo its output
  rows need (:func:`cimsplit.compiler.slicing.ofm_bands`) and gets the pads that
  are left; the Slice runs where the entry tensor is made (the band crosses,
  not the whole input), and when the entry is a DequantizeLinear's output the
  Slice cuts its int8 input and each part gets its own copy of the DQ;
- a ``Concat`` on the host joins the CIM part's output (first channels or
  rows) and the host part's into the operator's output.  When the operator ends
  in ``Q -> DQ`` the parts stop at the int8 tensor, the Concat joins int8 (exact:
  both copies of Q have the same scale) and the one DQ stays after it.

Every new node carries ``cimsplit.slicing`` (``ks:<channels>`` / ``ofm:<rows>``).
Returns the rewritten model (shapes inferred) and every node's placement.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from cimsplit.compiler.constants import STANDARD_DOMAINS
from cimsplit.compiler.simplify import infer_static_shapes, tensor_shapes
from cimsplit.compiler.slicing import anatomy, conv_geometry, ofm_bands
from cimsplit.compiler.workload import Workload
from cimsplit.passes.placement.result import PlacementResult
from cimsplit.passes.placement.slicing import expand
from cimsplit.passes.rewrite.annotate import CIM, HOST, NodePlacement, complete_placements, placements_from_schedule

__all__ = ["KEY_SLICING", "slice_model"]

KEY_SLICING = "cimsplit.slicing"
PARTS = ("cim", "host")


def _set_attr(node: onnx.NodeProto, name: str, value: object) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept)
    if value is not None:
        node.attribute.append(helper.make_attribute(name, value))


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


class _Builder:
    """The model being rewritten: new nodes and initializers, and their placements."""

    def __init__(self, model: onnx.ModelProto, placements: dict[str, NodePlacement]) -> None:
        self.model = model
        self.inits = {t.name: t for t in model.graph.initializer}
        self.producers = {o: n for n in model.graph.node for o in n.output if o}
        self.placements = placements
        self.new_inits: list[onnx.TensorProto] = []
        self.opset = next(o.version for o in model.opset_import if o.domain in STANDARD_DOMAINS)

    def init(self, name: str, array: np.ndarray) -> str:
        self.new_inits.append(numpy_helper.from_array(array, name))
        return name

    def weight_only(self, anchor: onnx.NodeProto) -> bool:
        """Whether onnxruntime may fold ``anchor``'s weight DQ into MatMulNBits: a MatMul or Gemm whose input
        is no 8-bit DQ's output (float or 16-bit activations; 8-bit ones make it a QLinearMatMul, whose weight
        must stay per tensor)."""
        if anchor.op_type not in ("MatMul", "Gemm"):
            return False
        source = self.producers.get(anchor.input[0])
        if source is None or source.op_type != "DequantizeLinear":
            return True
        zero_point = self.inits.get(source.input[2]) if len(source.input) > 2 and source.input[2] else None
        return zero_point is not None and zero_point.data_type not in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)

    def sliced_constant(self, name: str, axis: int, lo: int, hi: int, tag: str, size: int,
                        own_scale: bool = False) -> tuple[str, list]:
        """``name`` (initializer or DQ of initializers) cut to [lo, hi) on ``axis`` of a dimension of ``size``;
        new names end in ``__<tag>`` (the anchor and the part: unique when two operators share a weight).
        With ``own_scale`` a per-tensor scale of a weight matrix becomes the part's own per-column one."""
        part = tag
        if name in self.inits:
            array = numpy_helper.to_array(self.inits[name])
            if array.ndim == 0 or array.shape[axis] != size:
                return name, []  # broadcast (a Gemm bias of one value): every part reads it whole
            return self.init(f"{name}__{part}", np.take(array, range(lo, hi), axis=axis)), []
        dq = self.producers[name]
        data = numpy_helper.to_array(self.inits[dq.input[0]])
        if data.ndim == 0 or data.shape[axis % data.ndim] != size:
            return name, []
        inputs = [self.init(f"{dq.input[0]}__{part}", np.take(data, range(lo, hi), axis=axis))]
        scale = numpy_helper.to_array(self.inits[dq.input[1]])
        own = own_scale and scale.size == 1 and data.ndim == 2 and (dq.domain not in STANDARD_DOMAINS or self.opset >= 13)
        for extra in dq.input[1:]:
            values = numpy_helper.to_array(self.inits[extra]) if extra else None
            if values is not None and values.size > 1:
                inputs.append(self.init(f"{extra}__{part}", values[lo:hi]))
            elif values is not None and own:
                inputs.append(self.init(f"{extra}__{part}", np.full(hi - lo, values.reshape(()), values.dtype)))
            else:
                inputs.append(extra)
        node = helper.make_node("DequantizeLinear", inputs, [f"{name}__{part}"], name=f"{dq.name}/{part}",
                                domain=dq.domain)
        node.attribute.extend(dq.attribute)
        if own:
            _set_attr(node, "axis", axis % data.ndim)
        return node.output[0], [node]


def slice_model(model: onnx.ModelProto, workload: Workload, result: PlacementResult
                ) -> tuple[onnx.ModelProto, dict[str, NodePlacement]]:
    """The model with every sliced operator rewritten, and the placement of each of its nodes."""
    schedule, problem = result.schedule, result.problem
    expansion = expand(problem, schedule.on_host, schedule.slicing)
    parts = schedule.parts
    assert parts is not None
    placements = complete_placements(model, placements_from_schedule(workload, schedule))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    b = _Builder(out, placements)
    shapes = tensor_shapes(model)
    index = {(expansion.owner[i], expansion.role[i]): i for i in range(len(expansion.owner))}
    replaced: dict[str, list[onnx.NodeProto]] = {}
    for v in result.sliced:
        op = workload.operators[v]
        option = problem.slicings[v][schedule.slicing[v]]
        shape = anatomy(model, op)
        if shape is None:
            raise ValueError(f"operator {op.name!r} was sliced but cannot be rewritten")
        timing = {role: NodePlacement(CIM if role == "cim" else HOST, problem.names[v] + "/" + role,
                                      parts.start_ns[index[(v, role)]], parts.finish_ns[index[(v, role)]])
                  for role in ("cim", "host", "join")}
        new = _rewrite(b, shape, option.kind, option.split, shapes, timing)
        replaced[shape.anchor.name] = new
    gone = {n for v in result.sliced for n in workload.operators[v].nodes}
    nodes: list[onnx.NodeProto] = []
    for node in out.graph.node:
        if node.name in replaced:
            nodes.extend(replaced[node.name])
        elif node.name not in gone:
            nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(_topological(_prune(nodes, out), out))
    out.graph.initializer.extend(b.new_inits)
    used = {i for n in out.graph.node for i in n.input}
    keep = [t for t in out.graph.initializer if t.name in used]
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    del out.graph.value_info[:]
    out = onnx.shape_inference.infer_shapes(out, strict_mode=True, data_prop=True)
    if any(shape is None for shape in tensor_shapes(out).values()):  # contrib outputs: measured, as loading does
        out = infer_static_shapes(out, {i.name: shapes[i.name] for i in out.graph.input})
    names = {n.name for n in out.graph.node}
    return out, complete_placements(out, {k: p for k, p in b.placements.items() if k in names})


def _topological(nodes: list[onnx.NodeProto], model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """``nodes`` in a topological order, ties by their position (the parts sit at the anchor's place)."""
    import heapq

    made = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    deps = [{made[i] for i in n.input if i in made} for n in nodes]
    users: list[list[int]] = [[] for _ in nodes]
    for k, d in enumerate(deps):
        for j in d:
            users[j].append(k)
    waiting = [len(d) for d in deps]
    ready = [k for k, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(nodes[k])
        for j in users[k]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    return order


def _prune(nodes: list[onnx.NodeProto], model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Drop nodes nothing reads any more (the weight DQ a KS slice replaced, the DQ an OFM Slice bypasses)."""
    outputs = {o.name for o in model.graph.output}
    while True:
        read = {i for n in nodes for i in n.input} | outputs
        alive = [n for n in nodes if any(o in read for o in n.output if o)]
        if len(alive) == len(nodes):
            return nodes
        nodes = alive


def _rewrite(b: _Builder, shape, kind: str, split: int, shapes: Mapping, timing: Mapping[str, NodePlacement]
             ) -> list[onnx.NodeProto]:
    """The nodes replacing the operator of ``shape`` (at its anchor's place in the graph)."""
    label = f"{kind}:{split}"
    anchor = shape.anchor
    producers = {o: n for n in shape.nodes for o in n.output if o}
    # The tail: a Q -> DQ at the exit stays single after the Concat (int8 join).
    exit_node = producers[shape.exit]
    tail = None
    if exit_node.op_type == "DequantizeLinear" and exit_node.input[0] in producers \
            and producers[exit_node.input[0]].op_type == "QuantizeLinear":
        tail = exit_node
    joined = tail.input[0] if tail is not None else shape.exit
    copied = [n for n in shape.nodes if n is not tail]
    out_shape = shapes[shape.exit]
    new: list[onnx.NodeProto] = []
    entry_src = b.producers.get(shape.entry)
    band_of = None
    if kind == "ofm":
        g = conv_geometry(anchor, shapes)
        bands = dict(zip(PARTS, ofm_bands(g, split)))
        pads = list(_attr(anchor, "pads", [0, 0, 0, 0]))
        # Slice the int8 tensor when the entry is an activation DQ of another operator.
        via_dq = entry_src is not None and entry_src.op_type == "DequantizeLinear" and entry_src.input[0] not in b.inits
        sliced = entry_src.input[0] if via_dq else shape.entry
        source = b.producers.get(sliced)
        where = b.placements[source.name] if source is not None else NodePlacement(HOST, "", 0.0, 0.0)
        band_of = {}
        for part in PARTS:
            row0, row1, _, _ = bands[part]
            starts, ends, axes = (b.init(f"{anchor.name}/{part}_rows_{k}", np.array([val], dtype=np.int64))
                                  for k, val in (("start", row0), ("end", row1), ("axis", 2)))
            # Named after the operator too: two row-sliced operators may read one tensor.
            node = helper.make_node("Slice", [sliced, starts, ends, axes], [f"{sliced}__{anchor.name}_rows_{part}"],
                                    name=f"{anchor.name}/slice_{part}")
            new.append(node)
            b.placements[node.name] = NodePlacement(where.device, "", where.finish_ns, where.finish_ns)
            band = node.output[0]
            if via_dq:
                dq = helper.make_node("DequantizeLinear", [band, *entry_src.input[1:]],
                                      [f"{shape.entry}__{anchor.name}_{part}"], name=f"{entry_src.name}/{anchor.name}_{part}",
                                      domain=entry_src.domain)
                dq.attribute.extend(entry_src.attribute)
                new.append(dq)
                b.placements[dq.name] = timing[part]
                band = dq.output[0]
            band_of[part] = band
    m_total = out_shape[shape.out_axis]
    for part in PARTS:
        made = {o for n in copied for o in n.output if o}
        lo, hi = (0, split) if part == "cim" else (split, m_total)  # KS: this part's output channels
        extra: list[onnx.NodeProto] = []
        for node in copied:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.name = f"{node.name}/{part}"
            copy.input[:] = [f"{i}__{part}" if i in made else (band_of[part] if band_of and i == shape.entry else i)
                             for i in copy.input]
            copy.output[:] = [f"{o}__{part}" if o else o for o in copy.output]
            if node is anchor and kind == "ks":
                tag = f"{anchor.name}_{part}"
                w, dq_w = b.sliced_constant(anchor.input[1], shape.ks_axis, lo, hi, tag, m_total, b.weight_only(anchor))
                copy.input[1] = w
                extra += dq_w
                if len(anchor.input) > 2 and anchor.input[2]:
                    bias, dq_b = b.sliced_constant(anchor.input[2], -1 if anchor.op_type == "Gemm" else 0, lo, hi,
                                                   tag, m_total)
                    copy.input[2] = bias
                    extra += dq_b
            if node is not anchor and kind == "ks":
                for name, tensor, axis in shape.channel_constants:
                    if name == node.name:
                        sliced, dq_c = b.sliced_constant(tensor, axis, lo, hi, f"{node.name}_{part}", m_total)
                        copy.input[:] = [sliced if i == tensor else i for i in copy.input]
                        extra += dq_c
            if node is anchor and kind == "ofm":
                _, _, top, bottom = bands[part]
                _set_attr(copy, "auto_pad", None)
                _set_attr(copy, "pads", [top, pads[1] if len(pads) == 4 else 0, bottom, pads[3] if len(pads) == 4 else 0])
            copy.metadata_props.add(key=KEY_SLICING, value=label)
            b.placements[copy.name] = timing[part]
            new.append(copy)
        for node in extra:
            b.placements[node.name] = NodePlacement(timing[part].device, "", timing[part].start_ns, timing[part].start_ns)
        new[len(new) - len(copied):len(new) - len(copied)] = extra  # constants before their reader
    axis = 2 if kind == "ofm" else shape.out_axis
    concat = helper.make_node("Concat", [f"{joined}__cim", f"{joined}__host"], [joined], name=f"{anchor.name}/join",
                              axis=axis)
    concat.metadata_props.add(key=KEY_SLICING, value=label)
    b.placements[concat.name] = timing["join"]
    new.append(concat)
    if tail is not None:
        b.placements[tail.name] = timing["join"]
        new.append(tail)
    return new
