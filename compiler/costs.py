"""Cost model: host latency from profiles, CIM latency (eq. 2-3), transfers (eq. 4).

All times are floats in ns; ``bytes / (bytes/s) * 1e9`` converts a transfer,
plus bursts x CAS under the burst bus model (:mod:`cimsplit.compiler.hardware`).
The b of eq. 3 and 4 is the element size of the tensors actually moved (the
workload's byte counts: 1 byte for int8/uint8, 4 for float32); a hardware
``element_bytes`` overrides it for every tensor.  A hand-made workload that
gives no byte counts is costed as float32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cimsplit.compiler.hardware import Hardware, validate_hardware
from cimsplit.compiler.host_profile import HostProfile, operator_latencies
from cimsplit.compiler.workload import MovedTensor, Operator, Workload

__all__ = [
    "OperatorCost", "EdgeCost", "IoTransfer", "Costs",
    "build_costs", "cim_latency_ns", "transfer_ns", "row_bursts", "tensor_bursts", "moved_bytes", "crossbars_needed", "costs_to_dict",
]

_NS_PER_S = 1e9
_UNKNOWN_ELEMENT_BYTES = 4  # float32, when a workload does not say


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


def crossbars_needed(m: int, n: int, hardware: Hardware) -> int:
    """N_crossbar,v = ceil(M_v / M) * ceil(N_v / N) (eq. 1), M x N = crossbar rows x cols."""
    return math.ceil(m / hardware.crossbar_rows) * math.ceil(n / hardware.crossbar_cols)


def moved_bytes(elements: int, natural_bytes: int | None, hardware: Hardware) -> int:
    """b * elements: ``hardware.element_bytes`` when set, else the tensors' own ``natural_bytes``."""
    if hardware.element_bytes is not None:
        return hardware.element_bytes * elements
    return natural_bytes if natural_bytes is not None else _UNKNOWN_ELEMENT_BYTES * elements


def transfer_ns(size_bytes: int, hardware: Hardware, bursts: int = 0) -> float:
    """T_transfer in ns: b * elements / B_shared (eq. 4), plus ``bursts`` x CAS under the burst bus model."""
    volume_ns = size_bytes / hardware.bus_bandwidth_bytes_per_s * _NS_PER_S
    return volume_ns + bursts * hardware.cas_latency_ns if hardware.bus_model == "burst" else volume_ns


def row_bursts(shape: Sequence[int], itemsize: int, burst_bytes: int) -> int:
    """DRAM bursts to move a row-major tensor row by row (TSO-burst).

    A row is the last axis (W elements of one channel and output row); each
    row starts a new burst and takes ceil(W * itemsize / burst_bytes) of them.
    A scalar is one row of one element; an empty tensor takes none.
    """
    width = shape[-1] if shape else 1
    rows = math.prod(shape[:-1]) if shape else 1
    if width == 0 or rows == 0:
        return 0
    return rows * math.ceil(width * itemsize / burst_bytes)


def tensor_bursts(tensors: Sequence[MovedTensor], hardware: Hardware) -> int:
    """Bursts of moving ``tensors`` (:func:`row_bursts`); b is ``hardware.element_bytes`` when set."""
    return sum(row_bursts(t.shape, hardware.element_bytes or t.itemsize, hardware.burst_bytes) for t in tensors)


def cim_latency_ns(op: Operator, hardware: Hardware) -> float | None:
    """T_acc,v = T_load + N_mvm,v * T_mvm + T_store (eq. 2), T_load/T_store = b * N_in/out,v / B_cim (eq. 3).

    ``None`` for an operator that is not CIM-capable.  A fused activation adds
    nothing: the GPEU pipelines it (paper IV-A2).
    """
    if not op.cim_capable or op.n_mvm is None:
        return None
    b_cim = hardware.cim_bandwidth_bytes_per_s
    t_load_ns = moved_bytes(op.n_in, op.in_bytes, hardware) / b_cim * _NS_PER_S  # eq. 3: b * N_in,v / B_cim
    t_mvm_ns = op.n_mvm * hardware.mvm_latency_ns  # T_mvm,v = N_mvm,v * T_mvm
    t_store_ns = moved_bytes(op.n_out, op.out_bytes, hardware) / b_cim * _NS_PER_S  # eq. 3: b * N_out,v / B_cim
    return t_load_ns + t_mvm_ns + t_store_ns  # eq. 2


def build_costs(workload: Workload, hardware: Hardware, profile: HostProfile, paper_exact: bool = False) -> Costs:
    """Every cost the partitioner needs, from the workload, the hardware and a host profile.

    Edge transfers use ``Edge.elements`` (the tensors of u that v reads), not
    N_out,u as eq. 4 writes it: the two are equal for single-output operators,
    and for a multi-output operator (Split) only the part v consumes crosses
    the bus; b is the element size of what crosses (:func:`moved_bytes`).  Graph inputs and outputs live on the host, so a CIM operator that
    reads a graph input pays ``b * elements / B_shared`` before it and one that
    writes a graph output pays it after; ``paper_exact`` drops these, as the
    paper does.  Crossbar counts are recomputed for ``hardware``'s crossbar
    size from M_v and N_v (eq. 1), so a workload built for another size costs
    right.
    """
    validate_hardware(hardware)
    t_host = operator_latencies(workload, profile)
    operators = []
    io_transfers = []
    for op in workload.operators:
        t_cim = cim_latency_ns(op, hardware)
        if t_cim is None:
            crossbars = 0
        elif op.m is not None and op.n is not None:
            crossbars = crossbars_needed(op.m, op.n, hardware)
        else:
            crossbars = int(op.crossbars or 0)
        operators.append(OperatorCost(name=op.name, t_host_ns=t_host[op.name], t_cim_ns=t_cim, crossbars=crossbars))
        if t_cim is None or paper_exact:
            continue
        for direction, elements, natural, moved in (
                ("in", op.graph_input_elements, op.graph_input_bytes, op.graph_inputs_moved),
                ("out", op.graph_output_elements, op.graph_output_bytes, op.graph_outputs_moved)):
            if elements > 0:
                size_bytes = moved_bytes(elements, natural, hardware)
                io_transfers.append(IoTransfer(op.name, direction, size_bytes, transfer_ns(size_bytes, hardware, tensor_bursts(moved, hardware))))
    edges = []
    for edge in workload.edges:
        size_bytes = moved_bytes(edge.elements, edge.bytes, hardware)
        edges.append(EdgeCost(edge.src, edge.dst, size_bytes, transfer_ns(size_bytes, hardware, tensor_bursts(edge.moved, hardware))))  # eq. 4
    return Costs(
        hardware=hardware,
        operators=tuple(operators),
        edges=tuple(edges),
        io_transfers=tuple(io_transfers),
        host_profile=profile.summary(),
    )


def costs_to_dict(costs: Costs, workload: Workload) -> dict[str, Any]:
    """The JSON shape of ``cimsplit costs --json`` (operators in workload order)."""
    by_name = {op.name: op for op in workload.operators}
    return {
        "hardware": costs.hardware.to_dict(),
        "host_profile": dict(costs.host_profile),
        "operators": [
            {
                "name": cost.name,
                "op_type": by_name[cost.name].op_type,
                "nodes": list(by_name[cost.name].nodes),
                "cim_capable": by_name[cost.name].cim_capable,
                "crossbars": cost.crossbars,
                "t_host_ns": cost.t_host_ns,
                "t_cim_ns": cost.t_cim_ns,
            }
            for cost in costs.operators
        ],
        "edges": [
            {"src": edge.src, "dst": edge.dst, "bytes": edge.bytes, "t_transfer_ns": edge.t_transfer_ns}
            for edge in costs.edges
        ],
        "io_transfers": [
            {"operator": io.operator, "direction": io.direction, "bytes": io.bytes, "t_transfer_ns": io.t_transfer_ns}
            for io in costs.io_transfers
        ],
        "cpu_only_ns": costs.cpu_only_ns,
    }
