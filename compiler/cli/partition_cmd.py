"""`cimsplit partition`: place every operator on the host or the CIM (ILP of section IV-B).

    cimsplit partition MODEL [--input-shape NAME=D0,...] [hardware flags of `cimsplit costs`]
                       [--solver auto|gurobi|highs|cpsat] [--time-limit S] [--mip-gap G]
                       [--plain] [--verbose] [--json]

Prints the ILP's schedule beside the baselines (makespan, speedup over CPU-only,
operators on the CIM, crossbars used), the Table I statistics of the solve, and
the speedup against the whole model on onnxruntime with all optimizations.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from cimsplit.compiler.cli.args import add_hardware_args, add_model_args, add_solver_args
from cimsplit.compiler.cli.table import format_table
from cimsplit.compiler.errors import CimsplitError
from cimsplit.compiler.units import format_time_ns


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "partition", help="place operators on host or CIM (ILP) and compare with the baselines",
        description="Solve the partitioning ILP of section IV-B for MODEL and print the schedule beside the "
                    "CPU-only, greedy and single-split baselines, with the Table I statistics of the solve.",
    )
    add_model_args(parser)
    add_hardware_args(parser)
    add_solver_args(parser)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def check_solver_args(args: argparse.Namespace) -> None:
    """Refuse bad solver flags before the (slow) loading and profiling."""
    from cimsplit.passes.partition import SOLVER_CHOICES

    if args.solver not in SOLVER_CHOICES:
        raise CimsplitError(f"unknown solver {args.solver!r}", hint=f"--solver takes one of {', '.join(SOLVER_CHOICES)}")
    if not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise CimsplitError(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
    if args.mip_gap is not None and not (math.isfinite(args.mip_gap) and 0 <= args.mip_gap < 1):
        raise CimsplitError(f"--mip-gap must be in [0, 1), got {args.mip_gap:g}")
    if args.solver == "gurobi":
        from cimsplit.passes.gurobi_backend import import_gurobipy

        import_gurobipy()


def _gap_text(gap: float) -> str:
    return "-" if not math.isfinite(gap) else f"{100 * gap:.2f} %"


def run(args: argparse.Namespace) -> int:
    from cimsplit.compiler.costs import build_costs
    from cimsplit.compiler.frontend import load, parse_input_shapes
    from cimsplit.compiler.hardware import describe_hardware, hardware_from_args
    from cimsplit.compiler.host_profile import host_profile_for
    from cimsplit.passes.partition import MILP_SOLVERS, partition, problem_from_costs
    from cimsplit.passes.report import result_to_json, schedule_summary

    check_solver_args(args)
    hardware = hardware_from_args(args)
    loaded = load(args.model, parse_input_shapes(args.input_shape),
                  crossbar_size=(hardware.crossbar_rows, hardware.crossbar_cols))
    profile = host_profile_for(args, loaded)
    workload = loaded.workload
    costs = build_costs(workload, hardware, profile, paper_exact=args.paper_exact)
    problem = problem_from_costs(workload, costs)
    result = partition(problem, solver=args.solver, time_limit_s=args.time_limit, mip_gap=args.mip_gap,
                       plain=args.plain, verbose=args.verbose)
    for warning in result.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    if args.json:
        document = result_to_json(result, workload, costs, profile=profile)
        print(json.dumps(document, sort_keys=True, indent=2))
        return 0

    stats = result.solver
    print(f"hardware: {describe_hardware(hardware)}")
    print(profile.describe())
    print(f"model: {args.model}, {len(workload.operators)} operators, {len(workload.cim_capable)} CIM-capable, "
          f"{len(workload.edges)} edges")
    print(f"solver: {stats.reason}")
    print()
    kind = "ILP" if stats.name in MILP_SOLVERS else stats.name.upper()
    label = f"{kind} ({stats.name}{', plain' if args.plain and kind == 'ILP' else ''})"
    rows = []
    for name, schedule in [(label, result.schedule), *result.baselines.items()]:
        summary = schedule_summary(result, schedule)
        rows.append([name, format_time_ns(summary["makespan_ns"]), f"{summary['speedup']:.2f}x",
                     str(summary["operators_on_cim"]), f"{summary['crossbars_used']}/{problem.budget}"])
    print(format_table(["schedule", "makespan", "speedup", "ops on CIM", "crossbars"], rows,
                       [False, True, True, True, True]))
    print()
    rows = [[str(stats.n_operators), str(stats.n_variables), str(stats.n_constraints), f"{stats.time_s:.3f} s",
             format_time_ns(stats.objective_ns), format_time_ns(stats.bound_ns), _gap_text(stats.gap), stats.status,
             stats.name]]
    print("Table I statistics:")
    print(format_table(["operators", "variables", "constraints", "solve time", "objective", "best bound", "MIP gap",
                        "status", "solver"], rows, [True, True, True, True, True, True, True, False, False]))
    print()
    whole = profile.model_median_ns.get("optimizations_all")
    print(f"CPU-only (sum of per-operator host medians): {format_time_ns(result.cpu_only_ns)} -> "
          f"speedup {result.speedup:.2f}x")
    if whole:
        print(f"whole model on onnxruntime, all optimizations: {format_time_ns(whole)} -> "
              f"speedup {whole / result.schedule.makespan_ns:.2f}x")
    return 0
