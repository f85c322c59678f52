"""Read an ONNX file safely and fix the shapes of its graph inputs (DESIGN §2, §9).

Steps, each a one-line :class:`CimsplitError` when it fails:

1. the file exists and parses as an ONNX ``ModelProto`` (a truncated or foreign
   file fails here);
2. external-data locations are checked *before* any external data is read: a
   location that is absolute, climbs out of the model's folder (``../x.bin``)
   or is a symlink resolving outside it is refused;
3. the default-domain opset is 11 or newer;
4. ``onnx.checker`` accepts the model and its types match the operator schemas;
   sparse initializers become dense ones (a graph output declared without a shape,
   as onnx-graphsurgeon writes one it knows no shape of, takes the one onnx infers;
   nodes out of topological order are sorted; a ``value_info`` the inference
   contradicts is dropped; an input of unknown rank waits for ``--input-shape``:
   onnxruntime runs such models, the checker refuses them);
5. every real graph input (initializers listed as inputs by old exporters are
   not real inputs) gets a fully static shape, from the model or from
   ``--input-shape NAME=D0,D1,...``.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from cimsplit.compiler.toposort import stable_topological_order
from cimsplit.errors import CimsplitError

__all__ = [
    "MIN_OPSET",
    "read_model",
    "real_inputs",
    "parse_input_shapes",
    "resolve_input_shapes",
    "apply_input_shapes",
    "declared_dims",
    "node_reads",
]

log = logging.getLogger(__name__)

MIN_OPSET = 11
_FLAG_HINT = "pass --input-shape NAME=D0,D1,... for it"


def parse_input_shapes(specs: Iterable[str] | None) -> dict[str, tuple[int, ...]]:
    """Parse ``["x=1,3,224,224", ...]`` (the ``--input-shape`` flag) into a dict."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or ():
        name, sep, dims_text = spec.rpartition("=")
        if not sep or not name or not dims_text:
            raise CimsplitError(f"bad --input-shape {spec!r}", hint="write NAME=D0,D1,... e.g. input=1,3,224,224")
        try:
            dims = tuple(int(d) for d in dims_text.replace("x", ",").split(","))
        except ValueError:
            raise CimsplitError(f"bad --input-shape {spec!r}: dims must be integers", hint="e.g. input=1,3,224,224") from None
        if any(d <= 0 for d in dims):
            raise CimsplitError(f"bad --input-shape {spec!r}: dims must be positive", hint="e.g. input=1,3,224,224")
        if name in shapes and shapes[name] != dims:
            raise CimsplitError(f"--input-shape given twice for {name!r} with different dims")
        shapes[name] = dims
    return shapes


def _iter_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph nested in node attributes (If/Loop/Scan bodies)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _iter_graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _iter_graphs(sub)


def _iter_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto that may carry external data: initializers and Constant/attribute tensors."""
    for graph in _iter_graphs(model.graph):
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield sparse.values
            yield sparse.indices
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == onnx.AttributeProto.TENSORS:
                    yield from attr.tensors


def _check_external_locations(model: onnx.ModelProto, base_dir: Path) -> bool:
    """Refuse external-data locations that leave ``base_dir``; return whether any exist."""
    base_real = os.path.realpath(base_dir)
    found = False
    for tensor in _iter_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        found = True
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        if not location:
            raise CimsplitError(f"tensor {tensor.name!r} has external data without a location")
        if os.path.isabs(location) or Path(location).drive:
            raise CimsplitError(
                f"external data of tensor {tensor.name!r} has an absolute location {location!r}",
                hint="external data must sit in the model's folder",
            )
        target = os.path.realpath(os.path.join(base_real, location))
        if os.path.commonpath([base_real, target]) != base_real:
            raise CimsplitError(
                f"external data of tensor {tensor.name!r} at {location!r} leaves the model's folder",
                hint="external data must sit in the model's folder (no '..', no symlinks pointing outside)",
            )
        if not os.path.isfile(target):
            raise CimsplitError(f"external data file {location!r} of tensor {tensor.name!r} is missing")
    return found


def read_model(path: str | Path) -> onnx.ModelProto:
    """Load, check and validate an ONNX file (steps 1-4 of the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise CimsplitError(f"model file {str(path)!r} does not exist")
    if not path.is_file():
        raise CimsplitError(f"model path {str(path)!r} is not a file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, OSError, UnicodeDecodeError) as exc:
        raise CimsplitError(f"{str(path)!r} is not a readable ONNX model ({type(exc).__name__})") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise CimsplitError(f"{str(path)!r} is not an ONNX model (no graph found)")
    if not model.graph.output:
        raise CimsplitError(f"the graph of {str(path)!r} has no outputs", hint="a model must declare at least one graph output")
    if _check_external_locations(model, path.parent):
        _load_external_data(model, path.parent)
    _check_opset(model)
    try:
        if model.ByteSize() < onnx.checker.MAXIMUM_PROTOBUF:
            _sort_nodes(model.graph)
            _infer_output_shapes(model)
            unranked = _check_model(model)
            densify_sparse_initializers(model)
            if not unranked:  # (an input of unknown rank gets its shape from --input-shape, and its types are checked then)
                _check_types(model)
        else:  # in-memory checks cannot serialize past 2 GB; check the file instead
            onnx.checker.check_model(str(path))
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError, RuntimeError) as exc:
        raise CimsplitError(f"{str(path)!r} is not a valid ONNX model: {_first_line(exc)}") from None
    densify_sparse_initializers(model)  # no-op unless the model was too large for the in-memory checks
    return model


def node_reads(node: onnx.NodeProto) -> set[str]:
    """Tensors a node reads, including every name its subgraphs mention (outer-scope reads; a superset)."""
    names = {name for name in node.input if name}
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for graph in graphs:
            for inner in graph.node:
                names |= node_reads(inner)
            names |= {vi.name for vi in graph.output}
    return names


def _sort_nodes(graph: onnx.GraphProto) -> None:
    """Put the graph's nodes in a topological order (their own where they are in one) when they are not: onnxruntime
    sorts them itself (a graph onnx-graphsurgeon wrote without ``toposort()``), onnx's checker refuses them.  A cycle is
    left to the checker."""
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    needs = [{producer[name] for name in node_reads(node) if name in producer} for node in graph.node]
    if all(j < i for i, before in enumerate(needs) for j in before):
        return
    successors: dict[int, list[int]] = {}
    for i, before in enumerate(needs):
        for j in before:
            successors.setdefault(j, []).append(i)
    order = stable_topological_order({i: i for i in range(len(needs))}, successors)
    if order is not None:
        nodes = [copy.deepcopy(graph.node[i]) for i in order]
        del graph.node[:]
        graph.node.extend(nodes)


def _check_model(model: onnx.ModelProto) -> list[str]:
    """``onnx.checker`` on the model, graph inputs and outputs declared without a shape (which onnxruntime accepts and
    the checker does not) checked as if they had one; the real inputs among them (of unknown rank) are returned."""
    shapeless = {vi.name for vi in [*model.graph.input, *model.graph.output]
                 if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")}
    checked = model
    if shapeless:
        checked = onnx.ModelProto()
        checked.CopyFrom(model)
        for vi in [*checked.graph.input, *checked.graph.output]:
            if vi.name in shapeless:
                vi.type.tensor_type.shape.SetInParent()
    onnx.checker.check_model(checked)
    return [vi.name for vi in real_inputs(model.graph) if vi.name in shapeless]


def _check_types(model: onnx.ModelProto) -> None:
    """Types against the operator schemas (a bfloat16 Conv): what onnxruntime would refuse later.  A ``value_info``
    that onnx's inference contradicts (left by an edit of the graph) is dropped, as onnxruntime overrides it."""
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except onnx.shape_inference.InferenceError as exc:
        if not model.graph.value_info:
            raise
        bare = onnx.ModelProto()
        bare.CopyFrom(model)
        del bare.graph.value_info[:]
        onnx.shape_inference.infer_shapes(bare, check_type=True, strict_mode=True)  # (a type error stays one)
        log.warning("the model's value_info disagrees with onnx's shape inference, ignored: %s", _first_line(exc))
        del model.graph.value_info[:]


def _infer_output_shapes(model: onnx.ModelProto) -> None:
    """Give each tensor graph output declared without a shape the one onnx's shape inference finds (if any; else the
    front end measures it, :func:`~.simplify.infer_static_shapes`)."""
    shapeless = [vi for vi in model.graph.output if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")]
    if not shapeless:
        return
    inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(model).graph.output}  # (errors: the checker's)
    for vi in shapeless:
        found = inferred.get(vi.name)
        if found is not None and found.type.tensor_type.HasField("shape"):
            vi.type.tensor_type.shape.CopyFrom(found.type.tensor_type.shape)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _load_external_data(model: onnx.ModelProto, base_dir: Path) -> None:
    """Read every external tensor's bytes into the model (locations already checked to stay in ``base_dir``).

    onnx's own loader refuses hard-linked files and symlinks even inside the
    folder (with an exception type no caller expects); the locations were
    checked by :func:`_check_external_locations`, so the bytes are read here.
    """
    base_real = os.path.realpath(base_dir)
    for tensor in _iter_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        target = os.path.realpath(os.path.join(base_real, info["location"]))
        try:
            offset = int(info.get("offset") or 0)
            length = int(info["length"]) if info.get("length") else None
        except ValueError:
            raise CimsplitError(f"external data of tensor {tensor.name!r} has a non-integer offset or length") from None
        if offset < 0 or (length is not None and length < 0):
            raise CimsplitError(f"external data of tensor {tensor.name!r} has a negative offset or length")
        try:
            with open(target, "rb") as handle:
                handle.seek(offset)
                data = handle.read() if length is None else handle.read(length)
        except OSError as exc:
            raise CimsplitError(f"cannot read the external data of tensor {tensor.name!r}: {exc.strerror or exc}") from None
        if length is not None and len(data) != length:
            raise CimsplitError(
                f"external data file {info['location']!r} of tensor {tensor.name!r} is truncated "
                f"({len(data)} of {length} bytes at offset {offset})",
            )
        tensor.raw_data = data
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def densify_sparse_initializers(model: onnx.ModelProto) -> None:
    """Turn the main graph's sparse initializers into dense ones, in place.

    Every later stage (simplification, costing, split) reads weights as
    ``graph.initializer``; a sparse one would otherwise be a tensor without a
    producer or shape.
    """
    graph = model.graph
    if not graph.sparse_initializer:
        return
    import numpy as np
    from onnx import numpy_helper

    dense = []
    for sparse in graph.sparse_initializer:
        dims = tuple(int(d) for d in sparse.dims)
        name = sparse.values.name
        try:
            values = numpy_helper.to_array(sparse.values).reshape(-1)
            indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
            array = np.zeros(dims, dtype=values.dtype)
            if indices.ndim == 2:  # [NNZ, rank] coordinates
                array[tuple(indices.T)] = values
            else:  # [NNZ] linear indices
                array.reshape(-1)[indices] = values
        except (ValueError, IndexError, TypeError, MemoryError) as exc:
            raise CimsplitError(f"sparse initializer {name!r} cannot be read: {_first_line(exc)}") from None
        dense.append(numpy_helper.from_array(array, name))
    del graph.sparse_initializer[:]
    graph.initializer.extend(dense)


def _check_opset(model: onnx.ModelProto) -> None:
    versions = [op.version for op in model.opset_import if op.domain in ("", "ai.onnx")]
    if not versions:
        raise CimsplitError("the model imports no default-domain ONNX opset")
    if versions[0] > onnx.defs.onnx_opset_version():
        raise CimsplitError(
            f"the model uses default-domain opset {versions[0]}, which does not exist "
            f"(onnx {onnx.__version__} knows opsets up to {onnx.defs.onnx_opset_version()})",
        )
    if versions[0] < MIN_OPSET:
        raise CimsplitError(
            f"the model uses opset {versions[0]}; cimsplit needs opset {MIN_OPSET} or newer",
            hint="convert it with onnx.version_converter.convert_version(model, 17)",
        )


def real_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are fed at run time (not initializers listed as inputs)."""
    initializers = {t.name for t in graph.initializer}
    return [vi for vi in graph.input if vi.name not in initializers]


def declared_dims(vi: onnx.ValueInfoProto) -> list[int | None] | None:
    """Declared dims (None for symbolic/unknown); None when the rank itself is unknown."""
    tensor_type = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor_type.shape.dim]


def resolve_input_shapes(
    model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]] | None = None
) -> dict[str, tuple[int, ...]]:
    """Static shape of every real graph input, from the model and ``input_shapes``."""
    given = dict(input_shapes or {})
    inputs = real_inputs(model.graph)
    names = [vi.name for vi in inputs]
    for name in given:
        if name not in names:
            raise CimsplitError(
                f"--input-shape names {name!r}, which is not an input of the model",
                hint=f"its inputs are: {', '.join(names) or '(none)'}",
            )
    resolved: dict[str, tuple[int, ...]] = {}
    for vi in inputs:
        if not vi.type.HasField("tensor_type"):
            raise CimsplitError(f"graph input {vi.name!r} is not a tensor; cimsplit handles tensor inputs only")
        declared = declared_dims(vi)
        if vi.name in given:
            dims = tuple(int(d) for d in given[vi.name])
            if declared is not None and len(declared) != len(dims):
                raise CimsplitError(
                    f"--input-shape {vi.name}={','.join(map(str, dims))} has rank {len(dims)}, "
                    f"but input {vi.name!r} has rank {len(declared)}",
                )
            for axis, (want, have) in enumerate(zip(dims, declared or dims)):
                if have is not None and have != want:
                    raise CimsplitError(
                        f"--input-shape sets dim {axis} of input {vi.name!r} to {want}, but the model fixes it to {have}",
                    )
            resolved[vi.name] = dims
            continue
        if declared is None:
            raise CimsplitError(f"input {vi.name!r} has an unknown rank", hint=_FLAG_HINT.replace("NAME", vi.name))
        unknown = [axis for axis, d in enumerate(declared) if d is None]
        if unknown:
            shown = ",".join("?" if d is None else str(d) for d in declared)
            raise CimsplitError(
                f"input {vi.name!r} has unknown dims ({shown}) at axis {', '.join(map(str, unknown))}",
                hint=_FLAG_HINT.replace("NAME", vi.name),
            )
        resolved[vi.name] = tuple(int(d) for d in declared)  # type: ignore[arg-type]
    return resolved


def apply_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Write static input dims into ``model`` (in place) and drop stale inferred shapes.

    Old ``value_info`` entries and output shapes with symbolic dims would
    conflict with the static shapes inference derives from the fixed inputs,
    so they are cleared; fully static ones are kept (they are the only shape
    information for the outputs of custom-domain operators).
    """
    for vi in model.graph.input:
        if vi.name not in shapes:
            continue
        shape = vi.type.tensor_type.shape
        shape.ClearField("dim")
        for d in shapes[vi.name]:
            shape.dim.add().dim_value = int(d)
    static = [vi for vi in model.graph.value_info if (d := declared_dims(vi)) is not None and None not in d]
    del model.graph.value_info[:]
    model.graph.value_info.extend(static)
    for vi in model.graph.output:
        declared = declared_dims(vi)
        if declared is not None and any(d is None for d in declared):
            vi.type.tensor_type.ClearField("shape")
