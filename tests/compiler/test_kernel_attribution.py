"""Kernels of ONNX Runtime's optimized graph -> the workload operators they came from (no timing)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from graphs import parse, save, weights
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.frontend import LoadedModel, load
from cimsplit.compiler.kernel_attribution import Region, attribute_kernels, constant_nodes, split_region_times
from cimsplit.compiler.ort_profiler import optimized_model


def kernel_owners(loaded: LoadedModel, level: str = "all") -> dict[str, set[str]]:
    """Kernel op type -> op types of the workload operators charged with it (every kernel charged once)."""
    optimized = optimized_model(loaded.model, level)
    regions = attribute_kernels(loaded.model, optimized)
    charged = [kernel for region in regions for kernel, _ in region.kernels]
    assert sorted(charged) == sorted(node.name for node in optimized.graph.node)
    op_of = {node: op.op_type for op in loaded.workload.operators for node in op.nodes}
    op_type = {node.name: node.op_type for node in optimized.graph.node}
    owners: dict[str, set[str]] = defaultdict(set)
    for region in regions:
        for kernel, _ in region.kernels:
            owners[op_type[kernel]].update(op_of[node] for node in region.nodes)
    return dict(owners)


def q_weight(name: str, shape: tuple[int, ...], seed: int = 0) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(seed)
    return [
        numpy_helper.from_array(rng.integers(-60, 60, size=shape).astype(np.int8), name),
        numpy_helper.from_array(np.array(0.02, np.float32), f"{name}_s"),
        numpy_helper.from_array(np.array(0, np.int8), f"{name}_z"),
    ]


ACT = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(128, np.uint8), "z")]
ACT8 = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(3, np.int8), "z")]
"""int8 zero points: on x86 onnxruntime converts such single-reader pairs to uint8 (``qdq_kernels``)."""


# x[1,8,8,8] -> Conv 3x3 (8 -> 8) -> Relu -> y
#   ORT: one Conv with activation Relu (FusedConv, or an NCHWc Conv between reorders)
def conv_relu() -> onnx.ModelProto:
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        cr (float[1,8,8,8] x) => (float[1,8,8,8] y) {
          c = Conv <pads = [1,1,1,1]> (x, w)
          y = Relu(c)
        }""",
        weights(w=(8, 8, 3, 3)),
    )


# x -> Q -> DQ --\
#   w8 -> DQ ----- Conv 3x3 (8 -> 8) -> Q -> DQ -> y      ORT: Q, QLinearConv, DQ
def qdq_conv() -> onnx.ModelProto:
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        qc (float[1,8,8,8] x) => (float[1,8,8,8] y) {
          xq = QuantizeLinear(x, s, z)
          xd = DequantizeLinear(xq, s, z)
          wd = DequantizeLinear(w8, w8_s, w8_z)
          c = Conv <pads = [1,1,1,1]> (xd, wd)
          cq = QuantizeLinear(c, s, z)
          y = DequantizeLinear(cq, s, z)
        }""",
        [*ACT, *q_weight("w8", (8, 8, 3, 3))],
    )


# a -> Q -> DQ --\
#                 Add -> Q -> DQ -> y                     ORT: QLinearAdd
# b -> Q -> DQ --/
#   sigmoid=True: ... Add -> Q -> DQ -> Sigmoid -> Q -> DQ -> y
def qdq_add(act: list[onnx.TensorProto] = ACT, sigmoid: bool = False) -> onnx.ModelProto:
    tail = """td = DequantizeLinear(tq, s, z)
          g = Sigmoid(td)
          gq = QuantizeLinear(g, s, z)
          y = DequantizeLinear(gq, s, z)""" if sigmoid else "y = DequantizeLinear(tq, s, z)"
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        qa (float[1,8,8,8] a, float[1,8,8,8] b) => (float[1,8,8,8] y) {{
          aq = QuantizeLinear(a, s, z)
          ad = DequantizeLinear(aq, s, z)
          bq = QuantizeLinear(b, s, z)
          bd = DequantizeLinear(bq, s, z)
          t = Add(ad, bd)
          tq = QuantizeLinear(t, s, z)
          {tail}
        }}""",
        act,
    )


# x[1,16,16,16] -> Conv 3x3 (16 -> 32) -> Relu -> MaxPool 2x2 -> y
#   ORT (x86 with AVX2 or newer): ReorderInput -> nchwc Conv -> nchwc MaxPool -> ReorderOutput
def nchwc_chain() -> onnx.ModelProto:
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        nc (float[1,16,16,16] x) => (float[1,32,8,8] y) {
          c = Conv <pads = [1,1,1,1]> (x, w)
          r = Relu(c)
          y = MaxPool <kernel_shape = [2,2], strides = [2,2]> (r)
        }""",
        weights(w=(32, 16, 3, 3)),
    )


@pytest.fixture
def loaded(tmp_path: Path):
    return lambda model: load(save(model, tmp_path))


def attributed(loaded, proto: onnx.ModelProto, runs: Callable[[list[str]], bool], otherwise: str):
    """(regions, simplified node -> op type, kernel -> op type) of ``proto`` at level all; skipped unless ``runs(kernel op types)``."""
    model = loaded(proto)
    optimized = optimized_model(model.model)
    kernel_type = {node.name: node.op_type for node in optimized.graph.node}
    if not runs(list(kernel_type.values())):
        pytest.skip(otherwise)
    return (attribute_kernels(model.model, optimized), {node.name: node.op_type for node in model.model.graph.node},
            kernel_type)


def test_conv_relu_fusion_is_charged_to_the_conv_operator(loaded) -> None:
    model = loaded(conv_relu())
    assert [op.op_type for op in model.workload.operators] == ["Conv"]  # Relu fused into it by the workload
    owners = kernel_owners(model)
    assert "Relu" not in owners  # ORT runs no Relu kernel: it is fused into the Conv
    assert owners.keys() - {"ReorderInput", "ReorderOutput"} in ({"Conv"}, {"FusedConv"})
    assert set().union(*owners.values()) == {"Conv"}


def test_qdq_conv_runs_as_qlinearconv_charged_to_the_conv(loaded) -> None:
    model = loaded(qdq_conv())
    owners = kernel_owners(model)
    assert owners["QLinearConv"] == {"Conv"}
    assert "Conv" not in owners  # no float Conv runs
    assert set().union(*owners.values()) == {"Conv"}


def test_qdq_add_runs_as_qlinearadd_charged_to_the_add(loaded) -> None:
    model = loaded(qdq_add())
    owners = kernel_owners(model)
    assert owners["QLinearAdd"] == {"Add"}
    assert "Add" not in owners


def test_nchwc_reorders_are_charged_to_the_operators_that_need_them(loaded) -> None:
    model = loaded(nchwc_chain())
    owners = kernel_owners(model)
    if "ReorderInput" not in owners and "ReorderOutput" not in owners:
        pytest.skip("onnxruntime uses no NCHWc layout on this CPU")
    # The NCHWc kernels pass renamed tensors; each is still charged to its own operator (by its ``<tensor>_nchwc`` name).
    assert owners == {"ReorderInput": {"Conv"}, "Conv": {"Conv"}, "MaxPool": {"MaxPool"}, "ReorderOutput": {"MaxPool"}}


# x[1,16,8,8] -> Conv 3x3 (16 -> 32) -> Relu -> r -> Conv 3x3 (32 -> 32) -> Add r -> Relu -> Conv 1x1 (32 -> 32) -> y
#   ORT (x86 with AVX2 or newer): NCHWc Conv (Relu), NCHWc Conv (Sum r, Relu), NCHWc Conv, ReorderOutput
def nchwc_residual() -> onnx.ModelProto:
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        nr (float[1,16,8,8] x) => (float[1,32,8,8] y) {
          c1 = Conv <pads = [1,1,1,1]> (x, w1)
          r = Relu(c1)
          c2 = Conv <pads = [1,1,1,1]> (r, w2)
          s = Add(c2, r)
          t = Relu(s)
          y = Conv (t, w3)
        }""",
        weights(w1=(32, 16, 3, 3), w2=(32, 32, 3, 3), w3=(32, 32, 1, 1)),
    )


def test_nchwc_chain_charges_each_conv_and_a_fused_residual_add_to_their_own_nodes(loaded) -> None:
    model = loaded(nchwc_residual())
    optimized = optimized_model(model.model)
    if not any(node.domain == "com.microsoft.nchwc" for node in optimized.graph.node):
        pytest.skip("onnxruntime uses no NCHWc layout on this CPU")
    regions = attribute_kernels(model.model, optimized)
    by_type = {node.name: node.op_type for node in model.model.graph.node}
    kernel_type = {node.name: node.op_type for node in optimized.graph.node}
    found = sorted((tuple(by_type[n] for n in region.nodes), tuple(sorted(kernel_type[k] for k, _ in region.kernels)))
                   for region in regions)
    assert found == [
        (("Conv",), ("Conv", "ReorderOutput")),
        (("Conv", "Add", "Relu"), ("Conv",)),  # the second conv's kernel adds r and applies Relu
        (("Conv", "Relu"), ("Conv", "ReorderInput")),
    ]


def test_optimizations_off_is_one_kernel_per_node_and_weight_dequantize_goes_to_its_reader(loaded) -> None:
    model = loaded(qdq_conv())
    optimized = optimized_model(model.model, "off")
    regions = attribute_kernels(model.model, optimized)
    by_type = {node.name: node.op_type for node in model.model.graph.node}
    weight_dq = [name for name in constant_nodes(model.model.graph)]
    assert [by_type[name] for name in weight_dq] == ["DequantizeLinear"]
    conv_region = next(region for region in regions if any(by_type[node] == "Conv" for node in region.nodes))
    assert [by_type[node] for node in conv_region.nodes] == ["Conv"]
    assert sorted(dict(conv_region.kernels)) == sorted([weight_dq[0], conv_region.nodes[0]])
    assert all(len(region.nodes) == 1 for region in regions)


def test_split_region_times_by_weights_and_equally_when_they_are_zero() -> None:
    regions = (Region(("a", "b"), (("k1", 1.0), ("k2", 0.5))), Region(("c", "d"), (("k2", 0.5),)))
    times = split_region_times(regions, {"k1": 300.0, "k2": 200.0}, {"a": 3.0, "b": 1.0})
    assert times == {"a": 300.0, "b": 100.0, "c": 50.0, "d": 50.0}


# x[1,16,8,8] -> Conv 1x1 (16 -> 32) -> SiLU (Sigmoid, Mul) -> Conv 1x1 (32 -> 32) -> y
#   ORT: NCHWc Conv, QuickGelu (named after the Mul, ``<mul>/QuickGeluFusion/``), NCHWc Conv
def conv_silu_conv() -> onnx.ModelProto:
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        cs (float[1,16,8,8] x) => (float[1,32,8,8] y) {
          c = Conv (x, w1)
          g = Sigmoid(c)
          m = Mul(c, g)
          y = Conv (m, w2)
        }""",
        weights(w1=(32, 16, 1, 1), w2=(32, 32, 1, 1)),
    )


def test_a_fused_silu_kernel_is_charged_to_its_sigmoid_and_mul(loaded) -> None:
    model = loaded(conv_silu_conv())
    optimized = optimized_model(model.model)
    if not any(node.name.endswith("/QuickGeluFusion/") for node in optimized.graph.node):
        pytest.skip("onnxruntime fuses no QuickGelu here")
    regions = attribute_kernels(model.model, optimized)
    by_type = {node.name: node.op_type for node in model.model.graph.node}
    kernel_type = {node.name: node.op_type for node in optimized.graph.node}
    silu = next(region for region in regions if any(by_type[n] == "Sigmoid" for n in region.nodes))
    assert sorted(by_type[n] for n in silu.nodes) == ["Mul", "Sigmoid"]
    assert [kernel_type[k] for k, _ in silu.kernels] == ["QuickGelu"]


# x -> Q -> DQ -> Conv 3x3 (8 -> 8) -> Q -> DQ -> Clip 0..6 -> Q -> DQ -> Conv 3x3 (8 -> 8) -> Q -> DQ -> y
#   ORT: two QLinearConv ``<conv>_token_<n>`` whose outputs are renamed (the Clip runs between them here)
def qdq_conv_clip_conv() -> onnx.ModelProto:
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        qcc (float[1,8,8,8] x) => (float[1,8,8,8] y) {
          xq = QuantizeLinear(x, s, z)
          xd = DequantizeLinear(xq, s, z)
          wd = DequantizeLinear(w8, w8_s, w8_z)
          c = Conv <pads = [1,1,1,1]> (xd, wd)
          cq = QuantizeLinear(c, s, z)
          cd = DequantizeLinear(cq, s, z)
          r = Clip(cd, lo, hi)
          rq = QuantizeLinear(r, s, z)
          rd = DequantizeLinear(rq, s, z)
          vd = DequantizeLinear(v8, v8_s, v8_z)
          c2 = Conv <pads = [1,1,1,1]> (rd, vd)
          c2q = QuantizeLinear(c2, s, z)
          y = DequantizeLinear(c2q, s, z)
        }""",
        [*ACT, *q_weight("w8", (8, 8, 3, 3)), *q_weight("v8", (8, 8, 3, 3), seed=1),
         numpy_helper.from_array(np.array(0.0, np.float32), "lo"), numpy_helper.from_array(np.array(6.0, np.float32), "hi")],
    )


def test_a_qlinearconv_chain_charges_each_kernel_to_its_own_conv(loaded) -> None:
    regions, by_type, kernel_type = attributed(loaded, qdq_conv_clip_conv(), lambda types: types.count("QLinearConv") == 2,
                                               "onnxruntime runs these convs otherwise here")
    convs = [region for region in regions if any(by_type[n] == "Conv" for n in region.nodes)]
    assert [sum(by_type[n] == "Conv" for n in region.nodes) for region in convs] == [1, 1]
    assert [[kernel_type[k] for k, _ in region.kernels].count("QLinearConv") for region in convs] == [1, 1]


# x -> Q -> DQ xd --------------------------------------------\
#            xd -> MaxPool 5x5 -> Q -> DQ md ------------------- Concat -> Q -> DQ -> y
#                                 md -> MaxPool 5x5 -> Q -> DQ -/
#   (YOLO's SPPF) ORT: each shared DQ is duplicated per reader first; the MaxPools run on the 8-bit tensors
#   (their DQ copies and Qs dropped), a QLinearConcat reads them too (here: Q, MaxPool, MaxPool, QLinearConcat, DQ)
def qdq_pool_fork() -> onnx.ModelProto:
    def qdq(tensor: str, name: str) -> list[onnx.NodeProto]:
        return [helper.make_node("QuantizeLinear", [tensor, "s", "z"], [f"{name}q"]),
                helper.make_node("DequantizeLinear", [f"{name}q", "s", "z"], [f"{name}d"])]

    def pool(source: str, name: str) -> list[onnx.NodeProto]:
        return [helper.make_node("MaxPool", [source], [name], kernel_shape=[5, 5], pads=[2, 2, 2, 2]), *qdq(name, name)]

    nodes = [*qdq("x", "x"), *pool("xd", "m0"), *pool("m0d", "m1"),
             helper.make_node("Concat", ["xd", "m0d", "m1d"], ["c"], axis=1), *qdq("c", "c")]
    nodes[-1].output[0] = "y"
    for index, node in enumerate(nodes):
        node.name = f"{node.op_type}_{index}"
    graph = helper.make_graph(nodes, "sppf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 8, 8])], initializer=ACT)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_dequantize_read_by_two_operators_joins_neither_region(loaded) -> None:
    regions, by_type, kernel_type = attributed(loaded, qdq_pool_fork(), lambda types: types.count("MaxPool") == 2,
                                               "onnxruntime runs these pools otherwise here")
    pools = [region for region in regions if any(kernel_type[k] == "MaxPool" for k, _ in region.kernels)]
    # Each MaxPool kernel is its own operator's: the MaxPool and the Q it absorbs, no Concat (before: one region
    # of both MaxPools, the Concat and the shared DQs, split among them by their level-off times).
    assert sorted(sorted(by_type[n] for n in region.nodes) for region in pools) == [["MaxPool", "QuantizeLinear"]] * 2
    assert all([kernel_type[k] for k, _ in region.kernels] == ["MaxPool"] for region in pools)
    concat = next(region for region in regions if any(by_type[n] == "Concat" for n in region.nodes))
    assert "MaxPool" not in {by_type[n] for n in concat.nodes}
    assert "MaxPool" not in {kernel_type[k] for k, _ in concat.kernels}


# a, b -> Q -> DQ -> Add -> Q -> DQ -> Sigmoid -> Q -> DQ -> y (int8 pairs: ACT8)
#   ORT (x86): QLinearAdd and QLinearSigmoid, named after their nodes; the int8 pair between them converted to
#   uint8, so the tensor between the kernels has another name and type than the simplified one
def test_adjacent_qlinear_kernels_are_charged_to_their_own_nodes(loaded) -> None:
    regions, by_type, kernel_type = attributed(loaded, qdq_add(ACT8, sigmoid=True),
                                               lambda types: {"QLinearAdd", "QLinearSigmoid"} <= set(types),
                                               "onnxruntime runs these ops otherwise here")
    found = {kernel_type[k]: sorted(by_type[n] for n in region.nodes) for region in regions for k, _ in region.kernels
             if kernel_type[k].startswith("QLinear")}
    # Before: one region of both ops and their Q/DQs, the two kernels split between Add and Sigmoid by level-off times.
    assert found == {"QLinearAdd": ["Add", "DequantizeLinear", "DequantizeLinear", "QuantizeLinear"],
                     "QLinearSigmoid": ["DequantizeLinear", "QuantizeLinear", "Sigmoid"]}
