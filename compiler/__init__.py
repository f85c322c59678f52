"""cimsplit.compiler: ONNX in -> validated workload DAG with GEMM shapes and costs (DESIGN §2-3)."""

from __future__ import annotations

from cimsplit.compiler.costs import Costs, EdgeCost, IoTransfer, OperatorCost, build_costs
from cimsplit.compiler.frontend import LoadedModel, load, parse_input_shapes
from cimsplit.compiler.hardware import PRESETS, Hardware, load_hardware
from cimsplit.compiler.host_profile import HostProfile, profile_model
from cimsplit.compiler.profile_cache import cached_profile
from cimsplit.compiler.workload import Edge, Operator, Workload
from cimsplit.errors import CimsplitError

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
