"""The workload DAG of tiny graphs: fusion, edges, element counts, capability and its reasons."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from graphs import (
    OPSET,
    clean_cnn,
    control_flow_and_custom,
    conv_weight_input,
    integer_ops,
    parse,
    qlinear_conv,
    quantize_qdq,
    save,
    silu_net,
    weights,
)

from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_model import operator_features
from cimsplit.compiler.workload import Workload


def gemm_view(workload: Workload) -> list[tuple]:
    """What must not depend on the export: op kinds, GEMM shapes, element counts."""
    return [(op.cim_capable, op.m, op.n, op.n_mvm, op.crossbars, op.n_in, op.n_out) for op in workload.operators]


def test_clean_cnn_numbers(tmp_path: Path) -> None:
    w = load(save(clean_cnn(), tmp_path)).workload
    conv, flatten, gemm = w.operators
    assert conv.op_type == "Conv" and len(conv.nodes) == 2  # Conv + fused Relu
    assert [n.split("_")[0] for n in conv.nodes] == ["Conv", "Relu"]
    # Conv 3->4, 3x3, pad 1 on 8x8: M = 4, N = 3*3*3 = 27, N_mvm = 8*8 = 64
    assert (conv.m, conv.n, conv.n_mvm, conv.crossbars) == (4, 27, 64, 1)
    assert (conv.n_in, conv.n_out) == (1 * 3 * 8 * 8, 1 * 4 * 8 * 8)  # 192, 256 (the Relu's output)
    assert conv.graph_input_elements == 192 and conv.graph_output_elements == 0
    assert not flatten.cim_capable and flatten.m is None
    # Gemm transB=1, weight (10, 256): M = 10, N = 256, N_mvm = 1
    assert (gemm.m, gemm.n, gemm.n_mvm, gemm.crossbars) == (10, 256, 1, 1)
    assert gemm.graph_output_elements == 10
    assert [(e.src, e.dst, e.elements) for e in w.edges] == [
        (conv.name, flatten.name, 256), (flatten.name, gemm.name, 256)]
    assert w.inputs == {"x": (1, 3, 8, 8)} and w.outputs == {"y": (1, 10)}
    assert w.total_crossbars == 2


def test_silu_pair_is_fused_into_the_conv(tmp_path: Path) -> None:
    w = load(save(silu_net(), tmp_path)).workload
    conv, dw = w.operators
    assert [n.split("_")[0] for n in conv.nodes] == ["Conv", "Sigmoid", "Mul"]
    # Conv 8->8 3x3 on 6x6 (no pad): out 4x4; M = 8, N = 8*9 = 72, N_mvm = 16
    assert (conv.m, conv.n, conv.n_mvm) == (8, 72, 16)
    assert conv.n_out == 8 * 4 * 4  # the Mul's output
    # depthwise 1x1, group 8: N = 1, N_mvm = 4*4*8 = 128, crossbars = ceil(8/256) = 1
    assert (dw.m, dw.n, dw.n_mvm, dw.crossbars) == (8, 1, 128, 1)
    assert [(e.src, e.dst, e.elements) for e in w.edges] == [(conv.name, dw.name, 128)]


# x[2,8,64] -> MatMul(W 64x128) -> Add(b) -> Relu -> MatMul(W2 128x64) -> Add(x) -> y
# (PyTorch's Linear on a 3-D input: the bias is an Add of a constant after the MatMul)
def test_linear_bias_add_and_activation_fuse_into_the_matmul(tmp_path: Path) -> None:
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 8, 64] x) => (float[2, 8, 64] y) {
            h = MatMul(x, W)
            hb = Add(h, b)
            r = Relu(hb)
            h2 = MatMul(r, W2)
            y = Add(h2, x)
        }
        """,
        weights(W=(64, 128), b=(128,), W2=(128, 64)),
    )
    w = load(save(model, tmp_path)).workload
    fc1, fc2, residual = w.operators
    assert [n.split("_")[0] for n in fc1.nodes] == ["MatMul", "Add", "Relu"]
    # M = 128 outputs, N = 64 inputs, one MVM per row of the 2x8 activation: N_mvm = 16
    assert (fc1.m, fc1.n, fc1.n_mvm, fc1.crossbars) == (128, 64, 16, 1)
    assert fc1.n_out == 2 * 8 * 128  # the Relu's output
    assert (fc2.m, fc2.n, fc2.n_mvm, fc2.nodes) == (64, 128, 16, (fc2.name,))
    # the residual Add reads two activations: it is no bias and stays a host operator
    assert residual.op_type == "Add" and not residual.cim_capable


# Attention's products: q[2,5,4] x Transpose(k)[2,4,3] -> s[2,5,3]; a weight product beside it
def test_a_product_of_two_activations_has_its_gemm_shape_but_no_crossbars(tmp_path: Path) -> None:
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 5, 4] q, float[2, 3, 4] k) => (float[2, 5, 3] s, float[2, 5, 6] p) {
            kt = Transpose <perm = [0, 2, 1]> (k)
            s = MatMul(q, kt)
            p = MatMul(q, W)
        }
        """,
        weights(W=(4, 6)),
    )
    w = load(save(model, tmp_path)).workload
    ops = {op.op_type + ("-weights" if op.cim_capable else ""): op for op in w.operators}
    product, weighted = ops["MatMul"], ops["MatMul-weights"]
    # rows = 2 x 5 (the batch of heads times the rows), K = 4, columns = 3
    assert product.product_shape == (10, 4, 3) and (product.m, product.crossbars) == (None, None)
    assert weighted.product_shape is None and (weighted.m, weighted.n, weighted.n_mvm) == (6, 4, 10)
    assert operator_features(product) == {"n_in": 2 * 5 * 4 + 2 * 4 * 3, "n_out": 2 * 5 * 3, "m": 3, "n": 4, "n_mvm": 10, "k": 1}


# ConvTranspose as onnxruntime's CPU kernel runs it: per group a (C_out/g kH kW) x (C_in/g) weight by the input's
# pixels, then col2im.  One group: x[1,4,5,5], w[4,3,2,2]; two: x[1,4,5,5], w[4,3,3,3] (C_out 6)
def test_a_transposed_conv_has_the_gemm_shape_its_host_kernel_runs_but_no_crossbars(tmp_path: Path) -> None:
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 4, 5, 5] x) => (float[1, 3, 10, 10] u, float[1, 6, 9, 9] v) {
            u = ConvTranspose <kernel_shape = [2, 2], strides = [2, 2]> (x, W1)
            v = ConvTranspose <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1], group = 2> (x, W2)
        }
        """,
        weights(W1=(4, 3, 2, 2), W2=(4, 3, 3, 3)),
    )
    one, two = load(save(model, tmp_path)).workload.operators
    # rows = 5 x 5 pixels (times the groups), K = C_in / g, columns = C_out / g x kH x kW
    assert one.product_shape == (25, 4, 3 * 2 * 2) and (one.m, one.crossbars, one.cim_capable) == (None, None, False)
    assert two.product_shape == (50, 2, 3 * 3 * 3)
    assert operator_features(two) == {"n_in": 100, "n_out": 6 * 9 * 9, "m": 27, "n": 2, "n_mvm": 50, "k": 1}

# x -> Conv --+--> Relu -> y1
#             +--> y2           (conv output has two readers: no fusion)
# x -> Add(x, x) -> Relu -> y3  (Add is not CIM-capable: no fusion)
def test_no_fusion_with_two_readers_or_after_host_ops(tmp_path: Path) -> None:
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1,3,8,8] x) => (float[1,4,6,6] y1, float[1,4,6,6] c, float[1,3,8,8] y3) {
          c = Conv(x, w)
          y1 = Relu(c)
          a = Add(x, x)
          y3 = Relu(a)
        }""",
        weights(w=(4, 3, 3, 3)),
    )
    w = load(save(model, tmp_path)).workload
    assert sorted(op.op_type for op in w.operators) == ["Add", "Conv", "Relu", "Relu"]
    assert all(len(op.nodes) == 1 for op in w.operators)
    conv = w.operators[0]
    assert conv.n_out == 144 and conv.graph_output_elements == 144  # 4*6*6, read by Relu and as output


def test_conv_with_weight_as_graph_input_is_not_capable(tmp_path: Path) -> None:
    w = load(save(conv_weight_input(), tmp_path)).workload
    (conv,) = w.operators
    assert not conv.cim_capable
    assert conv.reason.startswith("weight is not constant (") and "'w'" in conv.reason
    assert (conv.m, conv.n, conv.n_mvm, conv.crossbars) == (None, None, None, None)
    assert conv.n_in == 1 * 3 * 8 * 8 + 4 * 3 * 3 * 3  # the weight is an activation here: 192 + 108


def test_control_flow_and_custom_ops_stay_on_host(tmp_path: Path) -> None:
    w = load(save(control_flow_and_custom(), tmp_path)).workload
    by_type = {op.op_type: op for op in w.operators}
    for kind in ("If", "Loop", "Scan"):
        assert not by_type[kind].cim_capable
        assert by_type[kind].reason == f"control flow ({kind}) stays on the host as an opaque operator"
    assert "custom-domain operator (com.example::MyOp)" in by_type["MyOp"].reason
    # If's branches read r from the outer scope: r (256) + condition (1)
    assert by_type["If"].n_in == 1 * 4 * 8 * 8 + 1
    relu = by_type["Relu"]
    readers = {e.dst for e in w.edges if e.src == relu.name}
    assert {by_type["If"].name, by_type["Loop"].name} <= readers
    # Loop outputs: final value (256) + scan output (3*256); the Conv after MyOp still lowers
    assert by_type["Loop"].n_out == 256 + 3 * 256
    conv = by_type["Conv"]
    assert conv.cim_capable and (conv.m, conv.n, conv.n_mvm) == (4, 4, 64)


def test_qlinear_ops_lower_like_float(tmp_path: Path) -> None:
    w = load(save(qlinear_conv(), tmp_path)).workload
    qconv, reshape, qmm = w.operators
    # QLinearConv weight (6, 4, 3, 3) on 6x6 -> 4x4: M = 6, N = 4*9 = 36, N_mvm = 16
    assert (qconv.op_type, qconv.m, qconv.n, qconv.n_mvm, qconv.crossbars) == ("QLinearConv", 6, 36, 16, 1)
    # QLinearMatMul (1,6,16) . (16,5): M = 5, N = 16, N_mvm = 1*6
    assert (qmm.op_type, qmm.m, qmm.n, qmm.n_mvm) == ("QLinearMatMul", 5, 16, 6)
    assert not reshape.cim_capable


def test_integer_ops_lower_like_float(tmp_path: Path) -> None:
    w = load(save(integer_ops(), tmp_path)).workload
    conv, mm = w.operators
    # ConvInteger (5,3,3,3) on 8x8 -> 6x6: M = 5, N = 27, N_mvm = 36
    assert (conv.op_type, conv.m, conv.n, conv.n_mvm) == ("ConvInteger", 5, 27, 36)
    # MatMulInteger (2,7,16) . (16,12): M = 12, N = 16, N_mvm = 2*7 = 14
    assert (mm.op_type, mm.m, mm.n, mm.n_mvm) == ("MatMulInteger", 12, 16, 14)


@pytest.mark.parametrize("builder", [clean_cnn, silu_net])
def test_int8_qdq_matches_float(tmp_path: Path, builder) -> None:  # noqa: ANN001
    float_w = load(save(builder(), tmp_path)).workload
    loaded = load(quantize_qdq(builder(), tmp_path))
    int8_w = loaded.workload
    assert len(int8_w.operators) == len(float_w.operators)
    assert gemm_view(int8_w) == gemm_view(float_w)
    assert [e.elements for e in int8_w.edges] == [e.elements for e in float_w.edges]
    assert int8_w.total_crossbars == float_w.total_crossbars
    # the Q/DQ pair on the graph input is part of the first operator
    first = int8_w.operators[0]
    kinds = [n for n in first.nodes if "QuantizeLinear" in n]
    assert kinds and first.graph_input_elements == float_w.operators[0].graph_input_elements
    # the weights stay int8 behind a DequantizeLinear (not folded to float constants)
    graph = loaded.model.graph
    int8_inits = {t.name for t in graph.initializer if t.data_type == onnx.TensorProto.INT8}
    weight_dqs = [n for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in int8_inits]
    assert weight_dqs
    assert {n.name for n in weight_dqs} <= set(int8_w.constant_nodes)
    fused = {name for op in int8_w.operators for name in op.nodes}
    assert not fused & set(int8_w.constant_nodes)


def test_bytes_are_those_of_the_tensors_moved(tmp_path: Path) -> None:
    """clean_cnn: float32 moves 4 bytes per element; its QDQ version moves the int8 tensor before
    each activation DequantizeLinear (1 byte), but the float graph input and output stay 4."""
    conv, flatten, gemm = load(save(clean_cnn(), tmp_path)).workload.operators
    edges = load(save(clean_cnn(), tmp_path)).workload.edges
    assert [(e.elements, e.bytes) for e in edges] == [(256, 4 * 256), (256, 4 * 256)]
    assert (conv.in_bytes, conv.out_bytes, conv.graph_input_bytes) == (4 * 192, 4 * 256, 4 * 192)
    assert (gemm.in_bytes, gemm.out_bytes, gemm.graph_output_bytes) == (4 * 256, 4 * 10, 4 * 10)
    int8 = load(quantize_qdq(clean_cnn(), tmp_path)).workload
    conv, flatten, gemm = int8.operators
    assert [(e.elements, e.bytes) for e in int8.edges] == [(256, 256), (256, 256)]
    # x (float) -> Q -> DQ -> Conv: the float graph input crosses, the Q runs with the conv
    assert (conv.in_bytes, conv.out_bytes, conv.graph_input_bytes) == (4 * 192, 256, 4 * 192)
    # Gemm -> Q -> DQ -> y: the DQ of the graph output runs on the host, the int8 tensor crosses
    assert (gemm.in_bytes, gemm.out_bytes, gemm.graph_output_bytes) == (256, 10, 10)


# x -> Q -> DQ --+--> Conv a
#                +--> Conv b        (two readers: the Q/DQ pair stays a host operator)
def test_qdq_on_graph_input_with_two_readers_stays_on_host(tmp_path: Path) -> None:
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1,3,8,8] x) => (float[1,4,6,6] a, float[1,4,6,6] b) {
          s = Constant <value = float {0.05}> ()
          z = Constant <value = int8 {0}> ()
          q = QuantizeLinear(x, s, z)
          d = DequantizeLinear(q, s, z)
          a = Conv(d, w1)
          b = Conv(d, w2)
        }""",
        weights(w1=(4, 3, 3, 3), w2=(4, 3, 3, 3)),
    )
    w = load(save(model, tmp_path)).workload
    assert [op.op_type for op in w.operators] == ["QuantizeLinear", "Conv", "Conv"]
    q = w.operators[0]
    assert len(q.nodes) == 2 and not q.cim_capable
    assert [(e.src, e.elements) for e in w.edges] == [(q.name, 192), (q.name, 192)]


def test_every_node_belongs_to_one_operator_or_is_constant(tmp_path: Path) -> None:
    loaded = load(quantize_qdq(silu_net(), tmp_path))
    names = [name for op in loaded.workload.operators for name in op.nodes]
    assert len(names) == len(set(names))
    covered = set(names) | set(loaded.workload.constant_nodes)
    unassigned = [n for n in loaded.model.graph.node if n.name not in covered]
    assert all(n.op_type == "Constant" for n in unassigned)


def test_crossbar_size_changes_counts(tmp_path: Path) -> None:
    # Gemm 256 -> 10: ceil(10/8) * ceil(256/64) = 2 * 4 = 8 crossbars of 8 x 64
    w = load(save(clean_cnn(), tmp_path), crossbar_size=(8, 64)).workload
    gemm = w.operators[-1]
    assert gemm.crossbars == 8
    assert (w.crossbar_rows, w.crossbar_cols) == (8, 64)


# x -> Conv -> Q --> DQ1 -> Sigmoid -> a        float twin: x -> Conv --> Sigmoid -> a
#                \-> DQ2 -> Tanh    -> b                             \--> Tanh    -> b
def test_dedicated_dq_per_reader_counts_the_tensor_once(tmp_path: Path) -> None:
    body = """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1,3,8,8] x) => (float[1,4,6,6] a, float[1,4,6,6] b) {{
          c = Conv(x, w)
          {middle}
          a = Sigmoid(d1)
          b = Tanh(d2)
        }}"""
    float_model = parse(body.format(middle="d1 = Identity(c)\n d2 = Identity(c)"), weights(w=(4, 3, 3, 3)))
    qdq_model = parse(body.format(middle="""s = Constant <value = float {0.05}> ()
          z = Constant <value = int8 {0}> ()
          q = QuantizeLinear(c, s, z)
          d1 = DequantizeLinear(q, s, z)
          d2 = DequantizeLinear(q, s, z)"""), weights(w=(4, 3, 3, 3)))
    fw = load(save(float_model, tmp_path, "f.onnx")).workload
    qw = load(save(qdq_model, tmp_path, "q.onnx")).workload
    assert len(qw.operators) == len(fw.operators) == 3
    assert qw.operators[0].n_out == fw.operators[0].n_out == 4 * 6 * 6  # 144, not 288
    assert sorted(e.elements for e in qw.edges) == sorted(e.elements for e in fw.edges) == [144, 144]


# x -> Q -> DQ -> Conv(weight = com.microsoft DequantizeLinear(int8 w)) -> y
# (onnxruntime's quantizer writes Q/DQ in its com.microsoft domain for int16/int4 types)
def test_com_microsoft_dequantize_weight_is_constant(tmp_path: Path) -> None:
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
        g (float[1,3,8,8] x) => (float[1,4,6,6] y) {
          s = Constant <value = float {0.05}> ()
          z = Constant <value = int8 {0}> ()
          q = com.microsoft.QuantizeLinear(x, s, z)
          d = com.microsoft.DequantizeLinear(q, s, z)
          wf = com.microsoft.DequantizeLinear(wq, s, z)
          y = Conv(d, wf)
        }""",
        [onnx.numpy_helper.from_array(np.arange(108, dtype=np.int8).reshape(4, 3, 3, 3) % 7, "wq")],
    )
    w = load(save(model, tmp_path)).workload
    (conv,) = w.operators
    # Conv 3->4 3x3 on 8x8 -> 6x6: M = 4, N = 27, N_mvm = 36; Q/DQ of x fused in, weight DQ constant
    assert (conv.cim_capable, conv.m, conv.n, conv.n_mvm) == (True, 4, 27, 36)
    assert len(conv.nodes) == 3 and len(w.constant_nodes) == 1


def test_qoperator_quantization_matches_float(tmp_path: Path) -> None:
    # onnxruntime's QOperator format: Q -> QLinearConv -> Flatten -> com.microsoft QGemm -> DQ
    float_w = load(save(clean_cnn(), tmp_path)).workload
    int8_w = load(quantize_qdq(clean_cnn(), tmp_path, "qop.onnx", qoperator=True)).workload
    assert [op.op_type for op in int8_w.operators] == ["QLinearConv", "Flatten", "QGemm"]
    assert gemm_view(int8_w) == gemm_view(float_w)  # conv 4x27 x64, gemm 10x256 x1
    assert int8_w.total_crossbars == float_w.total_crossbars == 2


def test_qoperator_contrib_outputs_keep_their_integer_type(tmp_path: Path) -> None:
    # QLinearAdd (com.microsoft) has no ONNX shape inference: its output's shape is measured by one
    # onnxruntime run, and its type must be the uint8 that run returns, not float (which onnxruntime
    # then refuses to load: the profiler and the partitions would fail on every QOperator residual net).
    import onnxruntime as ort

    model = parse(
        f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        res (float[1,4,6,6] x) => (float[1,4,6,6] y) {{
          c = Conv <pads = [1,1,1,1]> (x, w)
          r = Relu(c)
          y = Add(r, x)
        }}""",
        weights(w=(4, 4, 3, 3)),
    )
    loaded = load(quantize_qdq(model, tmp_path, "qop.onnx", qoperator=True)).model
    add = next(n for n in loaded.graph.node if n.op_type == "QLinearAdd")
    declared = {vi.name: vi.type.tensor_type.elem_type for vi in loaded.graph.value_info}
    assert declared[add.output[0]] == onnx.TensorProto.UINT8
    session = ort.InferenceSession(loaded.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": np.ones((1, 4, 6, 6), np.float32)})[0].shape == (1, 4, 6, 6)
