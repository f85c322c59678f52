"""Tiny ONNX graphs for front-end tests, each with an ASCII drawing.

All weights are seeded random; every builder returns a checked ``ModelProto``.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def weights(seed: int = 0, **shapes: tuple[int, ...]) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(seed)
    return [numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), name) for name, s in shapes.items()]


def parse(text: str, inits: list[onnx.TensorProto] = (), value_info: list[onnx.ValueInfoProto] = (),
          check: bool = True) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    model.graph.initializer.extend(inits)
    model.graph.value_info.extend(value_info)
    if check:
        onnx.checker.check_model(model, full_check=True)
    return model


def save(model: onnx.ModelProto, folder: Path, name: str = "model.onnx") -> Path:
    path = Path(folder) / name
    onnx.save(model, str(path))
    return path


# x[1,3,8,8] -> Conv 3x3 pad 1 (4 out) -> Relu -> Flatten -> Gemm transB=1 (10 x 256) -> y[1,10]
def clean_cnn(batch: int = 1) -> onnx.ModelProto:
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        clean (float[{batch},3,8,8] x) => (float[{batch},10] y) {{
          c = Conv <pads = [1,1,1,1]> (x, w)
          r = Relu(c)
          f = Flatten <axis = 1> (r)
          y = Gemm <transB = 1> (f, fw, fb)
        }}""",
        weights(w=(4, 3, 3, 3), fw=(10, 256), fb=(10,)),
    )


# What PyTorch / ultralytics / Paddle exports look like for the same network:
#
#   x[N,3,8,8] -> Identity -> Conv(w from a Constant node) -> BatchNormalization -> Relu
#        r -> Shape -> Gather(0) -> Unsqueeze -> Concat(-1) --shape--> Reshape(r) -> Identity
#          -> Gemm transB=1 (weight from a Constant node) -> y[N,10]
def pytorch_style() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.5).astype(np.float32))
    fw = numpy_helper.from_array((rng.standard_normal((10, 256)) * 0.1).astype(np.float32))
    model = parse(
        f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        torch_like (float[N,3,8,8] x) => (float[N,10] y) {{
          xi = Identity(x)
          w = Constant <value = float[1] {{0}}> ()
          c = Conv <pads = [1,1,1,1], kernel_shape = [3,3]> (xi, w)
          bn = BatchNormalization <epsilon = 0.00001> (c, s, b, m, v)
          r = Relu(bn)
          sh = Shape(r)
          i0 = Constant <value = int64 {{0}}> ()
          g0 = Gather <axis = 0> (sh, i0)
          ax = Constant <value = int64[1] {{0}}> ()
          u = Unsqueeze(g0, ax)
          m1 = Constant <value = int64[1] {{-1}}> ()
          cat = Concat <axis = 0> (u, m1)
          f = Reshape(r, cat)
          fi = Identity(f)
          fw = Constant <value = float[1] {{0}}> ()
          y = Gemm <transB = 1> (fi, fw, fb)
        }}""",
        weights(2, s=(4,), b=(4,), m=(4,), fb=(10,)) + [numpy_helper.from_array(np.full(4, 1.5, np.float32), "v")],
        check=False,
    )
    for node in model.graph.node:  # Constant-node weights, as torch.onnx writes them
        if node.output[0] in ("w", "fw"):
            node.attribute[0].t.CopyFrom(w if node.output[0] == "w" else fw)
    onnx.checker.check_model(model, full_check=True)
    return model


# x[1,8,6,6] -> Conv 3x3 (8 out) -> Sigmoid --\
#                         \------------------ Mul (SiLU) -> Conv 1x1 depthwise group=8 -> y
def silu_net() -> onnx.ModelProto:
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        silu (float[1,8,6,6] x) => (float[1,8,4,4] y) {{
          c = Conv(x, w)
          s = Sigmoid(c)
          a = Mul(c, s)
          y = Conv <group = 8> (a, dw)
        }}""",
        weights(3, w=(8, 8, 3, 3), dw=(8, 1, 1, 1)),
    )


# x[1,3,8,8] -> Conv(w = graph input "w") -> y : the weight is an activation, not a constant
def conv_weight_input() -> onnx.ModelProto:
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        wi (float[1,3,8,8] x, float[4,3,3,3] w) => (float[1,4,6,6] y) {{
          y = Conv(x, w)
        }}"""
    )


# x -> Relu -> If(ReduceSum > 0) ; r -> Loop(3 times: v += r) ; If -> com.example.MyOp -> Conv 1x1 -> cy
def control_flow_and_custom() -> onnx.ModelProto:
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : {OPSET}, "com.example" : 1]>
        cf (float[1,4,8,8] x) => (float[1,4,8,8] y, float[3,1,4,8,8] scan_y, float[1,4,8,8] loop_v,
                                  float[1,4,8,8] cy, float[8,1,4] scan_out)
           <int64 trip = {{3}}, bool keep = {{1}}> {{
          r = Relu(x)
          s = ReduceSum <keepdims = 0> (r)
          zero = Constant <value = float {{0.0}}> ()
          c = Greater(s, zero)
          y = If (c) <then_branch = then_g () => (float[1,4,8,8] t) {{ t = Add(r, r) }},
                      else_branch = else_g () => (float[1,4,8,8] e) {{ e = Sub(r, r) }}>
          loop_v, scan_y = Loop (trip, keep, r) <body = body_g (int64 i, bool cin, float[1,4,8,8] v)
              => (bool cout, float[1,4,8,8] vout, float[1,4,8,8] sout) {{
                 cout = Identity(cin)
                 vout = Add(v, r)
                 sout = Identity(vout) }}>
          seq = Reshape(r, seq_shape)
          acc0 = Constant <value = float[1,4] {{0,0,0,0}}> ()
          acc, scan_out = Scan <num_scan_inputs = 1, body = scan_g (float[1,4] a, float[1,4] e)
              => (float[1,4] a2, float[1,4] o) {{
                 a2 = Add(a, e)
                 o = Identity(a2) }}> (acc0, seq)
          cu = com.example.MyOp <alpha = 1.0> (y)
          cy = Conv(cu, w)
        }}""",
        weights(4, w=(4, 4, 1, 1)) + [numpy_helper.from_array(np.array([8, 1, 4], np.int64), "seq_shape")],
        [helper.make_tensor_value_info("cu", TensorProto.FLOAT, [1, 4, 8, 8])],
    )


# x[1,4,6,6] uint8 -> QLinearConv(w int8 [6,4,3,3]) -> y[1,6,4,4] -> Reshape [1,6,16] -> QLinearMatMul(wm int8 [16,5]) -> z[1,6,5]
def qlinear_conv() -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.integers(-8, 8, (6, 4, 3, 3)).astype(np.int8), "w")
    wm = numpy_helper.from_array(rng.integers(-8, 8, (16, 5)).astype(np.int8), "wm")
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        qlinear (uint8[1,4,6,6] x) => (uint8[1,6,4,4] y, uint8[1,6,5] z) {{
          xs = Constant <value = float {{0.1}}> ()
          xz = Constant <value = uint8 {{128}}> ()
          ws = Constant <value = float {{0.05}}> ()
          wz = Constant <value = int8 {{0}}> ()
          y = QLinearConv (x, xs, xz, w, ws, wz, xs, xz)
          yr = Reshape(y, shape_r)
          z = QLinearMatMul (yr, xs, xz, wm, ws, wz, xs, xz)
        }}""",
        [w, wm, numpy_helper.from_array(np.array([1, 6, 16], np.int64), "shape_r")],
    )


# x[1,3,8,8] uint8 -> ConvInteger(w int8 [5,3,3,3]) -> int32[1,5,6,6]
# a[2,7,16] uint8 -> MatMulInteger(b int8 [16,12]) -> int32[2,7,12]
def integer_ops() -> onnx.ModelProto:
    rng = np.random.default_rng(6)
    w = numpy_helper.from_array(rng.integers(-8, 8, (5, 3, 3, 3)).astype(np.int8), "w")
    b = numpy_helper.from_array(rng.integers(-8, 8, (16, 12)).astype(np.int8), "b")
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        integer (uint8[1,3,8,8] x, uint8[2,7,16] a) => (int32[1,5,6,6] y, int32[2,7,12] z) {{
          y = ConvInteger(x, w)
          z = MatMulInteger(a, b)
        }}""",
        [w, b],
    )


def quantize_qdq(model: onnx.ModelProto, folder: Path, name: str = "int8.onnx", qoperator: bool = False,
                 per_channel: bool = True, extra_options: dict | None = None) -> Path:
    """Quantize ``model`` to int8 with onnxruntime (seeded calibration data).

    QDQ format by default; ``qoperator`` writes QLinearConv / com.microsoft QGemm instead;
    ``extra_options`` go to the quantizer after ``QDQKeepRemovableActivations``.
    """
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    src = save(model, folder, "float_for_quant.onnx")
    inputs = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in model.graph.input}

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.data = iter([{k: rng.standard_normal(s).astype(np.float32) for k, s in inputs.items()} for _ in range(4)])

        def get_next(self):  # noqa: ANN201
            return next(self.data, None)

    out = Path(folder) / name
    quantize_static(
        str(src), str(out), Reader(), quant_format=QuantFormat.QOperator if qoperator else QuantFormat.QDQ,
        activation_type=QuantType.QUInt8 if qoperator else QuantType.QInt8,
        weight_type=QuantType.QInt8, per_channel=per_channel,
        extra_options={"QDQKeepRemovableActivations": True, **(extra_options or {})},
    )
    return out


# Shaped like silero VAD: the network hides in the branches of an If on an input.
# x[1,2,8,8], sr int64 scalar -> Equal(sr, 16000) -> If
#   then (16 kHz): Conv 3x3 pad 1 (4) -> Relu -> Conv 1x1 (3) -> y[1,3,8,8]
#   else ( 8 kHz): Conv 1x1 (5) -> y[1,5,8,8]       (the branches' shapes differ: y's is unknown statically)
def silero_like() -> onnx.ModelProto:
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        vad (float[1,2,8,8] x, int64 sr) => (float[1,?,8,8] y) {{
          k = Constant <value = int64 {{16000}}> ()
          c = Equal(sr, k)
          y = If (c) <then_branch = hi () => (float[1,3,8,8] t) {{
                          h = Conv <pads = [1, 1, 1, 1]> (x, w16)
                          r = Relu(h)
                          t = Conv(r, w16b) }},
                      else_branch = lo () => (float[1,5,8,8] e) {{ e = Conv(x, w8) }}>
        }}""",
        weights(7, w16=(4, 2, 3, 3), w16b=(3, 4, 1, 1), w8=(5, 2, 1, 1)),
    )


# x[1,3,8,8] -> conv1: Conv 3x3 pad 1 (4) -> op: DOMAIN:OP (declared [1,4,8,8] outputs a, b) -> sub: Sub(b, a)
#   -> conv2: Conv 3x3 pad 1 (4) -> y[1,4,8,8]
# With ai.onnx.contrib:NegPos (onnxruntime-extensions) a = min(c1, 0), b = max(c1, 0), so sub = |c1|.
def custom_op_chain(domain: str = "com.example", op: str = "MyOp") -> onnx.ModelProto:
    w = weights(8, w1=(4, 3, 3, 3), w2=(4, 4, 3, 3))
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node(op, ["c1"], ["a", "b"], name="op", domain=domain),
        helper.make_node("Sub", ["b", "a"], ["s"], name="sub"),
        helper.make_node("Conv", ["s", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], initializer=w,
        value_info=[helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 8, 8]) for n in ("a", "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(domain, 1)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def qdq_fork(activations: type = np.uint8) -> onnx.ModelProto:
    """A QDQ chain whose quantized tensor qa feeds a host and a CIM consumer (uint8 activations,
    or int8 with ``activations=np.int8``):

        x[1,16] -> q_x -> dq_x -> a: MatMul(dq_w1) -> q_a -> qa
        qa -> dq_a -> da ;  da -> b: Relu -> q_b -> dq_b -> y1      [host]
                            da -> c: MatMul(dq_w2) -> q_c -> dq_c -> y2   [cim]

    As the workload builder groups them, q_x/dq_x join a and q_a/dq_a join a
    (operator a on the CIM), q_b/dq_b join b, q_c/dq_c join c.
    """
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(128 if activations == np.uint8 else 0, activations), "z"),
        numpy_helper.from_array(np.array(0.01, np.float32), "sw"),
        numpy_helper.from_array(np.array(0, np.int8), "zw"),
    ]
    for w in ("w1", "w2"):
        inits.append(numpy_helper.from_array(rng.integers(-127, 128, (16, 16)).astype(np.int8), w))
    q = "QuantizeLinear"
    dq = "DequantizeLinear"
    nodes = [
        helper.make_node(dq, ["w1", "sw", "zw"], ["fw1"], name="dq_w1"),
        helper.make_node(dq, ["w2", "sw", "zw"], ["fw2"], name="dq_w2"),
        helper.make_node(q, ["x", "s", "z"], ["qx"], name="q_x"),
        helper.make_node(dq, ["qx", "s", "z"], ["dx"], name="dq_x"),
        helper.make_node("MatMul", ["dx", "fw1"], ["ta"], name="a"),
        helper.make_node(q, ["ta", "s", "z"], ["qa"], name="q_a"),
        helper.make_node(dq, ["qa", "s", "z"], ["da"], name="dq_a"),
        helper.make_node("Relu", ["da"], ["tb"], name="b"),
        helper.make_node(q, ["tb", "s", "z"], ["qb"], name="q_b"),
        helper.make_node(dq, ["qb", "s", "z"], ["y1"], name="dq_b"),
        helper.make_node("MatMul", ["da", "fw2"], ["tc"], name="c"),
        helper.make_node(q, ["tc", "s", "z"], ["qc"], name="q_c"),
        helper.make_node(dq, ["qc", "s", "z"], ["y2"], name="dq_c"),
    ]
    graph = helper.make_graph(
        nodes, "qdq_fork", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 16]) for y in ("y1", "y2")], initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def qdq_dedicated() -> onnx.ModelProto:
    """int8 QDQ with a dedicated pair per reader, as onnxruntime's quantizer writes with ``DedicatedQDQPair``:

        x[1,16] -> q_x -> dq_x -> a: MatMul(dq_w1) -> ta
        ta -> q_a1 -> dq_a1 -> b: MatMul(dq_w2) -> q_b -> dq_b -> y1
        ta -> q_a2 -> dq_a2 -> c: MatMul(dq_w3) -> q_c -> dq_c -> y2

    q_a1 and q_a2 are equal (input ta, scale s, zero point z).
    """
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(np.array(0.01, np.float32), "sw"), numpy_helper.from_array(np.array(0, np.int8), "zw")]
    inits += [numpy_helper.from_array(rng.integers(-127, 128, (16, 16)).astype(np.int8), w) for w in ("w1", "w2", "w3")]
    q, dq, make = "QuantizeLinear", "DequantizeLinear", helper.make_node
    nodes = [make(dq, [w, "sw", "zw"], [f"f{w}"], name=f"dq_{w}") for w in ("w1", "w2", "w3")]
    nodes += [make(q, ["x", "s", "z"], ["qx"], name="q_x"), make(dq, ["qx", "s", "z"], ["dx"], name="dq_x"),
              make("MatMul", ["dx", "fw1"], ["ta"], name="a")]
    for k, (node, w, y) in enumerate((("b", "fw2", "y1"), ("c", "fw3", "y2")), start=1):
        nodes += [make(q, ["ta", "s", "z"], [f"qa{k}"], name=f"q_a{k}"), make(dq, [f"qa{k}", "s", "z"], [f"da{k}"], name=f"dq_a{k}"),
                  make("MatMul", [f"da{k}", w], [f"t{node}"], name=node),
                  make(q, [f"t{node}", "s", "z"], [f"q{node}"], name=f"q_{node}"), make(dq, [f"q{node}", "s", "z"], [y], name=f"dq_{node}")]
    graph = helper.make_graph(nodes, "qdq_dedicated", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 16]) for y in ("y1", "y2")], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)

# x[1,3,8,8] -> conv: Conv 3->8 3x3 pad 1 -> relu -> flatten -> fc: Gemm transB=1 (12 x 512) -> y[1,12]
# (node names fixed; on 4x4 crossbars both conv and fc have a KS split at 4 channels, conv OFM splits)
def sliceable_cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w", (8, 3, 3, 3)), ("b", (8,)), ("fw", (12, 512)), ("fb", (12,)))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "sliceable", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def optimized(model: onnx.ModelProto | Path | str, basic_only: bool = False) -> onnx.ModelProto:
    """onnxruntime's optimized graph of ``model`` with the runtime's options (``basic_only``: after its level-1
    rewrites only, before any fusion)."""
    import onnxruntime as ort

    from cimsplit.runtime.devices import session_options

    payload = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    with tempfile.TemporaryDirectory() as tmp:
        options = session_options()
        if basic_only:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(payload, sess_options=options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath)


def kernels(model: onnx.ModelProto | Path | str) -> Counter[str]:
    """How many nodes of each type onnxruntime runs for ``model`` (its optimized graph, the runtime's options)."""
    return Counter(n.op_type for n in optimized(model).graph.node)
