"""Random valid ONNX models for differential fuzzing (issue 13, deliver 4).

A model grows from one input ``x[N,C,H,W]``: each step picks an operator and
one or two tensors already in the graph (any of them, not only the last, so
branches and skip connections arise), appends the node and records the new
tensor's shape.  Tensors nobody reads become graph outputs (several outputs).
Every decision is drawn from a :class:`Choices` source: a seeded numpy
generator for campaigns, hypothesis' ``data.draw`` for property tests.  Each
choice lists its simplest option first and counts start at their minimum, so
hypothesis shrinks a failing model towards few, plain operators.

Covered: Conv (kernel, stride, explicit or auto pads, dilation, groups incl.
depthwise, bias), Gemm (transB, bias), MatMul on 2-D and 4-D activations,
BatchNormalization, activations (Relu, LeakyRelu, Sigmoid, Tanh, Clip,
HardSigmoid, HardSwish, SiLU pair), broadcasting Add/Mul (same shape,
per-channel constant, scalar, squeeze-excite style ``[N,C,1,1]``), Concat,
Split, Slice, Reshape, Flatten, Transpose, MaxPool/AveragePool/
GlobalAveragePool, Resize.  :func:`quantize` makes the QDQ variant with
onnxruntime's ``quantize_static``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
T = TypeVar("T")

ACTIVATIONS = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish", "SiLU")
OPS_4D = ("Conv", "act", "Conv", "Add", "Conv", "act", "Mul", "BatchNormalization", "Concat", "Split", "Slice", "Transpose",
          "MaxPool", "AveragePool", "MatMul", "Resize", "Reshape", "GlobalAveragePool", "Flatten")
OPS_2D = ("Gemm", "act", "Gemm", "Add", "MatMul", "Concat", "Mul")
"""Conv and activations are listed more than once: drawn more often, so that most models have CIM work."""


class Choices(Protocol):
    """Where the generator's decisions come from; the first option / the lower bound is the simplest."""

    def integer(self, lo: int, hi: int) -> int: ...

    def choice(self, options: Sequence[T]) -> T: ...


class SeededChoices:
    """Decisions from ``numpy.random.default_rng(seed)``."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def integer(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def choice(self, options: Sequence[T]) -> T:
        return options[int(self.rng.integers(len(options)))]


class HypothesisChoices:
    """Decisions drawn with hypothesis (``data.draw`` or a ``@composite``'s ``draw``), so failures shrink."""

    def __init__(self, draw: Callable) -> None:
        from hypothesis import strategies as st

        self.draw, self.st = draw, st

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(self.st.integers(lo, hi))

    def choice(self, options: Sequence[T]) -> T:
        return options[self.draw(self.st.integers(0, len(options) - 1))]


@dataclass
class _Builder:
    choices: Choices
    rng: np.random.Generator
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    readers: dict[str, int] = field(default_factory=dict)
    counter: int = 0

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def const(self, array: np.ndarray, stem: str = "w") -> str:
        name = self.fresh(stem)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, *shape: int) -> str:
        return self.const((self.rng.standard_normal(shape) * 0.5).astype(np.float32))

    def node(self, op: str, inputs: list[str], out_shapes: list[tuple[int, ...]], **attrs) -> list[str]:  # noqa: ANN003
        outs = [self.fresh("t") for _ in out_shapes]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.fresh(op.lower() + "_"), **attrs))
        for name in inputs:
            if name in self.shapes:
                self.readers[name] = self.readers.get(name, 0) + 1
        for name, shape in zip(outs, out_shapes):
            self.shapes[name] = shape
            self.readers[name] = 0
        return outs

    def pick(self, rank: int) -> str | None:
        """The newest tensor of ``rank`` three times in four, else any of them (a branch or skip connection)."""
        names = [n for n in reversed(self.shapes) if len(self.shapes[n]) == rank]
        if not names:
            return None
        return names[0] if self.choices.integer(0, 3) < 3 else self.choices.choice(names)


def _conv_out(size: int, k: int, stride: int, dilation: int, pad_total: int) -> int:
    return (size + pad_total - dilation * (k - 1) - 1) // stride + 1


def _conv(b: _Builder, x: str) -> str:
    n, c, h, w = b.shapes[x]
    c = int(c)
    k = b.choices.choice((1, 3, 2, 5))
    stride = b.choices.choice((1, 2, 3))
    dilation = b.choices.choice((1, 2))
    groups = b.choices.choice([g for g in (1, c, 2, 4) if c % g == 0])
    c_out = b.choices.choice([m for m in (4, 8, 3, 6, 1) if m % groups == 0] or [groups])
    mode = b.choices.choice(("pads", "none", "SAME_UPPER", "SAME_LOWER", "VALID"))
    attrs: dict = {"kernel_shape": [k, k], "strides": [stride, stride], "dilations": [dilation, dilation], "group": groups}
    if mode == "pads":
        pads = [b.choices.integer(0, 2) for _ in range(4)]
        attrs["pads"] = pads
        ph, pw = pads[0] + pads[2], pads[1] + pads[3]
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        attrs["auto_pad"] = mode
        attrs["dilations"] = [1, 1]  # onnxruntime: "Dilation not supported for AutoPadType::SAME_*"
        dilation = 1
        ph = max(0, (-(-h // stride) - 1) * stride + dilation * (k - 1) + 1 - h)
        pw = max(0, (-(-w // stride) - 1) * stride + dilation * (k - 1) + 1 - w)
    else:
        if mode == "VALID":
            attrs["auto_pad"] = "VALID"
        ph = pw = 0
    ho, wo = _conv_out(h, k, stride, dilation, ph), _conv_out(w, k, stride, dilation, pw)
    if ho < 1 or wo < 1:  # too small for this kernel: a plain 1x1 conv instead
        attrs, ho, wo, groups = {"kernel_shape": [1, 1]}, h, w, 1
    inputs = [x, b.weight(c_out, c // attrs.get("group", 1), *attrs["kernel_shape"])]
    if b.choices.choice((False, True)):
        inputs.append(b.weight(c_out))
    return b.node("Conv", inputs, [(n, c_out, ho, wo)], **attrs)[0]


def _activation(b: _Builder, x: str) -> str:
    kind = b.choices.choice(ACTIVATIONS)
    shape = b.shapes[x]
    if kind == "SiLU":
        s = b.node("Sigmoid", [x], [shape])[0]
        return b.node("Mul", [x, s], [shape])[0]
    if kind == "Clip":
        return b.node("Clip", [x, b.const(np.float32(0.0), "lo"), b.const(np.float32(6.0), "hi")], [shape])[0]
    attrs = {"alpha": 0.1} if kind == "LeakyRelu" else {}
    return b.node(kind, [x], [shape], **attrs)[0]


def _binary(b: _Builder, x: str, op: str) -> str:
    shape = b.shapes[x]
    same = [n for n in reversed(b.shapes) if b.shapes[n] == shape and n != x]
    squeeze = [n for n in reversed(b.shapes) if len(shape) == 4 and b.shapes[n] == (shape[0], shape[1], 1, 1)]
    kind = b.choices.choice(("const", "scalar", "same", "squeeze"))
    if kind == "same" and same:
        other = b.choices.choice(same)
    elif kind == "squeeze" and squeeze:
        other = b.choices.choice(squeeze)
    elif kind == "scalar":
        other = b.const(np.float32(0.5), "s")
    else:
        other = b.weight(*((shape[1], 1, 1) if len(shape) == 4 else (shape[-1],)))
    return b.node(op, [x, other], [shape])[0]


def _batchnorm(b: _Builder, x: str) -> str:
    c = b.shapes[x][1]
    scale, bias, mean = b.weight(c), b.weight(c), b.weight(c)
    var = b.const((b.rng.random(c) + 0.5).astype(np.float32), "var")
    return b.node("BatchNormalization", [x, scale, bias, mean, var], [b.shapes[x]], epsilon=1e-5)[0]


def _concat(b: _Builder, x: str) -> str:
    shape = b.shapes[x]
    axis = 1
    fits = [n for n in reversed(b.shapes)
            if len(b.shapes[n]) == len(shape) and all(d == e for i, (d, e) in enumerate(zip(b.shapes[n], shape)) if i != axis)]
    other = b.choices.choice(fits)  # x itself fits: Concat(x, x) is valid too
    out = list(shape)
    out[axis] += b.shapes[other][axis]
    return b.node("Concat", [x, other], [tuple(out)], axis=axis)[0]


def _split(b: _Builder, x: str) -> str:
    n, c, h, w = b.shapes[x]
    if c < 2:
        return _activation(b, x)
    first = b.choices.integer(1, c - 1)
    outs = b.node("Split", [x, b.const(np.array([first, c - first], np.int64), "sp")],
                  [(n, first, h, w), (n, c - first, h, w)], axis=1)
    return b.choices.choice(outs)


def _slice(b: _Builder, x: str) -> str:
    shape = list(b.shapes[x])
    axis = b.choices.choice((2, 3, 1))
    size = shape[axis]
    step = b.choices.choice((1, 2))
    start = b.choices.integer(0, max(0, size - 1) // 2)
    end = b.choices.choice((size, size - 1 if size > start + 1 else size))
    shape[axis] = len(range(start, end, step))
    args = [b.const(np.array([v], np.int64), "sl") for v in (start, end, axis, step)]
    return b.node("Slice", [x, *args], [tuple(shape)])[0]


def _transpose(b: _Builder, x: str) -> str:
    n, c, h, w = b.shapes[x]
    return b.node("Transpose", [x], [(n, c, w, h)], perm=[0, 1, 3, 2])[0]


def _pool(b: _Builder, x: str, op: str) -> str:
    n, c, h, w = b.shapes[x]
    k = b.choices.choice((2, 3))
    stride = b.choices.choice((2, 1))
    pad = b.choices.choice((0, 1)) if k == 3 else 0
    ho, wo = _conv_out(h, k, stride, 1, 2 * pad), _conv_out(w, k, stride, 1, 2 * pad)
    if ho < 1 or wo < 1:
        return b.node("GlobalAveragePool", [x], [(n, c, 1, 1)])[0]
    return b.node(op, [x], [(n, c, ho, wo)], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)[0]


def _matmul(b: _Builder, x: str) -> str:
    shape = b.shapes[x]
    k_out = b.choices.choice((4, 8, 3, 16))
    return b.node("MatMul", [x, b.weight(shape[-1], k_out)], [(*shape[:-1], k_out)])[0]


def _resize(b: _Builder, x: str) -> str:
    n, c, h, w = b.shapes[x]
    mode = b.choices.choice(("nearest", "linear"))
    scales = b.const(np.array([1, 1, 2, 2], np.float32), "sc")
    return b.node("Resize", [x, "", scales], [(n, c, 2 * h, 2 * w)], mode=mode)[0]


def _reshape(b: _Builder, x: str) -> str:
    n, c, h, w = b.shapes[x]
    if h * w % 2 == 0 and b.choices.choice((True, False)):
        out = (n, c * 2, h * w // 2, 1)
    else:
        out = (n, c, w, h)
    return b.node("Reshape", [x, b.const(np.array(out, np.int64), "shape")], [out])[0]


def _flatten(b: _Builder, x: str) -> str:
    n, c, h, w = b.shapes[x]
    return b.node("Flatten", [x], [(n, c * h * w)], axis=1)[0]


def _gemm(b: _Builder, x: str) -> str:
    n, k = b.shapes[x]
    m = b.choices.choice((8, 4, 10, 3))
    trans_b = b.choices.choice((1, 0))
    inputs = [x, b.weight(*((m, k) if trans_b else (k, m)))]
    if b.choices.choice((True, False)):
        inputs.append(b.weight(m))
    return b.node("Gemm", inputs, [(n, m)], transB=trans_b)[0]


def _step(b: _Builder) -> None:
    rank = b.choices.choice((4, 2)) if any(len(s) == 2 for s in b.shapes.values()) else 4
    x = b.pick(rank)
    op = b.choices.choice(OPS_4D if rank == 4 else OPS_2D)
    h_w = b.shapes[x][2] * b.shapes[x][3] if rank == 4 else 0
    if op == "Resize" and h_w > 64:  # keep tensors small
        op = "MaxPool"
    builders = {
        "Conv": _conv, "act": _activation, "BatchNormalization": _batchnorm, "Concat": _concat, "Split": _split,
        "Slice": _slice, "Transpose": _transpose, "MatMul": _matmul, "Resize": _resize, "Reshape": _reshape,
        "Flatten": _flatten, "Gemm": _gemm,
        "Add": lambda b_, t: _binary(b_, t, "Add"), "Mul": lambda b_, t: _binary(b_, t, "Mul"),
        "MaxPool": lambda b_, t: _pool(b_, t, "MaxPool"), "AveragePool": lambda b_, t: _pool(b_, t, "AveragePool"),
        "GlobalAveragePool": lambda b_, t: b_.node("GlobalAveragePool", [t], [(*b_.shapes[t][:2], 1, 1)])[0],
    }
    builders[op](b, x)


def random_model(choices: Choices, weight_seed: int = 0, max_steps: int = 10) -> onnx.ModelProto:
    """A checked opset-17 model with one float input and one or more float outputs."""
    b = _Builder(choices, np.random.default_rng(weight_seed))
    x_shape = (1, choices.choice((3, 4, 1, 8, 6)), choices.integer(4, 10), choices.integer(4, 10))
    b.shapes["x"], b.readers["x"] = x_shape, 0
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    second = choices.choice((None, x_shape, (*x_shape[:2], 1, 1)))
    if second is not None:  # a second graph input, read by a broadcasting Add/Mul or a Concat
        b.shapes["x2"], b.readers["x2"] = second, 0
        inputs.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, list(second)))
        op = choices.choice(("Add", "Mul", "Concat") if second == x_shape else ("Add", "Mul"))
        if op == "Concat":
            b.node("Concat", ["x", "x2"], [(x_shape[0], 2 * x_shape[1], *x_shape[2:])], axis=1)
        else:
            b.node(op, ["x", "x2"], [x_shape])
    for _ in range(choices.integer(1, max_steps)):
        _step(b)
    outputs = [n for n, count in b.readers.items() if count == 0 and n not in ("x", "x2")]
    graph = helper.make_graph(
        b.nodes, "fuzz", inputs,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(b.shapes[n])) for n in outputs], initializer=b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="cimsplit-fuzz")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def seeded_model(seed: int, max_steps: int = 10) -> onnx.ModelProto:
    return random_model(SeededChoices(seed), weight_seed=seed, max_steps=max_steps)


def input_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    return {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in model.graph.input}


def quantize(model: onnx.ModelProto, folder: Path, seed: int = 0, config: str = "s8s8-per-channel") -> Path:
    """The int8 variant from onnxruntime's ``quantize_static`` in ``config`` (:data:`quantizers.STATIC`; by default
    QDQ, int8 activations and per-channel int8 weights), seeded calibration."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static
    from quantizers import STATIC

    folder = Path(folder)
    src = folder / "float_for_quant.onnx"
    onnx.save(model, str(src))
    shapes = input_shapes(model)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(seed)
            self.data = iter([{k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()} for _ in range(3)])

        def get_next(self):  # noqa: ANN201
            return next(self.data, None)

    out = folder / "model.onnx"
    quantize_static(str(src), str(out), Reader(), **STATIC[config])
    src.unlink()
    return out


def models(max_steps: int = 10):  # noqa: ANN201 - a hypothesis SearchStrategy[onnx.ModelProto]
    """Hypothesis strategy of :func:`random_model`; shrinking goes towards one plain operator."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw: Callable) -> onnx.ModelProto:
        return random_model(HypothesisChoices(draw), max_steps=max_steps)

    return strategy()
