"""`cimsplit costs`: the cost tables the partitioner will see, per operator and per edge.

    cimsplit costs MODEL [--input-shape NAME=D0,...] [--hw x86|arm|FILE.toml]
                   [--crossbars C] [--mvm-latency T] [--bus-bandwidth B]
                   [--crossbar-size RxC] [--host-profile FILE] [--paper-exact] [--json]

``--json`` prints one deterministic JSON document (sorted keys): the same
model, hardware and ``--host-profile`` give the same bytes.
"""

from __future__ import annotations

import argparse
import json
import sys

from cimsplit.cli.args import HardwareArgs, ModelArgs
from cimsplit.cli.table import format_table
from cimsplit.compiler.units import format_time_ns


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "costs", help="show T_host, T_acc, crossbars per operator and T_transfer per edge",
        description="Cost the model's operators: host latency from a host profile (IV-A1), CIM latency "
                    "(eq. 2-3), crossbars (eq. 1) and transfers (eq. 4).",
    )
    ModelArgs.add_to_parser(parser)
    HardwareArgs.add_to_parser(parser)
    parser.add_argument("--json", action="store_true", help="print the costs as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cimsplit.compiler.costs import costs_to_dict
    from cimsplit.compiler.hardware import describe_hardware
    from cimsplit.passes.pipeline import cost_model

    hardware = HardwareArgs.parse(args)
    costed = cost_model(ModelArgs.parse(args), hardware, HardwareArgs.compile_options(args))
    loaded, profile, costs = costed.loaded, costed.profile, costed.costs
    for warning in costed.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    workload = loaded.workload
    if args.json:
        print(json.dumps(costs_to_dict(costs, workload), sort_keys=True, indent=2))
        return 0

    print(f"hardware: {describe_hardware(hardware)}")
    print(profile.describe())
    print(f"model: {args.model} (fingerprint {loaded.fingerprint}), {len(workload.operators)} operators, "
          f"{len(workload.cim_capable)} CIM-capable, {len(workload.edges)} edges")
    print()
    rows = [
        [cost.name, op.op_type, format_time_ns(cost.t_host_ns),
         "-" if cost.t_cim_ns is None else format_time_ns(cost.t_cim_ns), str(cost.crossbars) if op.cim_capable else "-"]
        for cost, op in zip(costs.operators, workload.operators)
    ]
    print(format_table(["operator", "op_type", "T_host", "T_acc", "crossbars"], rows, [False, False, True, True, True]))
    print()
    rows = [[f"{edge.src} -> {edge.dst}", f"{edge.bytes} B", format_time_ns(edge.t_transfer_ns)] for edge in costs.edges]
    print(format_table(["edge", "bytes", "T_transfer"], rows, [False, True, True]))
    if costs.io_transfers:
        print()
        rows = [
            [io.operator, "graph input -> CIM" if io.direction == "in" else "CIM -> graph output", f"{io.bytes} B",
             format_time_ns(io.t_transfer_ns)]
            for io in costs.io_transfers
        ]
        print(format_table(["operator (if on CIM)", "transfer", "bytes", "T_transfer"], rows, [False, False, True, True]))
    capable = [cost for cost in costs.operators if cost.t_cim_ns is not None]
    print()
    print(f"CPU-only (sum of T_host):               {format_time_ns(costs.cpu_only_ns)}")
    whole_ns = profile.model_median_ns.get("optimizations_all")
    print(f"whole model, all ORT optimizations:     {'not measured' if whole_ns is None else format_time_ns(whole_ns)}")
    print(f"CIM-capable operators on the host:      {format_time_ns(sum(c.t_host_ns for c in capable))}")
    print(f"CIM-capable operators on the CIM:       {format_time_ns(sum(c.t_cim_ns or 0.0 for c in capable))}")
    print(f"crossbars to offload all of them:       {sum(c.crossbars for c in capable)} (budget {hardware.crossbars})")
    print(f"transfers if every edge crossed:        {format_time_ns(sum(e.t_transfer_ns for e in costs.edges))}")
    return 0
