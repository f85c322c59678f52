"""Cost model: host latency from profiles, CIM latency (eq. 2-3), transfers (eq. 4)."""

from __future__ import annotations

from dataclasses import dataclass

from cimsplit.compiler.hardware import Hardware


@dataclass(frozen=True)
class OperatorCost:
    name: str
    t_host_ns: float
    t_cim_ns: float | None
    """None when the operator is not CIM-capable."""
    crossbars: int
    """0 when the operator is not CIM-capable."""


@dataclass(frozen=True)
class EdgeCost:
    src: str
    dst: str
    bytes: int
    t_transfer_ns: float


@dataclass(frozen=True)
class IoTransfer:
    """A graph input read, or a graph output written, by an operator placed on the CIM."""

    operator: str
    direction: str  # "in" (host -> CIM before the operator) or "out" (CIM -> host after it)
    bytes: int
    t_transfer_ns: float


@dataclass(frozen=True)
class Costs:
    hardware: Hardware
    operators: tuple[OperatorCost, ...]
    edges: tuple[EdgeCost, ...]
    io_transfers: tuple[IoTransfer, ...]
    host_profile: dict
    """Where the host latencies came from: path or 'profiled here', fingerprint, cpu, ort version."""

    @property
    def cpu_only_ns(self) -> float:
        return sum(op.t_host_ns for op in self.operators)
