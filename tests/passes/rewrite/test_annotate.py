"""Annotate pass: per-node device and timing stamped into metadata_props."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.workload import Operator, Workload
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.rewrite.annotate import (
    NodePlacement,
    annotate,
    complete_placements,
    placements_from_schedule,
    read_annotations,
)


def _op(name: str, nodes: tuple[str, ...]) -> Operator:
    return Operator(name, "MatMul", nodes, True, None, 4, 4, 2, 1, 8, 8)


def chain_with_constant() -> onnx.ModelProto:
    """A leftover Constant (no operator) feeding a host Reshape:

        k: Constant ---------------------------.
                                                v
        x --> mm: MatMul(W) --> relu: Relu --> rs: Reshape --> y
    """
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "W")
    nodes = [
        helper.make_node("Constant", [], ["k"], name="k", value=numpy_helper.from_array(np.array([8], dtype=np.int64))),
        helper.make_node("MatMul", ["x", "W"], ["t"], name="mm"),
        helper.make_node("Relu", ["t"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "k"], ["y"], name="rs"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def test_operator_nodes_take_the_schedule_of_their_operator() -> None:
    workload = Workload((_op("mm", ("mm", "relu")), _op("rs", ("rs",))), ())
    schedule = Schedule(on_host=(False, True), start_ns=(0.0, 150.0), finish_ns=(100.0, 250.0), makespan_ns=250.0)
    placements = placements_from_schedule(workload, schedule)
    assert placements == {
        "mm": NodePlacement("cim", "mm", 0.0, 100.0),
        "relu": NodePlacement("cim", "mm", 0.0, 100.0),  # the fused activation shares its anchor's slot
        "rs": NodePlacement("host", "rs", 150.0, 250.0),
    }


def test_leftover_constant_follows_its_consumer_and_stamps_survive_save_and_load(tmp_path) -> None:
    model = chain_with_constant()
    placed = {"mm": NodePlacement("cim", "mm", 0.0, 100.0), "relu": NodePlacement("cim", "mm", 0.0, 100.0),
              "rs": NodePlacement("host", "rs", 150.0, 250.0)}
    complete = complete_placements(model, placed)
    # k is read only by rs (host): it goes to the host, with zero duration at rs's start.
    assert complete["k"] == NodePlacement("host", "", 150.0, 150.0)
    assert list(complete) == ["k", "mm", "relu", "rs"]

    annotated = annotate(model, placed)
    onnx.checker.check_model(annotated, full_check=True)
    path = tmp_path / "annotated.onnx"
    onnx.save(annotated, path)
    again = onnx.load(path)
    props = {p.key: p.value for p in again.graph.node[1].metadata_props}
    assert props == {"cimsplit.device": "cim", "cimsplit.operator": "mm",
                     "cimsplit.start_ns": "0.0", "cimsplit.finish_ns": "100.0"}
    assert read_annotations(again.graph.node) == complete
    # The input model is not modified.
    assert all(len(n.metadata_props) == 0 for n in model.graph.node)


def test_annotating_twice_replaces_the_stamps_and_keeps_other_metadata() -> None:
    model = chain_with_constant()
    model.graph.node[1].metadata_props.add(key="origin", value="layer1")
    first = annotate(model, {"mm": NodePlacement("cim", "mm", 0.0, 1.0)})
    second = annotate(first, {"mm": NodePlacement("host", "mm", 2.0, 3.0)})
    props = [(p.key, p.value) for p in second.graph.node[1].metadata_props]
    assert ("origin", "layer1") in props
    assert [v for k, v in props if k == "cimsplit.device"] == ["host"]
    assert len(props) == 5


def test_refuses_unnamed_nodes_and_unknown_names() -> None:
    model = chain_with_constant()
    with pytest.raises(ValueError, match="not in the model"):
        complete_placements(model, {"nope": NodePlacement("host", "", 0.0, 0.0)})
    model.graph.node[2].name = ""
    with pytest.raises(ValueError, match="unique non-empty name"):
        complete_placements(model, {})
    with pytest.raises(ValueError, match="device must be"):
        NodePlacement("gpu", "", 0.0, 0.0)
