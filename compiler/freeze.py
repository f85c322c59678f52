"""``--freeze-input NAME=VALUE``: fix a scalar or small graph input to a constant and fold what depends on it.

A model like silero VAD computes ``If(Equal(sr, 16000))`` and hides its whole
network inside the two branches, where the compiler sees one opaque host
operator.  Freezing ``sr`` turns it into an initializer; onnx-graphsurgeon's
constant folder then evaluates ``Equal`` with onnxruntime and, with
``flatten_subgraphs``, replaces an ``If`` on a constant condition by the
nodes of the branch taken, so the network inside becomes the compiler's.

VALUE is one number or a comma-separated list (``sr=16000``,
``scale=0.5,0.5``); it takes the input's declared element type and shape (a
list must have as many elements as the declared shape; a lone number fills
it).  At most :data:`MAX_ELEMENTS` elements: larger inputs are activations,
not switches.  The frozen values are recorded so that ``run --check`` can feed
them to the original model.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from cimsplit.errors import CimsplitError

__all__ = ["MAX_ELEMENTS", "parse_frozen_inputs", "freeze_inputs"]

log = logging.getLogger(__name__)

MAX_ELEMENTS = 64


def parse_frozen_inputs(specs: Iterable[str] | None) -> dict[str, list[float]]:
    """``["sr=16000", "k=1,2"]`` -> ``{"sr": [16000.0], "k": [1.0, 2.0]}`` (types are fixed by :func:`freeze_inputs`)."""
    values: dict[str, list[float]] = {}
    for spec in specs or ():
        name, sep, text = spec.partition("=")
        name = name.strip()
        if not sep or not name or not text.strip():
            raise CimsplitError(f"--freeze-input {spec!r} is not NAME=VALUE", hint="e.g. --freeze-input sr=16000")
        if name in values:
            raise CimsplitError(f"--freeze-input gives {name!r} twice")
        try:
            values[name] = [float(part) for part in text.split(",")]
        except ValueError:
            raise CimsplitError(f"--freeze-input {spec!r}: {text!r} is not a number or a comma-separated list of numbers",
                                hint="e.g. --freeze-input sr=16000") from None
    return values


def _constant(vi: onnx.ValueInfoProto, numbers: list[float]) -> np.ndarray:
    name = vi.name
    tensor_type = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise CimsplitError(f"--freeze-input {name}: the input is not a tensor")
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]
    if None in dims:
        if len(numbers) == 1 and not dims:
            dims = []
        elif len(dims) == 1:
            dims = [len(numbers)]  # a vector of unknown length takes the list's
        else:
            raise CimsplitError(f"--freeze-input {name}: the input has unknown dims", hint=f"fix them with --input-shape {name}=...")
    count = int(np.prod(dims)) if dims else 1
    if count > MAX_ELEMENTS:
        raise CimsplitError(f"--freeze-input {name}: the input has {count} elements; at most {MAX_ELEMENTS} can be frozen",
                            hint="freeze switches and small parameters, not activations")
    if len(numbers) not in (1, count):
        raise CimsplitError(f"--freeze-input {name}: {len(numbers)} values for an input of {count} elements")
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
    array = np.array(numbers, dtype=np.float64)
    if dtype.kind in "iub" and not np.all(array == np.round(array)):
        raise CimsplitError(f"--freeze-input {name}: the input is {dtype}, {numbers} are not whole numbers")
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if array.min() < info.min or array.max() > info.max:
            raise CimsplitError(f"--freeze-input {name}: {numbers} do not fit the input's type {dtype}")
    return np.full(dims, array[0]).astype(dtype) if len(numbers) == 1 else array.reshape(dims).astype(dtype)


def freeze_inputs(model: onnx.ModelProto, frozen: Mapping[str, list[float]]) -> onnx.ModelProto:
    """A copy of ``model`` with each input in ``frozen`` made a constant and everything it decides folded.

    Unknown names are a :class:`CimsplitError` naming the model's inputs.
    """
    if not frozen:
        return model
    inputs = {vi.name: vi for vi in model.graph.input}
    initializers = {t.name for t in model.graph.initializer}
    for name in frozen:
        if name not in inputs or name in initializers:
            real = [n for n in inputs if n not in initializers]
            raise CimsplitError(f"--freeze-input {name}: the model has no input {name!r}",
                                hint=f"its inputs are {', '.join(real) or 'none'}")
    constants = {name: _constant(inputs[name], values) for name, values in frozen.items()}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [vi for vi in out.graph.input if vi.name not in constants]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    out.graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in constants.items())
    folded = _fold(out)
    log.info("froze %s: %d nodes -> %d", ", ".join(f"{k}={v.tolist()}" for k, v in constants.items()),
             len(model.graph.node), len(folded.graph.node))
    return folded


def _fold(model: onnx.ModelProto) -> onnx.ModelProto:
    """Fold constants, inline every ``If`` whose condition became constant, repeat until nothing changes.

    onnx-graphsurgeon folds (its own ``flatten_subgraphs`` loses branch outputs
    that come from nested ``If`` nodes, as in silero VAD, so the inlining is here).
    """
    for _ in range(32):  # each round inlines at least one If; nesting is shallow
        model = _fold_constants(model)
        if not _inline_constant_ifs(model.graph):
            return model
    return model


def _fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnx_graphsurgeon as gs
    import onnxruntime as ort

    # graphsurgeon evaluates with onnxruntime sessions of default options: keep their native
    # log lines ("[W:onnxruntime:...]") off the terminal unless debugging
    ort.set_default_logger_severity(2 if logging.getLogger("cimsplit").isEnabledFor(logging.DEBUG) else 4)

    try:
        graph = gs.import_onnx(model)
        graph.fold_constants(flatten_subgraphs=False, error_ok=True).cleanup(remove_unused_graph_inputs=False).toposort()
        folded = gs.export_onnx(graph)
    except Exception as exc:  # noqa: BLE001 - folding is an optimisation; the frozen model is valid without it
        log.warning("constant folding after --freeze-input failed (%s: %s)", type(exc).__name__, exc)
        return model
    folded.ir_version = model.ir_version
    del folded.opset_import[:]
    folded.opset_import.extend(model.opset_import)
    return folded


def _constant_values(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _inline_constant_ifs(graph: onnx.GraphProto) -> bool:
    """Replace each ``If`` of ``graph`` whose condition is a constant by the branch it takes; True if any was."""
    constants = _constant_values(graph)
    new_nodes: list[onnx.NodeProto] = []
    changed = False
    for node in graph.node:
        cond = constants.get(node.input[0]) if node.op_type == "If" and node.domain in ("", "ai.onnx") else None
        if cond is None or cond.size != 1:
            new_nodes.append(node)
            continue
        branch = next(a.g for a in node.attribute if a.name == ("then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"))
        new_nodes.extend(_branch_nodes(node, branch, graph))
        changed = True
    if changed:
        del graph.node[:]
        graph.node.extend(new_nodes)
    return changed


def _branch_nodes(if_node: onnx.NodeProto, branch: onnx.GraphProto, graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The branch's nodes for the parent graph: local names prefixed, branch outputs renamed to the If's."""
    prefix = f"{if_node.name or 'If'}/"
    local = {t.name for t in branch.initializer} | {o for n in branch.node for o in n.output if o}
    rename = {name: prefix + name for name in local}
    for branch_out, if_out in zip(branch.output, if_node.output):
        if branch_out.name in rename and if_out and branch_out.name not in rename.values():
            rename[branch_out.name] = if_out
    for init in branch.initializer:
        copy = graph.initializer.add()
        copy.CopyFrom(init)
        copy.name = rename[init.name]
    nodes = []
    for index, inner in enumerate(branch.node):
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = prefix + (inner.name or f"{inner.op_type}_{index}")
        copy.input[:] = [rename.get(name, name) for name in inner.input]
        copy.output[:] = [rename.get(name, name) for name in inner.output]
        for attr in copy.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _rename_outer_references(sub, rename)
        nodes.append(copy)
    produced = {o for n in nodes for o in n.output}
    for branch_out, if_out in zip(branch.output, if_node.output):
        source = rename.get(branch_out.name, branch_out.name)
        if if_out and if_out not in produced:  # the branch passes an outer tensor (or a shared one) through
            nodes.append(helper.make_node("Identity", [source], [if_out], name=f"{prefix}{if_out}/passthrough"))
    return nodes


def _rename_outer_references(graph: onnx.GraphProto, rename: Mapping[str, str]) -> None:
    """Rename, inside a nested subgraph, the tensors it reads from the inlined branch's scope."""
    own = {t.name for t in graph.initializer} | {vi.name for vi in graph.input} | {o for n in graph.node for o in n.output}
    outer = {k: v for k, v in rename.items() if k not in own}
    for node in graph.node:
        node.input[:] = [outer.get(name, name) for name in node.input]
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _rename_outer_references(sub, outer)
    for out in graph.output:
        if out.name in outer:
            out.name = outer[out.name]
