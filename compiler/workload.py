"""The workload DAG G=(V, E) the cost model and the partitioner work on.

One operator per ONNX compute node of the simplified model, except that an
element-wise activation that is the only consumer of a CIM-capable operator's
output is fused into it (DESIGN §2), and quantize/dequantize nodes are fused
into the operator they belong to.  Edges carry activation tensors only.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MovedTensor:
    """A tensor as it crosses the bus: its shape and its element size as moved (int8 before a DequantizeLinear)."""

    shape: tuple[int, ...]
    itemsize: int


@dataclass(frozen=True)
class Operator:
    """One schedulable unit: an anchor ONNX node plus the nodes fused into it.

    ``m``/``n``/``n_mvm``/``crossbars`` are the GEMM lowering of eq. 1 and are
    ``None`` when the operator is not CIM-capable (``reason`` then says why).
    ``n_in``/``n_out`` count activation elements (weights excluded).
    """

    name: str
    op_type: str
    nodes: tuple[str, ...]
    cim_capable: bool
    reason: str | None
    m: int | None
    n: int | None
    n_mvm: int | None
    crossbars: int | None
    n_in: int
    n_out: int
    graph_input_elements: int = 0
    """Elements of graph inputs this operator reads directly (host -> CIM if on CIM)."""
    graph_output_elements: int = 0
    """Elements of graph outputs this operator writes (CIM -> host if on CIM)."""
    weight_shape: tuple[int, ...] | None = None
    """Logical shape of the constant weight (after its transpose/reshape chain), if any."""
    in_bytes: int | None = None
    """Bytes of the ``n_in`` elements as they are moved (a QDQ model moves the int8 tensor
    before a DequantizeLinear, 1 byte per element); None: not known (costed as float32)."""
    out_bytes: int | None = None
    """Bytes of the ``n_out`` elements as they are moved; None: not known."""
    graph_input_bytes: int | None = None
    """Bytes of ``graph_input_elements`` as they are moved; None: not known."""
    graph_output_bytes: int | None = None
    """Bytes of ``graph_output_elements`` as they are moved; None: not known."""
    graph_inputs_moved: tuple[MovedTensor, ...] = ()
    """The graph inputs counted in ``graph_input_elements``, for the burst bus model."""
    graph_outputs_moved: tuple[MovedTensor, ...] = ()
    """The graph outputs counted in ``graph_output_elements``, for the burst bus model."""
    window: int = 1
    """Taps of a pooling operator's window (its kernel's size: 9 for a 3x3 MaxPool); 1 for any other."""
    product_shape: tuple[int, int, int] | None = None
    """(rows, K, columns) of a GEMM the host's cost follows but the CIM does not run: a MatMul of two activations
    (attention's Q K^T and A V: no constant weight) or a ConvTranspose (not lowered); None for any other operator."""


@dataclass(frozen=True)
class Edge:
    """A data dependency u -> v; ``elements`` counts the tensors of u that v reads."""

    src: str
    dst: str
    elements: int
    tensors: tuple[str, ...] = ()
    """Names of the tensors of u that v reads (sorted)."""
    bytes: int | None = None
    """Bytes of those elements as they cross (int8 before a DequantizeLinear: 1 per element);
    None: not known (costed as float32)."""
    moved: tuple[MovedTensor, ...] = ()
    """The tensors counted in ``elements``, for the burst bus model."""


@dataclass(frozen=True)
class Workload:
    """Operators in a deterministic topological order, and the edges between them."""

    operators: tuple[Operator, ...]
    edges: tuple[Edge, ...]
    crossbar_rows: int = 256
    crossbar_cols: int = 256
    inputs: dict[str, tuple[int, ...]] = field(default_factory=dict)
    outputs: dict[str, tuple[int, ...]] = field(default_factory=dict)
    constant_nodes: tuple[str, ...] = ()
    """Nodes computed from constants only (e.g. DequantizeLinear of a weight) that
    belong to no operator; a partition that reads their output recomputes them."""

    def operator(self, name: str) -> Operator:
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(name)

    @property
    def cim_capable(self) -> tuple[Operator, ...]:
        return tuple(op for op in self.operators if op.cim_capable)

    @property
    def total_crossbars(self) -> int:
        """Crossbars needed to offload every CIM-capable operator."""
        return sum(op.crossbars or 0 for op in self.operators)
