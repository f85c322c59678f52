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

from cimsplit.cli.args import HardwareArgs, ModelArgs, SolverArgs
from cimsplit.cli.table import format_table
from cimsplit.compiler.units import format_time_ns

SOLVER = SolverArgs(stream=True)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "partition", help="place operators on host or CIM (ILP) and compare with the baselines",
        description="Solve the partitioning ILP of section IV-B for MODEL and print the schedule beside the "
                    "CPU-only, greedy and single-split baselines, with the Table I statistics of the solve.",
    )
    ModelArgs.add_to_parser(parser)
    HardwareArgs.add_to_parser(parser)
    SOLVER.add_to_parser(parser)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def _gap_text(gap: float) -> str:
    return "-" if not math.isfinite(gap) else f"{100 * gap:.2f} %"


def run(args: argparse.Namespace) -> int:
    from cimsplit.compiler.hardware import describe_hardware
    from cimsplit.passes.emit.report import result_to_json, schedule_summary
    from cimsplit.passes.pipeline import cost_model, place_model
    from cimsplit.passes.placement.driver import MILP_SOLVERS

    solve = SOLVER.parse(args)
    hardware = HardwareArgs.parse(args)
    options = HardwareArgs.compile_options(args, solve)
    costed = cost_model(ModelArgs.parse(args), hardware, options)
    loaded, profile, costs = costed.loaded, costed.profile, costed.costs
    workload = loaded.workload
    result = place_model(costed, options).result
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
    label = f"{kind} ({stats.name}{', plain' if solve.plain and kind == 'ILP' else ''})"
    rows = []
    for name, schedule in [(label, result.schedule), *result.baselines.items()]:
        summary = schedule_summary(result, schedule)
        rows.append([name, format_time_ns(summary["makespan_ns"]), f"{summary['speedup']:.2f}x",
                     str(summary["operators_on_cim"]), f"{summary['crossbars_used']}/{result.problem.budget}"])
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
    if result.stream is not None:
        stream = result.stream
        rate = 1e9 / stream.period_ns if stream.period_ns > 0 else float("inf")
        print(f"stream ({result.objective} objective): period {format_time_ns(stream.period_ns)} ({rate:.1f} frames/s), "
              f"frame latency {format_time_ns(stream.latency_ns)}, {stream.frames_in_flight} frames in flight")
    whole = profile.model_median_ns.get("optimizations_all")
    print(f"CPU-only (sum of per-operator host medians): {format_time_ns(result.cpu_only_ns)} -> "
          f"speedup {result.speedup:.2f}x")
    if whole:
        print(f"whole model on onnxruntime, all optimizations: {format_time_ns(whole)} -> "
              f"speedup {whole / result.schedule.makespan_ns:.2f}x")
    return 0
