"""cimsplit.passes: partition (ILP, solver backends, baselines, validator), then rewrite."""

from __future__ import annotations

from cimsplit.passes.annotate import annotate
from cimsplit.passes.backend import (
    BACKENDS,
    Backend,
    BackendMissing,
    BackendOutcome,
    BackendUnavailable,
    SolveOptions,
    get_backend,
)
from cimsplit.passes.baselines import all_baselines, cpu_only, greedy, list_schedule, single_split
from cimsplit.passes.emit import build_artifacts, write_artifacts
from cimsplit.passes.ilp import MilpModel, build_milp
from cimsplit.passes.partition import SOLVER_CHOICES, partition, problem_from_costs
from cimsplit.passes.problem import PartitionProblem
from cimsplit.passes.report import result_to_json
from cimsplit.passes.result import PartitionResult, Schedule, SolverStats
from cimsplit.passes.schedule import host_order_by_start, simulate
from cimsplit.passes.split import split
from cimsplit.passes.validate import InternalError, validate

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendMissing",
    "BackendOutcome",
    "BackendUnavailable",
    "InternalError",
    "MilpModel",
    "PartitionProblem",
    "PartitionResult",
    "SOLVER_CHOICES",
    "Schedule",
    "SolveOptions",
    "SolverStats",
    "all_baselines",
    "annotate",
    "build_artifacts",
    "build_milp",
    "cpu_only",
    "get_backend",
    "greedy",
    "host_order_by_start",
    "list_schedule",
    "partition",
    "problem_from_costs",
    "result_to_json",
    "simulate",
    "single_split",
    "split",
    "validate",
    "write_artifacts",
]
