"""GEMM lowering (eq. 1) of single nodes, numbers computed by hand beside each assertion."""

from __future__ import annotations

import math

import pytest
from onnx import helper

from cimsplit.compiler.im2col import crossbars, lower


def test_crossbars_eq1() -> None:
    # N_crossbar = ceil(M_v/M) * ceil(N_v/N)
    assert crossbars(512, 4608, 256, 256) == 2 * 18
    assert crossbars(1000, 512, 256, 256) == 4 * 2
    assert crossbars(64, 147, 256, 256) == 1
    assert crossbars(257, 1, 256, 256) == 2
    assert crossbars(100, 300, 128, 64) == math.ceil(100 / 128) * math.ceil(300 / 64)  # 1 * 5


def test_conv_3x3_512_at_7x7() -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    shapes = {"x": (1, 512, 7, 7), "w": (512, 512, 3, 3), "y": (1, 512, 7, 7)}
    gemm = lower(node, {"w"}, shapes, 256, 256).gemm
    assert gemm is not None
    assert gemm.m == 512  # C_out
    assert gemm.n == 512 * 3 * 3 == 4608  # C_in*kH*kW
    assert gemm.n_mvm == 7 * 7 == 49  # H_out*W_out
    assert gemm.crossbars == 2 * 18 == 36


def test_conv_groups_and_batch() -> None:
    # group=4, C_in=16, C_out=8, 5x5 kernel, batch 2, output 10x10
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=4)
    shapes = {"x": (2, 16, 14, 14), "w": (8, 4, 5, 5), "y": (2, 8, 10, 10)}
    gemm = lower(node, {"w"}, shapes, 256, 256).gemm
    assert gemm is not None
    assert (gemm.m, gemm.n) == (8, 4 * 5 * 5)  # M = C_out, N = (C_in/g)*kH*kW
    assert gemm.n_mvm == 10 * 10 * 4 * 2  # H_out*W_out*g*batch


def test_depthwise_conv() -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=320, pads=[1, 1, 1, 1])
    shapes = {"x": (1, 320, 14, 14), "w": (320, 1, 3, 3), "y": (1, 320, 14, 14)}
    gemm = lower(node, {"w"}, shapes, 256, 256).gemm
    assert gemm is not None
    assert (gemm.m, gemm.n, gemm.n_mvm) == (320, 9, 14 * 14 * 320)
    assert gemm.crossbars == math.ceil(320 / 256)  # = 2


def test_conv_1d_is_not_capable() -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"])
    low = lower(node, {"w"}, {"x": (1, 4, 10), "w": (6, 4, 3), "y": (1, 6, 8)}, 256, 256)
    assert low.gemm is None and "1-D convolution" in low.reason


def test_conv_weight_not_constant() -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"])
    low = lower(node, set(), {"x": (1, 3, 8, 8), "w": (4, 3, 3, 3), "y": (1, 4, 6, 6)}, 256, 256)
    assert low.gemm is None and low.reason.startswith("weight is not constant (") and "'w'" in low.reason


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_weight_on_the_right(trans_b: int) -> None:
    # Y (4, 1000) = X (4, 512) . W (512, 1000);  W stored transposed when transB=1
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=trans_b)
    w_shape = (1000, 512) if trans_b else (512, 1000)
    gemm = lower(node, {"w", "b"}, {"x": (4, 512), "w": w_shape, "y": (4, 1000)}, 256, 256).gemm
    assert gemm is not None
    assert (gemm.m, gemm.n, gemm.n_mvm) == (1000, 512, 4)  # M = N_w, N = K, N_mvm = rows of X
    assert gemm.crossbars == 4 * 2
    assert gemm.weight_shape == (512, 1000)  # logical (K, N)


def test_gemm_weight_on_the_left() -> None:
    # Y (30, 7) = W (30, 20) . X (20, 7), W stored as (20, 30) with transA=1
    node = helper.make_node("Gemm", ["w", "x"], ["y"], transA=1)
    gemm = lower(node, {"w"}, {"w": (20, 30), "x": (20, 7), "y": (30, 7)}, 256, 256).gemm
    assert gemm is not None
    assert (gemm.m, gemm.n, gemm.n_mvm) == (30, 20, 7)  # one MVM per column of X


def test_matmul_weight_on_the_right_batched_activation() -> None:
    # X (2, 49, 384) . W (384, 96): N_mvm = 2*49 rows, M = 96, N = 384
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    gemm = lower(node, {"w"}, {"x": (2, 49, 384), "w": (384, 96), "y": (2, 49, 96)}, 256, 256).gemm
    assert gemm is not None
    assert (gemm.m, gemm.n, gemm.n_mvm) == (96, 384, 2 * 49)
    assert gemm.crossbars == 1 * 2  # ceil(96/256) * ceil(384/256)


def test_matmul_weight_on_the_left() -> None:
    # W (10, 16) . X (3, 16, 5): each of the 3*5 columns is one input vector
    node = helper.make_node("MatMul", ["w", "x"], ["y"])
    gemm = lower(node, {"w"}, {"w": (10, 16), "x": (3, 16, 5), "y": (3, 10, 5)}, 256, 256).gemm
    assert gemm is not None
    assert (gemm.m, gemm.n, gemm.n_mvm) == (10, 16, 3 * 5)


def test_matmul_two_activations_not_capable() -> None:
    node = helper.make_node("MatMul", ["q", "k"], ["y"])
    low = lower(node, set(), {"q": (1, 8, 16), "k": (1, 16, 8), "y": (1, 8, 8)}, 256, 256)
    assert low.gemm is None and low.reason.startswith("weight is not constant (both matrix inputs")


def test_quantized_forms_find_their_weight() -> None:
    qconv = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])
    consts = {"xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}
    shapes = {"x": (1, 4, 6, 6), "w": (6, 4, 3, 3), "y": (1, 6, 4, 4)}
    gemm = lower(qconv, consts, shapes, 256, 256).gemm
    assert gemm is not None and (gemm.m, gemm.n, gemm.n_mvm) == (6, 36, 16)
    qmm = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    gemm = lower(qmm, consts | {"as", "az", "bs", "bz"}, {"a": (6, 16), "b": (16, 5), "y": (6, 5)}, 256, 256).gemm
    assert gemm is not None and (gemm.m, gemm.n, gemm.n_mvm) == (5, 16, 6)
    mmi = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    gemm = lower(mmi, {"b"}, {"a": (6, 16), "b": (16, 5), "y": (6, 5)}, 256, 256).gemm
    assert gemm is not None and (gemm.m, gemm.n, gemm.n_mvm) == (5, 16, 6)


def test_other_ops_are_not_gemms() -> None:
    low = lower(helper.make_node("Add", ["a", "b"], ["y"]), {"b"}, {}, 256, 256)
    assert low.gemm is None and "Add" in low.reason
