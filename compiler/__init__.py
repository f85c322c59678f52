"""cimsplit.compiler: ONNX in -> validated workload DAG with GEMM shapes and costs (DESIGN §2-3)."""

from __future__ import annotations

from cimsplit.compiler.costs import Costs, EdgeCost, IoTransfer, OperatorCost, build_costs
from cimsplit.errors import CimsplitError
from cimsplit.compiler.frontend import LoadedModel, load, parse_input_shapes
from cimsplit.compiler.hardware import PRESETS, Hardware, load_hardware
from cimsplit.compiler.host_profile import HostProfile, cached_profile, profile_model
from cimsplit.compiler.workload import Edge, Operator, Workload

__all__ = [
    "CimsplitError",
    "Costs",
    "Edge",
    "EdgeCost",
    "Hardware",
    "HostProfile",
    "IoTransfer",
    "LoadedModel",
    "Operator",
    "OperatorCost",
    "PRESETS",
    "Workload",
    "build_costs",
    "cached_profile",
    "load",
    "load_hardware",
    "parse_input_shapes",
    "profile_model",
]
