"""cimsplit.passes: the pipeline (compile_model), placement (decide), rewrite (annotate, split), emit (files), sweep."""

from __future__ import annotations

from cimsplit.passes.emit.artifacts import write_artifacts
from cimsplit.passes.emit.report import result_to_json
from cimsplit.passes.pipeline import CompileOptions, CompileResult, StageError, build_artifacts, compile_model, cost_model
from cimsplit.passes.placement.baselines import all_baselines, cpu_only, greedy, list_schedule, single_split
from cimsplit.passes.placement.driver import SOLVER_CHOICES, place, problem_from_costs
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import PlacementResult, Schedule, SolverStats
from cimsplit.passes.placement.simulate import host_order_by_start, simulate
from cimsplit.passes.placement.solvers.backend import (
    BACKENDS,
    Backend,
    BackendMissing,
    BackendOutcome,
    BackendUnavailable,
    get_backend,
)
from cimsplit.passes.placement.solvers.milp import MilpModel, build_milp
from cimsplit.passes.placement.validate import InternalError, validate
from cimsplit.passes.rewrite.annotate import annotate
from cimsplit.passes.rewrite.split import split

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendMissing",
    "BackendOutcome",
    "BackendUnavailable",
    "CompileOptions",
    "CompileResult",
    "InternalError",
    "MilpModel",
    "PlacementProblem",
    "PlacementResult",
    "SOLVER_CHOICES",
    "Schedule",
    "SolveOptions",
    "SolverStats",
    "StageError",
    "all_baselines",
    "annotate",
    "build_artifacts",
    "build_milp",
    "compile_model",
    "cost_model",
    "cpu_only",
    "get_backend",
    "greedy",
    "host_order_by_start",
    "list_schedule",
    "place",
    "problem_from_costs",
    "result_to_json",
    "simulate",
    "single_split",
    "split",
    "validate",
    "write_artifacts",
]
