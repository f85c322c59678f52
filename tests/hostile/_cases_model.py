"""Hostile models: file, protobuf, graph structure, names, shapes, dtypes, opsets, external data,
control flow and custom operators."""

from __future__ import annotations

import gzip
import json
import os

import _models as m
import numpy as np
import onnx
from _harness import ERROR, HANDLED, OK, Case, Workspace
from onnx import TensorProto, helper


def _inspect(build_model, *extra: str):
    def build(ws: Workspace) -> list[str]:
        return ["inspect", str(m.save(build_model(), ws.root)), *extra]
    return build


def _inspect_path(write):
    def build(ws: Workspace) -> list[str]:
        return ["inspect", str(write(ws))]
    return build


def _compile(build_model, *extra: str, shape_args: tuple[str, ...] = ()):
    """compile with a fast profile (the model must be loadable for the profile)."""
    def build(ws: Workspace) -> list[str]:
        path = m.save(build_model(), ws.root)
        return ws.compile_args(path, ws.root / "out", *extra, shape_args=shape_args)
    return build


def _compile_unprofiled(build_model, *extra: str):
    """compile without --host-profile: for models refused before profiling (or whose profiling must fail)."""
    def build(ws: Workspace) -> list[str]:
        path = m.save(build_model(), ws.root)
        return ["compile", str(path), "-o", str(ws.root / "out"), "--time-limit", "5", *extra]
    return build


def _bytes(data: bytes):
    def write(ws: Workspace):
        path = ws.path("model.onnx")
        path.write_bytes(data)
        return path
    return write


def _truncated(ws: Workspace):
    data = m.cnn().SerializeToString()
    path = ws.path("model.onnx")
    path.write_bytes(data[: len(data) // 2])
    return path


def _gzipped(ws: Workspace):
    path = ws.path("model.onnx.gz")
    path.write_bytes(gzip.compress(m.cnn().SerializeToString()))
    return path


def _graph_only(ws: Workspace):
    path = ws.path("graph.onnx")
    path.write_bytes(m.cnn().graph.SerializeToString())
    return path


def _tensor_only(ws: Workspace):
    path = ws.path("tensor.onnx")
    path.write_bytes(m.weight("w", (2, 2)).SerializeToString())
    return path


def _symlinked(ws: Workspace):
    real = m.cnn_file(ws.root, "real.onnx")
    link = ws.path("link.onnx")
    link.symlink_to(real.name)
    return link


def _no_graph():
    model = onnx.ModelProto()
    model.ir_version = 8
    model.opset_import.add(domain="", version=m.OPSET)
    return model


def _ir(version: int):
    def build():
        model = m.cnn()
        model.ir_version = version
        return model
    return build


def _dup_initializer():
    model = m.cnn()
    model.graph.initializer.append(m.weight("w", (4, 3, 3, 3), 5))
    return model


def _no_outputs():
    model = m.matmul()
    del model.graph.output[:]
    return model


def _cycle():
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="a"), helper.make_node("Relu", ["a"], ["b"], name="b")]
    return m.model_of(nodes, [m.vi("x", [1, 4])], [m.vi("b", [1, 4])])


def _unsorted():
    model = m.cnn()
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))
    return model


def _passthrough():
    model = m.matmul()
    model.graph.output.append(m.vi("x", [1, 4]))
    return model


def _constant_output():
    model = m.matmul()
    model.graph.output.append(m.vi("w", [4, 4]))
    return model


def _two_components():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"), helper.make_node("Relu", ["z"], ["u"], name="relu")]
    return m.model_of(nodes, [m.vi("x", [1, 4]), m.vi("z", [1, 4])], [m.vi("y", [1, 4]), m.vi("u", [1, 4])], [m.weight("w", (4, 4))])


def _no_nodes():
    return m.model_of([], [m.vi("x", [1, 4])], [m.vi("x", [1, 4])])


def _only_constants():
    nodes = [helper.make_node("Constant", [], ["y"], name="k", value=m.weight("kv", (1, 4)))]
    return m.model_of(nodes, [m.vi("x", [1, 4])], [m.vi("y", [1, 4])])


def _optional_empty_input():
    nodes = [helper.make_node("Clip", ["x", "", "hi"], ["c"], name="clip"), helper.make_node("MatMul", ["c", "w"], ["y"], name="mm")]
    inits = [m.weight("w", (4, 4)), onnx.numpy_helper.from_array(np.array(0.5, np.float32), "hi")]
    return m.model_of(nodes, [m.vi("x", [1, 4])], [m.vi("y", [1, 4])], inits)


def _unknown_default_op():
    return m.model_of([helper.make_node("FooBar", ["x"], ["y"], name="f")], [m.vi("x", [1, 4])], [m.vi("y", [1, 4])])


def _names(names, tensors=("x", "c", "r", "f", "y")):
    return lambda: m.cnn(names=names, tensors=tensors)


def _shape_mismatch():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    return m.model_of(nodes, [m.vi("x", [1, 4])], [m.vi("y", [1, 4])], [m.weight("w", (5, 4))])


def _unknown_rank():
    model = m.matmul()
    model.graph.input[0].type.tensor_type.ClearField("shape")
    return model


def _zero_dim():
    return m.cnn(batch=0)


def _scalar_input():
    nodes = [helper.make_node("Mul", ["x", "s"], ["y"], name="mul")]
    return m.model_of(nodes, [m.vi("x", [1, 4]), m.vi("s", [])], [m.vi("y", [1, 4])])


def _typed(elem: int, dtype):
    return lambda: m.cnn(dtype=dtype, elem=elem)


def _double_matmul():
    return m.model_of([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [m.vi("x", [1, 4], TensorProto.DOUBLE)],
                      [m.vi("y", [1, 4], TensorProto.DOUBLE)], [m.weight("w", (4, 4), dtype=np.float64)])


def _int_model():
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add"), helper.make_node("Cast", ["a"], ["c"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["c", "w"], ["y"], name="mm")]
    return m.model_of(nodes, [m.vi("x", [1, 4], TensorProto.INT64)], [m.vi("y", [1, 4])], [m.weight("w", (4, 4))])


def _bool_model():
    nodes = [helper.make_node("Not", ["x"], ["n"], name="not"), helper.make_node("Cast", ["n"], ["c"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["c", "w"], ["y"], name="mm")]
    return m.model_of(nodes, [m.vi("x", [1, 4], TensorProto.BOOL)], [m.vi("y", [1, 4])], [m.weight("w", (4, 4))])


def _string_input():
    nodes = [helper.make_node("Identity", ["x"], ["y"], name="id")]
    return m.model_of(nodes, [m.vi("x", [1, 4], TensorProto.STRING)], [m.vi("y", [1, 4], TensorProto.STRING)])


def _sequence_input():
    model = m.model_of([helper.make_node("SequenceLength", ["x"], ["y"], name="len")], [], [m.vi("y", [], TensorProto.INT64)])
    model.graph.input.append(helper.make_tensor_sequence_value_info("x", TensorProto.FLOAT, [1, 4]))
    return model


def _opset(version: int):
    return lambda: m.cnn(opset=version)


def _no_default_opset():
    model = m.cnn()
    del model.opset_import[:]
    model.opset_import.add(domain="com.example", version=1)
    return model


def _com_microsoft():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Gelu", ["m"], ["y"], name="gelu", domain="com.microsoft")]
    return m.model_of(nodes, [m.vi("x", [1, 4])], [m.vi("y", [1, 4])], [m.weight("w", (4, 4))],
                      extra_opsets=[helper.make_opsetid("com.microsoft", 1)])


def _custom_with_vi():
    model = m.custom_op()
    model.graph.value_info.append(m.vi("m", [1, 4]))
    return model


def _scan():
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "e"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["o"])],
        "body", [m.vi("s_in", [4]), m.vi("e", [4])], [m.vi("s_out", [4]), m.vi("o", [4])])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
             helper.make_node("Scan", ["s0", "mm"], ["s", "y"], name="scan", body=body, num_scan_inputs=1)]
    return m.model_of(nodes, [m.vi("x", [3, 4]), m.vi("s0", [4])], [m.vi("s", [4]), m.vi("y", [3, 4])], [m.weight("w", (4, 4))])


# ---- external data -------------------------------------------------------------------------------------------------

def _ext(setup):
    """inspect of the CNN whose weights sit in external data, after ``setup(ws, model_path)``."""
    def build(ws: Workspace) -> list[str]:
        path = m.with_external_data(ws.path("model", "x").parent)
        setup(ws, path)
        return ["inspect", str(path)]
    return build


def _ext_relocate(location: str, **extra):
    def setup(ws, path):
        m.set_external_location(path, location, **extra)
    return setup


def _ext_outside(ws, path):
    outside = ws.path("elsewhere", "weights.bin")
    os.replace(path.parent / "weights.bin", outside)
    m.set_external_location(path, "../elsewhere/weights.bin")


def _ext_symlink_out(ws, path):
    outside = ws.path("elsewhere", "weights.bin")
    os.replace(path.parent / "weights.bin", outside)
    (path.parent / "weights.bin").symlink_to(outside)


def _ext_symlink_in(ws, path):
    os.replace(path.parent / "weights.bin", path.parent / "real.bin")
    (path.parent / "weights.bin").symlink_to("real.bin")


def _ext_hardlink(ws, path):
    os.link(path.parent / "weights.bin", path.parent / "twin.bin")


def _ext_missing(ws, path):
    (path.parent / "weights.bin").unlink()


def _ext_truncated(ws, path):
    data = (path.parent / "weights.bin").read_bytes()
    (path.parent / "weights.bin").write_bytes(data[: len(data) // 2])


def _ext_no_location(ws, path):
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        kept = [(e.key, e.value) for e in tensor.external_data if e.key != "location"]
        del tensor.external_data[:]
        for key, value in kept:
            tensor.external_data.add(key=key, value=value)
    onnx.save(model, str(path))


def _ext_compile(ws: Workspace) -> list[str]:
    path = m.with_external_data(ws.path("model", "x").parent)
    return ws.compile_args(path, ws.root / "out")


def _huge_bytes() -> bytes:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return m.model_of(nodes, [m.vi("x", [1, 3, 100000, 100000])], [m.vi("y", [1, 4, 99998, 99998])],
                      [m.weight("w", (4, 3, 3, 3))]).SerializeToString()


def _json_file(ws: Workspace):
    path = ws.path("model.onnx")
    path.write_text(json.dumps({"graph": {"node": []}}))
    return path


CASES = [
    # file
    Case("file-missing", "file", ERROR, lambda ws: ["inspect", str(ws.root / "nope.onnx")], "does not exist"),
    Case("file-directory", "file", ERROR, lambda ws: ["inspect", str(ws.path("d", "x").parent)], "not a file"),
    Case("file-empty", "file", ERROR, _inspect_path(_bytes(b""))),
    Case("file-garbage", "file", ERROR, _inspect_path(_bytes(bytes(range(256)) * 7))),
    Case("file-truncated", "file", ERROR, _inspect_path(_truncated)),
    Case("file-json", "file", ERROR, _inspect_path(_json_file)),
    Case("file-gzip", "file", ERROR, _inspect_path(_gzipped)),
    Case("file-symlink-to-model", "file", OK, _inspect_path(_symlinked)),
    # protobuf
    Case("proto-no-graph", "protobuf", ERROR, _inspect(_no_graph)),
    Case("proto-graph-not-model", "protobuf", ERROR, _inspect_path(_graph_only)),
    Case("proto-tensor-not-model", "protobuf", ERROR, _inspect_path(_tensor_only)),
    Case("proto-ir-version-0", "protobuf", ERROR, _inspect(_ir(0))),
    Case("proto-ir-version-99", "protobuf", ERROR, _inspect(_ir(99))),
    Case("proto-duplicate-initializer", "protobuf", ERROR, _inspect(_dup_initializer)),
    # graph structure
    Case("graph-no-outputs-inspect", "graph", ERROR, _inspect(_no_outputs), "no outputs"),
    Case("graph-no-outputs-compile", "graph", ERROR, _compile_unprofiled(_no_outputs), "no outputs"),
    Case("graph-cycle", "graph", ERROR, _inspect(_cycle)),
    Case("graph-unsorted", "graph", OK, _compile(_unsorted)),  # (sorted, as onnxruntime sorts it)
    Case("graph-dead-leaf", "graph", OK, _compile(m.dead_leaf)),
    Case("graph-unused-input", "graph", OK, _compile(m.unused_input)),
    Case("graph-passthrough-output", "graph", OK, _compile(_passthrough)),
    Case("graph-constant-output", "graph", OK, _compile(_constant_output)),
    Case("graph-two-components", "graph", OK, _compile(_two_components)),
    Case("graph-no-nodes", "graph", HANDLED, _compile_unprofiled(_no_nodes)),
    Case("graph-only-constants", "graph", HANDLED, _compile_unprofiled(_only_constants)),
    Case("graph-optional-empty-input", "graph", OK, _compile(_optional_empty_input)),
    Case("graph-chain-200", "graph", OK, _compile(lambda: m.chain(200))),
    Case("graph-sparse-initializer", "graph", OK, _compile(m.sparse_weight)),
    # names
    Case("names-empty", "names", OK, _compile(_names(("", "", "", "")))),
    Case("names-duplicate", "names", OK, _compile(_names(("n", "n", "n", "n")))),
    Case("names-unicode-and-paths", "names", OK,
         _compile(_names(("../conv", "/etc/relu", "fläche x", "a:b"), ("in put", "ç/1", "../r", "f\\x", "out:0")))),
    Case("names-long", "names", OK, _compile(_names(tuple("n" * 1000 + str(i) for i in range(4))))),
    Case("names-like-partitions", "names", OK, _compile(_names(("host_0", "cim_0", "host_1", "cim_1"), ("cim_0", "host_0", "t", "u", "plan")))),
    Case("names-newline", "names", OK, _compile(_names(("a\nb", "c\td", "e", "f")))),
    # shapes and dims
    Case("shapes-symbolic-no-flag", "shapes", ERROR, _inspect(lambda: m.cnn(batch="N")), "--input-shape"),
    Case("shapes-symbolic-with-flag", "shapes", OK, _compile(lambda: m.cnn(batch="N"), shape_args=("--input-shape", "x=2,3,8,8"))),
    Case("shapes-flag-unknown-input", "shapes", ERROR, _inspect(m.cnn, "--input-shape", "nope=1,3,8,8"), "not an input"),
    Case("shapes-flag-wrong-rank", "shapes", ERROR, _inspect(lambda: m.cnn(batch="N"), "--input-shape", "x=1,3,8"), "rank"),
    Case("shapes-flag-conflicts", "shapes", ERROR, _inspect(m.cnn, "--input-shape", "x=1,3,9,9"), "fixes it"),
    Case("shapes-flag-zero", "shapes", ERROR, _inspect(m.cnn, "--input-shape", "x=0,3,8,8"), "positive"),
    Case("shapes-flag-negative", "shapes", ERROR, _inspect(m.cnn, "--input-shape", "x=-1,3,8,8")),
    Case("shapes-flag-not-int", "shapes", ERROR, _inspect(m.cnn, "--input-shape", "x=a,3,8,8"), "integers"),
    Case("shapes-flag-malformed", "shapes", ERROR, _inspect(m.cnn, "--input-shape", "1,3,8,8"), "bad --input-shape"),
    Case("shapes-huge-dims-inspect", "shapes", OK, _inspect(lambda: onnx.ModelProto.FromString(_huge_bytes()))),
    Case("shapes-huge-dims-compile", "shapes", ERROR, _compile_unprofiled(lambda: onnx.ModelProto.FromString(_huge_bytes())), "too large"),
    Case("shapes-zero-dim", "shapes", ERROR, _inspect(_zero_dim)),
    Case("shapes-unknown-rank", "shapes", ERROR, _inspect(_unknown_rank), "shape"),
    Case("shapes-scalar-input", "shapes", OK, _compile(_scalar_input)),
    Case("shapes-mismatch", "shapes", ERROR, _inspect(_shape_mismatch)),
    # dtypes
    Case("dtypes-bfloat16-conv-inspect", "dtypes", ERROR, _inspect(_typed(TensorProto.BFLOAT16, np.float32)), "bfloat16"),
    Case("dtypes-bfloat16-conv-compile", "dtypes", ERROR, _compile_unprofiled(_typed(TensorProto.BFLOAT16, np.float32)), "bfloat16"),
    Case("dtypes-float16", "dtypes", OK, _compile(_typed(TensorProto.FLOAT16, np.float16))),
    Case("dtypes-float64-matmul", "dtypes", OK, _compile(_double_matmul)),
    # onnxruntime's CPU provider has no float64 Conv: refused when profiling, with one line
    Case("dtypes-float64-conv", "dtypes", HANDLED, _compile_unprofiled(_typed(TensorProto.DOUBLE, np.float64))),
    Case("dtypes-int64-input", "dtypes", OK, _compile(_int_model)),
    Case("dtypes-bool-input", "dtypes", OK, _compile(_bool_model)),
    Case("dtypes-string-input", "dtypes", HANDLED, _compile_unprofiled(_string_input)),
    Case("dtypes-sequence-input", "dtypes", ERROR, _inspect(_sequence_input), "not a tensor"),
    # opsets and domains
    Case("opsets-10", "opsets", ERROR, _inspect(_opset(10)), "opset 11 or newer"),
    Case("opsets-99-inspect", "opsets", ERROR, _inspect(_opset(99)), "does not exist"),
    Case("opsets-99-compile", "opsets", ERROR, _compile_unprofiled(_opset(99)), "does not exist"),
    Case("opsets-no-default", "opsets", ERROR, _inspect(_no_default_opset), "opset"),
    Case("opsets-11", "opsets", OK, _compile(_opset(11))),
    Case("opsets-unknown-default-op", "opsets", ERROR, _inspect(_unknown_default_op)),
    Case("opsets-com-microsoft", "opsets", OK, _compile(_com_microsoft)),
    # external data
    Case("external-inside", "external", OK, _ext(lambda ws, p: None)),
    Case("external-compile", "external", OK, _ext_compile),
    Case("external-dotdot", "external", ERROR, _ext(_ext_outside), "leaves the model's folder"),
    Case("external-absolute", "external", ERROR, _ext(_ext_relocate("/etc/passwd")), "absolute"),
    Case("external-symlink-out", "external", ERROR, _ext(_ext_symlink_out), "leaves the model's folder"),
    Case("external-symlink-inside", "external", OK, _ext(_ext_symlink_in)),
    Case("external-hardlink", "external", OK, _ext(_ext_hardlink)),
    Case("external-missing", "external", ERROR, _ext(_ext_missing), "missing"),
    Case("external-truncated", "external", ERROR, _ext(_ext_truncated), "truncated"),
    Case("external-bad-offset", "external", ERROR, _ext(_ext_relocate("weights.bin", offset="abc")), "offset"),
    Case("external-no-location", "external", ERROR, _ext(_ext_no_location), "location"),
    # control flow and custom operators (the fuzz work compiles these; either way no crash)
    Case("control-if-inspect", "control", OK, _inspect(m.if_model)),
    Case("control-if-compile", "control", HANDLED, _compile_unprofiled(m.if_model)),
    Case("control-loop-inspect", "control", OK, _inspect(m.loop_model)),
    Case("control-loop-compile", "control", HANDLED, _compile_unprofiled(m.loop_model)),
    Case("control-scan-inspect", "control", OK, _inspect(_scan)),
    Case("custom-op-inspect", "custom", OK, _inspect(m.custom_op)),
    Case("custom-op-compile", "custom", HANDLED, _compile_unprofiled(m.custom_op)),
    Case("custom-op-with-value-info", "custom", HANDLED, _compile_unprofiled(_custom_with_vi)),
]
