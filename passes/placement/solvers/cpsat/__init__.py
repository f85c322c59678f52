"""OR-Tools CP-SAT: the whole-graph model, its cuts, the solve, the staged solve and the bottleneck segments."""

from __future__ import annotations

from cimsplit.passes.placement.solvers.cpsat.model import CpSatModel, build_model, time_unit_ns
from cimsplit.passes.placement.solvers.cpsat.solve import CpSatOptions, CpSatRun, solve_cpsat
from cimsplit.passes.placement.solvers.cpsat.staged import CpSatBackend, solve_staged

__all__ = ["CpSatBackend", "CpSatModel", "CpSatOptions", "CpSatRun", "build_model", "solve_cpsat", "solve_staged",
           "time_unit_ns"]
