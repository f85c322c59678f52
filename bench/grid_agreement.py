"""Issue 4's must-show: Gurobi, HiGHS and CP-SAT agree on the optimum over a hardware grid.

    .venv/bin/python bench/grid_agreement.py [--models resnet18,mobilenet_v2] [--crossbars 25,50,100,200]
        [--mvm-latency-ns 50,1000] [--solvers gurobi,highs,cpsat] [--time-limit 60] [--hw x86]
        [--profile-dir bench/results/profiles] [--image-size N]

Full-size zoo models (fp32), host latencies from a SAVED profile (DIR/NAME.json,
measured once with ``profile_model(loaded, runs=5, warmup=2)`` and reused while the
model's fingerprint matches), so reruns solve the same problems.  For every model x
crossbars x MVM latency it solves the ILP with each solver (named explicitly) and
prints one row: the ILP makespan, the greedy / single-split / CPU-only baselines,
the speedup over CPU-only, and each solver's time.  Then it checks, and prints:
every solver proved optimality and all optima agree within 1e-6 relative; the
ILP is never worse than any baseline; it beats greedy strictly somewhere.
Exit status 1 if a check fails.  Solver times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import onnx
from table1 import host_profile  # bench/ is on sys.path when this script runs

from cimsplit.cli.table import format_table
from cimsplit.compiler.costs import build_costs
from cimsplit.compiler.frontend import load
from cimsplit.compiler.hardware import load_hardware
from cimsplit.models import zoo
from cimsplit.passes.placement.driver import place, problem_from_costs
from cimsplit.passes.placement.options import SolveOptions

REL_TOL = 1e-6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--crossbars", default="25,50,100,200")
    parser.add_argument("--mvm-latency-ns", default="50,1000")
    parser.add_argument("--solvers", default="gurobi,highs,cpsat")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--hw", default="x86")
    parser.add_argument("--image-size", type=int, default=None)
    parser.add_argument("--profile-dir", default="bench/results/profiles")
    args = parser.parse_args(argv)

    profile_dir = Path(args.profile_dir)
    profile_dir.mkdir(parents=True, exist_ok=True)
    solvers = args.solvers.split(",")
    rows, failures = [], []
    beats_greedy = 0
    for name in args.models.split(","):
        hardware0 = load_hardware(args.hw)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(zoo.build(name, image_size=args.image_size), path)
            loaded = load(path, crossbar_size=(hardware0.crossbar_rows, hardware0.crossbar_cols))
        tag = name if args.image_size is None else f"{name}@{args.image_size}"
        profile = host_profile(tag, loaded, profile_dir, runs=5)
        for crossbars in map(int, args.crossbars.split(",")):
            for mvm in map(float, args.mvm_latency_ns.split(",")):
                hardware = load_hardware(args.hw, crossbars=crossbars, mvm_latency_ns=mvm)
                problem = problem_from_costs(loaded.workload, build_costs(loaded.workload, hardware, profile))
                results = {s: place(problem, SolveOptions(solver=s, time_limit_s=args.time_limit)) for s in solvers}
                label = f"{tag} C={crossbars} mvm={mvm:g}ns"
                ran = {s: r.solver.name for s, r in results.items()}
                if any(ran[s] != s for s in solvers):
                    failures.append(f"{label}: a solver degraded: {ran}")
                spans = {s: r.schedule.makespan_ns for s, r in results.items()}
                first = results[solvers[0]]
                best = min(spans.values())
                for s, r in results.items():
                    if r.solver.status != "optimal":
                        failures.append(f"{label}: {s} {r.solver.status}")
                    if abs(spans[s] - best) > REL_TOL * best:
                        failures.append(f"{label}: {s} {spans[s]:.3f} ns vs best {best:.3f} ns")
                base = {k: v.makespan_ns for k, v in first.baselines.items()}
                if best > min(base.values()) * (1 + 1e-12):
                    failures.append(f"{label}: ILP {best:.1f} ns worse than a baseline {base}")
                if best < base["greedy"] * (1 - REL_TOL):
                    beats_greedy += 1
                rows.append([tag, str(crossbars), f"{mvm:g}", f"{best / 1e3:.3f}", f"{base['greedy'] / 1e3:.3f}",
                             f"{base['single_split'] / 1e3:.3f}", f"{base['cpu_only'] / 1e3:.3f}",
                             f"{base['cpu_only'] / best:.2f}x", f"{base['greedy'] / best:.3f}",
                             *[f"{results[s].solver.time_s:.2f}" for s in solvers],
                             str(max(abs(spans[s] - best) / best for s in solvers))[:8]])
                print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    print(f"Grid agreement: {args.hw}, fp32, image size {args.image_size or 'default'}, saved host profiles in "
          f"{profile_dir}, time limit {args.time_limit:g} s")
    print(format_table(["model", "crossbars", "mvm ns", "ILP us", "greedy us", "single_split us", "cpu_only us",
                        "speedup", "greedy/ILP", *[f"{s} s" for s in solvers], "max rel diff"],
                       rows, [False] + [True] * (len(rows[0]) - 1)))
    print()
    print(f"configurations: {len(rows)}; ILP strictly better than greedy on {beats_greedy}")
    if beats_greedy == 0:
        failures.append("the ILP never beats greedy")
    for text in failures:
        print(f"FAIL: {text}")
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
