"""Invariants of the workload DAG over random small CNN graphs (hypothesis)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.frontend import load
from cimsplit.compiler.simplify import tensor_shapes

C, H = 4, 5  # every tensor is float[1, C, H, H]
KINDS = ("conv", "relu", "sigmoid", "silu", "add", "mul", "clip")


@st.composite
def random_cnn(draw: st.DrawFn) -> onnx.ModelProto:
    """A random DAG: each step applies one op to one or two earlier tensors."""
    steps = draw(st.integers(1, 10))
    tensors = ["x"]
    nodes, inits = [], []
    rng = np.random.default_rng(draw(st.integers(0, 1000)))
    for k in range(steps):
        kind = draw(st.sampled_from(KINDS))
        a = draw(st.sampled_from(tensors))
        out = f"t{k}"
        if kind == "conv":
            inits.append(numpy_helper.from_array((rng.standard_normal((C, C, 3, 3)) * 0.3).astype(np.float32), f"w{k}"))
            nodes.append(helper.make_node("Conv", [a, f"w{k}"], [out], pads=[1, 1, 1, 1]))
        elif kind in ("relu", "sigmoid"):
            nodes.append(helper.make_node(kind.capitalize(), [a], [out]))
        elif kind == "silu":
            nodes.append(helper.make_node("Sigmoid", [a], [f"s{k}"]))
            nodes.append(helper.make_node("Mul", [a, f"s{k}"], [out]))
        elif kind == "clip":
            inits.append(numpy_helper.from_array(np.array(0, np.float32), f"lo{k}"))
            inits.append(numpy_helper.from_array(np.array(6, np.float32), f"hi{k}"))
            nodes.append(helper.make_node("Clip", [a, f"lo{k}", f"hi{k}"], [out]))
        else:
            b = draw(st.sampled_from(tensors))
            nodes.append(helper.make_node(kind.capitalize(), [a, b], [out]))
        tensors.append(out)
    consumed = {i for n in nodes for i in n.input}
    outputs = [t for t in tensors[1:] if t not in consumed] or [tensors[-1]]
    vi = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, C, H, H])  # noqa: E731
    graph = helper.make_graph(nodes, "random", [vi("x")], [vi(o) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cnn())
def test_workload_invariants(model: onnx.ModelProto) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.onnx"
        onnx.save(model, str(path))
        loaded = load(path)
    w = loaded.workload
    graph = loaded.model.graph
    # every compute node is in exactly one operator
    names = [n for op in w.operators for n in op.nodes]
    assert len(names) == len(set(names))
    assert set(names) | set(w.constant_nodes) >= {n.name for n in graph.node if n.op_type != "Constant"}
    # operators are in topological order and edges carry the elements of their tensors
    position = {op.name: k for k, op in enumerate(w.operators)}
    shapes = tensor_shapes(loaded.model)
    for e in w.edges:
        assert position[e.src] < position[e.dst]
        assert e.elements == sum(math.prod(shapes[t]) for t in e.tensors)
    for op in w.operators:
        # every tensor is 1 x C x H x H; fused outputs count once
        assert op.n_out % (C * H * H) == 0 and op.n_out > 0
        if op.op_type == "Conv":
            assert (op.m, op.n, op.n_mvm, op.crossbars) == (C, C * 9, H * H, 1)  # eq. 1
            assert len(op.nodes) <= 3  # Conv + one activation (or the SiLU pair)
        else:
            assert len(op.nodes) == 1 and not op.cim_capable
    # the simplified model computes the same outputs
    x = np.random.default_rng(0).standard_normal((1, C, H, H)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(loaded.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, wv in zip(got, want):
        np.testing.assert_allclose(g, wv, rtol=1e-4, atol=1e-5)
