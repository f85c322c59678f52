"""The kernels onnxruntime runs for a GEMM operator's fused activation, read from its optimized graph.

The workload fuses an activation into the conv or GEMM it follows (SiLU's
Sigmoid and Mul, a Relu, with their Q/DQ nodes).  What that costs depends on
what onnxruntime makes of it, so for each GEMM operator with a fused
activation, :func:`activation_kernels` lists the kernels of the regions
(:mod:`cimsplit.compiler.kernel_attribution`) made of its activation's nodes
alone (from the first activation node on), each with the calibrated kind of
what it is: ``glue:QuantizeLinear`` / ``glue:DequantizeLinear`` for Q/DQ,
``int8:<Op>`` for a ``QLinear<Op>``, the float ``<Op>`` otherwise, at N_out
elements out (times the kernel's charged fraction) and N_out per tensor it
reads in.  Regions that hold the anchor's nodes are the GEMM kind's (its
calibration points have them too), regions shared with another operator that
operator's, regions with a Transpose layout glue
(:mod:`cimsplit.compiler.host_glue`).  Nothing is measured.

* Quantized: nothing when onnxruntime folds a Relu or Clip into the
  QLinearConv's range; a float Sigmoid and Mul with a QuantizeLinear and
  DequantizeLinear kernel each when the conv's int8 output is kept (YOLOv5n
  int8: 1.4 ns per output element, of which a standalone int8 Sigmoid point,
  a QLinearSigmoid, has none); the predictor takes that SiLU as one
  :data:`QUANTIZED_SILU` chain where the board has the kind.
* Float: SiLU's Sigmoid and Mul run as one QuickGelu kernel, the ``SiLU`` kind
  (:func:`kernel_kind`).  An activation folded into the conv's kernel
  (FusedConv) leaves no kernel of its own, but MLAS still applies it in a pass
  over the output after each block, which costs about what the standalone
  element-wise kernel does (MobileNetV2's 1x1 expansion convs
  with their Clip: 0.75-0.90 of their profiled time without it, 0.97-1.07 with
  it, on one board); a Relu (:data:`IN_REGISTER`) is applied in the kernel's
  registers and costs nothing (ResNet-50's convs: over-predicted by 3-5 % with
  it); a folded HardSwish is one pass too, predicted as a HardSigmoid's (:data:`ONE_PASS`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from cimsplit.compiler.host_chains import KERNEL_KINDS
from cimsplit.compiler.host_glue import GLUE_PREFIX
from cimsplit.compiler.host_model import INT8_PREFIX, fused_activations
from cimsplit.compiler.kernel_attribution import Region, attribute_kernels
from cimsplit.compiler.workload import Operator, Workload

__all__ = ["activation_kernels", "activation_nodes", "kernel_kind", "quantized_silu", "IN_REGISTER", "ONE_PASS", "QUANTIZED_SILU",
           "SILU_CHAIN_KERNELS"]

_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})
IN_REGISTER = frozenset({"Relu"})
"""Activations MLAS's conv kernels apply in registers (``MLAS_CONV_KERNEL_FLAG_RELU_ACTIVATION`` in onnxruntime's
``mlas/lib/sconv.h``; any other is ``MLAS_CONV_KERNEL_FLAG_OTHER_ACTIVATION``, a pass over the output)."""
ONE_PASS = {"HardSwish": "HardSigmoid"}
"""Folded activations whose pass over the output a calibrated kind's one pass predicts: a HardSwish of its own runs
as its function body (HardSigmoid, then Mul reading two tensors), folded it is one pass computing x * HardSigmoid(x)
(MobileNetV3-Small's NCHWc convs with their HardSwish: 18-28 % over their profiled time as the two kernels)."""


QUANTIZED_SILU = INT8_PREFIX + "SiLU-chain"
"""The calibrated kind of a quantized conv's fused SiLU: its Sigmoid, Mul and their Q/DQ kernels, measured together
after an int8 conv and before another, as YOLO's and EfficientNet's run them (:func:`quantized_silu`).  Predicted
kernel by kernel from their own points, the chain came to 0.57-0.60 of its profiled time in YOLOv5n, YOLOv8n and
EfficientNet-B0 int8 on the Intel Xeon VM, its Mul to 0.34-0.38 (the board's points then ran 1.2x slower than it
says): in the chain the Mul reads a tensor the Sigmoid read before it, which costs it 1.4-1.7x what the same Mul
costs on operands of its own."""


SILU_CHAIN_KERNELS = frozenset({"Sigmoid", "Mul", GLUE_PREFIX + "QuantizeLinear", GLUE_PREFIX + "DequantizeLinear"})
"""The kernels' kinds of a :data:`QUANTIZED_SILU` chain (:func:`activation_kernels`): a U8S8 model's SiLU runs as
QLinearSigmoid and QLinearMul instead (``int8:Sigmoid``, ``int8:Mul``), which their own kinds predict."""


def activation_nodes(op: Operator, node_types: Mapping[str, str]) -> list[str]:
    """A GEMM operator's nodes from its first fused activation node on (none without one)."""
    activations = set(fused_activations(op, node_types))
    first = next((i for i, node in enumerate(op.nodes) if i > 0 and node_types.get(node) in activations), len(op.nodes))
    return list(op.nodes[first:])


def quantized_silu(op: Operator, node_types: Mapping[str, str]) -> bool:
    """A GEMM operator whose fused activation is a SiLU between Q/DQ pairs (:data:`QUANTIZED_SILU`)."""
    nodes = activation_nodes(op, node_types)
    return sorted({node_types.get(node) for node in nodes} - _QDQ) == ["Mul", "Sigmoid"] and any(
        node_types.get(node) in _QDQ for node in nodes)


def kernel_kind(op_type: str) -> str:
    """The calibrated kind that predicts one kernel of a fused activation.

    onnxruntime fuses a float SiLU (x * Sigmoid(x)) into com.microsoft's QuickGelu, calibrated as its own pattern
    (:data:`~cimsplit.compiler.host_chains.KERNEL_KINDS`).
    """
    if op_type in KERNEL_KINDS:
        return KERNEL_KINDS[op_type]
    if op_type in _QDQ:
        return GLUE_PREFIX + op_type
    if op_type.startswith("QLinear"):
        return INT8_PREFIX + op_type.removeprefix("QLinear")
    return op_type


def activation_kernels(simplified: onnx.ModelProto, optimized: onnx.ModelProto, workload: Workload,
                       regions: Sequence[Region] | None = None) -> dict[str, list[tuple[str, dict[str, float]]]]:
    """GEMM operator with a fused activation -> [(kind, features)] of what its activation costs
    (an empty list: nothing); ``n_in`` counts every tensor a kernel reads (SiLU's Mul: two).
    ``regions``: :func:`~.kernel_attribution.attribute_kernels` of the two graphs, when the caller has them."""
    types = {node.name: node.op_type for node in simplified.graph.node}
    kernel_types = {node.name: node.op_type for node in optimized.graph.node}
    constants = {init.name for init in optimized.graph.initializer}
    operands = {node.name: max(1, sum(1 for name in node.input if name and name not in constants))
                for node in optimized.graph.node}
    owner: dict[str, str] = {}
    elements: dict[str, float] = {}
    for op in workload.operators:
        if not fused_activations(op, types):
            continue
        owner.update((node, op.name) for node in activation_nodes(op, types))
        elements[op.name] = float(max(op.n_out, 1))
    found: dict[str, list[tuple[str, dict[str, float]]]] = {name: [] for name in elements}
    for region in attribute_kernels(simplified, optimized) if regions is None else regions:
        names = {owner.get(node) for node in region.nodes}
        if len(names) != 1 or None in names:
            continue
        name = names.pop()
        assert name is not None
        if any(kernel_types[kernel] == "Transpose" for kernel, _ in region.kernels):
            continue  # layout glue, :mod:`cimsplit.compiler.host_glue`'s
        for kernel, fraction in region.kernels:
            n_out = elements[name] * fraction
            found[name].append((kernel_kind(kernel_types[kernel]), {"n_in": n_out * operands[kernel], "n_out": n_out}))
    for op in workload.operators:
        quantized = any(types.get(node) in _QDQ for node in op.nodes)
        if op.name in found and not found[op.name] and not quantized:  # folded into the float kernel: a pass over its output
            found[op.name] = [(ONE_PASS.get(act, act), {"n_in": elements[op.name], "n_out": elements[op.name]})
                              for act in fused_activations(op, types) if act not in IN_REGISTER]
    return found
