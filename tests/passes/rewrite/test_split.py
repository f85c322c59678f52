"""Split pass: partitions (which nodes went where), transfers, validity, numbers."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.hardware import Hardware
from cimsplit.passes.rewrite.partitions import group_nodes, plan_split
from cimsplit.passes.rewrite.split import PARTITION_DOMAIN, TRANSFER_DOMAIN, split

BUS_BYTES_PER_S = 20.48e9
BUS = Hardware("test", element_bytes=1, bus_bandwidth_bytes_per_s=BUS_BYTES_PER_S)


def _model(nodes, inputs, outputs, weights, shape=(2, 4)) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((shape[1], shape[1])).astype(np.float32), w) for w in weights]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, list(shape)) for x in inputs],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, list(shape)) for y in outputs],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def cycle_model() -> onnx.ModelProto:
    """All CIM nodes in one partition would form a cycle through the host (cim -> host -> cim):

                x
                |
          a: MatMul W1        [cim]
             /        \\
       b: Relu        d: MatMul W3   [host] / [cim]
          |               |
       c: MatMul W2       |   [cim]
             \\        /
              add: Add         [cim]
                |
                y
    """
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["t1"], name="a"),
        helper.make_node("Relu", ["t1"], ["t2"], name="b"),
        helper.make_node("MatMul", ["t1", "W3"], ["t4"], name="d"),
        helper.make_node("MatMul", ["t2", "W2"], ["t3"], name="c"),
        helper.make_node("Add", ["t3", "t4"], ["y"], name="add"),
    ]
    return _model(nodes, ["x"], ["y"], ["W1", "W2", "W3"])


CYCLE_DEVICES = {"a": "cim", "b": "host", "c": "cim", "d": "cim", "add": "cim"}


def independent_model() -> onnx.ModelProto:
    """Two branches from x; the CIM nodes a and c can share one partition:

              x
            /    \\
      a: MatMul W1   b: Relu     [cim] / [host]
           |           |
           ya      c: MatMul W2  [cim]
                       |
                       yc
    """
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["ya"], name="a"),
        helper.make_node("Relu", ["x"], ["tb"], name="b"),
        helper.make_node("MatMul", ["tb", "W2"], ["yc"], name="c"),
    ]
    return _model(nodes, ["x"], ["ya", "yc"], ["W1", "W2"])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def _check_all(result) -> None:
    for part in result.partitions.values():
        onnx.checker.check_model(part, full_check=True)
        onnx.shape_inference.infer_shapes(part, check_type=True, strict_mode=True)
    onnx.checker.check_model(result.partitioned, full_check=True)


# ------------------------------------------------------------------ structure
def test_cycle_through_the_host_splits_the_cim_side_in_two() -> None:
    result = split(cycle_model(), CYCLE_DEVICES, BUS)
    plan = result.plan
    assert [(p.name, p.nodes) for p in plan.partitions] == [
        ("cim_0", ("a", "d")), ("host_0", ("b",)), ("cim_1", ("c", "add")),
    ]
    assert [(p.inputs, p.outputs, p.initializers) for p in plan.partitions] == [
        (("x",), ("t1", "t4"), ("W1", "W3")),
        (("t1",), ("t2",), ()),
        (("t2", "t4"), ("y",), ("W2",)),
    ]
    # One transfer per crossing tensor and destination; graph input and output live on the host.
    # bytes = elements * element_bytes = 2*4*1 = 8; latency = 8 B / 20.48e9 B/s * 1e9 = 0.390625 ns (eq. 4).
    assert [(t.name, t.tensor, t.src_device, t.dst_device, t.bytes) for t in plan.transfers] == [
        ("transfer_0", "x", "host", "cim", 8),
        ("transfer_1", "t1", "cim", "host", 8),
        ("transfer_2", "t2", "host", "cim", 8),
        ("transfer_3", "y", "cim", "host", 8),
    ]
    assert all(t.latency_ns == pytest.approx(8 / 20.48e9 * 1e9) for t in plan.transfers)


def test_independent_cim_segments_merge_when_no_cycle_results() -> None:
    groups = group_nodes(independent_model(), {"a": "cim", "b": "host", "c": "cim"})
    # Segments cim{a}, host{b}, cim{c}: merging {a} with {c} makes no path through the host.
    assert groups == [("host", ["b"]), ("cim", ["a", "c"])]


def test_all_host_is_one_partition_without_transfers() -> None:
    result = split(cycle_model(), {n: "host" for n in CYCLE_DEVICES}, BUS)
    assert [(p.name, p.nodes) for p in result.plan.partitions] == [("host_0", ("a", "b", "d", "c", "add"))]
    assert result.plan.transfers == ()
    _check_all(result)


def test_one_transfer_per_tensor_and_destination_device() -> None:
    """t1 is read by two host nodes in two host partitions but crosses the bus once.

        x -> a: MatMul [cim] -> t1 -+-> b: Relu [host] -> c: MatMul [cim] -> t3 -.
                                    '------------------------------------------> e: Add [host] -> y
    """
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["t1"], name="a"),
        helper.make_node("Relu", ["t1"], ["t2"], name="b"),
        helper.make_node("MatMul", ["t2", "W2"], ["t3"], name="c"),
        helper.make_node("Add", ["t1", "t3"], ["y"], name="e"),
    ]
    model = _model(nodes, ["x"], ["y"], ["W1", "W2"])
    result = split(model, {"a": "cim", "b": "host", "c": "cim", "e": "host"}, BUS)
    assert [(p.name, p.nodes) for p in result.plan.partitions] == [
        ("cim_0", ("a",)), ("host_0", ("b",)), ("cim_1", ("c",)), ("host_1", ("e",)),
    ]
    assert [(t.tensor, t.dst_device) for t in result.plan.transfers] == [
        ("x", "cim"), ("t1", "host"), ("t2", "cim"), ("t3", "host"),
    ]
    _check_all(result)
    top = result.partitioned.graph
    transfers = [n for n in top.node if n.domain == TRANSFER_DOMAIN]
    calls = [n for n in top.node if n.domain == PARTITION_DOMAIN]
    assert [n.name for n in top.node] == ["transfer_0", "cim_0", "transfer_1", "host_0", "transfer_2", "cim_1",
                                          "transfer_3", "host_1"]
    # The host copy of t1 feeds both host partitions.
    assert list(transfers[1].output) == ["t1__on_host"]
    assert "t1__on_host" in calls[1].input and "t1__on_host" in calls[3].input
    attrs = {a.name: helper.get_attribute_value(a) for a in transfers[1].attribute}
    assert attrs == {"src_device": b"cim", "dst_device": b"host", "bytes": 8, "latency_ns": pytest.approx(0.390625)}


def test_weight_only_nodes_join_the_partition_that_reads_them() -> None:
    """Constant k and its DequantizeLinear dq are ready at the start, yet belong with m:

        x -> a: MatMul W1 [cim] -> h: Relu [host] -> m: MatMul [cim] -> y
                  k: Constant int8 -> dq: DequantizeLinear [cim] --^
    """
    k = numpy_helper.from_array(np.arange(16, dtype=np.int8).reshape(4, 4), "kv")
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["t1"], name="a"),
        helper.make_node("Constant", [], ["kq"], name="k", value=k),
        helper.make_node("DequantizeLinear", ["kq", "scale"], ["wq"], name="dq"),
        helper.make_node("Relu", ["t1"], ["t2"], name="h"),
        helper.make_node("MatMul", ["t2", "wq"], ["y"], name="m"),
    ]
    model = _model(nodes, ["x"], ["y"], ["W1"])
    model.graph.initializer.append(numpy_helper.from_array(np.array(0.1, np.float32), "scale"))
    result = split(model, {"a": "cim", "k": "cim", "dq": "cim", "h": "host", "m": "cim"}, BUS)
    assert [(p.name, p.nodes) for p in result.plan.partitions] == [
        ("cim_0", ("a",)), ("host_0", ("h",)), ("cim_1", ("k", "dq", "m")),
    ]
    assert result.plan.partition("cim_1").inputs == ("t2",)
    _check_all(result)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(_run(result.partitioned, {"x": x})["y"], _run(model, {"x": x})["y"], rtol=1e-6)


def test_a_weight_read_on_both_devices_is_copied_and_a_random_draw_is_not() -> None:
    """k -> dq feeds a CIM and a host MatMul: each partition dequantizes it, no weight crosses.
    r: RandomNormal feeds both too; each run draws anew, so it is made once and crosses:

        x -> a: MatMul(dq) [cim] -> s: Add(r) [host] -> y
        x -> b: MatMul(dq) [host] -> u: Add(r) [cim] -> z
    """
    k = numpy_helper.from_array(np.arange(16, dtype=np.int8).reshape(4, 4), "kv")
    nodes = [
        helper.make_node("Constant", [], ["kq"], name="k", value=k),
        helper.make_node("DequantizeLinear", ["kq", "scale"], ["wq"], name="dq"),
        helper.make_node("RandomNormal", [], ["noise"], name="r", shape=[2, 4], seed=1.0),
        helper.make_node("MatMul", ["x", "wq"], ["t1"], name="a"),
        helper.make_node("MatMul", ["x", "wq"], ["t2"], name="b"),
        helper.make_node("Add", ["t1", "noise"], ["y"], name="s"),
        helper.make_node("Add", ["t2", "noise"], ["z"], name="u"),
    ]
    model = _model(nodes, ["x"], ["y", "z"], [])
    model.graph.initializer.append(numpy_helper.from_array(np.array(0.1, np.float32), "scale"))
    devices = {"k": "host", "dq": "host", "r": "host", "a": "cim", "b": "host", "s": "host", "u": "cim"}
    result = split(model, devices, BUS)
    assert [(p.name, p.nodes) for p in result.plan.partitions] == [
        ("host_0", ("k", "dq", "r", "b")), ("cim_0", ("k", "dq", "a", "u")), ("host_1", ("s",)),
    ]
    # 8 elements of 1 byte each (BUS's element size): x, the draw and t2 go to the CIM, t1 and z come back
    assert [(t.tensor, t.dst_device, t.bytes) for t in result.plan.transfers] == [
        ("x", "cim", 8), ("noise", "cim", 8), ("t2", "cim", 8), ("t1", "host", 8), ("z", "host", 8)]
    _check_all(result)


def test_copy_names_never_collide_with_the_models_own_names() -> None:
    """The model already has a tensor called t1__on_host: the host copy of t1 must be named otherwise.

        x -> a: MatMul W1 [cim] -> t1 -> b: Relu [host] -> t1__on_host -> c: Add(t1, t1__on_host) [host] -> y
    """
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["t1"], name="a"),
        helper.make_node("Relu", ["t1"], ["t1__on_host"], name="b"),
        helper.make_node("Add", ["t1", "t1__on_host"], ["y"], name="c"),
    ]
    model = _model(nodes, ["x"], ["y"], ["W1"])
    result = split(model, {"a": "cim", "b": "host", "c": "host"}, BUS)
    transfer = next(n for n in result.partitioned.graph.node if n.name == "transfer_1")
    assert list(transfer.output) == ["t1__on_host_1"]
    _check_all(result)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(_run(result.partitioned, {"x": x})["y"], _run(model, {"x": x})["y"], rtol=1e-6)


# ------------------------------------------------------------ validity, numbers
@pytest.mark.parametrize("devices", [
    CYCLE_DEVICES,
    {n: "host" for n in CYCLE_DEVICES},
    {n: "cim" for n in CYCLE_DEVICES},
    {"a": "host", "b": "cim", "c": "host", "d": "cim", "add": "host"},
])
def test_partitions_chained_by_hand_and_partitioned_model_equal_the_original(devices) -> None:
    model = cycle_model()
    result = split(model, devices, BUS)
    _check_all(result)
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    expected = _run(model, {"x": x})["y"]
    # Run the partitions one after the other, feeding each from a shared tensor table.
    tensors = {"x": x}
    for spec in result.plan.partitions:
        tensors.update(_run(result.partitions[spec.name], {t: tensors[t] for t in spec.inputs}))
    np.testing.assert_allclose(tensors["y"], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_run(result.partitioned, {"x": x})["y"], expected, rtol=1e-6, atol=1e-6)


def test_partition_files_carry_node_metadata_and_only_their_weights() -> None:
    model = cycle_model()
    model.graph.node[0].metadata_props.add(key="cimsplit.device", value="cim")
    result = split(model, CYCLE_DEVICES, BUS)
    cim_0 = result.partitions["cim_0"]
    assert [t.name for t in cim_0.graph.initializer] == ["W1", "W3"]
    assert {p.key: p.value for p in cim_0.graph.node[0].metadata_props} == {"cimsplit.device": "cim"}
    assert [i.name for i in cim_0.graph.input] == ["x"]


def test_refuses_a_node_without_device_and_a_crossing_tensor_without_shape() -> None:
    model = cycle_model()
    with pytest.raises(ValueError, match="no device"):
        plan_split(model, {"a": "cim"}, BUS)
    del model.graph.value_info[:]
    with pytest.raises(ValueError, match="no value_info"):
        plan_split(model, CYCLE_DEVICES, BUS)


def test_control_flow_outer_scope_reads_are_partition_inputs() -> None:
    """An If whose branches read t (an outer-scope tensor) depends on t's producer:

        x -> a: MatMul W1 [cim] -> t ;  cond -> iff: If(then: Relu(t), else: Neg(t)) [host] -> y
    """
    then_g = helper.make_graph([helper.make_node("Relu", ["t"], ["o1"], name="then_relu")], "then", [],
                               [helper.make_tensor_value_info("o1", TensorProto.FLOAT, [2, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["t"], ["o2"], name="else_neg")], "else", [],
                               [helper.make_tensor_value_info("o2", TensorProto.FLOAT, [2, 4])])
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["t"], name="a"),
        helper.make_node("If", ["cond"], ["y"], name="iff", then_branch=then_g, else_branch=else_g),
    ]
    model = _model(nodes, ["x"], ["y"], ["W1"])
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    result = split(model, {"a": "cim", "iff": "host"}, BUS)
    assert result.plan.partition("host_0").inputs == ("cond", "t")
    _check_all(result)
    x = np.ones((2, 4), np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        np.testing.assert_allclose(_run(result.partitioned, feeds)["y"], _run(model, feeds)["y"], rtol=1e-6)


# ------------------------------------------------------------------- property
@st.composite
def dags(draw):
    """Random DAGs of Add/Relu/MatMul nodes over [2,4] tensors, with a random device per node."""
    n = draw(st.integers(2, 9))
    nodes, produced, devices = [], ["x"], {}
    for i in range(n):
        kind = draw(st.sampled_from(["Add", "Relu", "MatMul"]))
        srcs = [draw(st.sampled_from(produced))]
        if kind == "Add":
            srcs.append(draw(st.sampled_from(produced)))
        elif kind == "MatMul":
            srcs.append("W")
        nodes.append(helper.make_node(kind, srcs, [f"t{i}"], name=f"n{i}"))
        produced.append(f"t{i}")
        devices[f"n{i}"] = draw(st.sampled_from(["host", "cim"]))
    consumed = {s for node in nodes for s in node.input}
    outputs = [t for t in produced[1:] if t not in consumed] or [produced[-1]]
    if draw(st.booleans()) and produced[1] not in outputs:
        outputs.append(produced[1])  # a graph output that other nodes read too
    return _model(nodes, ["x"], outputs, ["W"]), devices


@settings(max_examples=40, deadline=None)
@given(dags())
def test_random_graphs_split_acyclically_and_compute_the_same(case) -> None:
    model, devices = case
    result = split(model, devices, BUS)
    plan = result.plan
    # Every node in exactly one partition, of its own device.
    placed = [(n, p.device) for p in plan.partitions for n in p.nodes]
    assert sorted(placed) == sorted(devices.items())
    # Execution order respects every dependency (so the partition graph is acyclic).
    available = set(plan.inputs)
    for spec in plan.partitions:
        assert set(spec.inputs) <= available
        available |= set(spec.outputs)
    # No two partitions of one device could merge without a cycle (the merge step ran to a fixpoint):
    # merging A and B is cyclic exactly when a path of two or more partition edges joins them.
    succ = {p.name: {q.name for q in plan.partitions if q is not p and set(q.inputs) & set(p.outputs)}
            for p in plan.partitions}

    def long_path(a: str, b: str) -> bool:
        stack, seen = [x for x in succ[a] if x != b], set()
        while stack:
            x = stack.pop()
            if b in succ[x]:
                return True
            stack.extend(y for y in succ[x] - seen if y != b)
            seen |= succ[x]
        return False

    for a in plan.partitions:
        for b in plan.partitions:
            if a is not b and a.device == b.device:
                assert long_path(a.name, b.name) or long_path(b.name, a.name), (a.name, b.name)
    # Numbering per device in execution order.
    for device in ("host", "cim"):
        names = [p.name for p in plan.partitions if p.device == device]
        assert names == [f"{device}_{k}" for k in range(len(names))]
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    expected = _run(model, {"x": x})
    got = _run(result.partitioned, {"x": x})
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)
