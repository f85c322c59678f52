"""Volume (eq. 4) against burst-aware (TSO-burst) transfers: placements, makespans and Table I columns.

    .venv/bin/python bench/bus_model.py [--models resnet18,resnet50,yolov5n] [--crossbars 25,50,100]
                                        [--mvm-latency-ns 50,500] [--int8] [--time-limit 60]
                                        [--burst-bytes 64] [--cas-latency-ns 13.75] [--profile-dir DIR]

For every model and grid point the placement is solved twice on the same host
latencies, once with each bus model.  Printed per point: the operators that
change device, the volume plan's makespan, what that plan really takes when
the bus pays bursts (re-timed with burst costs), the burst-aware plan's
makespan and the gain of planning with the right bus model, and the solver
statistics of both solves (the columns of the paper's Table I).  Host
latencies come from DIR/NAME.json (see bench/table1.py).  Nothing here is an
assertion.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import onnx
from table1 import host_profile

from cimsplit.cli.table import format_table
from cimsplit.compiler.costs import build_costs
from cimsplit.compiler.frontend import load
from cimsplit.compiler.hardware import load_hardware
from cimsplit.models import zoo
from cimsplit.passes.fixed_placement import fixed_assignment
from cimsplit.passes.placement.driver import place, problem_from_costs
from cimsplit.passes.placement.options import SolveOptions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet18,resnet50,yolov5n")
    parser.add_argument("--crossbars", default="25,50,100")
    parser.add_argument("--mvm-latency-ns", default="50,500")
    parser.add_argument("--int8", action="store_true")
    parser.add_argument("--hw", default="x86")
    parser.add_argument("--burst-bytes", type=int, default=64)
    parser.add_argument("--cas-latency-ns", type=float, default=13.75)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--profile-dir", default="bench/results/profiles")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)

    profile_dir = Path(args.profile_dir)
    profile_dir.mkdir(parents=True, exist_ok=True)
    base = load_hardware(args.hw)
    rows, changed_total, points = [], 0, 0
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(zoo.build(name, int8=args.int8), path)
            loaded = load(path, crossbar_size=(base.crossbar_rows, base.crossbar_cols))
        tag = f"{name}{'-int8' if args.int8 else ''}"
        profile = host_profile(tag, loaded, profile_dir, args.runs)
        for crossbars in (int(c) for c in args.crossbars.split(",")):
            for mvm_ns in (float(t) for t in args.mvm_latency_ns.split(",")):
                volume = dataclasses.replace(base, crossbars=crossbars, mvm_latency_ns=mvm_ns)
                burst = dataclasses.replace(volume, bus_model="burst", burst_bytes=args.burst_bytes,
                                            cas_latency_ns=args.cas_latency_ns)
                options = SolveOptions(time_limit_s=args.time_limit)
                p_volume = problem_from_costs(loaded.workload, build_costs(loaded.workload, volume, profile))
                p_burst = problem_from_costs(loaded.workload, build_costs(loaded.workload, burst, profile))
                r_volume, r_burst = place(p_volume, options), place(p_burst, options)
                retimed = fixed_assignment(p_burst, r_volume.schedule.on_host).schedule.makespan_ns
                changed = sum(a != b for a, b in zip(r_volume.schedule.on_host, r_burst.schedule.on_host))
                changed_total += changed
                points += 1
                stats = [(r.solver.status, r.solver.time_s, r.solver.gap) for r in (r_volume, r_burst)]
                rows.append([
                    tag, str(crossbars), f"{mvm_ns:g}", str(changed),
                    f"{r_volume.schedule.makespan_ns / 1e6:.4f}", f"{retimed / 1e6:.4f}",
                    f"{r_burst.schedule.makespan_ns / 1e6:.4f}", f"{100 * (1 - r_burst.schedule.makespan_ns / retimed):.2f}%",
                    f"{r_burst.schedule.makespan_ns / r_volume.schedule.makespan_ns:.3f}",
                    str(r_burst.solver.n_variables), str(r_burst.solver.n_constraints),
                    *(f"{status} {time_s:.1f}s {100 * gap:.2f}%" for status, time_s, gap in stats),
                ])
                print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    print(f"Bus models on {base.name}: volume = bytes / B_shared (eq. 4); burst = {args.burst_bytes}-byte bursts x "
          f"CAS {args.cas_latency_ns:g} ns + bytes / B_shared, rows of the last axis (TSO-burst); time limit "
          f"{args.time_limit:g} s{', int8' if args.int8 else ''}")
    print(format_table(
        ["model", "C", "T_mvm ns", "ops moved", "volume ms", "volume plan, burst bus ms", "burst plan ms",
         "gain", "burst/volume", "vars", "constraints", "volume solve", "burst solve"],
        rows, [False, True, True, True, True, True, True, True, True, True, True, False, False]))
    print(f"\n{changed_total} operator moves over {points} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
