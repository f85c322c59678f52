"""Cut int8 QDQ pairs as onnxruntime would have converted them: to uint8 (x86).

The split cuts a pair when its Q and DQ land in different partitions: each
partition alone no longer shows the pair, so onnxruntime would leave it int8
and the consumer would run the S8S8 kernel the whole model does not run —
several times slower, and not always bit-identical (U8S8 kernels on AVX2
saturate differently).  :func:`unsigned_cuts` converts exactly the cut pairs
onnxruntime converts in the whole model (:func:`cimsplit.compiler.qdq_kernels.converted_pairs`),
so that every partition runs the kernels of the whole model.  The conversion
is exact: ``q_u8 = q_s8 + 128`` for every input, and
``(q_u8 - (zp + 128)) * s = (q_s8 - zp) * s``.

An uncut pair is converted too when its DQ feeds an operator that has an ONNX
function body (HardSwish, which onnxruntime's CPU provider expands): in
``partitioned.onnx``, whose partitions are model-local functions, onnxruntime
inlines such an operator with the partition before its QDQ passes
(``InlineFunctionsAOT`` in ``graph_partitioner.cc``, not after them as for the
whole model), its body reads the DQ twice, the DQ is duplicated, and the pair
stays int8: the Conv before a HardSwish ran in float (fuzz seeds 179, 894).
Converting a pair onnxruntime converts anyway changes nothing where it does
not expand the operator.

An uncut pair onnxruntime converts is marked for the runtime: its QuantizeLinear gets
``cimsplit.unsigned`` = ``1`` (:data:`KEY_UNSIGNED`).  A timed run cuts a host partition
into pieces, one onnxruntime session each, and converts a marked pair it cuts the same way
(``runtime/steps.py``): the runtime imports no compiler, so the facts come in the file.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, defs, numpy_helper

from cimsplit.compiler.constants import STANDARD_DOMAINS
from cimsplit.compiler.qdq_kernels import QdqPair, converted_pairs, readers_of

__all__ = ["KEY_UNSIGNED", "unsigned_cuts"]

KEY_UNSIGNED = "cimsplit.unsigned"
"""Metadata of a QuantizeLinear whose pair onnxruntime converts to uint8: a cut of it must convert it too."""


@dataclass(frozen=True)
class _Cut:
    """What one converted pair of the whole model is in the split model: its Qs, DQs and the tensors between."""

    pair: QdqPair
    quantizers: tuple[str, ...]
    dequantizers: tuple[str, ...]
    tensors: tuple[str, ...]


def unsigned_cuts(model: onnx.ModelProto, partitions_of: Mapping[str, set[str]],
                  whole: onnx.ModelProto | None = None) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """``model`` with every cut int8 Q -> DQ pair onnxruntime would convert made uint8 (and every one read by an
    operator with a function body), every other such pair of one Q and one DQ marked (:data:`KEY_UNSIGNED`), and
    the tensors converted.

    A pair onnxruntime's optimized graph of ``whole`` leaves int8 is not converted (:func:`_dequantizer_sources`).
    ``partitions_of`` maps node names to the partitions that hold them (a DQ on a
    boundary is copied into its readers' partitions); a pair is cut when a DQ
    reading its tensor is in a partition its Q is not.  ``whole``: the model
    onnxruntime would run whole, whose pairs are the ones it converts (default
    ``model``).  A sliced model is not that model, and its pairs are found as
    the slicing rewrite left them:

    - both parts of a sliced operator read the one DQ of its input, a DQ with
      two readers that onnxruntime would duplicate and not convert, where the
      whole model's DQ has one reader and is converted (ViT-Tiny S8S8 per
      tensor: the KS-sliced qkv MatMuls ran DQ + a float MatMul in their parts,
      QLinearMatMul whole, 0.25 off): every DQ of the tensor is converted with its Q;
    - a row-sliced operator's parts read bands of the int8 tensor: Q -> a Slice
      per part -> the part's own DQ, converted with the Q and the bands (a fuzz
      Reshape -> Conv ran float Convs in its parts, QLinearConv whole: 1.37 off
      on an AVX2 host without VNNI);
    - a sliced operator's output pair is its parts' Qs -> the join's Concat ->
      the DQ (or, read by a row-sliced operator, its bands' DQs): all of them are
      converted, since a quantized kernel takes one type in and out (a part
      reading uint8 and writing int8 runs in float; fuzz seed 7214, a sliced 1x1
      conv feeding a row-sliced one: 2.05 off).
    """
    readers = readers_of(model.graph)
    producers = {out: node for node in model.graph.node for out in node.output}
    nodes = {node.name: node for node in model.graph.node}
    opset = next((o.version for o in model.opset_import if o.domain in STANDARD_DOMAINS), 1)
    cuts, marked = [], []
    whole_graph = (whole or model).graph
    pairs = converted_pairs(whole_graph)
    sources = _dequantizer_sources(whole or model) if pairs else {}
    computes = {out: node.name for node in whole_graph.node for out in node.output}
    quantized = {node.name: computes.get(node.input[0], "") for node in whole_graph.node if node.op_type == "QuantizeLinear"}
    for pair in pairs.values():
        source = sources.get(pair.dequantize)
        if source == "":
            continue  # left int8 by onnxruntime
        cut = _as_split(pair, readers, producers)
        if cut is None:
            continue
        homes = set().union(*(partitions_of.get(q, set()) for q in cut.quantizers))
        apart = any(partitions_of.get(d, set()) - homes for d in cut.dequantizers) or len(cut.quantizers) > 1
        expanded = any(_has_function_body(r, opset) for d in cut.dequantizers for r in readers.get(nodes[d].output[0], []))
        merged = source not in (None, pair.quantize, quantized.get(pair.quantize))
        if apart or (expanded and not merged):
            cuts.append(cut)
        elif cut.tensors == (pair.tensor,) and len(cut.dequantizers) == 1:
            marked.append(cut.quantizers[0])
    if not cuts and not marked:
        return model, ()
    converted = onnx.ModelProto()
    converted.CopyFrom(model)
    _convert(converted, cuts)
    quantizers = {node.name: node for node in converted.graph.node}
    for name in marked:
        entry = quantizers[name].metadata_props.add()
        entry.key, entry.value = KEY_UNSIGNED, "1"
    return converted, tuple(cut.pair.tensor for cut in cuts)


def _dequantizer_sources(model: onnx.ModelProto) -> dict[str, str]:
    """DequantizeLinear nodes of onnxruntime's optimized graph of ``model`` (it keeps Q and DQ names; one it fused
    into a quantized kernel is gone) -> the node whose output each reads, past the layout Transposes onnxruntime
    inserted and without the suffix it gives the kernels it re-lays out (a graph input or initializer by its name),
    or "" for one it leaves int8; empty if it does not load the model.

    :func:`converted_pairs` follows onnxruntime's conversion rule on the model as written; its other passes can
    change a pair first.  Two Transposes that cancel, with Q/DQ pairs between them, go with their Qs: the last DQ
    reads the first Q, whose tensor has a second reader and stays int8 (fuzz seed 7864: DQ -> Transpose -> Q/DQ ->
    Transpose -> Q/DQ -> Conv; the Conv runs in float, where the split, converting the cut pair after the
    Transposes, ran QLinearConv: 0.305 off), so a pair whose DQ is int8 there is not converted; or it reads the
    quantized kernel before them (seed 1699 with exporter clutter: the QLinearAdd before two such Transposes and a
    HardSwish), so the HardSwish's pair, whose DQ reads neither its Q nor what its Q quantizes, was merged away and
    is not converted ahead for the function body (converted, it kept the redundant pairs apart: one more
    requantization, 0.0009 off even all on the host)."""
    import onnxruntime as ort

    from cimsplit.runtime.devices import session_options

    with tempfile.TemporaryDirectory() as tmp:
        options = session_options()
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        try:
            ort.InferenceSession(model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001 - a model onnxruntime refuses whole: the rule's answer stands
            return {}
        optimized = onnx.load(options.optimized_model_filepath)
    types = {t.name: t.data_type for t in optimized.graph.initializer}
    ours = {node.name for node in model.graph.node}
    producers = {out: node for node in optimized.graph.node for out in node.output}

    def source(tensor: str) -> str:
        node = producers.get(tensor)
        while node is not None and node.op_type == "Transpose" and node.name not in ours:
            node = producers.get(node.input[0])
        return re.sub(r"_token_\d+$", "", node.name) if node is not None else tensor  # (a kernel onnxruntime re-laid out)

    return {node.name: "" if types.get(node.input[2]) == TensorProto.INT8 else source(node.input[0])
            for node in optimized.graph.node if node.op_type == "DequantizeLinear" and len(node.input) == 3}


def _has_function_body(node: onnx.NodeProto, opset: int) -> bool:
    """True if ``node``'s operator has an ONNX function body at ``opset`` (one onnxruntime may inline)."""
    if node.domain not in STANDARD_DOMAINS:
        return False
    try:
        schema = defs.get_schema(node.op_type, opset)
    except defs.SchemaError:
        return False
    return schema.has_function or schema.has_context_dependent_function


def _as_split(pair: QdqPair, readers: Mapping[str, list[onnx.NodeProto]],
              producers: Mapping[str, onnx.NodeProto]) -> _Cut | None:
    """``pair`` in the split model: its Q, or a sliced operator's parts' Qs joined by a Concat, then its DQs, or a
    row-sliced operator's bands (a Slice per part, then the part's DQ; a slice commutes with the shift by 128);
    else None."""
    source = producers.get(pair.tensor)
    if source is not None and source.name == pair.quantize:
        quantizers, between = [source], [pair.tensor]
    elif source is not None and source.op_type == "Concat":
        quantizers, between = [producers.get(t) for t in source.input], [*source.input, pair.tensor]
        if not all(part is not None and part.op_type == "QuantizeLinear" and len(part.input) == 3
                   and part.input[2] == quantizers[0].input[2] and len(readers.get(part.output[0], [])) == 1  # type: ignore[union-attr]
                   for part in quantizers):
            return None
    else:
        return None
    zero_point = quantizers[0].input[2]  # type: ignore[union-attr]
    users = readers.get(pair.tensor, [])
    if users and all(d.op_type == "DequantizeLinear" and d.input[0] == pair.tensor and (len(quantizers) == 1 or d.input[2] == zero_point)
                     for d in users):
        dequantizers = users
    else:
        bands = [(band, readers.get(band.output[0], [])) for band in users]
        if not bands or not all(band.op_type == "Slice" and band.input[0] == pair.tensor and len(dq) == 1
                                and dq[0].op_type == "DequantizeLinear" and dq[0].input[2] == zero_point for band, dq in bands):
            return None
        dequantizers = [dq[0] for _, dq in bands]
        between += [band.output[0] for band, _ in bands]
    if len(quantizers) > 1 and len(users) != 1 and dequantizers is users:
        return None  # a join's output read by several DQs: not the pattern the slicing rewrite writes
    return _Cut(pair, tuple(q.name for q in quantizers), tuple(d.name for d in dequantizers), tuple(between))  # type: ignore[union-attr]


def _convert(model: onnx.ModelProto, cuts: list[_Cut]) -> None:
    graph = model.graph
    nodes = {node.name: node for node in graph.node}
    infos = {vi.name: vi for vi in graph.value_info}
    zero_points = {t.name: t for t in graph.initializer}
    taken = set(zero_points) | {o for node in graph.node for o in node.output}
    for cut in cuts:
        pair = cut.pair
        name, k = f"{pair.tensor}_zero_point_u8", 0
        while name in taken:
            k += 1
            name = f"{pair.tensor}_zero_point_u8_{k}"
        taken.add(name)
        shape = numpy_helper.to_array(zero_points[nodes[cut.quantizers[0]].input[2]]).shape
        graph.initializer.append(numpy_helper.from_array(np.full(shape, pair.zero_point + 128, np.uint8), name))
        for node in (*cut.quantizers, *cut.dequantizers):
            nodes[node].input[2] = name
        for tensor in cut.tensors:
            if tensor in infos:
                infos[tensor].type.tensor_type.elem_type = TensorProto.UINT8
            else:
                graph.value_info.append(onnx.helper.make_tensor_value_info(tensor, TensorProto.UINT8, None))
