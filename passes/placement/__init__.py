"""Placement: which operator runs on the host and which on the CIM (paper section IV-B).

Built from plain cost tables (:class:`PlacementProblem`), so nothing here needs
ONNX: the driver (:func:`place`) runs the baselines and heuristics, one exact
solve (MILP on Gurobi/HiGHS, or CP-SAT), and the independent validator.
"""

from __future__ import annotations

from cimsplit.passes.placement.baselines import all_baselines, cpu_only, greedy, single_split
from cimsplit.passes.placement.budget import BudgetCurve, budget_curve
from cimsplit.passes.placement.driver import SOLVER_CHOICES, place, problem_from_costs
from cimsplit.passes.placement.explain import OperatorExplanation, explain_operators
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import PlacementResult, Schedule, SolverStats
from cimsplit.passes.placement.simulate import host_order_by_start, simulate
from cimsplit.passes.placement.validate import InternalError, validate

__all__ = [
    "BudgetCurve",
    "InternalError",
    "OperatorExplanation",
    "PlacementProblem",
    "PlacementResult",
    "SOLVER_CHOICES",
    "Schedule",
    "SolveOptions",
    "SolverStats",
    "all_baselines",
    "budget_curve",
    "cpu_only",
    "explain_operators",
    "greedy",
    "host_order_by_start",
    "place",
    "problem_from_costs",
    "simulate",
    "single_split",
    "validate",
]
