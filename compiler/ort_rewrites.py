"""What onnxruntime does to a QDQ graph before it fuses it, done to the model cimsplit costs and splits.

Where a quantized tensor is decides where a cut carries int8 to the bit: onnxruntime fuses DQ -> op -> Q
into one integer kernel only where nothing stands between them, and it first removes no-ops and carries
quantizers over data-movement ops.  If the model cimsplit splits kept a no-op or lacked a carried pair,
an operator would end at a float tensor the whole model never computes, and a cut there would run a float
kernel where the model runs an integer one (fuzz seeds with exporter clutter: 0.06-3.0 off).

:func:`drop_no_ops` removes what onnxruntime's level-1 rules remove (``EliminateIdentity``,
``EliminateDropout``, ``CastElimination``, ``NoopElimination``: an Identity, a Dropout without its mask,
a Cast to the type it has, an Add or Sub of a constant scalar zero, a Mul or Div by a constant scalar
one), unless its output is a graph output.  A Reshape to the same shape stays: onnxruntime keeps it (and
fuses the QDQ pairs around it; random model 5154: removed, an AveragePool after it ran in float).

:func:`propagate_quantizers` inserts the pairs of onnxruntime's ``QDQPropagationTransformer``
(``core/optimizer/qdq_transformer/qdq_propagation.cc``): a QuantizeLinear copied backward and a
DequantizeLinear forward over MaxPool, Reshape, Transpose, Squeeze, Unsqueeze and Slice (in the opset
versions it lists), a Q -> DQ pair of the same scalar scale and zero point on each edge crossed.  So a
float Conv followed by a Reshape and then a Q runs as a QLinearConv writing int8 (a quantization-aware
export with a view before its fake-quant).  The pairs change no value (``Q(Reshape(x)) = Reshape(Q(x))``
for a scalar scale, ``Q(DQ(q)) = q``), and onnxruntime, finding them in place, inserts none again.  Its
rules, on each node's first input and output:

- *Q backward*, for each Q with constant scalar scale (and zero point): from the edge into the Q,
  while the edge's source node propagates and reads, as input 0, a tensor that is a graph input, an
  initializer or the one-consumer, non-output tensor of a node other than a DequantizeLinear: a pair
  on that edge, then the same one step further back (a graph input or initializer ends the walk).
  The edge into the Q itself must be its producer's only consumer and no graph output.
- *DQ forward*, for each DQ with constant scalar scale, whose output has one consumer and is no graph
  output: while that consumer propagates, a Q on its output and a DQ before each of its readers but
  the Qs (its output read by nothing but the graph: one DQ, which keeps the name; a graph output that
  is also read: none), then the same past each of those readers, depth first.  A Reshape read by a
  MatMul and an AveragePool gets one Q and two DQs, and the pair stays int8 (fuzz seed 209 with a
  dynamic batch; cimsplit had inserted nothing and, cutting there, converted the pair: a QLinearMatMul
  in ``partitioned.onnx`` where the model runs a float MatMul, 3.03 off).

Q backward runs over every node first, then DQ forward over the nodes the graph had before either.

:func:`rewrite_as_onnxruntime` runs these in onnxruntime's order, with its ``DoubleQDQPairsRemover``
(:mod:`cimsplit.compiler.double_pairs`) between, twice where a folded ``If`` left a no-op.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import numpy as np
import onnx
from onnx import defs, numpy_helper

from cimsplit.compiler.double_pairs import merge_double_pairs

__all__ = ["PROPAGATING", "branch_outputs", "drop_no_ops", "fuse_pads", "propagate_quantizers", "restore_quantizers", "rewrite_as_onnxruntime",
           "standard_quantizers"]

log = logging.getLogger(__name__)

PROPAGATING = {"MaxPool": (12,), "Reshape": (5, 13, 14, 19), "Transpose": (1, 13), "Squeeze": (1, 11, 13),
               "Unsqueeze": (1, 11, 13), "Slice": (1, 10, 11, 13)}
"""Op type -> the opset versions (``since_version``) onnxruntime 1.32 propagates Q/DQ over."""
_QDQ_DOMAINS = ("", "ai.onnx", "com.microsoft")
_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
_NEUTRAL = {"Add": 0.0, "Sub": 0.0, "Mul": 1.0, "Div": 1.0}
"""A binary op and the constant it leaves its other input unchanged by (the constant second for Sub and Div)."""


class _Graph:
    """The top-level graph of a model being edited: nodes in order, and names handed out uniquely."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.graph = model.graph
        self.nodes = list(self.graph.node)
        """Edited here and written back once (:meth:`write`): a repeated field rebuilt copies its messages."""
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.constants = {t.name: t for t in self.graph.initializer}
        self.inputs = {vi.name for vi in self.graph.input}
        self.outputs = {vi.name for vi in self.graph.output}
        self.taken = {t for node in self.graph.node for t in [*node.input, *node.output]} | set(self.constants) | self.inputs
        self.node_names = {node.name for node in self.graph.node}
        self.inserted = 0
        self._index: tuple[dict[str, onnx.NodeProto], dict[str, list[tuple[onnx.NodeProto, int]]]] | None = None
        """tensor -> its producer, and -> its readers (node, input index); built when asked, dropped when the graph changes."""

    def fresh(self, base: str, names: set[str]) -> str:
        name, k = base, 1
        while name in names:
            name, k = f"{base}_{k}", k + 1
        names.add(name)
        return name

    def _indexed(self) -> tuple[dict[str, onnx.NodeProto], dict[str, list[tuple[onnx.NodeProto, int]]]]:
        if self._index is None:
            producers: dict[str, onnx.NodeProto] = {}
            readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
            for node in self.nodes:
                for name in node.output:
                    producers.setdefault(name, node)
                for i, name in enumerate(node.input):
                    readers.setdefault(name, []).append((node, i))
            self._index = producers, readers
        return self._index

    def producer(self, tensor: str) -> onnx.NodeProto | None:
        return self._indexed()[0].get(tensor)

    def readers(self, tensor: str) -> list[tuple[onnx.NodeProto, int]]:
        return list(self._indexed()[1].get(tensor, ()))

    def write(self) -> None:
        del self.graph.node[:]
        self.graph.node.extend(self.nodes)

    def propagates(self, node: onnx.NodeProto) -> bool:
        if node.domain not in ("", "ai.onnx") or node.op_type not in PROPAGATING:
            return False
        try:
            version = defs.get_schema(node.op_type, self.opset).since_version
        except Exception:  # noqa: BLE001 - an op onnx does not know at this opset propagates nothing
            return False
        return version in PROPAGATING[node.op_type]

    def scalar_params(self, node: onnx.NodeProto) -> bool:
        """Whether a Q or DQ reads a constant scalar scale and, if any, zero point."""
        params = [name for name in node.input[1:3] if name]
        return bool(params) and all(name in self.constants and numpy_helper.to_array(self.constants[name]).size == 1
                                    for name in params)

    def single_edge(self, tensor: str) -> bool:
        """One reading edge and no graph output (onnxruntime's condition for following an edge)."""
        return tensor not in self.outputs and len(self.readers(tensor)) == 1

    def insert_pairs(self, tensor: str, readers: list[tuple[onnx.NodeProto, int]] | None, like: onnx.NodeProto) -> None:
        """Q(tensor) -> a DQ (``like``'s scale and zero point) before each of ``readers`` (node, input index), which
        then reads its own DQ; with None, ``tensor`` is a graph output: its producer writes a new name, the DQ
        ``tensor``.  Names as onnxruntime's: ``{tensor}_q``, ``{tensor}_dq``, ``{tensor}_dq1``, ..."""
        params, q_out = list(like.input[1:3]), self.fresh(f"{tensor}_q_to_dq", self.taken)
        source, outs = tensor, []
        if readers is None:
            producer = self.producer(tensor)
            assert producer is not None
            source, outs = self.fresh(f"{tensor}_pre_q", self.taken), [tensor]
            producer.output[list(producer.output).index(tensor)] = source
            at = self.nodes.index(producer) + 1
        else:
            at = min(self.nodes.index(node) for node, _ in readers)
            for k, (node, i) in enumerate(readers):
                outs.append(self.fresh(f"{tensor}_post_dq{k or ''}", self.taken))
                node.input[i] = outs[-1]
        self._index = None
        self.nodes[at:at] = [
            onnx.helper.make_node("QuantizeLinear", [source, *params], [q_out], name=self.fresh(f"{tensor}_q", self.node_names),
                                  domain=like.domain),
            *(onnx.helper.make_node("DequantizeLinear", [q_out, *params], [out], domain=like.domain,
                                    name=self.fresh(f"{tensor}_dq{k or ''}", self.node_names)) for k, out in enumerate(outs))]
        self.inserted += 1


def _is(node: onnx.NodeProto | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and node.domain in _QDQ_DOMAINS


def _next_edges(g: _Graph, node: onnx.NodeProto) -> list[tuple[onnx.NodeProto, int]] | None:
    """Where a DQ goes on past ``node`` (onnxruntime's ``GetNextPropagationEdges``): each edge out of its output
    but those into a Q (``[]``: nowhere), or None for the edge to the graph output its output is when nothing
    reads it."""
    if not g.propagates(node):
        return []
    out = node.output[0]
    readers = g.readers(out)
    if not readers:
        return None if out in g.outputs else []
    return [] if out in g.outputs else [(reader, i) for reader, i in readers if not _is(reader, "QuantizeLinear")]


def _q_backward(g: _Graph, q: onnx.NodeProto) -> None:
    tensor = q.input[0]
    node = g.producer(tensor)
    if node is None or not g.single_edge(tensor):
        return
    while g.propagates(node):
        tensor = node.input[0]
        source = g.producer(tensor)
        if source is None:  # a graph input or initializer: a pair on that edge ends the walk
            if tensor in g.inputs or tensor in g.constants:
                g.insert_pairs(tensor, [(node, 0)], q)
            return
        if not g.single_edge(tensor) or _is(source, "DequantizeLinear"):
            return
        g.insert_pairs(tensor, [(node, 0)], q)
        node = source


def _dq_forward(g: _Graph, dq: onnx.NodeProto) -> None:
    if not g.single_edge(dq.output[0]):
        return
    nodes = [g.readers(dq.output[0])[0][0]]
    while nodes:  # depth first, as onnxruntime's stack of edge groups
        node = nodes.pop()
        edges = _next_edges(g, node)
        if edges != []:
            g.insert_pairs(node.output[0], edges, dq)
            nodes.extend(reader for reader, _ in edges or [])


def propagate_quantizers(model: onnx.ModelProto) -> int:
    """Insert, in place, the Q/DQ pairs onnxruntime's propagation would (module docstring); how many Qs."""
    g = _Graph(model)
    original = list(g.nodes)
    for node in original:
        if _is(node, "QuantizeLinear") and g.scalar_params(node):
            _q_backward(g, node)
    for node in original:
        if _is(node, "DequantizeLinear") and g.scalar_params(node):
            _dq_forward(g, node)
    g.write()
    return g.inserted


def _passed_through(node: onnx.NodeProto, constants: dict[str, onnx.TensorProto], types: dict[str, int]) -> str | None:
    """The input a node onnxruntime removes passes on unchanged (module docstring), else None."""
    if node.domain not in ("", "ai.onnx") or not node.input:
        return None
    if node.op_type == "Identity" or (node.op_type == "Dropout" and len([o for o in node.output if o]) == 1):
        return node.input[0]
    if node.op_type == "Cast":
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        return node.input[0] if to is not None and types.get(node.input[0]) == to else None
    if node.op_type in _NEUTRAL and len(node.input) == 2:
        for constant, other in ((1, 0), (0, 1)) if node.op_type in ("Add", "Mul") else ((1, 0),):
            tensor = constants.get(node.input[constant])
            if tensor is not None and len(tensor.dims) <= 1:
                values = numpy_helper.to_array(tensor)
                if values.size == 1 and float(values.reshape(-1)[0]) == _NEUTRAL[node.op_type]:
                    return node.input[other]
    return None


def standard_quantizers(model: onnx.ModelProto) -> tuple[onnx.ModelProto, frozenset[str]]:
    """A copy of ``model`` with its ``com.microsoft`` Q/DQ nodes in the standard domain, and their outputs (by which
    :func:`restore_quantizers` puts them back); ``model`` itself and nothing when the copy is no valid model (an int16
    contrib Q below opset 21).

    onnx's type inference and onnxslim know no contrib schema, so with the quantizer's ``UseQDQContribOps`` every
    type and shape after a Q/DQ was unknown: a same-type Cast between a MatMul and its Q stayed (fuzz seed 8519 with
    exporter clutter: a cut there left the MatMul alone in its partition, run as MatMulIntegerToFloat, 0.17-3.8
    off), and Shape subgraphs and an ``If`` on the batch were not folded as onnxruntime folds them."""
    contrib = frozenset(node.output[0] for node in model.graph.node if node.domain == "com.microsoft" and node.op_type in _QDQ_OPS)
    if not contrib:
        return model, contrib
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        if node.output and node.output[0] in contrib and node.op_type in _QDQ_OPS:
            node.domain = ""
    try:
        onnx.shape_inference.infer_shapes(copy, check_type=True, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        return model, frozenset()
    return copy, contrib


def restore_quantizers(model: onnx.ModelProto, contrib: frozenset[str]) -> onnx.ModelProto:
    """``model`` with the Q/DQ nodes writing ``contrib`` (:func:`standard_quantizers`) back in ``com.microsoft``."""
    for node in model.graph.node:
        if node.output and node.output[0] in contrib and node.op_type in _QDQ_OPS:
            node.domain = "com.microsoft"
    return model


def branch_outputs(graph: onnx.GraphProto) -> set[str]:
    """The tensors the top-level ``If`` nodes and the nodes of their branches write."""
    return {name for node in graph.node if node.op_type == "If"
            for name in [*node.output, *(o for attr in node.attribute for inner in attr.g.node for o in inner.output)]}


def rewrite_as_onnxruntime(model: onnx.ModelProto, late: set[str]) -> None:
    """Where onnxruntime's quantized tensors are: its level-1 steps, in place.

    Each step of onnxruntime's removes no-ops, then merges double Q/DQ pairs, folds constants and propagates
    quantizers.  An ``If`` it folds is inlined by the folding, after that step's no-op removal: a no-op from
    its branch (an ``Identity`` of the taken side) still stands when the quantizers propagate, and goes in
    the next step, after which a pair may stand next to another (fuzz seed 42889: a batch ``If`` between a
    DQ and a Slice; 0.0215 off).  onnxslim folded the ``If`` already, so the no-ops writing one of ``late``
    (what the ``If`` nodes and their branches wrote) are kept through a first step and dropped in a second.
    """
    dropped = drop_no_ops(model, later=late)
    merged, propagated = merge_double_pairs(model), propagate_quantizers(model)
    if late:
        dropped += drop_no_ops(model)
        merged += merge_double_pairs(model)
        propagated += propagate_quantizers(model)
    log.info("removed %d no-ops, merged %d double Q/DQ pairs and inserted %d pairs, as onnxruntime does",
             dropped, merged, propagated)


def drop_no_ops(model: onnx.ModelProto, later: Collection[str] = ()) -> int:
    """Remove, in place, the no-ops onnxruntime removes (module docstring) from the top-level graph; how many.
    Those writing a tensor in ``later`` stay this time (onnxruntime removes them one step later: see
    :func:`rewrite_as_onnxruntime` on folded ``If`` nodes)."""
    graph = model.graph
    typed = onnx.shape_inference.infer_shapes(standard_quantizers(model)[0])
    types = {vi.name: vi.type.tensor_type.elem_type for vi in [*typed.graph.value_info, *typed.graph.input, *typed.graph.output]}
    types |= {t.name: t.data_type for t in graph.initializer}
    constants = {t.name: t for t in graph.initializer}
    outputs = {vi.name for vi in graph.output}
    in_subgraphs = {name for node in graph.node for attr in node.attribute for body in [attr.g, *attr.graphs]
                    for inner in body.node for name in inner.input}
    alias: dict[str, str] = {}
    keep: list[onnx.NodeProto] = []
    for node in graph.node:
        node.input[:] = [alias.get(name, name) for name in node.input]
        source = _passed_through(node, constants, types)
        if source is not None and node.output[0] not in outputs and node.output[0] not in in_subgraphs and node.output[0] not in later:
            alias[node.output[0]] = source
        else:
            keep.append(node)
    if alias:
        del graph.node[:]
        graph.node.extend(keep)
    return len(alias)


_PAD_VERSIONS = (1, 2, 11, 13, 18, 19)
_CONV_VERSIONS = (1, 11)
"""The Pad and Conv versions onnxruntime's ``PadFusion`` (``core/optimizer/pad_fusion.cc``) fuses."""


def fuse_pads(model: onnx.ModelProto) -> int:
    """Fold, in place, each Pad into the Conv after it (through a Cast) exactly where onnxruntime 1.32's level-1
    ``PadFusion`` does; how many.  It fuses a Pad of a version it lists, of at most three inputs, read by one node
    and no graph output, in constant mode with constant pads and a zero constant value, padding no batch or channel
    dim and none negatively, into a Conv of a listed version with no ``auto_pad`` but NOTSET.  (Its source also
    names MaxPool and AveragePool children and wants a ``pads`` attribute; 1.32 fuses into neither pool, and into
    a Conv without ``pads`` as well: ``test_ort_rewrites`` holds the rule to onnxruntime's own graph.)  onnxslim
    fuses a zero Pad into a Conv with ``auto_pad`` VALID too; in a QDQ model that decides whether the Conv reads its
    DequantizeLinear directly, so a quantized model gets this rule and not onnxslim's (fuzz seed 5249 with exporter
    clutter: a zero Pad before a VALID Conv, kept by onnxruntime, which ran the Conv in float, and fused by
    onnxslim, whose split ran QLinearConv: 0.756 off even all on the host)."""
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    constants |= {node.output[0]: numpy_helper.to_array(node.attribute[0].t) for node in graph.node
                  if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value"}
    outputs = {vi.name for vi in graph.output}

    def since(op_type: str) -> int:
        return defs.get_schema(op_type, opset).since_version

    def readers(tensor: str) -> list[onnx.NodeProto]:
        return [node for node in graph.node if tensor in node.input]

    fused = []
    for pad in graph.node:
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in pad.attribute}
        users = readers(pad.output[0]) if pad.op_type == "Pad" and pad.domain in ("", "ai.onnx") else []
        if (len(users) != 1 or pad.output[0] in outputs or since("Pad") not in _PAD_VERSIONS or len(pad.input) > 3
                or attributes.get("mode", b"constant") not in (b"constant", "constant")):
            continue
        if opset >= 11:
            pads = constants.get(pad.input[1]) if len(pad.input) > 1 else None
            value = constants.get(pad.input[2]) if len(pad.input) > 2 and pad.input[2] else np.zeros(1)
            if pads is None or value is None or np.frombuffer(value.tobytes(), np.uint8).any():  # (-0.0 is not zero)
                continue
            pads = [int(p) for p in pads]
        else:
            pads = list(attributes.get("pads", []))
            if attributes.get("value", 0.0) != 0.0:
                continue
        (child,) = users
        if child.op_type == "Cast":
            after = readers(child.output[0])
            if len(after) != 1 or child.output[0] in outputs:
                continue
            (child,) = after
        half = len(pads) // 2
        child_attributes = {a.name: a for a in child.attribute}
        auto_pad = child_attributes["auto_pad"].s if "auto_pad" in child_attributes else b"NOTSET"
        if (child.op_type != "Conv" or child.domain not in ("", "ai.onnx") or since("Conv") not in _CONV_VERSIONS
                or auto_pad != b"NOTSET" or any(pads[i] for i in (0, 1, half, half + 1)) or any(p < 0 for p in pads)):
            continue
        if "pads" not in child_attributes:
            child.attribute.append(onnx.helper.make_attribute("pads", [0] * (2 * half - 4)))
            child_attributes["pads"] = child.attribute[-1]
        spatial = pads[2:half] + pads[half + 2:]
        child_attributes["pads"].ints[:] = [a + b for a, b in zip(child_attributes["pads"].ints, spatial)]
        users[0].input[0] = pad.input[0]  # (the child, or the Cast before it)
        fused.append(pad)
    for pad in fused:
        graph.node.remove(pad)
    return len(fused)
