"""GEMM lowering of CIM-capable nodes (paper section IV-A2, eq. 1; DESIGN §2).

A crossbar holds an M x N block of the weight matrix and performs one MVM per
input vector.  Every CIM-capable node is lowered to a weight matrix of
``m`` x ``n`` (``m`` outputs per MVM, ``n`` inputs per MVM) applied to
``n_mvm`` input vectors:

* Conv, weight (C_out, C_in/g, kH, kW), output (B, C_out, H_out, W_out), via
  im2col: m = C_out, n = (C_in/g)*kH*kW, n_mvm = H_out*W_out*g*B.  Each group
  applies its own input vector, so a depthwise conv (g = C) has n = kH*kW and
  n_mvm = H_out*W_out*C — the vector-vector case the paper notes leaves most
  cells idle.  The paper's example (g = 1, B = 1) gives n_mvm = H_out*W_out.
* Gemm/MatMul with a constant weight W of logical shape (K, N) applied to the
  activation from the right (Y = X W): m = N, n = K, n_mvm = product of the
  activation's other dims.  With the weight on the left (Y = W X, W (M, K)):
  m = M, n = K, n_mvm = the activation's columns times its batch dims.

Crossbars (eq. 1): ceil(m / rows) * ceil(n / cols) for a rows x cols crossbar.
Quantized forms (QLinearConv, ConvInteger, QLinearMatMul, MatMulInteger, and
onnxruntime's com.microsoft QGemm) have the GEMM of their float forms; only
the weight's input position differs.  ORT's saved FusedConv/FusedGemm lower
like Conv/Gemm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import onnx

__all__ = ["Gemm", "crossbars", "lower", "Lowering", "CONV_OPS", "MATMUL_OPS", "GEMM_LIKE_OPS", "GEMM_OPS",
           "is_gemm_node", "weight_index"]

Shape = tuple[int, ...]

CONV_OPS = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3, "FusedConv": 1}
"""Conv-like op -> position of its weight input."""
MATMUL_OPS = {"MatMul": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3)}
"""MatMul-like op (numpy semantics) -> positions of its (A, B) inputs."""
GEMM_LIKE_OPS = {"Gemm": (0, 1), "QGemm": (0, 3), "FusedGemm": (0, 1)}
"""Gemm-like op (2-D, transA/transB) -> positions of its (A, B) inputs."""
GEMM_OPS = frozenset({*GEMM_LIKE_OPS, *CONV_OPS, *MATMUL_OPS})
_MS_GEMM_OPS = frozenset({"QGemm", "FusedGemm", "FusedConv"})
"""onnxruntime's com.microsoft forms: QGemm (QOperator quantization), FusedConv/FusedGemm (saved ORT optimizations)."""


def is_gemm_node(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is a Conv/Gemm/MatMul form this module can lower."""
    if node.domain in ("", "ai.onnx"):
        return node.op_type in GEMM_OPS and node.op_type not in _MS_GEMM_OPS
    return node.domain == "com.microsoft" and node.op_type in _MS_GEMM_OPS


@dataclass(frozen=True)
class Gemm:
    """An m x n weight matrix applied to n_mvm input vectors, and its crossbar count."""

    m: int
    n: int
    n_mvm: int
    crossbars: int
    weight: str
    weight_shape: Shape


@dataclass(frozen=True)
class Lowering:
    """Either a GEMM (``gemm`` set) or the reason the node cannot run on the CIM."""

    gemm: Gemm | None
    reason: str | None


def crossbars(m: int, n: int, rows: int, cols: int) -> int:
    """Eq. 1: N_crossbar = ceil(M_v / M) * ceil(N_v / N)."""
    return math.ceil(m / rows) * math.ceil(n / cols)


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def weight_index(node: onnx.NodeProto, consts: set[str]) -> int | None:
    """Input position of the node's constant weight, or None."""
    if node.op_type in CONV_OPS:
        i = CONV_OPS[node.op_type]
        return i if len(node.input) > i and node.input[i] in consts else None
    if node.op_type in GEMM_LIKE_OPS:
        pairs = GEMM_LIKE_OPS[node.op_type]
    elif node.op_type in MATMUL_OPS:
        pairs = MATMUL_OPS[node.op_type]
    else:
        return None
    a, b = pairs
    if node.input[b] in consts and node.input[a] not in consts:
        return b
    if node.input[a] in consts and node.input[b] not in consts:
        return a
    return None


def _not_constant(node: onnx.NodeProto, consts: set[str], positions: tuple[int, ...]) -> str:
    names = [node.input[i] for i in positions if len(node.input) > i]
    if names and all(n in consts for n in names):
        return "weight is not constant (every input is constant: nothing to compute at run time)"
    variable = [n for n in names if n not in consts]
    what = "the weight input" if len(variable) == 1 else "both matrix inputs"
    return f"weight is not constant ({what} {', '.join(repr(v) for v in variable)} computed at run time)"


def lower(node: onnx.NodeProto, consts: set[str], shapes: dict[str, Shape | None], rows: int, cols: int) -> Lowering:
    """Lower one node to a GEMM (eq. 1), or say why it is not CIM-capable."""
    op = node.op_type
    if op in CONV_OPS:
        w_pos = CONV_OPS[op]
        if weight_index(node, consts) is None:
            return Lowering(None, _not_constant(node, consts, (w_pos,)))
        return _lower_conv(node, node.input[w_pos], shapes, rows, cols)
    if op in GEMM_LIKE_OPS or op in MATMUL_OPS:
        a_pos, b_pos = GEMM_LIKE_OPS[op] if op in GEMM_LIKE_OPS else MATMUL_OPS[op]
        w = weight_index(node, consts)
        if w is None:
            return Lowering(None, _not_constant(node, consts, (a_pos, b_pos)))
        x_pos = b_pos if w == a_pos else a_pos
        return _lower_matmul(node, weight_on_right=(w == b_pos), w_name=node.input[w], x_name=node.input[x_pos],
                             shapes=shapes, rows=rows, cols=cols)
    return Lowering(None, f"{op} is not a GEMM")


def _lower_conv(node: onnx.NodeProto, w_name: str, shapes: dict[str, Shape | None], rows: int, cols: int) -> Lowering:
    w_shape = shapes.get(w_name)
    y_shape = shapes.get(node.output[0])
    if w_shape is None or y_shape is None:
        return Lowering(None, "shape of the weight or output is unknown")
    if len(w_shape) != 4:
        return Lowering(None, f"{len(w_shape) - 2}-D convolution; only 2-D Conv maps to the crossbars")
    group = int(_attr(node, "group", 1))  # type: ignore[arg-type]
    c_out, c_in_per_group, k_h, k_w = w_shape
    batch, _, h_out, w_out = y_shape
    m = c_out  # M_v = C_out
    n = c_in_per_group * k_h * k_w  # N_v = (C_in/g)*kH*kW
    n_mvm = h_out * w_out * group * batch  # one input vector per output pixel, group and image
    return Lowering(Gemm(m, n, n_mvm, crossbars(m, n, rows, cols), w_name, tuple(w_shape)), None)


def _lower_matmul(
    node: onnx.NodeProto, *, weight_on_right: bool, w_name: str, x_name: str,
    shapes: dict[str, Shape | None], rows: int, cols: int,
) -> Lowering:
    w_shape = shapes.get(w_name)
    x_shape = shapes.get(x_name)
    if w_shape is None or x_shape is None:
        return Lowering(None, "shape of the weight or activation is unknown")
    if node.op_type in GEMM_LIKE_OPS:
        trans_w = int(_attr(node, "transB" if weight_on_right else "transA", 0))  # type: ignore[arg-type]
        trans_x = int(_attr(node, "transA" if weight_on_right else "transB", 0))  # type: ignore[arg-type]
        w2 = tuple(reversed(w_shape)) if trans_w else tuple(w_shape)
        x2 = tuple(reversed(x_shape)) if trans_x else tuple(x_shape)
        if weight_on_right:  # Y (P, N) = X (P, K) . W (K, N)
            k, n_w = w2
            return _gemm(m=n_w, n=k, n_mvm=x2[0], w_name=w_name, w_shape=w2, rows=rows, cols=cols)
        m_w, k = w2  # Y (M, Q) = W (M, K) . X (K, Q)
        return _gemm(m=m_w, n=k, n_mvm=x2[1], w_name=w_name, w_shape=w2, rows=rows, cols=cols)
    # MatMul (numpy semantics); leading weight dims of 1 broadcast away.
    w_core = tuple(w_shape)
    while len(w_core) > 2 and w_core[0] == 1:
        w_core = w_core[1:]
    if len(w_core) > 2:
        return Lowering(None, f"batched constant weight of shape {tuple(w_shape)} (one matrix per batch entry)")
    if weight_on_right:
        if len(w_core) == 1:  # x (..., K) . w (K,) -> (...)
            k, n_w = w_core[0], 1
        else:
            k, n_w = w_core
        n_mvm = math.prod(x_shape[:-1]) if len(x_shape) > 1 else 1
        return _gemm(m=n_w, n=k, n_mvm=n_mvm, w_name=w_name, w_shape=w_core, rows=rows, cols=cols)
    if len(w_core) == 1:  # w (K,) . x (..., K, Q) -> (..., Q)
        m_w, k = 1, w_core[0]
    else:
        m_w, k = w_core
    n_mvm = math.prod(x_shape[:-2]) * x_shape[-1] if len(x_shape) > 1 else 1
    return _gemm(m=m_w, n=k, n_mvm=n_mvm, w_name=w_name, w_shape=w_core, rows=rows, cols=cols)


def _gemm(*, m: int, n: int, n_mvm: int, w_name: str, w_shape: Shape, rows: int, cols: int) -> Lowering:
    return Lowering(Gemm(m, n, n_mvm, crossbars(m, n, rows, cols), w_name, tuple(w_shape)), None)
