"""Property: any host/CIM assignment of a QDQ model splits into partitions whose outputs
equal the whole model's bit for bit, and the runtime copies exactly the bytes the plan charges.

The assignments are drawn at random (not the optimum of some profile), so no host
profile can find a placement that breaks the equality.  The graph has Conv, Gemm, Add,
Concat, a residual and one quantized tensor read by three consumers; it is quantized by
onnxruntime's ``quantize_static`` in the four configurations of issue 12 (U8S8 and S8S8,
per-tensor and per-channel weight scales).
"""

from __future__ import annotations

import functools
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _profiles import table_profile
from graphs import kernels
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.costs import build_costs
from cimsplit.compiler.frontend import load
from cimsplit.compiler.hardware import load_hardware
from cimsplit.passes.emit.artifacts import write_artifacts
from cimsplit.passes.fixed_placement import fixed_assignment
from cimsplit.passes.pipeline import build_artifacts
from cimsplit.passes.placement.driver import problem_from_costs
from cimsplit.runtime import Session
from cimsplit.runtime.devices import session_options

CONFIGS = [(act, per_channel) for act in ("uint8", "int8") for per_channel in (False, True)]


def residual_net(clutter: bool = False) -> onnx.ModelProto:
    """
      x[1,3,8,8] -> c1: Conv 3->8 3x3 -> r1: Relu -> t1
      t1 -> c2: Conv 8->8 3x3 -> t2 ;  t1 -> c3: Conv 8->8 1x1 -> t3    (t1 read three times)
      cat: Concat(t2, t3) -> c4: Conv 16->8 1x1 -> t5 ;  add: Add(t5, t1) -> r2: Relu     (residual)
      -> gap: GlobalAveragePool -> flat: Flatten -> fc: Gemm 8->10 -> y[1,10]

    ``clutter``: what exporters leave, an Identity after r1, and a Dropout and a Reshape to the same shape
    after r2.
    """
    rng = np.random.default_rng(0)
    shapes = {"w1": (8, 3, 3, 3), "w2": (8, 8, 3, 3), "w3": (8, 8, 1, 1), "w4": (8, 16, 1, 1), "fw": (10, 8)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.4).astype(np.float32), n) for n, s in shapes.items()]
    inits += [numpy_helper.from_array((rng.standard_normal(s[0]) * 0.1).astype(np.float32), f"b{n}") for n, s in shapes.items()]
    conv = "Conv"
    nodes = [
        helper.make_node(conv, ["x", "w1", "bw1"], ["c1"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["t1"], name="r1"),
        helper.make_node(conv, ["t1", "w2", "bw2"], ["t2"], name="c2", pads=[1, 1, 1, 1]),
        helper.make_node(conv, ["t1", "w3", "bw3"], ["t3"], name="c3"),
        helper.make_node("Concat", ["t2", "t3"], ["t4"], name="cat", axis=1),
        helper.make_node(conv, ["t4", "w4", "bw4"], ["t5"], name="c4"),
        helper.make_node("Add", ["t5", "t1"], ["t6"], name="add"),
        helper.make_node("Relu", ["t6"], ["t7"], name="r2"),
        helper.make_node("GlobalAveragePool", ["t7"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fw", "bfw"], ["y"], name="fc", transB=1),
    ]
    if clutter:
        nodes[1].output[0], nodes[7].output[0] = "t1_relu", "t7_relu"
        nodes[2:2] = [helper.make_node("Identity", ["t1_relu"], ["t1"], name="identity")]
        nodes[9:9] = [helper.make_node("Dropout", ["t7_relu"], ["t7_dropout"], name="dropout"),
                      helper.make_node("Reshape", ["t7_dropout", "same"], ["t7"], name="reshape")]
        inits.append(numpy_helper.from_array(np.array([1, 8, 8, 8], np.int64), "same"))
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


_MODELS = tempfile.TemporaryDirectory(prefix="cimsplit-qdq-prop-")
"""The quantized nets of :func:`quantized`, for the test process's lifetime (removed when it ends)."""


@functools.cache
def quantized(config: int) -> tuple[str, object]:
    """(path, loaded front-end model) of the residual net in quantizer configuration ``config``."""
    from cimsplit.models.quantize import quantize_qdq

    activations, per_channel = CONFIGS[config]
    path = Path(_MODELS.name) / f"residual_{activations}_{per_channel}.onnx"
    onnx.save(quantize_qdq(residual_net(), activations=activations, per_channel=per_channel), path)
    return str(path), load(path)


@st.composite
def assignments(draw):
    config = draw(st.integers(0, len(CONFIGS) - 1))
    _, loaded = quantized(config)
    on_host = [not op.cim_capable or draw(st.booleans()) for op in loaded.workload.operators]
    return config, on_host


# c1 on the CIM writing a cut tensor, c2 and c3 on the host: once a float Conv on the AVX2 hosts (below)
_CONV_RELU_CUT = (2, [False, True, True, True, False, True, True, True, True, False])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(assignments())
@example(_CONV_RELU_CUT)
def test_random_assignments_split_bit_identical_and_copy_the_planned_bytes(case) -> None:
    config, on_host = case
    path, loaded = quantized(config)
    hardware = load_hardware("x86", crossbars=1000)
    costs = build_costs(loaded.workload, hardware, table_profile(loaded))
    result = fixed_assignment(problem_from_costs(loaded.workload, costs), on_host)
    built = build_artifacts(loaded.model, loaded.workload, result, hardware, model_path=path,
                            fingerprint=loaded.fingerprint)
    x = np.random.default_rng(config).standard_normal((1, 3, 8, 8)).astype(np.float32)
    reference = ort.InferenceSession(path, sess_options=session_options(), providers=["CPUExecutionProvider"])
    (expected,) = reference.run(["y"], {"x": x})
    with tempfile.TemporaryDirectory() as tmp:
        out = write_artifacts(Path(tmp) / "out", built)
        with Session(out) as session:
            got = session.run({"x": x})["y"]
            stats = session.transfer_stats
    assert got.tobytes() == expected.tobytes(), np.abs(got - expected).max()
    assert stats.bytes == stats.modeled_bytes == sum(t.bytes for t in built.plan.transfers)
    # Every crossing tensor but the float graph input and output is a quantized one (1 byte per element).
    for transfer in built.plan.transfers:
        if transfer.tensor not in ("x", "y"):
            assert transfer.tensor.endswith("_QuantizeLinear_Output"), transfer


def test_a_cut_after_conv_relu_keeps_the_whole_models_quantized_conv() -> None:
    """S8S8 per tensor, c1 -> r1 on the CIM, t1 read by c2, c3 and add on the host.  In cim_0 the cut
    Q(t1) ends the partition; alone it would write a graph output and nothing else, and onnxruntime
    would then drop the DQ(c1) -> Q(t1) pair of equal scales after removing the Relu, leaving c1 an int8
    output its uint8 input cannot fuse with: a float Conv where the whole model runs QLinearConv
    (0.043 off in y on an AVX2 host without VNNI).  The copy of t1's DQ in cim_0 keeps the pair: every
    partition together runs the whole model's convolution kernels, QLinearConv and float Conv alike."""
    config, on_host = _CONV_RELU_CUT
    path, loaded = quantized(config)
    hardware = load_hardware("x86", crossbars=1000)
    costs = build_costs(loaded.workload, hardware, table_profile(loaded))
    result = fixed_assignment(problem_from_costs(loaded.workload, costs), on_host)
    built = build_artifacts(loaded.model, loaded.workload, result, hardware, model_path=path, fingerprint=loaded.fingerprint)
    parts = sum((kernels(model) for model in built.split.partitions.values()), Counter())
    cim_0 = built.split.partitions["cim_0"]
    whole = kernels(path)
    assert {k: parts[k] for k in ("QLinearConv", "Conv")} == {k: whole[k] for k in ("QLinearConv", "Conv")}
    # cim_0 holds c1 and a DQ of t1 that nothing reads (no output of the partition)
    assert "c1" in [n.name for n in cim_0.graph.node]
    assert [n.name for n in cim_0.graph.node if n.input[0] == "t1_QuantizeLinear_Output"] == ["t1_DequantizeLinear"]
    assert [o.name for o in cim_0.graph.output] == ["t1_QuantizeLinear_Output"]


@pytest.mark.parametrize("config", [0, 3])
def test_exporter_clutter_stays_and_splits_bit_identical(config: int, tmp_path: Path) -> None:
    """The net with an Identity, a Dropout and a same-shape Reshape, quantized (the quantizer drops the first two):
    the front end keeps the Reshape, as onnxruntime does (it fuses the QDQ pairs around it), so the simplified
    model runs the model's kernels, and all on the host, all on the CIM and alternate operators split to the
    model's output bit for bit."""
    from cimsplit.models.quantize import quantize_qdq

    activations, per_channel = CONFIGS[config]
    path = tmp_path / "clutter.onnx"
    onnx.save(quantize_qdq(residual_net(clutter=True), activations=activations, per_channel=per_channel), path)
    loaded = load(path)
    assert [n.name for n in loaded.model.graph.node if n.op_type == "Reshape"] == ["reshape"]
    assert kernels(loaded.model) == kernels(path)
    hardware = load_hardware("x86", crossbars=1000)
    problem = problem_from_costs(loaded.workload, build_costs(loaded.workload, hardware, table_profile(loaded)))
    x = np.random.default_rng(config).standard_normal((1, 3, 8, 8)).astype(np.float32)
    reference = ort.InferenceSession(str(path), sess_options=session_options(), providers=["CPUExecutionProvider"])
    (expected,) = reference.run(["y"], {"x": x})
    capable = [op.cim_capable for op in loaded.workload.operators]
    for pattern in (lambda i: True, lambda i: False, lambda i: i % 2 == 0):
        on_host = [not c or pattern(i) for i, c in enumerate(capable)]
        built = build_artifacts(loaded.model, loaded.workload, fixed_assignment(problem, on_host), hardware,
                                model_path=str(path), fingerprint=loaded.fingerprint)
        with Session(write_artifacts(tmp_path / f"out_{sum(on_host)}", built)) as session:
            got = session.run({"x": x})["y"]
        assert got.tobytes() == expected.tobytes(), (on_host, np.abs(got - expected).max())
