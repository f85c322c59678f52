"""The partitioning problem as plain cost tables: no ONNX objects inside.

Operators are indexed 0..n-1 in a topological order.  ``t_cim_ns[v] is None``
means v is not CIM-capable (x_v = 1, eq. 5).  ``t_in_ns[v]`` / ``t_out_ns[v]``
are the graph input / output transfers v pays when placed on the CIM (DESIGN §3;
all zero under ``--paper-exact``).  ``tensors`` say which edges carry the same
tensor, for the stream model's bus (one transfer per tensor and destination
device, :mod:`cimsplit.passes.placement.stream`); without them every edge is
its own tensor.  ``slicings[v]`` lists the ways v may be split between the CIM
and the host (:class:`SliceOption`, TSO).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TensorTransfer:
    """Tensor(s) of operator ``src`` read by the operators ``dsts``; crosses the bus once when a reader sits on the other device."""

    name: str
    src: int
    dsts: tuple[int, ...]
    t_transfer_ns: float


@dataclass(frozen=True)
class SliceOption:
    """One slicing of a CIM-capable operator; times in ns."""

    kind: str
    """``ks`` (output channels) or ``ofm`` (output rows)."""
    split: int
    """Output channels (KS) or output rows (OFM) the CIM part computes: the first ``split`` of them."""
    t_host_ns: float
    """The host part."""
    t_cim_ns: float
    """The CIM part (eq. 2-3 on its slice)."""
    crossbars: int
    """Crossbars the CIM part holds."""
    t_join_ns: float
    """The Concat on the host."""
    t_back_ns: float
    """The CIM part's output to the host (eq. 4 on the slice)."""
    in_cim_ns: tuple[tuple[int, float], ...] = ()
    """(predecessor, transfer of what the CIM part reads when that predecessor's output is on the host)."""
    in_host_ns: tuple[tuple[int, float], ...] = ()
    """(predecessor, transfer of what the host part reads when that predecessor's output is on the CIM)."""
    t_graph_in_ns: float = 0.0
    """Graph input the CIM part reads (host -> CIM before it)."""

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.split}"


@dataclass(frozen=True)
class PlacementProblem:
    names: tuple[str, ...]
    t_host_ns: tuple[float, ...]
    t_cim_ns: tuple[float | None, ...]
    crossbars: tuple[int, ...]
    edges: tuple[tuple[int, int, float], ...]
    """(u, v, T_transfer,(u,v) in ns), u before v in the topological order."""
    budget: int
    """Crossbar budget C (eq. 14)."""
    t_in_ns: tuple[float, ...] = ()
    t_out_ns: tuple[float, ...] = ()
    writes_output: tuple[bool, ...] = ()
    """True where the operator writes a graph output (its finish bounds the makespan)."""
    tensors: tuple[TensorTransfer, ...] = ()
    """The edges grouped by the tensor they carry (default: one per edge, named ``src:dst``)."""
    slicings: tuple[tuple[SliceOption, ...], ...] = ()
    """Per operator, its slicing options (TSO, :mod:`cimsplit.passes.placement.slicing`); empty: none anywhere."""

    def __post_init__(self) -> None:
        n = len(self.names)
        if not self.t_in_ns:
            object.__setattr__(self, "t_in_ns", (0.0,) * n)
        if not self.t_out_ns:
            object.__setattr__(self, "t_out_ns", (0.0,) * n)
        if not self.writes_output:
            object.__setattr__(self, "writes_output", (False,) * n)
        for table in (self.t_host_ns, self.t_cim_ns, self.crossbars, self.t_in_ns, self.t_out_ns, self.writes_output):
            if len(table) != n:
                raise ValueError("every per-operator table must have one entry per operator")
        if self.slicings and len(self.slicings) != n:
            raise ValueError("slicings must have one entry per operator")
        for v, options in enumerate(self.slicings):
            if options and self.t_cim_ns[v] is None:
                raise ValueError(f"operator {self.names[v]!r} is not CIM-capable and cannot be sliced")
        for u, v, _ in self.edges:
            if not 0 <= u < v < n:
                raise ValueError(f"edge ({u}, {v}) is not forward in the topological order")
        if not self.tensors:
            object.__setattr__(self, "tensors", tuple(
                TensorTransfer(f"{self.names[u]}:{self.names[v]}", u, (v,), float(t)) for u, v, t in self.edges))
        pairs = {(u, v) for u, v, _ in self.edges}
        for tensor in self.tensors:
            if any((tensor.src, d) not in pairs for d in tensor.dsts):
                raise ValueError(f"tensor {tensor.name!r} names a reader that is not an edge of its producer")

    @property
    def n(self) -> int:
        return len(self.names)

    def capable(self, v: int) -> bool:
        return self.t_cim_ns[v] is not None
