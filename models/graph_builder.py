"""A small ONNX graph builder for the zoo: nodes, seeded weights, one model out.

The builders in this package write graphs the way ``torch.onnx.export`` does
for a model in eval mode: every convolution is a ``Conv`` followed by a
``BatchNormalization`` with its own parameters (so that the front end's BN
folding is exercised), weights are initializers, and every node has a unique,
readable name taken from the module path of the reference implementation
(``layer1.0.conv1``, ``features.3.conv.1.0``, ``model.24.m.0``).

Weights are deterministic random draws from one ``numpy.random.Generator``:
He-normal convolutions (std = sqrt(2 / fan_in), the scaling that keeps the
second moment of ReLU networks constant with depth) and BatchNormalization
statistics that are "sane" (positive variance, scale near one), so that the
activations stay finite through fifty layers and int8 calibration sees a
useful range.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["GraphBuilder", "OPSET", "IR_VERSION", "EMBEDDINGS_KEY", "image_input", "make_divisible", "float_output"]

OPSET = 17
# IR version 8 is what onnx 1.13-1.15 wrote for opset 17 and what every
# onnxruntime since 1.14 reads; onnx 1.23 would otherwise stamp a newer one.
IR_VERSION = 8
PRODUCER = "cimsplit.models"
EMBEDDINGS_KEY = "cimsplit.embeddings"  # metadata: comma-separated learned initializers that feed no layer


class GraphBuilder:
    """Accumulates nodes and initializers; ``model()`` turns them into a ModelProto.

    Every op helper takes the node name first and returns the name of the
    output tensor (``<node name>_out``), so builders read like the forward
    pass of the reference module.
    """

    def __init__(self, graph_name: str, seed: int) -> None:
        self.graph_name = graph_name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._node_names: set[str] = set()
        self._tensor_names: set[str] = set()
        self.embeddings: list[str] = []

    # ----------------------------------------------------------------- basics
    def constant(self, name: str, array: np.ndarray) -> str:
        """Add an initializer (kept in its dtype) and return its name."""
        if name in self._tensor_names:
            raise ValueError(f"duplicate tensor name {name!r}")
        self._tensor_names.add(name)
        self.initializers.append(numpy_helper.from_array(np.array(array, order="C"), name))  # 0-d stays 0-d
        return name

    def embedding(self, name: str, array: np.ndarray) -> str:
        """A learned tensor that is no layer's weight (ViT's class token and position embedding).

        :func:`cimsplit.models.zoo.parameter_count` finds layer weights from
        the ops that consume them; these it finds in the model's metadata
        (``EMBEDDINGS_KEY``), which :meth:`model` writes when there are any.
        """
        self.embeddings.append(name)
        return self.constant(name, array)

    def node(
        self, op_type: str, name: str, inputs: list[str], n_outputs: int = 1, out: str | None = None, **attrs: object,
    ) -> list[str]:
        """Add one node named ``name``; returns its output tensor names.

        ``out`` names the (single) output explicitly, for graph outputs.
        """
        if not name or name in self._node_names:
            raise ValueError(f"duplicate or empty node name {name!r}")
        self._node_names.add(name)
        if out is not None:
            outputs = [out]
        else:
            outputs = [f"{name}_out" if n_outputs == 1 else f"{name}_out{i}" for i in range(n_outputs)]
        for out in outputs:
            if out in self._tensor_names:
                raise ValueError(f"duplicate tensor name {out!r}")
            self._tensor_names.add(out)
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, **attrs))
        return outputs

    def op(self, op_type: str, name: str, inputs: list[str], out: str | None = None, **attrs: object) -> str:
        """Single-output :meth:`node`."""
        return self.node(op_type, name, inputs, out=out, **attrs)[0]

    # ------------------------------------------------------- layers with weights
    def conv(
        self, name: str, x: str, c_in: int, c_out: int, kernel: int, stride: int = 1,
        pad: int | None = None, groups: int = 1, bias: bool = False,
    ) -> str:
        """Conv2d with He-normal weights (C_out, C_in/g, k, k); pad defaults to k//2."""
        pad = kernel // 2 if pad is None else pad
        fan_in = (c_in // groups) * kernel * kernel
        w = self.rng.standard_normal((c_out, c_in // groups, kernel, kernel)) * np.sqrt(2.0 / fan_in)
        inputs = [x, self.constant(f"{name}.weight", w.astype(np.float32))]
        if bias:
            b = self.rng.uniform(-1.0, 1.0, c_out) / np.sqrt(fan_in)
            inputs.append(self.constant(f"{name}.bias", b.astype(np.float32)))
        return self.op(
            "Conv", name, inputs, dilations=[1, 1], group=groups, kernel_shape=[kernel, kernel],
            pads=[pad, pad, pad, pad], strides=[stride, stride],
        )

    def batchnorm(self, name: str, x: str, channels: int, eps: float = 1e-5, gamma_scale: float = 1.0) -> str:
        """BatchNormalization in inference form, with positive running variance.

        ``gamma_scale`` shrinks the scale of a BN that closes a residual branch,
        the way trained networks (and torchvision's zero_init_residual) keep
        the sum ``x + f(x)`` from doubling its variance at every block.
        """
        gamma = self.rng.uniform(0.5, 1.0, channels) * gamma_scale
        beta = self.rng.normal(0.0, 0.1, channels)
        mean = self.rng.normal(0.0, 0.1, channels)
        var = self.rng.uniform(0.5, 1.5, channels)
        inputs = [x]
        for field, value in (("weight", gamma), ("bias", beta), ("running_mean", mean), ("running_var", var)):
            inputs.append(self.constant(f"{name}.{field}", value.astype(np.float32)))
        return self.op("BatchNormalization", name, inputs, epsilon=eps, momentum=0.9)

    def gemm(self, name: str, x: str, k_in: int, n_out: int, out: str | None = None) -> str:
        """Linear layer as Gemm(x, W^T) + b with W of shape (n_out, k_in) and transB=1."""
        w = self.rng.standard_normal((n_out, k_in)) * np.sqrt(1.0 / k_in)
        b = self.rng.uniform(-1.0, 1.0, n_out) / np.sqrt(k_in)
        return self.op(
            "Gemm", name,
            [x, self.constant(f"{name}.weight", w.astype(np.float32)), self.constant(f"{name}.bias", b.astype(np.float32))],
            out=out, alpha=1.0, beta=1.0, transB=1,
        )

    def linear(self, name: str, x: str, k_in: int, n_out: int, weight_scale: float = 1.0) -> str:
        """nn.Linear on a 3-d input as PyTorch exports it: MatMul(x, W^T) then Add(bias).

        The initializer ``name.weight`` holds W^T, shape (k_in, n_out), as the
        exporter folds the transpose; the MatMul is node ``name``, the Add
        ``name.bias_add`` (the front end fuses it into the MatMul's operator).
        ``weight_scale`` shrinks a layer that closes a residual branch (see
        :meth:`batchnorm`'s ``gamma_scale``).
        """
        w = self.rng.standard_normal((k_in, n_out)) * np.sqrt(1.0 / k_in) * weight_scale
        b = self.rng.uniform(-1.0, 1.0, n_out) / np.sqrt(k_in)
        y = self.op("MatMul", name, [x, self.constant(f"{name}.weight", w.astype(np.float32))])
        return self.op("Add", f"{name}.bias_add", [y, self.constant(f"{name}.bias", b.astype(np.float32))])

    def layernorm(self, name: str, x: str, dim: int, eps: float = 1e-6) -> str:
        """LayerNormalization over the last axis (opset 17), scale near one."""
        gamma = self.rng.uniform(0.5, 1.0, dim)
        beta = self.rng.normal(0.0, 0.1, dim)
        return self.op(
            "LayerNormalization", name,
            [x, self.constant(f"{name}.weight", gamma.astype(np.float32)), self.constant(f"{name}.bias", beta.astype(np.float32))],
            axis=-1, epsilon=eps,
        )

    def squeeze_excitation(
        self, name: str, x: str, channels: int, squeeze: int, activation: str, scale_activation: str,
    ) -> str:
        """torchvision.ops.SqueezeExcitation: x * scale_act(fc2(act(fc1(avgpool(x))))).

        fc1/fc2 are biased 1x1 Convs; ``activation`` is "relu" or "silu"
        (Sigmoid + Mul, as PyTorch exports SiLU), ``scale_activation``
        "sigmoid" or "hardsigmoid" (PyTorch's relu6(x + 3) / 6 is ONNX
        HardSigmoid with alpha 1/6, beta 0.5).
        """
        s = self.op("GlobalAveragePool", f"{name}.avgpool", [x])
        s = self.conv(f"{name}.fc1", s, channels, squeeze, 1, pad=0, bias=True)
        if activation == "relu":
            s = self.op("Relu", f"{name}.activation", [s])
        else:
            s = self.op("Mul", f"{name}.activation.mul", [s, self.op("Sigmoid", f"{name}.activation.sigmoid", [s])])
        s = self.conv(f"{name}.fc2", s, squeeze, channels, 1, pad=0, bias=True)
        if scale_activation == "sigmoid":
            s = self.op("Sigmoid", f"{name}.scale_activation", [s])
        else:
            s = self.op("HardSigmoid", f"{name}.scale_activation", [s], alpha=1.0 / 6.0, beta=0.5)
        return self.op("Mul", f"{name}.mul", [s, x])

    # ----------------------------------------------------------------- output
    def model(
        self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto], doc: str,
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.graph_name, inputs, outputs, initializer=self.initializers)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=PRODUCER,
            producer_version="0.1.0", doc_string=doc,
        )
        model.ir_version = IR_VERSION
        if self.embeddings:
            helper.set_model_props(model, {EMBEDDINGS_KEY: ",".join(self.embeddings)})
        return model


def make_divisible(value: float, divisor: int = 8) -> int:
    """torchvision's ``_make_divisible``: round to a multiple of ``divisor``, never more than 10 % down."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def image_input(name: str, batch: int, size: int, dynamic_batch: bool) -> onnx.ValueInfoProto:
    """A float32 NCHW image input; ``dynamic_batch`` writes the symbolic dim ``batch``."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch" if dynamic_batch else batch, 3, size, size])


def float_output(name: str, dims: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)
