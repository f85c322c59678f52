"""Small models for the hostile-input corpus, each written to a folder by a builder.

Every builder takes the folder and returns the model's path.  Weights are
seeded; nothing here is checked by onnx unless it is meant to be valid.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def weight(name: str, shape: tuple[int, ...], seed: int = 0, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array((_rng(seed).standard_normal(shape) * 0.5).astype(dtype), name)


def model_of(nodes, inputs, outputs, inits=(), opset: int = OPSET, extra_opsets=(), ir_version: int = 8,
             value_info=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits), value_info=list(value_info))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    model.ir_version = ir_version
    return model


def vi(name: str, dims, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def save(model: onnx.ModelProto, folder: Path, name: str = "model.onnx", **kwargs) -> Path:
    path = Path(folder) / name
    onnx.save(model, str(path), **kwargs)
    return path


# x[1,3,8,8] -> conv: Conv 3x3 pad 1 (4) -> relu -> flat: Flatten -> fc: Gemm (10 x 256) -> y[1,10]
def cnn(batch: int | str = 1, dtype=np.float32, elem: int = TensorProto.FLOAT, names=("conv", "relu", "flat", "fc"),
        tensors=("x", "c", "r", "f", "y"), opset: int = OPSET) -> onnx.ModelProto:
    x, c, r, f, y = tensors
    nodes = [
        helper.make_node("Conv", [x, "w"], [c], name=names[0], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", [c], [r], name=names[1]),
        helper.make_node("Flatten", [r], [f], name=names[2], axis=1),
        helper.make_node("Gemm", [f, "fw", "fb"], [y], name=names[3], transB=1),
    ]
    inits = [weight("w", (4, 3, 3, 3), 0, dtype), weight("fw", (10, 256), 1, dtype), weight("fb", (10,), 2, dtype)]
    return model_of(nodes, [vi(x, [batch, 3, 8, 8], elem)], [vi(y, [batch, 10], elem)], inits, opset=opset)


def cnn_file(folder: Path, name: str = "model.onnx", **kwargs) -> Path:
    return save(cnn(**kwargs), folder, name)


# x[1,4] -> mm: MatMul (4 x 4) -> y[1,4]
def matmul(x_dims=(1, 4)) -> onnx.ModelProto:
    return model_of([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vi("x", list(x_dims))],
                    [vi("y", [*x_dims[:-1], 4])], [weight("w", (4, 4))])


# x[1,4] -> mm: MatMul (4 x 4) -> y; x -> dead: Relu -> (nothing reads it)
def dead_leaf() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"), helper.make_node("Relu", ["x"], ["dead"], name="dead")]
    return model_of(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])], [weight("w", (4, 4))])


# x[1,4] -> mm -> y; aux[1,2] is declared but never read
def unused_input() -> onnx.ModelProto:
    return model_of([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vi("x", [1, 4]), vi("aux", [1, 2])],
                    [vi("y", [1, 4])], [weight("w", (4, 4))])


# x[1,4] -> mm: MatMul(w3) with w3 a sparse initializer -> y
def sparse_weight() -> onnx.ModelProto:
    model = model_of([helper.make_node("MatMul", ["x", "w3"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["y"], name="relu")],
                     [vi("x", [1, 4])], [vi("y", [1, 4])])
    values = numpy_helper.from_array(np.array([1.0, -2.0, 3.0], np.float32), "w3")
    indices = numpy_helper.from_array(np.array([0, 5, 15], np.int64), "w3_indices")
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [4, 4]))
    return model


# x[1,4] -> a: Relu -> ... (n nodes) -> y
def chain(n: int) -> onnx.ModelProto:
    names = ["x", *[f"t{i}" for i in range(n - 1)], "y"]
    nodes = [helper.make_node("Relu", [names[i]], [names[i + 1]], name=f"n{i}") for i in range(n)]
    return model_of(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])])


# x -> If(cond const) { then: Relu(x), else: Neg(x) } -> y
def if_model() -> onnx.ModelProto:
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", [1, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", [1, 4])])
    nodes = [
        helper.make_node("MatMul", ["x0", "w"], ["x"], name="mm"),
        helper.make_node("Constant", [], ["cond"], name="cond", value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
    ]
    return model_of(nodes, [vi("x0", [1, 4])], [vi("y", [1, 4])], [weight("w", (4, 4))])


# x[1,4] -> Loop 3 times { acc = acc + 1 } -> y
def loop_model() -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "one"], ["acc_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("acc_in", [1, 4])],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [1, 4])],
        initializer=[numpy_helper.from_array(np.ones((1, 4), np.float32), "one")],
    )
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Constant", [], ["trip"], name="trip", value=numpy_helper.from_array(np.array(3, np.int64))),
        helper.make_node("Constant", [], ["cond"], name="cond", value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
        helper.make_node("Loop", ["trip", "cond", "m"], ["y"], name="loop", body=body),
    ]
    return model_of(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])], [weight("w", (4, 4))])


# x[1,4] -> mm: MatMul -> my: com.example:MyOp -> y (declared [1,4])
def custom_op() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("MyOp", ["m"], ["y"], name="my", domain="com.example")]
    return model_of(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])], [weight("w", (4, 4))],
                    extra_opsets=[helper.make_opsetid("com.example", 1)])


def with_external_data(folder: Path, location: str = "weights.bin") -> Path:
    """The CNN with every initializer in ``location`` (relative to ``folder``)."""
    model = cnn()
    return save(model, folder, "model.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                location=location, size_threshold=0)


def set_external_location(path: Path, location: str, **extra: str) -> None:
    """Rewrite the location (and other keys) of every external tensor in the file at ``path``."""
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        if tensor.data_location == TensorProto.EXTERNAL:
            entries = {e.key: e.value for e in tensor.external_data}
            entries.update(location=location, **extra)
            del tensor.external_data[:]
            for key, value in entries.items():
                tensor.external_data.add(key=key, value=value)
    onnx.save(model, str(path))
