"""The stage contract: stages run in order, a failure names its stage and those before it, user errors pass."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from graphs import clean_cnn, save
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.frontend import ModelSpec
from cimsplit.compiler.hardware import load_hardware
from cimsplit.errors import CimsplitError
from cimsplit.passes.fixed_placement import fixed_placement
from cimsplit.passes.pipeline import STAGES, CompileOptions, Stage, StageError, build_artifacts, compile_model, run_stages


def _fail(_value: object) -> None:
    raise ValueError("boom")


def test_stages_run_in_order_and_a_failure_names_the_stages_before_it() -> None:
    double, inc = Stage("double", lambda x: 2 * x), Stage("inc", lambda x: x + 1)
    assert run_stages([double, inc], 5) == 11  # (5 * 2) + 1
    with pytest.raises(StageError, match=r"^error running the split stage after: load, costs, inc: ValueError: boom$") as info:
        run_stages([inc, Stage("split", _fail)], 0, done=["load", "costs"])
    assert (info.value.stage, info.value.done) == ("split", ("load", "costs", "inc"))
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(StageError, match=r"^error running the load stage \(the first stage\)"):
        run_stages([Stage("load", _fail)], 0)


def test_a_check_that_fails_fails_its_stage_and_user_errors_pass_unchanged() -> None:
    with pytest.raises(StageError, match="error running the placement stage after: load: ValueError: boom"):
        run_stages([Stage("load", lambda x: x), Stage("placement", lambda x: x, check=_fail)], 0)

    def user_error(_value: object) -> None:
        raise CimsplitError("no such file: m.onnx", hint="check the path")

    with pytest.raises(CimsplitError) as info:
        run_stages([Stage("load", user_error)], 0)
    assert info.value.one_line() == "no such file: m.onnx — check the path"


def test_build_artifacts_names_the_annotate_stage_for_a_placement_of_another_model() -> None:
    """x -> a: MatMul W -> b: Relu -> y, placed by hand; the workload handed over lists b before a."""
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["t"], name="a"), helper.make_node("Relu", ["t"], ["y"], name="b")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], initializer=[w])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    hardware = load_hardware("x86")
    workload, result = fixed_placement(model, {"a": "cim", "b": "host"}, hardware, t_host_ns=1000.0, t_cim_ns=100.0)
    other = dataclasses.replace(workload, operators=workload.operators[::-1])
    with pytest.raises(StageError, match="error running the annotate stage after: placement: ValueError: the placement must list"):
        build_artifacts(model, other, result, hardware, model_path="m.onnx", fingerprint="f")
    built = build_artifacts(model, workload, result, hardware, model_path="m.onnx", fingerprint="f")
    assert [(p.name, p.device, p.nodes) for p in built.plan.partitions] == [("cim_0", "cim", ("a",)), ("host_0", "host", ("b",))]


def test_compile_model_runs_every_stage_on_a_real_model(tmp_path) -> None:
    """x -> Conv_0 -> Relu_1 (fused into the Conv) -> Flatten_2 -> Gemm_3 -> y (names given by the front end);
    a CIM so fast and a bus so wide that both CIM-capable operators go to it, Flatten stays on the host."""
    assert STAGES == ("load", "costs", "placement", "explain", "annotate", "split", "plan")
    path = save(clean_cnn(), tmp_path)
    hardware = load_hardware("x86", crossbars=1000, mvm_latency_ns=1.0, cim_bandwidth_bytes_per_s=1e12,
                             bus_bandwidth_bytes_per_s=1e12)
    compiled = compile_model(ModelSpec(str(path)), hardware, CompileOptions())
    plan = compiled.artifacts.plan
    assert [(p.name, p.device, p.nodes) for p in plan.partitions] == [
        ("cim_0", "cim", ("Conv_0", "Relu_1")), ("host_0", "host", ("Flatten_2",)), ("cim_1", "cim", ("Gemm_3",))]
    assert plan.makespan_ns == compiled.result.schedule.makespan_ns == plan.timeline.makespan_ns
    assert plan.model.path == str(path.resolve()) and plan.report["solver"]["name"] == compiled.result.solver.name


def test_compile_with_the_throughput_objective_writes_the_stream(tmp_path) -> None:
    """The same Conv -> Flatten -> Gemm model: plan.json carries objective, period, frames in flight and the
    stream; every transfer task is one of the split's transfers (TENSOR->DEVICE), every operator task an operator."""
    from cimsplit.passes.placement.options import SolveOptions
    from cimsplit.runtime.plan import Plan

    path = save(clean_cnn(), tmp_path)
    hardware = load_hardware("x86", crossbars=1000, mvm_latency_ns=1.0, cim_bandwidth_bytes_per_s=1e12,
                             bus_bandwidth_bytes_per_s=1e9)
    compiled = compile_model(ModelSpec(str(path)), hardware, CompileOptions(solve=SolveOptions(objective="throughput")))
    plan, stream = compiled.artifacts.plan, compiled.result.stream
    assert plan.objective == "throughput" and plan.period_ns == stream.period_ns
    assert plan.frames_in_flight == stream.frames_in_flight and plan.stream.latency_ns == stream.latency_ns
    assert plan.makespan_ns == stream.latency_ns == compiled.result.schedule.makespan_ns
    split = {f"{t.tensor}->{t.dst_device}" for t in plan.transfers}
    assert {t.name for t in plan.stream.tasks if t.kind == "transfer"} == split
    assert {t.name for t in plan.stream.tasks if t.kind == "operator"} == set(compiled.result.problem.names)
    assert Plan.from_json(plan.to_json()).stream == plan.stream
