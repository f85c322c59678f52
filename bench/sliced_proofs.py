"""Does the default slicing prove its plans?  The paper grid, int8 zoo, x86, this machine's profiles.

For each model, crossbars C in {25, 50, 100, 200} and T_mvm in {50, 100, 500, 1000} ns:
cost the int8 zoo model with this machine's cached host profile (``cached_profile``, as
``sweep`` does) and every slicing candidate, place it with the default ``--slicing auto``
(one solver thread, as a sweep's points) and with ``--slicing off``, and print per point
the status, gap, time, makespan, whole-operator makespan and their ratio, operators
sliced, and how the slicing step decided (cheap bound, sliced model, segments).  The
summary: points proven within the time limit, the largest time, the slicing gain.

    .venv/bin/python bench/sliced_proofs.py [--models resnet18,resnet50,mobilenet_v2,yolov5n]
        [--crossbars 25,50,100,200] [--mvm-latency 50,100,500,1000] [--time-limit 60]
        [--out bench/results/sliced_proofs.txt]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path


def problems(name: str, crossbars: list[int], mvm_ns: list[float]):
    """(C, T_mvm, problem with every slicing candidate) for the int8 zoo model ``name``."""
    import onnx

    from cimsplit.compiler.costs import build_costs
    from cimsplit.compiler.frontend import load
    from cimsplit.compiler.hardware import load_hardware
    from cimsplit.compiler.profile_cache import cached_profile
    from cimsplit.compiler.slicing import slice_costs
    from cimsplit.models import zoo
    from cimsplit.passes.placement.driver import problem_from_costs

    preset = load_hardware("x86")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        onnx.save(zoo.build(name, int8=True), path)
        loaded = load(path, crossbar_size=(preset.crossbar_rows, preset.crossbar_cols))
    profile = cached_profile(loaded, progress=False)
    for c in crossbars:
        for t in mvm_ns:
            hardware = load_hardware("x86", crossbars=c, mvm_latency_ns=t)
            costs = build_costs(loaded.workload, hardware, profile)
            yield c, t, problem_from_costs(loaded.workload, costs, slice_costs(loaded.model, loaded.workload, costs))


def how(reason: str) -> str:
    """What decided the slicing step, from the reason line."""
    if "optimal with slicing too" in reason:
        return "cheap bound"
    if "segments" in reason:
        return "segments"
    if "no slicing option fits" in reason:
        return "nothing fits"
    return "sliced model" if "slicing" in reason else "-"


def main() -> int:
    from cimsplit.passes.placement import SolveOptions, place

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,yolov5n")
    parser.add_argument("--crossbars", default="25,50,100,200")
    parser.add_argument("--mvm-latency", default="50,100,500,1000", help="ns")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sliced_proofs.txt"))
    args = parser.parse_args()
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    say(f"# {' '.join(sys.argv)}")
    say(f"{'model':<13} {'C':>4} {'Tmvm':>5} {'status':<10} {'gap':>8} {'time s':>7} {'sliced ms':>10} "
        f"{'whole ms':>9} {'ratio':>6} {'ops sliced':>10} {'decided by':<12}")
    rows = []
    for name in args.models.split(","):
        for c, t, problem in problems(name, [int(x) for x in args.crossbars.split(",")],
                                      [float(x) for x in args.mvm_latency.split(",")]):
            options = SolveOptions(time_limit_s=args.time_limit, threads=1)
            begin = time.perf_counter()
            result = place(problem, options)
            wall = time.perf_counter() - begin
            whole = place(replace(problem, slicings=()), options)
            s = result.solver
            ratio = result.schedule.makespan_ns / whole.schedule.makespan_ns
            rows.append((name, s.status, wall, ratio))
            say(f"{name:<13} {c:>4} {int(t):>5} {s.status:<10} {s.gap:>8.3%} {wall:>7.2f} "
                f"{result.schedule.makespan_ns / 1e6:>10.4f} {whole.schedule.makespan_ns / 1e6:>9.4f} {ratio:>6.3f} "
                f"{len(result.sliced):>10} {how(s.reason):<12}")
    say("")
    for name in [*dict.fromkeys(r[0] for r in rows), "all"]:
        mine = [r for r in rows if name in ("all", r[0])]
        proven = sum(r[1] == "optimal" for r in mine)
        gains = [1 - r[3] for r in mine]
        say(f"{name:<13} proven optimal within {args.time_limit:g} s: {proven}/{len(mine)}; max time "
            f"{max(r[2] for r in mine):.2f} s, mean {sum(r[2] for r in mine) / len(mine):.2f} s; slicing gain "
            f"mean {sum(gains) / len(gains):.2%}, max {max(gains):.2%}, points sliced "
            f"{sum(g > 1e-9 for g in gains)}/{len(mine)}")
    Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
