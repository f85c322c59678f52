"""Simplify a model before costing it (DESIGN §2), with onnxslim, then infer static shapes.

Calls of model-local functions (PyTorch's ``export_modules_as_functions``, an
exporter's per-module functions) are inlined first (``onnx.inliner``), as
onnxruntime inlines them before it optimizes: their bodies are the operators
to cost and place, where a call would be one opaque operator on the host.

onnxslim folds constants and shape-only subgraphs (Shape->Gather->Unsqueeze->
Concat->Reshape collapses to one constant shape), fuses BatchNormalization
into the preceding Conv, and removes Identity nodes and other no-ops (not in a quantized
model: :func:`_slim`).  Its constant folder
never folds ``QuantizeLinear``/``DequantizeLinear`` (onnx-graphsurgeon's
``NO_FOLD_OPS``), so the QDQ structure of quantized models stays intact: a
``DequantizeLinear`` of an int8 weight is *not* turned into a float constant.

After slimming:

* equal QuantizeLinear nodes are merged, as onnxruntime merges them
  (:func:`merge_equal_quantizers`); in a quantized model the no-ops onnxruntime removes
  are removed, Q/DQ pairs inserted over data-movement ops where it inserts them and
  double pairs merged where it merges them, in its order
  (:func:`cimsplit.compiler.ort_rewrites.rewrite_as_onnxruntime`);
* every node gets a unique, non-empty name, deterministically: existing names
  are kept, an empty or repeated one becomes ``<op_type>_<index>`` (with a
  suffix if that is taken too);
* graph input and output names are those of the original model (checked);
* ``onnx.shape_inference`` (with data propagation) writes a static shape for
  every tensor into ``value_info``; a tensor whose shape inference cannot
  settle (Loop scan outputs, data-dependent ops) is measured by one seeded
  onnxruntime run; whatever is still unknown is a :class:`CimsplitError`,
  except downstream of custom-domain operators, which onnxruntime cannot run
  and which the workload keeps opaque on the host.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import onnx
import onnx.inliner

from cimsplit.compiler.constant_outputs import make_constant_outputs
from cimsplit.compiler.constants import STANDARD_DOMAINS
from cimsplit.compiler.loader import node_reads
from cimsplit.compiler.ort_rewrites import branch_outputs, fuse_pads, restore_quantizers, rewrite_as_onnxruntime, standard_quantizers
from cimsplit.errors import CimsplitError
from cimsplit.ort_logging import ort_log_severity

__all__ = ["simplify", "name_nodes", "merge_equal_quantizers", "prune_dead_nodes", "tensor_shapes", "infer_static_shapes"]

log = logging.getLogger(__name__)

Shape = tuple[int, ...]


def _is_quantized(model: onnx.ModelProto) -> bool:
    return any(node.op_type in ("QuantizeLinear", "DequantizeLinear") for node in model.graph.node)


def _slim(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxslim's result, or, when it fails or returns a graph reading a tensor nothing computes, its result with
    constant folding only, or the model as it is."""
    import onnxslim

    # onnxslim installs a stderr handler on its logger unless one exists; the
    # library must not print, so give it a silent one (records still propagate).
    slim_log = logging.getLogger("onnxslim")
    if not slim_log.handlers:
        slim_log.addHandler(logging.NullHandler())
    # weight_tying (merging equal weights) compares every pair of same-shaped constants: quadratic, and of no use.
    # FusionGemm rewrites a 3-D MatMul + Add as Reshape -> Gemm -> Reshape: two
    # host operators more, and an activation after it no longer fuses; the
    # workload builder fuses the bias Add into the MatMul instead.
    # In a QDQ model, merging equal nodes changes how many nodes read a
    # DequantizeLinear, and with it the pairs onnxruntime converts and the kernels
    # it fuses (two Flattens of one DQ merged: the Gemm after one of them ran in
    # float, QGemm in the model): the split would not run the model's kernels.
    # Nor are its no-ops removed there: onnxruntime keeps a Reshape to the same shape (onnxslim does not),
    # and removes what ort_rewrites.drop_no_ops removes after slimming.
    skipped = ["weight_tying"] + (["subexpression_elimination", "dead_node_elimination"] if _is_quantized(model) else [])
    pads = ["FusionPadConv"] if _is_quantized(model) else []  # (onnxruntime's own rule instead: ort_rewrites.fuse_pads)
    standard, contrib = standard_quantizers(model)  # (types and shapes through com.microsoft Q/DQ)
    for attempt in (skipped, sorted({*skipped, "graph_fusion", "subexpression_elimination"})):
        copy = onnx.ModelProto()
        copy.CopyFrom(standard)  # onnxslim edits its argument in place (freeze)
        try:
            slimmed = onnxslim.slim(copy, skip_optimizations=attempt, skip_fusion_patterns=["FusionGemm", *pads])
        except Exception as exc:  # noqa: BLE001 - a library failure degrades, it must not crash
            log.warning("onnxslim failed (%s: %s)", type(exc).__name__, exc)
            continue
        if slimmed is None:  # onnxslim returns None when its own check fails
            log.warning("onnxslim returned no model")
            continue
        dangling = _dangling(slimmed.graph)
        if not dangling:
            return restore_quantizers(slimmed, contrib)
        # (fuzz seed 7246: its fusions folded an Add into a Conv whose output a Transpose also read, and the
        # Transpose -> Reshape after it vanished)
        log.warning("onnxslim's graph reads %r, which nothing computes", dangling[0])
    log.warning("using the model unsimplified")
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _dangling(graph: onnx.GraphProto) -> list[str]:
    """Tensors a node reads that no earlier node, initializer or graph input provides (top level)."""
    known = {t.name for t in graph.initializer} | {vi.name for vi in graph.input}
    missing = []
    for node in graph.node:
        missing += [name for name in node.input if name and name not in known]
        known.update(node.output)
    return missing


def name_nodes(graph: onnx.GraphProto) -> None:
    """Give every node of ``graph`` a unique non-empty name, in place and deterministically."""
    taken: set[str] = set()
    wanted = [n.name for n in graph.node]
    keep = [False] * len(wanted)
    for i, name in enumerate(wanted):
        if name and name not in taken:
            taken.add(name)
            keep[i] = True
    for i, node in enumerate(graph.node):
        if keep[i]:
            continue
        base = node.name or f"{node.op_type}_{i}"
        candidate, k = base, 1
        while candidate in taken:
            candidate = f"{base}_{k}"
            k += 1
        node.name = candidate
        taken.add(candidate)


def _shape_of(type_proto: onnx.TypeProto) -> Shape | None:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    dims = type_proto.tensor_type.shape.dim
    if any(not d.HasField("dim_value") or d.dim_value < 0 for d in dims):
        return None
    return tuple(int(d.dim_value) for d in dims)


def tensor_shapes(model: onnx.ModelProto) -> dict[str, Shape | None]:
    """Static shape of every named tensor (None where unknown), from the model's type info."""
    graph = model.graph
    shapes: dict[str, Shape | None] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        shape = _shape_of(vi.type)
        if shape is not None or vi.name not in shapes:
            shapes[vi.name] = shape
    for init in graph.initializer:
        shapes[init.name] = tuple(int(d) for d in init.dims)
    for node in graph.node:
        for out in node.output:
            if out and out not in shapes:
                shapes[out] = None
    return shapes


_ORT_DOMAINS = STANDARD_DOMAINS | {"ai.onnx.ml", "com.microsoft"}


def _downstream_of_custom(graph: onnx.GraphProto) -> set[str]:
    """Tensors computed (transitively) from the output of a node onnxruntime cannot run."""
    tainted: set[str] = set()
    for node in graph.node:
        if node.domain not in _ORT_DOMAINS or any(i in tainted for i in node.input):
            tainted.update(o for o in node.output if o)
    return tainted


def _measure_shapes_with_ort(
    model: onnx.ModelProto, names: list[str], input_shapes: Mapping[str, Shape]
) -> dict[str, tuple[Shape, int]]:
    """Run the model once on seeded inputs with ``names`` exposed as outputs; return their shapes and
    ONNX element types (a contrib operator's output, e.g. QLinearAdd's uint8, has none in shape inference)."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    # Custom-domain nodes (and what follows them) cannot run in onnxruntime;
    # the tensors asked for do not depend on them, so drop them from the probe.
    custom = _downstream_of_custom(model.graph)
    kept = [n for n in probe.graph.node if not any(o in custom for o in n.output)]
    del probe.graph.node[:]
    probe.graph.node.extend(kept)
    outputs = [o for o in probe.graph.output if o.name not in custom]
    del probe.graph.output[:]
    probe.graph.output.extend(outputs)
    # The feeds carry the shapes: leave the graph's own shapes out, so that onnxruntime's load-time
    # inference does not check branches the run does not take against them (silero VAD's 8 kHz If branch).
    _clear_value_info(probe.graph)
    for vi in [*probe.graph.input, *probe.graph.output]:
        for i, dim in enumerate(vi.type.tensor_type.shape.dim):
            dim.dim_param = f"{vi.name}_d{i}"
    existing = {o.name for o in probe.graph.output}
    for name in names:
        if name not in existing:
            probe.graph.output.add().name = name
    feeds = {}
    rng = np.random.default_rng(0)
    elem_types = {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.input}
    for name, shape in input_shapes.items():
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_types[name])
        if np.issubdtype(dtype, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[name] = np.zeros(shape, dtype=dtype)
        else:
            feeds[name] = np.zeros(shape, dtype=dtype)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = ort_log_severity()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    values = session.run(names, feeds)
    return {name: (tuple(int(d) for d in np.shape(v)), onnx.helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype))
            for name, v in zip(names, values)}


def _first_line(exc: BaseException) -> str:
    """The last status message of an onnxruntime error (its innermost cause), else its first line."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text.rsplit("Status Message: ", 1)[-1]


def _clear_value_info(graph: onnx.GraphProto) -> None:
    del graph.value_info[:]
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _clear_value_info(sub)


def _set_value_info(model: onnx.ModelProto, measured: Mapping[str, tuple[Shape, int]]) -> None:
    """Declare each measured tensor's shape; its element type where shape inference left none."""
    by_name = {vi.name: vi for vi in list(model.graph.value_info) + list(model.graph.output)}
    for name, (shape, elem_type) in measured.items():
        vi = by_name.get(name)
        if vi is None:
            vi = model.graph.value_info.add()
            vi.name = name
        vi.type.tensor_type.elem_type = vi.type.tensor_type.elem_type or elem_type
        shape_proto = vi.type.tensor_type.shape
        shape_proto.ClearField("dim")
        for d in shape:
            shape_proto.dim.add().dim_value = d


def infer_static_shapes(model: onnx.ModelProto, input_shapes: Mapping[str, Shape],
                        unsimplified: onnx.ModelProto | None = None) -> onnx.ModelProto:
    """Return ``model`` with a static shape in ``value_info`` for every activation tensor.

    Shapes inference cannot settle are measured by one onnxruntime run of ``model``, or, when
    onnxruntime cannot load it (folding for the fixed shapes broke a branch the run does not
    take), of ``unsimplified`` for the tensors it has under the same names.
    """
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CimsplitError(f"shape inference failed on the simplified model: {first}") from None
    shapes = tensor_shapes(inferred)
    unknown = [name for name, shape in shapes.items() if shape is None]
    if not unknown:
        return inferred
    custom = _downstream_of_custom(inferred.graph)
    measurable = [name for name in unknown if name not in custom]
    if measurable:
        try:
            measured = _measure_shapes_with_ort(inferred, measurable, input_shapes)
        except Exception as exc:  # noqa: BLE001 - any ORT failure becomes one clear error below
            log.debug("onnxruntime shape probe failed: %s", exc)
            measured, probe_error = {}, _first_line(exc)
        else:
            probe_error = None
        if unsimplified is not None and len(measured) < len(measurable):
            known = {o for n in unsimplified.graph.node for o in n.output} | {vi.name for vi in unsimplified.graph.input}
            try:
                measured |= _measure_shapes_with_ort(
                    unsimplified, [n for n in measurable if n in known and n not in measured], input_shapes)
            except Exception as exc:  # noqa: BLE001
                log.debug("onnxruntime shape probe of the unsimplified model failed: %s", exc)
                probe_error = _first_line(exc)
        missing = [name for name in measurable if name not in measured]
        if missing:
            branches = any(n.op_type in ("If", "Loop") for n in inferred.graph.node)
            raise CimsplitError(
                f"tensor {missing[0]!r} still has an unknown shape after simplification"
                + (f", and one onnxruntime run on seeded inputs failed ({probe_error})" if probe_error else ""),
                hint="fix every symbolic input dim with --input-shape NAME=D0,D1,..."
                + (", and the inputs its If/Loop nodes branch on with --freeze-input NAME=VALUE" if branches else ""),
            )
        log.info("shapes of %d tensors measured with onnxruntime: %s", len(measured), ", ".join(sorted(measured)))
        _set_value_info(inferred, measured)
    left = [name for name in unknown if name in custom]
    if left:
        log.warning("%d tensors after custom-domain operators have unknown shapes (counted as 0 elements)", len(left))
    return inferred


def simplify(model: onnx.ModelProto, input_shapes: Mapping[str, Shape]) -> onnx.ModelProto:
    """Slim ``model`` (inputs already fixed to ``input_shapes``), name nodes, infer static shapes.

    Nodes whose outputs reach no graph output are dropped first (onnxslim
    would drop them too, and with them a graph input only they read); the
    result declares exactly the original model's graph inputs, read or not,
    so that a plan accepts the same feeds as the model.
    """
    pruned = onnx.ModelProto()
    pruned.CopyFrom(model)
    if pruned.functions:
        log.info("inlining %d model-local function(s)", len(pruned.functions))
        pruned = onnx.inliner.inline_local_functions(pruned)
    dropped = prune_dead_nodes(pruned.graph)
    if dropped:
        log.info("dropped %d nodes whose outputs reach no graph output", dropped)
    original_inputs = [vi for vi in pruned.graph.input if vi.name not in {t.name for t in pruned.graph.initializer}]
    output_names = [vi.name for vi in pruned.graph.output]
    if _is_quantized(pruned):  # onnxruntime's PadFusion, not onnxslim's (which fuses any zero Pad)
        fuse_pads(pruned)
    slimmed = _slim(pruned)
    new_inputs = {vi.name for vi in slimmed.graph.input}
    new_outputs = [vi.name for vi in slimmed.graph.output]
    if new_outputs != output_names or any(vi.name not in new_inputs for vi in original_inputs if _is_used(pruned, vi.name)):
        log.warning("onnxslim changed graph input/output names; using the unslimmed model")
        slimmed = onnx.ModelProto()
        slimmed.CopyFrom(pruned)
    _drop_initializer_inputs(slimmed.graph)
    merged = merge_equal_quantizers(slimmed.graph)
    if merged:
        log.info("merged %d QuantizeLinear nodes equal to another, as onnxruntime does", merged)
    if _is_quantized(slimmed):
        rewrite_as_onnxruntime(slimmed, branch_outputs(pruned.graph))
    if make_constant_outputs(slimmed.graph):
        log.info("graph outputs that are constants are made by an Identity of them")
    del slimmed.graph.input[:]
    slimmed.graph.input.extend(original_inputs)
    name_nodes(slimmed.graph)
    # Re-infer from scratch, but keep declared static shapes of tensors that
    # inference cannot reach (outputs of custom-domain operators).
    custom = _downstream_of_custom(slimmed.graph)
    declared = [vi for vi in model.graph.value_info if vi.name in custom]
    del slimmed.graph.value_info[:]
    slimmed.graph.value_info.extend(declared)
    used = {vi.name for vi in slimmed.graph.input}
    return infer_static_shapes(slimmed, {k: v for k, v in input_shapes.items() if k in used}, unsimplified=model)


def merge_equal_quantizers(graph: onnx.GraphProto) -> int:
    """Merge, in place, each QuantizeLinear into an earlier equal one (same inputs and attributes); the count.

    onnxruntime's common-subexpression elimination merges them in the whole
    model (the quantizer's ``DedicatedQDQPair`` writes one per reader), leaving
    one Q with several DQs, a pair it then keeps int8.  Split apart, each
    partition would show a pair of its own and convert it, and run other
    kernels than the model.  A Q that writes a graph output or is read inside
    a subgraph is left alone, as onnxruntime leaves it.
    """
    protected = {vi.name for vi in graph.output}
    for node in graph.node:
        protected |= node_reads(node) - set(node.input)
    first: dict[tuple, str] = {}
    renamed: dict[str, str] = {}
    keep: list[onnx.NodeProto] = []
    for node in graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = renamed.get(name, name)
        if node.op_type == "QuantizeLinear" and node.domain in STANDARD_DOMAINS and node.output[0] not in protected:
            key = (tuple(node.input), tuple(sorted(a.SerializeToString() for a in node.attribute)))
            if key in first:
                renamed[node.output[0]] = first[key]
                continue
            first[key] = node.output[0]
        keep.append(node)
    if renamed:
        del graph.node[:]
        graph.node.extend(keep)
    return len(renamed)


def prune_dead_nodes(graph: onnx.GraphProto) -> int:
    """Remove, in place, the nodes of a topologically sorted graph whose outputs reach no graph output."""
    live = {vi.name for vi in graph.output}
    keep: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        if any(out in live for out in node.output if out):
            keep.append(node)
            live |= node_reads(node)
    dropped = len(graph.node) - len(keep)
    if dropped:
        del graph.node[:]
        graph.node.extend(reversed(keep))
    return dropped


def _is_used(model: onnx.ModelProto, name: str) -> bool:
    return any(name in node.input for node in model.graph.node) or any(o.name == name for o in model.graph.output)


def _drop_initializer_inputs(graph: onnx.GraphProto) -> None:
    """Old exporters list initializers as graph inputs; they are weights, not inputs."""
    inits = {t.name for t in graph.initializer}
    keep = [vi for vi in graph.input if vi.name not in inits]
    if len(keep) != len(graph.input):
        del graph.input[:]
        graph.input.extend(keep)
