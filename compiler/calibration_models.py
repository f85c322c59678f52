"""The micro-models of calibration points: the measured node, alone or in the context a network gives it.

A conv (unless it reads an image) or a depthwise conv sits between two pointwise
convs, so onnxruntime keeps its blocked layout across it; an int8 element-wise
op reads convs' outputs (the quantizer leaves one that reads the float graph input
unquantized, and no network quantizes a graph input between two quantized ops), an
int8 activation an Add of two convs; binary ops and Concat read two tensors; a float Concat joins two convs' outputs
and feeds a conv, a float pool sits between two (onnxruntime runs them on their blocked layout); a Reshape or
Flatten is read by a Relu (a view in a network, a copy as the graph's output); an int8 op whose graph output the
quantizer would leave float (:data:`FLOAT_OUTPUTS`) is read by a conv.  :func:`keep_int8` adds
the fork after which onnxruntime keeps a quantized side int8 (the ``-s8in`` /
``-s8out`` / ``-s8`` kernel kinds).  A fused kind's activation (``Conv-depthwise+Clip``) follows the measured conv;
a quantized SiLU (:data:`~.host_fused.QUANTIZED_SILU`) sits between two 1x1 convs, the first's activation.
A GEMM point is also measured :func:`~.cache_flush.flushed`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.fusion import ACTIVATIONS
from cimsplit.compiler.host_fused import QUANTIZED_SILU
from cimsplit.compiler.host_glue import GLUE_PREFIX, NCHWC_DOMAIN
from cimsplit.compiler.host_model import FUSED_SEPARATOR, INT8_PREFIX, anchor_kind, plain_kind
from cimsplit.compiler.host_variants import LAST_AXIS, SECOND_LAST_AXIS

__all__ = ["conv_pad", "MEASURED_NODE", "FORK_PREFIX", "GridPoint", "build_point", "build_glue_point", "keep_int8"]


@dataclass(frozen=True)
class GridPoint:
    """One micro-benchmark: its kind and the shape parameters that build it."""

    kind: str
    params: tuple[tuple[str, int], ...]
    variant: int = 0
    """Distinguishes forms of one op (MaxPool 3x3/2 and 5x5/1)."""

    def get(self, key: str) -> int:
        return dict(self.params)[key]

    def width(self) -> int:
        """An element point's last axis: ``w`` where given (a row kind's), else ``h``."""
        return dict(self.params).get("w", self.get("h"))

    def elements(self) -> int:
        """An element point's ``c x h x w``."""
        return self.get("c") * self.get("h") * self.width()


def conv_pad(k: int, s: int) -> int:
    """A conv point's padding: none for a patch conv (stride = kernel, a transformer's stem), else "same"."""
    return 0 if s == k else k // 2


DEPTHWISE_NEIGHBOUR = 8
"""Channels on the far side of the pointwise convs around a measured conv (few, so they cost little)."""
SECOND_INPUT = "x2"
"""The second operand of a binary or Concat point, a graph input shaped like ``x``."""
MEASURED_INPUT = "x_measured"
"""The measured operator's input when it is not the graph input ``x``."""
BLOCKED_SECOND = "x_measured_2"
"""The second operand of a float Concat or int8 binary point, another conv's output."""
NEIGHBOUR_OUTPUT = "x_conv"
"""The first conv's output of an int8 activation point (the Add of two convs feeds the activation)."""
BINARY = frozenset({"Add", "Mul", "Sub", "Div", "Concat"})
BLOCKED_KINDS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "Resize"})
"""Float kinds onnxruntime runs on the NCHWc layout of the convs around them (a Resize as an NCHWc Upsample):
measured between two."""
FLOAT_OUTPUTS = frozenset({"HardSigmoid", "Tanh", "Sub", "Div", "Pow", "Erf", "ReduceMean", "BatchNormalization"})
"""Ops whose output the zoo's quantizer leaves float when it is the graph's: an int8 point has a conv read it."""
VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
"""Ops that only relabel their input's shape: measured with a reader, not as the graph's output."""
MEASURED_NODE = "calibration_measured"
"""The measured node's name when its neighbours are of its own kind (a Conv between convs)."""
FORK_PREFIX = "calibration_fork_"
"""Names of the DequantizeLinear nodes :func:`keep_int8` adds (graph outputs no network has: never charged)."""
IMAGE_CHANNELS = 3
"""Conv points with this many input channels read the graph input, as a network's first conv does."""
_OPSET = 17


def build_point(point: GridPoint, seed: int = 0) -> onnx.ModelProto:
    """The float model of ``point`` (input ``x``, output ``y``): one node, or the measured node between neighbours."""
    rng = np.random.default_rng(seed)
    kind = plain_kind(anchor_kind(point.kind)).removeprefix(INT8_PREFIX)
    activations = point.kind.split(FUSED_SEPARATOR)[1:]
    if activations and kind not in ("Conv", "Conv-depthwise"):
        raise ValueError(f"no calibration model for {point.kind}")
    inits: list[TensorProto] = []

    def const(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(shape: tuple[int, ...]) -> np.ndarray:
        return (rng.standard_normal(shape) / math.sqrt(max(1, math.prod(shape[1:])))).astype(np.float32)

    outputs = ["y"]
    x2_shape: list[int] = []
    if kind == "Conv":
        h, k, s = point.get("h"), point.get("k"), point.get("s")
        c_in, c_out = point.get("c_in"), point.get("c_out")
        measured = helper.make_node("Conv", ["x", const("w", weight((c_out, c_in, k, k))), const("b", np.zeros(c_out, np.float32))],
                                    ["y"], name=MEASURED_NODE, kernel_shape=[k, k], strides=[s, s], pads=[conv_pad(k, s)] * 4)
        x_shape, nodes = [1, c_in, h, h], [measured]
        if c_in > IMAGE_CHANNELS:
            # Between two pointwise convs, as in a network: onnxruntime keeps the blocked layout (float NCHWc,
            # int8 NHWC) from conv to conv, so the layout changes a lone conv pays at its input and output
            # (half of a small conv's time) are not its cost in a model.
            x_shape = [1, DEPTHWISE_NEIGHBOUR, h, h]
            measured.input[0], measured.output[0] = MEASURED_INPUT, "t"
            nodes = [
                helper.make_node("Conv", ["x", const("w_in", weight((c_in, DEPTHWISE_NEIGHBOUR, 1, 1)))], [MEASURED_INPUT],
                                 kernel_shape=[1, 1]),
                measured,
                helper.make_node("Conv", ["t", const("w_out", weight((DEPTHWISE_NEIGHBOUR, c_out, 1, 1)))], ["y"], kernel_shape=[1, 1]),
            ]
    elif kind == "Conv-depthwise":
        # Between two pointwise convs, as in every network that has one (MobileNet, EfficientNet): onnxruntime then
        # runs it in the blocked NCHWc layout of its neighbours, which costs several times what it costs alone.
        h, k, s, c = point.get("h"), point.get("k"), point.get("s"), point.get("c")
        x_shape = [1, DEPTHWISE_NEIGHBOUR, h, h]
        nodes = [
            helper.make_node("Conv", ["x", const("w_in", weight((c, DEPTHWISE_NEIGHBOUR, 1, 1)))], [MEASURED_INPUT],
                             kernel_shape=[1, 1]),
            helper.make_node("Conv", [MEASURED_INPUT, const("w", weight((c, 1, k, k))), const("b", np.zeros(c, np.float32))],
                             ["t"], kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=c),
            helper.make_node("Conv", ["t", const("w_out", weight((DEPTHWISE_NEIGHBOUR, c, 1, 1)))], ["y"], kernel_shape=[1, 1]),
        ]
    elif kind == "ConvTranspose":  # stride 2, doubling the map, between two pointwise convs as in a decoder
        h, k, c_in, c_out = point.get("h"), point.get("k"), point.get("c_in"), point.get("c_out")
        pad = (k - 1) // 2
        x_shape = [1, DEPTHWISE_NEIGHBOUR, h, h]
        nodes = [
            helper.make_node("Conv", ["x", const("w_in", weight((c_in, DEPTHWISE_NEIGHBOUR, 1, 1)))], [MEASURED_INPUT],
                             kernel_shape=[1, 1]),
            helper.make_node("ConvTranspose", [MEASURED_INPUT, const("w", weight((c_in, c_out, k, k))),
                                               const("b", np.zeros(c_out, np.float32))], ["t"], name=MEASURED_NODE,
                             kernel_shape=[k, k], strides=[2, 2], pads=[pad] * 4, output_padding=[2 + 2 * pad - k] * 2),
            helper.make_node("Conv", ["t", const("w_out", weight((DEPTHWISE_NEIGHBOUR, c_out, 1, 1)))], ["y"], kernel_shape=[1, 1]),
        ]
    elif kind == QUANTIZED_SILU.removeprefix(INT8_PREFIX):  # a SiLU fused into a 1x1 conv that another one reads
        c, h = point.get("c"), point.get("h")
        x_shape = [1, c, h, h]
        nodes = [helper.make_node("Conv", ["x", const("w_in", weight((c, c, 1, 1)))], ["t"], kernel_shape=[1, 1]),
                 helper.make_node("Sigmoid", ["t"], ["s"]), helper.make_node("Mul", ["t", "s"], ["a"]),
                 helper.make_node("Conv", ["a", const("w_out", weight((c, c, 1, 1)))], ["y"], kernel_shape=[1, 1])]
    elif kind == "Gemm":
        m, n, b = point.get("m"), point.get("n"), point.get("b")
        x_shape = [b, n]
        nodes = [helper.make_node("Gemm", ["x", const("w", weight((m, n))), const("b", np.zeros(m, np.float32))], ["y"],
                                  transB=1)]
    elif kind == "MatMul":
        # Two activations, as attention's Q K^T and A V: each operand made by a product with a weight (so
        # quantized as a network's are), the measured product (b, m, k) x (b, k, n) reading both.
        b, m, k, n = point.get("b"), point.get("m"), point.get("k"), point.get("n")
        x_shape, x2_shape = [b, m, k], [b, k, n]
        nodes = [helper.make_node("MatMul", ["x", const("w_a", weight((k, k)))], [MEASURED_INPUT]),
                 helper.make_node("MatMul", [SECOND_INPUT, const("w_b", weight((n, n)))], [BLOCKED_SECOND]),
                 helper.make_node("MatMul", [MEASURED_INPUT, BLOCKED_SECOND], ["y"], name=MEASURED_NODE)]
    else:
        c, h, w = point.get("c"), point.get("h"), point.width()
        x_shape = x2_shape = [c, h, w] if kind == "SkipLayerNormalization" else [1, c, h, w]  # (fused on 3-D tensors only)
        if point.kind.startswith(INT8_PREFIX):
            # Between quantized ops, as in a network: each operand made by a conv, whose QuantizeLinear
            # runs in its QLinearConv (from a float graph input the quantizer leaves an op unquantized, and
            # an operand's own QuantizeLinear kernel was charged to the measured op: no network has it).
            # An activation follows an Add of two convs, as a residual block's Relu does (after a conv
            # it would fuse into it).
            x_shape = [1, DEPTHWISE_NEIGHBOUR, h, w]

            def conv(index: int, output: str) -> onnx.NodeProto:
                return helper.make_node("Conv", ["x", const(f"w_in{index}", weight((c, DEPTHWISE_NEIGHBOUR, 1, 1)))],
                                        [output], kernel_shape=[1, 1])

            if kind in ACTIVATIONS or kind == "BatchNormalization":  # (after a conv, onnxruntime folds it into it)
                nodes = [conv(0, NEIGHBOUR_OUTPUT), conv(1, BLOCKED_SECOND),
                         helper.make_node("Add", [NEIGHBOUR_OUTPUT, BLOCKED_SECOND], [MEASURED_INPUT])]
            else:
                nodes = [conv(0, MEASURED_INPUT)] + ([conv(1, BLOCKED_SECOND)] if kind in BINARY else [])
            more, outputs = _element_nodes(kind, point.variant, c, h, const, MEASURED_INPUT, BLOCKED_SECOND, w=w)
            nodes += more
            if kind in FLOAT_OUTPUTS:  # read by a conv, as MobileNetV3's HardSigmoid by its Mul: the output is quantized
                more[-1].output[0] = "t"
                nodes.append(helper.make_node("Conv", ["t", const("w_out", weight((DEPTHWISE_NEIGHBOUR, c, 1, 1)))], ["y"],
                                              kernel_shape=[1, 1]))
        elif kind == "Concat":
            # Between pointwise convs, as in a CNN's blocks: onnxruntime concatenates the convs' blocked
            # NCHWc outputs, which costs about twice a Concat of two plain graph inputs.
            x_shape = [1, DEPTHWISE_NEIGHBOUR, h, h]
            nodes = [helper.make_node("Conv", ["x", const(f"w_in{i}", weight((c, DEPTHWISE_NEIGHBOUR, 1, 1)))], [name],
                                      kernel_shape=[1, 1]) for i, name in enumerate((MEASURED_INPUT, BLOCKED_SECOND))]
            nodes += [helper.make_node("Concat", [MEASURED_INPUT, BLOCKED_SECOND], ["t"], axis=1),
                      helper.make_node("Conv", ["t", const("w_out", weight((DEPTHWISE_NEIGHBOUR, 2 * c, 1, 1)))], ["y"],
                                       kernel_shape=[1, 1])]
        elif kind in BLOCKED_KINDS:
            # Between pointwise convs, as in a CNN: onnxruntime pools (upsamples) their blocked NCHWc output, 2-3x
            # faster than a plain graph input (a 3x3/2 MaxPool of 64 x 56 x 56: 15 us so, 38 us plain).
            x_shape = [1, DEPTHWISE_NEIGHBOUR, h, w]
            more, _ = _element_nodes(kind, point.variant, c, h, const, MEASURED_INPUT)
            more[-1].output[0] = "t"
            nodes = [helper.make_node("Conv", ["x", const("w_in", weight((c, DEPTHWISE_NEIGHBOUR, 1, 1)))], [MEASURED_INPUT],
                                      kernel_shape=[1, 1]), *more,
                     helper.make_node("Conv", ["t", const("w_out", weight((DEPTHWISE_NEIGHBOUR, c, 1, 1)))], ["y"],
                                      kernel_shape=[1, 1])]
        elif kind in VIEWS:
            # Read by another op, as in a network: onnxruntime then hands the input's buffer on (a
            # view); as the graph's output it would copy it.
            more, _ = _element_nodes(kind, point.variant, c, h, const, "x")
            more[-1].output[0] = "t"
            nodes = [*more, helper.make_node("Relu", ["t"], ["y"])]
        else:
            nodes, outputs = _element_nodes(kind, point.variant, c, h, const, "x", w=w)
    for op in activations:  # after the measured conv (the last but one node, or the only one)
        anchor = nodes[-2] if len(nodes) > 1 else nodes[0]
        more, _ = _element_nodes(op, 0, 0, 0, const, anchor.output[0] + "_anchor")
        more[-1].output[0], anchor.output[0] = anchor.output[0], anchor.output[0] + "_anchor"
        nodes.insert(nodes.index(anchor) + 1, more[-1])
    shapes = {"x": x_shape, SECOND_INPUT: x2_shape}
    inputs = [name for name in ("x", SECOND_INPUT) if any(name in node.input for node in nodes)]
    graph = helper.make_graph(
        nodes, f"calibration_{kind}", [helper.make_tensor_value_info(name, TensorProto.FLOAT, shapes[name]) for name in inputs],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs], initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="cimsplit-calibrate")
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def build_glue_point(point: GridPoint) -> onnx.ModelProto:
    """The one-node model of a layout-glue point (:mod:`cimsplit.compiler.host_glue`): the kernel as onnxruntime
    inserts it, on ``c`` x ``h`` x ``h`` elements (uint8 at 0.05 / 128, as the converted pairs are)."""
    c, h = point.get("c"), point.get("h")
    op = point.kind.removeprefix(GLUE_PREFIX)
    u8, f32 = TensorProto.UINT8, TensorProto.FLOAT
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(128, np.uint8), "z")]
    if op in ("DequantizeLinear", "QuantizeLinear"):
        node = helper.make_node(op, ["x", "s", "z"], ["y"], name=MEASURED_NODE)
        types, shape = ((u8, f32) if op == "DequantizeLinear" else (f32, u8)), [1, c, h, h]
    elif op in ("Transpose-u8", "Transpose-f32"):
        node = helper.make_node("Transpose", ["x"], ["y"], name=MEASURED_NODE, perm=[0, 3, 1, 2])  # NHWC -> NCHW
        types, shape, inits = ((u8, u8) if op == "Transpose-u8" else (f32, f32)), [1, h, h, c], []
    elif op == "ReorderInput":  # NCHW -> NCHWc, on channels a multiple of both block sizes (8, 16)
        if c % 16:
            raise ValueError(f"{point.kind} on {c} channels: the grid gives a reorder whole blocks")
        node = helper.make_node(op, ["x"], ["y"], name=MEASURED_NODE, domain=NCHWC_DOMAIN)
        types, shape, inits = (f32, f32), [1, c, h, h], []
    else:
        raise ValueError(f"no calibration model for {point.kind}")
    out_shape = shape if node.domain else None  # (onnx infers none for the NCHWc domain; the blocked shape is the same)
    graph = helper.make_graph([node], f"calibration_{op}", [helper.make_tensor_value_info("x", types[0], shape)],
                              [helper.make_tensor_value_info("y", types[1], out_shape)], initializer=inits)
    opsets = [helper.make_opsetid("", _OPSET)] + ([helper.make_opsetid(NCHWC_DOMAIN, 1)] if node.domain else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="cimsplit-calibrate")
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _element_nodes(kind: str, variant: int, c: int, h: int, const: Callable[[str, np.ndarray], str],
                   x: str, second: str = SECOND_INPUT, w: int = 0) -> tuple[list[onnx.NodeProto], list[str]]:
    """The nodes of an element-wise point reading ``x`` (``c x h x w``, ``w`` = ``h`` unless given; and ``second``,
    by default the graph input ``x2``, when binary)."""
    make = helper.make_node
    unary = {"Relu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu", "Erf", "GlobalAveragePool", "Softmax", "Sqrt",
             "Softplus", "Exp"}
    if kind in unary:  # a Softmax over channels, as a detector head's (onnxruntime transposes them last and back)
        return [make(kind, [x], ["y"], **({"axis": 1} if kind == "Softmax" else {}))], ["y"]
    if kind == "Softmax" + LAST_AXIS:  # over the last axis, as attention's
        return [make("Softmax", [x], ["y"], axis=-1)], ["y"]
    if kind == "Softmax" + SECOND_LAST_AXIS:  # over the axis before it, as an int8 DFL's (onnxruntime swaps the two)
        return [make("Softmax", [x], ["y"], axis=-2)], ["y"]
    if kind == "LayerNormalization":  # over the last axis, with scale and bias, as a transformer's
        return [make(kind, [x, const("gamma", np.ones(w or h, np.float32)), const("beta", np.zeros(w or h, np.float32))], ["y"],
                     axis=-1)], ["y"]
    if kind == "Gelu":  # nn.GELU() as PyTorch exports it, x * (1 + erf(x / sqrt 2)) * 0.5: onnxruntime's one Gelu kernel
        return [make("Div", [x, const("sqrt2", np.float32(math.sqrt(2.0)))], ["gelu_d"]), make("Erf", ["gelu_d"], ["gelu_e"]),
                make("Add", ["gelu_e", const("one", np.float32(1.0))], ["gelu_a"]), make("Mul", [x, "gelu_a"], ["gelu_m"]),
                make("Mul", ["gelu_m", const("half", np.float32(0.5))], ["y"])], ["y"]
    if kind == "SiLU":  # x * Sigmoid(x), as PyTorch exports nn.SiLU: onnxruntime's one QuickGelu kernel
        return [make("Sigmoid", [x], ["silu_s"]), make("Mul", [x, "silu_s"], ["y"])], ["y"]
    if kind == "SkipLayerNormalization":  # a residual Add read by a LayerNormalization alone: one fused kernel
        norm, outputs = _element_nodes("LayerNormalization", variant, c, h, const, "skip_s", w=w)
        return [make("Add", [x, second], ["skip_s"]), *norm], outputs
    if kind in ("Squeeze", "Unsqueeze"):
        return [make(kind, [x, const("axes", np.array([0], np.int64))], ["y"])], ["y"]
    if kind == "ReduceMean":  # over the last axis, as a decomposed LayerNormalization's mean and variance
        return [make(kind, [x], ["y"], axes=[-1], keepdims=1)], ["y"]
    if kind == "Pad":  # one pixel of zeros around the map, as an explicit padding before a conv or pool
        return [make(kind, [x, const("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))], ["y"])], ["y"]
    if kind == "BatchNormalization":  # inference form, per channel
        stats = [const(name, np.full(c, value, np.float32)) for name, value in (("bn_scale", 1.5), ("bn_bias", 0.1),
                                                                                ("bn_mean", 0.2), ("bn_var", 0.9))]
        return [make(kind, [x, *stats], ["y"])], ["y"]
    if kind == "PRelu":  # one slope per channel
        return [make(kind, [x, const("slope", np.full((c, 1, 1), 0.25, np.float32))], ["y"])], ["y"]
    if kind == "Gather":  # half the channels, as a class token's or a head's selection
        return [make("Gather", [x, const("indices", np.arange(c // 2, dtype=np.int64))], ["y"], axis=1)], ["y"]
    # Two operands of their own, as in a network: one tensor read twice would give its int8
    # DequantizeLinear two readers, which onnxruntime duplicates, keeping the pair int8.
    if kind in ("Add", "Mul", "Sub", "Div"):
        return [make(kind, [x, second], ["y"])], ["y"]
    if kind == "Clip":
        return [make("Clip", [x, const("lo", np.float32(0)), const("hi", np.float32(6))], ["y"])], ["y"]
    if kind == "Pow":
        return [make("Pow", [x, const("e", np.float32(2))], ["y"])], ["y"]
    if kind == "MaxPool":
        k, s = (3, 2) if variant == 0 else (5, 1)
        return [make("MaxPool", [x], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4)], ["y"]
    if kind == "AveragePool":
        return [make("AveragePool", [x], ["y"], kernel_shape=[2, 2], strides=[2, 2])], ["y"]
    if kind == "Flatten":
        return [make("Flatten", [x], ["y"], axis=1)], ["y"]
    if kind == "Reshape":
        return [make("Reshape", [x, const("shape", np.array([1, c, h * h], np.int64))], ["y"])], ["y"]
    if kind == "Transpose":
        return [make("Transpose", [x], ["y"], perm=[0, 2, 3, 1])], ["y"]
    if kind == "Concat":
        return [make("Concat", [x, second], ["y"], axis=1)], ["y"]
    if kind == "Split":
        return [make("Split", [x, const("split", np.array([c // 2, c - c // 2], np.int64))], ["y", "z"], axis=1)], ["y", "z"]
    if kind == "Slice":
        return [make("Slice", [x, const("starts", np.array([0], np.int64)), const("ends", np.array([c // 2], np.int64)),
                               const("axes", np.array([1], np.int64))], ["y"])], ["y"]
    if kind == "Resize":
        # as PyTorch exports nn.Upsample(scale_factor=2) (YOLO's necks)
        return [make("Resize", [x, "", const("scales", np.array([1, 1, 2, 2], np.float32))], ["y"], mode="nearest",
                     coordinate_transformation_mode="asymmetric", nearest_mode="floor")], ["y"]
    raise ValueError(f"no calibration model for {kind}")


def keep_int8(model: onnx.ModelProto, *, inputs: bool, outputs: bool) -> onnx.ModelProto:
    """``model`` with a second DequantizeLinear of the measured operator's quantized input and/or output.

    Each such QuantizeLinear then feeds two DQs (the new one is an extra graph
    output), so onnxruntime keeps that pair int8, as after a fork in a real model.
    The new DQs (named :data:`FORK_PREFIX` and a number) are not the measured operator's
    work: a network's fork feeds quantized kernels, and where it feeds a float op
    the DQ it runs is predicted as layout glue (:mod:`cimsplit.compiler.host_glue`).
    """
    graph = model.graph
    source = MEASURED_INPUT if any(MEASURED_INPUT in n.output for n in graph.node) else "x"
    def find(test: Callable[[onnx.NodeProto], bool], what: str) -> onnx.NodeProto:
        found = next((n for n in graph.node if test(n)), None)
        if found is None:  # the quantizer left that side in float: no such kernel to measure
            raise RuntimeError(f"the quantized calibration model has no {what}")
        return found

    q_in = find(lambda n: n.op_type == "QuantizeLinear" and n.input[0] == source, "QuantizeLinear of its input")
    dq_in = find(lambda n: n.op_type == "DequantizeLinear" and n.input[0] == q_in.output[0], "DequantizeLinear of its input")
    measured = find(lambda n: bool(n.input) and n.input[0] == dq_in.output[0], "operator after its input's DequantizeLinear")
    q_out = find(lambda n: n.op_type == "QuantizeLinear" and n.input[0] == measured.output[0], "QuantizeLinear of its output")
    for i, q in enumerate([q for q, wanted in ((q_in, inputs), (q_out, outputs)) if wanted]):
        name = f"{FORK_PREFIX}{i}"
        graph.node.append(helper.make_node("DequantizeLinear", [q.output[0], *q.input[1:]], [name], name=name))
        graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return onnx.shape_inference.infer_shapes(model)
