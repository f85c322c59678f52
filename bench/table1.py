"""Table I of the paper for the zoo models: ILP size and solve statistics, HiGHS and Gurobi, plain and improved.

    .venv/bin/python bench/table1.py [--models resnet18,resnet50,mobilenet_v2,yolov5n] [--time-limit 60]
                                     [--profile-dir DIR] [--runs 10] [--int8] [--hw x86]

At 100 crossbars and 50 ns MVM latency (the paper's headline point).  Host
latencies come from DIR/NAME.json when it exists (a profile written by
`cimsplit profile` or by an earlier run of this script); otherwise the model is
profiled once on this machine and the profile saved there.  Prints one row per
model x solver x formulation, then the improved/plain solve-time ratios.
Nothing here is an assertion: times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import onnx

from cimsplit.cli.table import format_table
from cimsplit.compiler.costs import build_costs
from cimsplit.compiler.frontend import load
from cimsplit.compiler.hardware import load_hardware
from cimsplit.compiler.host_profile import HostProfile, profile_model
from cimsplit.errors import CimsplitError
from cimsplit.models import zoo
from cimsplit.passes.placement.driver import place, problem_from_costs
from cimsplit.passes.placement.options import SolveOptions


def host_profile(name: str, loaded, profile_dir: Path, runs: int) -> HostProfile:
    path = profile_dir / f"{name}.json"
    if path.exists():
        profile = HostProfile.load(path)
        if profile.fingerprint == loaded.fingerprint:
            return profile
        print(f"# {path} is for another version of {name} (the front end changed): profiling again", file=sys.stderr)
    begin = time.perf_counter()
    profile = profile_model(loaded, runs=runs, warmup=2, progress=False)
    profile.save(path)
    print(f"# profiled {name} in {time.perf_counter() - begin:.0f} s -> {path}", file=sys.stderr)
    return profile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(zoo.NAMES))
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--profile-dir", default="out/profiles")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--int8", action="store_true", help="int8 QDQ models, as in the paper")
    parser.add_argument("--hw", default="x86")
    parser.add_argument("--crossbars", type=int, default=100)
    parser.add_argument("--mvm-latency-ns", type=float, default=50.0)
    parser.add_argument("--solvers", default="highs,gurobi")
    args = parser.parse_args(argv)

    profile_dir = Path(args.profile_dir)
    profile_dir.mkdir(parents=True, exist_ok=True)
    hardware = load_hardware(args.hw, crossbars=args.crossbars, mvm_latency_ns=args.mvm_latency_ns)
    rows = []
    times: dict[tuple[str, str, bool], float] = {}
    for name in args.models.split(","):
        model = zoo.build(name, int8=args.int8)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(model, path)
            loaded = load(path, crossbar_size=(hardware.crossbar_rows, hardware.crossbar_cols))
        tag = f"{name}{'-int8' if args.int8 else ''}"
        profile = host_profile(tag, loaded, profile_dir, args.runs)
        costs = build_costs(loaded.workload, hardware, profile)
        problem = problem_from_costs(loaded.workload, costs)
        whole = profile.model_median_ns["optimizations_all"]
        for solver in args.solvers.split(","):
            for plain in (True, False):
                try:
                    result = place(problem, SolveOptions(solver=solver, time_limit_s=args.time_limit, plain=plain))
                except CimsplitError as exc:
                    rows.append([tag, solver, "plain" if plain else "improved", "-", "-", "-", "-", exc.one_line()[:40],
                                 "-", "-", "-", "-"])
                    continue
                stats = result.solver
                ran = stats.name if stats.name == solver else f"{stats.name} (for {solver})"
                times[(tag, solver, plain)] = stats.time_s if stats.name == solver else math.nan
                rows.append([
                    tag, ran, "plain" if plain else "improved", str(stats.n_operators), str(stats.n_variables),
                    str(stats.n_constraints), f"{stats.time_s:.2f}", stats.status,
                    f"{100 * stats.gap:.2f}%", f"{result.schedule.makespan_ns / 1e6:.3f}",
                    f"{result.speedup:.2f}", f"{whole / result.schedule.makespan_ns:.2f}",
                ])
                print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    print(f"Table I: {hardware.name}, {args.crossbars} crossbars, {args.mvm_latency_ns:g} ns MVM, "
          f"time limit {args.time_limit:g} s{', int8' if args.int8 else ''}")
    print(format_table(
        ["model", "solver", "formulation", "ops", "vars", "constraints", "time s", "status", "gap", "makespan ms",
         "speedup", "vs ORT-all"],
        rows, [False, False, False, True, True, True, True, False, True, True, True, True]))
    print()
    for (tag, solver, plain), t in sorted(times.items()):
        if plain and (tag, solver, False) in times and times[(tag, solver, False)] > 0:
            print(f"{tag} {solver}: solve time plain / improved = {t / times[(tag, solver, False)]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
