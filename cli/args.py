"""Argument groups shared by subcommands (Polygraphy style): model, hardware, solver."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cimsplit.errors import CimsplitError

if TYPE_CHECKING:
    from cimsplit.compiler.costs import Costs
    from cimsplit.compiler.frontend import LoadedModel
    from cimsplit.compiler.hardware import Hardware
    from cimsplit.compiler.host_profile import HostProfile
    from cimsplit.passes.placement.result import PlacementResult


def add_model_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("model", metavar="MODEL", help="ONNX model file")
    group.add_argument(
        "--input-shape", metavar="NAME=D0,D1,...", action="append", default=[],
        help="fix the shape of a graph input with symbolic or unknown dims (repeatable)",
    )
    group.add_argument(
        "--freeze-input", metavar="NAME=VALUE", action="append", default=[],
        help="make a scalar or small graph input a constant and fold what depends on it, e.g. an If on it (repeatable)",
    )


def add_hardware_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("hardware")
    group.add_argument("--hw", default="x86", metavar="x86|arm|FILE.toml", help="hardware preset or TOML file (default x86)")
    group.add_argument("--crossbars", metavar="C", help="number of crossbars C")
    group.add_argument("--mvm-latency", metavar="T", help="latency of one MVM, e.g. 50ns or 0.05us")
    group.add_argument("--bus-bandwidth", metavar="B", help="CPU-CIM bus and CIM internal bandwidth, e.g. 20.48GB/s")
    group.add_argument("--crossbar-size", metavar="RxC", help="crossbar rows x columns, e.g. 256x256")
    group.add_argument("--host-profile", metavar="FILE", help="host latencies measured by `cimsplit profile` (default: profile this machine)")
    group.add_argument("--op-latency", metavar="NAME=DURATION", action="append", default=[],
                       help="host latency of an operator onnxruntime cannot profile (custom domain), by node name or "
                            "op type, e.g. MyOp=2us (repeatable)")
    group.add_argument("--paper-exact", action="store_true", help="no graph input/output transfers (the paper's model)")


def add_solver_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("solver")
    group.add_argument("--solver", default="auto", help="auto|gurobi|highs|cpsat (default auto)")
    group.add_argument("--time-limit", type=float, default=60.0, metavar="SECONDS", help="solver time limit (default 60)")
    group.add_argument("--mip-gap", type=float, default=None, metavar="GAP", help="relative MIP gap to stop at")
    group.add_argument("--plain", action="store_true", help="the paper's plain formulation, without cuts or tightenings")
    group.add_argument("--verbose", action="store_true", help="show solver output")


@dataclass(frozen=True)
class CostedModel:
    """What the model and hardware argument groups resolve to."""

    hardware: Hardware
    loaded: LoadedModel
    profile: HostProfile
    costs: Costs
    warnings: tuple[str, ...] = ()
    """For plan.json: operators whose host latency is unknown (compiler/opaque.py)."""


def costed_model(args: argparse.Namespace) -> CostedModel:
    """Hardware, simplified model, host profile (given or measured here) and costs, from the flags."""
    from cimsplit.compiler.costs import build_costs
    from cimsplit.compiler.freeze import parse_frozen_inputs
    from cimsplit.compiler.frontend import load, parse_input_shapes
    from cimsplit.compiler.hardware import hardware_from_args
    from cimsplit.compiler.host_profile import host_profile_for
    from cimsplit.compiler.opaque import opaque_latencies, parse_op_latencies

    hardware = hardware_from_args(args)
    loaded = load(args.model, parse_input_shapes(args.input_shape),
                  crossbar_size=(hardware.crossbar_rows, hardware.crossbar_cols),
                  frozen_inputs=parse_frozen_inputs(args.freeze_input))
    profile = host_profile_for(args, loaded)
    profile, warnings = opaque_latencies(profile, loaded.model, parse_op_latencies(getattr(args, "op_latency", None)))
    costs = build_costs(loaded.workload, hardware, profile, paper_exact=args.paper_exact)
    return CostedModel(hardware, loaded, profile, costs, warnings)


def partition_from_args(args: argparse.Namespace, costed: CostedModel) -> PlacementResult:
    """Solve the partitioning problem with the solver flags; warnings go to stderr."""
    from cimsplit.passes.placement.driver import place, problem_from_costs
    from cimsplit.passes.placement.options import SolveOptions

    problem = problem_from_costs(costed.loaded.workload, costed.costs)
    options = SolveOptions(solver=args.solver, time_limit_s=args.time_limit, mip_gap=args.mip_gap, plain=args.plain,
                           verbose=args.verbose)
    result = place(problem, options)
    if costed.warnings:  # operators without a host latency: plan.json says so
        result = dataclasses.replace(result, warnings=(*costed.warnings, *result.warnings))
    for warning in result.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    return result


def check_solver_args(args: argparse.Namespace) -> None:
    """Refuse bad solver flags before the (slow) loading and profiling."""
    from cimsplit.passes.placement.driver import SOLVER_CHOICES

    if args.solver not in SOLVER_CHOICES:
        raise CimsplitError(f"unknown solver {args.solver!r}", hint=f"--solver takes one of {', '.join(SOLVER_CHOICES)}")
    if not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise CimsplitError(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
    if args.mip_gap is not None and not (math.isfinite(args.mip_gap) and 0 <= args.mip_gap < 1):
        raise CimsplitError(f"--mip-gap must be in [0, 1), got {args.mip_gap:g}")
    if args.solver == "gurobi":
        from cimsplit.passes.placement.solvers.gurobi import import_gurobipy

        import_gurobipy()
