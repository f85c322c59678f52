"""The slicing rewrite: a sliced Conv/Gemm/MatMul runs as two parts and a Concat, and the split
model's outputs equal the original's (float within the runtime's tolerance, int8 QDQ bit for bit).

Graphs (crossbars of 4x4 cells, so that 8+ output channels split at crossbar-row boundaries):

    x[1,C,H,W] -> conv (k, stride, dilation, pads; optional Relu) -> y          (random, hypothesis)
    x[1,3,8,8] -> conv 3->8 3x3 pad 1 -> relu -> flatten -> fc: Gemm 512->12 -> y    (KS on both)
    x[2,16]    -> MatMul 16x12 -> y                                                   (KS on a MatMul)
    x[2,3,16]  -> MatMul 16x12 -> Add b[12] -> y;  x[1,3,8,8] -> Conv 3->8 -> Add b[1,8,1,1] -> y
                                                             (a fused bias Add: its constant is sliced too)
"""

from __future__ import annotations

import functools
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from _profiles import table_profile
from graphs import kernels
from graphs import quantize_qdq as quantize_static_qdq
from graphs import sliceable_cnn as cnn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.costs import build_costs
from cimsplit.compiler.frontend import load
from cimsplit.compiler.hardware import load_hardware
from cimsplit.compiler.slicing import slice_costs
from cimsplit.passes.emit.artifacts import write_artifacts
from cimsplit.passes.emit.report import result_to_json
from cimsplit.passes.pipeline import build_artifacts
from cimsplit.passes.placement.driver import problem_from_costs
from cimsplit.passes.placement.result import PlacementResult, SolverStats
from cimsplit.passes.placement.slicing import WHOLE
from cimsplit.passes.placement.validate import validate
from cimsplit.passes.rewrite.slicing import KEY_SLICING
from cimsplit.runtime import Session
from cimsplit.runtime.devices import session_options

XBAR = 4


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def conv_net(c_in: int, c_out: int, h: int, k: int, stride: int, dilation: int, pads: list[int], relu: bool,
             seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((c_out, c_in, k, k)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(c_out) * 0.1).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], name="conv", pads=pads,
                              strides=[stride, stride], dilations=[dilation, dilation])]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"], name="relu"))
    h_out = (h + pads[0] + pads[2] - dilation * (k - 1) - 1) // stride + 1
    w_out = (h + pads[1] + pads[3] - dilation * (k - 1) - 1) // stride + 1
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, h, h])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, h_out, w_out])], [w, b])


def matmul_net() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(2).standard_normal((16, 12)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])], [w])


def biased_nets() -> list[onnx.ModelProto]:
    """A PyTorch Linear on a 3-D input (MatMul -> Add of the bias) and a Conv whose bias is an Add of [1,C,1,1]."""
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((16, 12)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(12).astype(np.float32), "b")
    linear = _model([helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                     helper.make_node("Add", ["m", "b"], ["y"], name="bias")],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 12])], [w, b])
    wc = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "wc")
    bc = numpy_helper.from_array(rng.standard_normal((1, 8, 1, 1)).astype(np.float32), "bc")
    conv = _model([helper.make_node("Conv", ["x", "wc"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                   helper.make_node("Add", ["c", "bc"], ["y"], name="bias")],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [wc, bc])
    return [linear, conv]


@functools.cache
def _quantized(model_bytes: bytes, per_channel: bool, reduce_range: bool = False) -> bytes:
    from cimsplit.models.quantize import quantize_qdq

    return quantize_qdq(onnx.load_from_string(model_bytes), per_channel=per_channel,
                        reduce_range=reduce_range).SerializeToString()


def split_run(model: onnx.ModelProto, choose, cim_devices: dict[str, bool] | None = None, *, must_slice: bool = True):
    """Compile ``model`` with the slicing ``choose(options)`` picks per operator (an index or None),
    run the split model and the original on the same input; (got, expected, artifacts).  None when
    ``choose`` picks nothing and not ``must_slice``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.onnx"
        onnx.save(model, path)
        loaded = load(path, crossbar_size=(XBAR, XBAR))
        hardware = load_hardware("x86", crossbars=1000, crossbar_rows=XBAR, crossbar_cols=XBAR)
        costs = build_costs(loaded.workload, hardware, table_profile(loaded))
        problem = problem_from_costs(loaded.workload, costs, slice_costs(loaded.model, loaded.workload, costs))
        slicing = [WHOLE] * problem.n
        on_host = [True] * problem.n
        for v in range(problem.n):
            pick = choose(problem.names[v], problem.slicings[v]) if problem.slicings else None
            if pick is not None:
                slicing[v] = pick
            elif cim_devices and problem.names[v] in cim_devices:
                on_host[v] = not cim_devices[problem.names[v]]
        if not must_slice and all(k == WHOLE for k in slicing):
            return None
        assert any(k != WHOLE for k in slicing), "nothing to slice"
        schedule = validate(problem, on_host, slicing=slicing)
        stats = SolverStats("fixed", "optimal", schedule.makespan_ns, schedule.makespan_ns, 0.0, 0.0, problem.n, 0, 0)
        result = PlacementResult(problem, schedule, stats)
        built = build_artifacts(loaded.model, loaded.workload, result, hardware, model_path=str(path),
                                fingerprint=loaded.fingerprint, report=result_to_json(result, loaded.workload, costs))
        (name, shape), = ((i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in model.graph.input)
        x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
        reference = ort.InferenceSession(str(path), sess_options=session_options(), providers=["CPUExecutionProvider"])
        (expected,) = reference.run(None, {name: x})
        out = write_artifacts(Path(tmp) / "out", built)
        with Session(out) as session:
            got = session.run({name: x})[model.graph.output[0].name]
            stats = session.transfer_stats
        assert stats.bytes == stats.modeled_bytes == sum(t.bytes for t in built.plan.transfers)
        replay_ok = built.plan.timeline.makespan_ns == schedule.makespan_ns
        assert replay_ok
        return got, expected, built


def _kind(kind: str, which: int = 0):
    def choose(name, options):
        matching = [k for k, o in enumerate(options) if o.kind == kind]
        return matching[min(which, len(matching) - 1)] if matching else None
    return choose


def test_ks_on_conv_and_gemm_structure_and_numbers():
    got, expected, built = split_run(cnn(), _kind("ks"))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    nodes = {n.name: n for n in built.annotated.graph.node}
    # conv: 8 output channels on 4x4 crossbars -> KS at 4; fc: 12 outputs -> KS at 4 (first of 4, 8)
    assert {"conv/cim", "conv/host", "conv/join", "relu/cim", "relu/host", "fc/cim", "fc/host", "fc/join"} <= set(nodes)
    props = {p.key: p.value for p in nodes["conv/cim"].metadata_props}
    assert props[KEY_SLICING] == "ks:4" and props["cimsplit.device"] == "cim"
    assert {p.key: p.value for p in nodes["conv/join"].metadata_props}["cimsplit.device"] == "host"
    weights = {t.name: t.dims for t in built.annotated.graph.initializer}
    assert weights[nodes["conv/cim"].input[1]] == [4, 3, 3, 3] and weights[nodes["conv/host"].input[1]] == [4, 3, 3, 3]
    assert weights[nodes["fc/cim"].input[1]] == [4, 512] and weights[nodes["fc/host"].input[1]] == [8, 512]
    entries = {op["name"]: op for op in built.plan.report["operators"]}
    assert entries["conv"]["slicing"]["kind"] == "ks" and entries["conv"]["slicing"]["split"] == 4
    assert entries["conv"]["device"] == "cim+host" and built.plan.report["operators_sliced"] == 2
    assert {op.name for op in built.plan.timeline.operators} >= {"conv/cim", "conv/host", "conv/join"}


def test_ks_on_a_matmul():
    got, expected, _ = split_run(matmul_net(), _kind("ks", 1))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_ks_slices_the_constant_of_a_fused_bias_add(tmp_path):
    # int8: onnxruntime's quantize_static as a user calls it (no pre-processing, which would fuse the Linear
    # into a Gemm): the bias is an int8 initializer behind a DequantizeLinear.
    for k, net in enumerate(biased_nets()):
        for int8 in (False, True):
            # Weights per tensor: a MatMul's per-channel weight is not offered KS (next test).
            model = onnx.load(quantize_static_qdq(net, tmp_path, f"q{k}.onnx", per_channel=False)) if int8 else net
            got, expected, built = split_run(model, _kind("ks"))
            if int8:
                assert got.tobytes() == expected.tobytes(), np.abs(got - expected).max()
            else:
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
            cim = {n.op_type: n for n in built.annotated.graph.node if n.name.endswith("/cim")}
            shapes = {t.name: list(t.dims) for t in built.annotated.graph.initializer}
            # The float Conv's Add becomes the Conv's own bias in the front end (onnxslim folds it).
            added = cim["Add"].input[1] if "Add" in cim else cim["Conv"].input[2]
            dq = next((n for n in built.annotated.graph.node if added in n.output), None)
            # 12 (8) output channels on 4x4 crossbars, KS at 4: the CIM part adds the first 4 bias values
            cim_bias = shapes[dq.input[0] if dq is not None else added]
            assert cim_bias == ([4] if k == 0 or "Add" not in cim else [1, 4, 1, 1])


def test_ks_parts_of_int8_gemms_read_and_write_the_uint8_pairs_onnxruntime_makes_whole(tmp_path):
    # Host op -> Q -> DQ -> GEMM -> Q -> DQ -> host op: both pairs join the operators before them, and both KS
    # parts read the input pair's DQ; the output pair becomes the parts' Qs -> the join's Concat -> the DQ.
    # onnxruntime (x86) runs the whole model's pairs as uint8 and the GEMM as QLinearMatMul / QGemm; a part
    # reading int8 alone, or uint8 in and int8 out, runs DQ + a float GEMM, off by a quantization step (ViT-Tiny
    # S8S8 per tensor: 0.25; pre-processed, per channel: 0.175).
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((16, 12)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(12).astype(np.float32), "b")
    matmul = _model([helper.make_node("Sigmoid", ["x"], ["s"], name="sig"), helper.make_node("MatMul", ["s", "w"], ["y"], name="mm")],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 12])], [w])
    gemm = _model([helper.make_node("Sigmoid", ["x"], ["s"], name="sig"), helper.make_node("Gemm", ["s", "w", "b"], ["g"], name="fc"),
                   helper.make_node("Sigmoid", ["g"], ["y"], name="out")],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 16])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 12])], [w, b])
    for net, per_channel in ((matmul, False), (gemm, True)):
        model = onnx.load(quantize_static_qdq(net, tmp_path, f"{net.graph.node[1].op_type}.onnx", per_channel=per_channel))
        got, expected, built = split_run(model, _kind("ks"))
        assert got.tobytes() == expected.tobytes(), np.abs(got - expected).max()
        cim = next(p for name, p in built.split.partitions.items() if name.startswith("cim"))
        assert [i.type.tensor_type.elem_type for i in cim.graph.input] == [TensorProto.UINT8]
        if net is gemm:
            assert [o.type.tensor_type.elem_type for o in cim.graph.output] == [TensorProto.UINT8]


def test_ks_parts_of_a_weight_only_int8_matmul_run_matmulnbits_in_one_graph_too():
    # x (float) -> MatMul(DQ(W int8, per tensor)): onnxruntime folds DQ -> MatMul into MatMulNBits, but only
    # when the scale has one reader, and it merges equal one-value initializers first (ConstantSharing).  The
    # two parts' DQs sharing the scale ran float MatMuls in partitioned.onnx (ViT-Tiny with int16 activations:
    # 14 of them, 0.0436 off the model); each part now reads a per-column scale of its own width.
    rng = np.random.default_rng(6)
    weights = [numpy_helper.from_array(rng.integers(-100, 100, (64, 12)).astype(np.int8), "w_q"),
               numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
               numpy_helper.from_array(np.array(0, np.int8), "w_zero")]
    net = _model([helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], name="dq"),
                  helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])], weights)
    got, expected, built = split_run(net, _kind("ks"))
    assert got.tobytes() == expected.tobytes()
    assert kernels(net)["MatMulNBits"] == 1
    ran = kernels(built.split.partitioned)
    assert (ran["MatMulNBits"], ran["MatMul"]) == (2, 0)
    inits = {t.name: list(t.dims) for t in built.annotated.graph.initializer}
    dqs = [n for n in built.annotated.graph.node if n.op_type == "DequantizeLinear"]
    # 12 output columns on 4x4 crossbars, KS at 4: scales of 4 and 8 values along the weight's axis 1
    assert sorted((inits[n.input[1]], inits[n.input[2]], helper.get_attribute_value(n.attribute[0])) for n in dqs) == [
        ([4], [4], 1), ([8], [8], 1)]
    x = np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)
    whole = ort.InferenceSession(net.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    top = ort.InferenceSession(built.split.partitioned.SerializeToString(), providers=["CPUExecutionProvider"])
    assert top.run(None, {"x": x})[0].tobytes() == whole.tobytes()


def test_slices_of_a_model_with_com_microsoft_quantizers_keep_their_shapes_and_domain(tmp_path):
    # onnxruntime's quantizer with UseQDQContribOps writes com.microsoft Q/DQ, whose outputs onnx's shape
    # inference does not know: the front end measures them, and the sliced model measures them again (it
    # lost them and the split refused a crossing tensor with no value_info).
    model = onnx.load(quantize_static_qdq(cnn(), tmp_path, "contrib.onnx", extra_options={"UseQDQContribOps": True}))
    assert {n.domain for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")} == {"com.microsoft"}
    for kind in ("ks", "ofm"):
        got, expected, built = split_run(model, _kind(kind))
        assert got.tobytes() == expected.tobytes(), np.abs(got - expected).max()
        copies = {n.domain for n in built.annotated.graph.node if n.op_type == "DequantizeLinear" and "/" in n.name}
        assert copies == {"com.microsoft"}


def test_no_ks_for_a_matmul_whose_weight_is_dequantized_per_channel(tmp_path):
    # onnxruntime runs it as a float GEMM on a weight made at run time, whose parts MLAS sums in another
    # order than the whole: KS would break the int8 bit-identity.  Per tensor it runs as QLinearMatMul
    # (KS offered); per-channel Conv and Gemm run as QLinearConv and QGemm (KS offered).
    from cimsplit.compiler.slicing import anatomy

    linear, conv = biased_nets()
    for net, per_channel, expected in ((linear, True, [None]), (linear, False, [1]), (conv, True, [0]), (cnn(), True, [0, 0])):
        loaded = load(quantize_static_qdq(net, tmp_path, f"{len(net.graph.node)}{per_channel}.onnx", per_channel=per_channel),
                      crossbar_size=(XBAR, XBAR))
        ops = [op for op in loaded.workload.operators if op.cim_capable]
        assert [anatomy(loaded.model, op).ks_axis for op in ops] == expected


def test_ofm_on_the_first_conv_slices_the_input_rows_with_the_halo():
    got, expected, built = split_run(cnn(), lambda name, options: _kind("ofm", 1)(name, options) if name == "conv" else None)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    nodes = {n.name: n for n in built.annotated.graph.node}
    # 8 output rows, 3x3, pad 1, split at 4: the CIM part reads rows 0..5 (pads 1/0), the host part 3..8 (0/1)
    assert [a.ints for a in nodes["conv/cim"].attribute if a.name == "pads"] == [[1, 1, 0, 1]]
    assert [a.ints for a in nodes["conv/host"].attribute if a.name == "pads"] == [[0, 1, 1, 1]]
    inits = {t.name: numpy_helper.to_array(t) for t in built.annotated.graph.initializer}
    cim_slice = nodes["conv/slice_cim"]
    assert (inits[cim_slice.input[1]][0], inits[cim_slice.input[2]][0]) == (0, 5)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c_in=st.integers(1, 5), c_out=st.integers(5, 12), h=st.integers(5, 12), k=st.sampled_from([1, 2, 3, 5]),
       stride=st.integers(1, 3), dilation=st.integers(1, 2), pads=st.lists(st.integers(0, 2), min_size=4, max_size=4),
       relu=st.booleans(), kind=st.sampled_from(["ks", "ofm"]), which=st.integers(0, 2), int8=st.booleans())
def test_random_convs_split_run_equal_to_the_original(c_in, c_out, h, k, stride, dilation, pads, relu, kind, which, int8):
    extent = dilation * (k - 1) + 1
    if h + pads[0] + pads[2] < extent or h + pads[1] + pads[3] < extent:
        return
    model = conv_net(c_in, c_out, h, k, stride, dilation, pads, relu)
    if int8:
        # 7-bit weights: on an x86 host without VNNI a full-range U8S8 kernel saturates, and whole and sliced
        # (5 output channels against 4 + 1 here) saturated differently: c_in 1, c_out 5, 2x2, KS, 0.16 off.
        model = onnx.load_from_string(_quantized(model.SerializeToString(), per_channel=which % 2 == 0, reduce_range=True))
    h_out = (h + pads[0] + pads[2] - extent) // stride + 1
    if (kind == "ofm" and h_out < 2) or (kind == "ks" and c_out <= XBAR):
        return
    ran = split_run(model, _kind(kind, which), must_slice=False)
    if ran is None:  # no part reads a real row (h 5, top pad 1, 1x1, stride 3: output row 0 is all padding)
        return
    got, expected, _ = ran
    if int8:
        assert got.tobytes() == expected.tobytes(), np.abs(got - expected).max()
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_int8_qdq_ks_and_ofm_are_bit_identical():
    for per_channel in (True, False):
        model = onnx.load_from_string(_quantized(cnn().SerializeToString(), per_channel))
        for choose in (_kind("ks"), _kind("ofm", 2)):
            got, expected, built = split_run(model, choose)
            assert got.tobytes() == expected.tobytes(), np.abs(got - expected).max()
    # Both row parts read the whole weight: each dequantizes it on its own device, so only activations
    # cross (the weight and bias crossed as float once, and the CIM part ran a float Conv).  ofm at 6 of
    # 8 output rows: the CIM part reads input rows 0..6 (float32, 3 x 7 x 8 x 4 bytes = 672) and sends
    # back 8 channels x 6 rows x 8 (int8: 384 bytes).
    assert [(t.tensor, t.src_device, t.bytes) for t in built.plan.transfers] == [
        ("x__conv_rows_cim", "host", 672), ("r_QuantizeLinear_Output__cim", "cim", 384)]


def test_two_row_sliced_convs_of_one_tensor_each_slice_it_under_their_own_names():
    """x -> relu -> r;  r -> a: Conv 3x3 and r -> b: Conv 1x1;  y = a + b.  Both split by rows slice r (or,
    quantized, its int8 tensor, each with its own DQ of the band).  Both once named their band r__rows_cim:
    here shape inference failed (a's band has a halo row, b's not), in a fuzz model the split was not SSA."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("wa", (4, 3, 3, 3)), ("wb", (4, 3, 1, 1)))]
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "wa"], ["a"], name="a", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["r", "wb"], ["b"], name="b"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    got, expected, built = split_run(model, _kind("ofm", 1))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    slices = [n for n in built.annotated.graph.node if n.op_type == "Slice"]
    assert sorted(n.input[0] for n in slices) == ["r"] * 4
    quantized = onnx.load_from_string(_quantized(model.SerializeToString(), per_channel=True))
    got, expected, built = split_run(quantized, _kind("ofm", 1))
    assert got.tobytes() == expected.tobytes(), np.abs(got - expected).max()
    assert built.plan.report["operators_sliced"] == 2


def test_row_bands_of_an_int8_tensor_are_converted_with_their_pair():
    """x -> conv0 -> relu0 -> Q(r0) -> DQ -> conv (rows split) -> relu -> fc, S8S8.  Whole, onnxruntime turns the
    r0 pair uint8 and runs QLinearConv.  Split, Q(r0) feeds a Slice per part and each part its own DQ: no
    pair onnxruntime sees, so unless the split converts Q, bands and DQs the parts run float Convs (1.37 off
    on an AVX2 host without VNNI in a fuzz model).  The parts run QLinearConv: one more than whole."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w0", (8, 3, 3, 3)), ("w", (8, 8, 3, 3)), ("b", (8,)), ("fw", (12, 512)), ("fb", (12,)))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("Conv", ["r0", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc", transB=1)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])], inits)
    quantized = onnx.load_from_string(_quantized(model.SerializeToString(), per_channel=True))
    rows = _kind("ofm", 2)
    got, expected, built = split_run(quantized, lambda name, options: rows(name, options) if name == "conv" else None)
    assert got.tobytes() == expected.tobytes(), np.abs(got - expected).max()
    parts = sum((kernels(m) for m in built.split.partitions.values()), Counter())
    whole = kernels(quantized)
    assert (parts["QLinearConv"], parts["Conv"]) == (whole["QLinearConv"] + 1, whole["Conv"]) == (3, 0)


def test_ofm_offers_no_part_that_reads_only_padding_rows():
    """h 5, 1x1, stride 2, top pad 2: output rows 0..3 read input rows -2, 0, 2, 4.  Of the splits at 1, 2, 3
    (a quarter, half, three quarters of 4 rows), 1 leaves the CIM part output row 0 alone, all padding (no input
    row for a Conv to read): it is not offered.  2 and 3 are, and split 2 (CIM: input row 0 with top pad 2)
    runs equal to the original."""
    model = conv_net(1, 5, 5, 1, 2, 1, [2, 0, 0, 0], False)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.onnx"
        onnx.save(model, path)
        loaded = load(path, crossbar_size=(XBAR, XBAR))
        costs = build_costs(loaded.workload, load_hardware("x86", crossbars=1000, crossbar_rows=XBAR, crossbar_cols=XBAR),
                            table_profile(loaded))
        offered = [c.split for c in slice_costs(loaded.model, loaded.workload, costs) if c.kind == "ofm"]
    assert offered == [2, 3]
    got, expected, built = split_run(model, _kind("ofm", 0))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    pads = {n.name: [a.ints for a in n.attribute if a.name == "pads"][0] for n in built.annotated.graph.node
            if n.name in ("conv/cim", "conv/host")}
    assert pads == {"conv/cim": [2, 0, 0, 0], "conv/host": [0, 0, 0, 0]}
