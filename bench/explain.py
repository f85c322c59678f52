"""`cimsplit explain` on the zoo: reasons, forced-move costs, budget curve, and the time they take.

    .venv/bin/python bench/explain.py [--models resnet18,mobilenet_v2,yolov5n] [--crossbars 100,25]
                                      [--time-limit 5] [--profile-dir bench/results/profiles]
                                      [--out bench/results/explain.txt]

x86, 50 ns MVM, float32 zoo models, host latencies from the saved profiles
(profiled once on this machine when missing, as bench/table1.py does).  Every
solve (the plan, each forced move, each budget-curve point) uses ``--solver
auto`` with the given time limit.  Prints, per model and budget, the reason
counts, the operators whose move costs most, the budget curve's summary, and
the time split into plan / forced moves / budget curve.  Nothing here is an
assertion: times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).parent))
from table1 import host_profile  # noqa: E402  (the saved-profile loader)

from cimsplit.cli.table import format_table  # noqa: E402
from cimsplit.compiler.costs import build_costs  # noqa: E402
from cimsplit.compiler.frontend import load  # noqa: E402
from cimsplit.compiler.hardware import load_hardware  # noqa: E402
from cimsplit.compiler.units import format_time_ns  # noqa: E402
from cimsplit.models import zoo  # noqa: E402
from cimsplit.passes.placement import SolveOptions, place, problem_from_costs  # noqa: E402
from cimsplit.passes.placement.budget import budget_curve  # noqa: E402
from cimsplit.passes.placement.explain import REASONS, explain_operators  # noqa: E402

TOP = 5


def _run(name: str, crossbars: int, time_limit_s: float, profile_dir: Path) -> tuple[list[str], list[str]]:
    hardware = load_hardware("x86", crossbars=crossbars, mvm_latency_ns=50.0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        onnx.save(zoo.build(name), path)
        loaded = load(path, crossbar_size=(hardware.crossbar_rows, hardware.crossbar_cols))
    profile = host_profile(name, loaded, profile_dir, 10)
    problem = problem_from_costs(loaded.workload, build_costs(loaded.workload, hardware, profile))
    options = SolveOptions(time_limit_s=time_limit_s)
    solves = Counter()

    def solve(p):
        solves["n"] += 1
        return place(p, options)

    begin = time.perf_counter()
    plan = place(problem, options)
    plan_s = time.perf_counter() - begin
    not_capable = {op.name: op.reason or "" for op in loaded.workload.operators if not op.cim_capable}
    begin = time.perf_counter()
    reasons = explain_operators(plan, solve, not_capable=not_capable)
    reasons_s, forced_solves = time.perf_counter() - begin, solves["n"]
    begin = time.perf_counter()
    curve = budget_curve(plan, solve)
    curve_s = time.perf_counter() - begin
    counts = Counter(e.reason for e in reasons)
    unproven = sum(1 for e in reasons if e.forced is not None and e.forced.status not in ("optimal", "shortcut", "impossible"))
    capable = sum(1 for v in range(problem.n) if problem.capable(v))
    total = plan_s + reasons_s + curve_s
    row = [f"{name}@{crossbars}", str(problem.n), str(capable), format_time_ns(plan.schedule.makespan_ns),
           plan.solver.status, *(str(counts.get(r, 0)) for r in REASONS), f"{forced_solves}/{capable}",
           str(unproven), str(curve.saturation), str(len(curve.placement_changes)), str(curve.solves),
           f"{plan_s:.1f}", f"{reasons_s:.1f}", f"{curve_s:.1f}", f"{total:.1f}", f"{total / max(plan_s, 1e-9):.0f}x"]
    costly = sorted((e for e in reasons if e.saving_ns), key=lambda e: -e.saving_ns)[:TOP]
    lines = [f"{name} at {crossbars} crossbars: plan {format_time_ns(plan.schedule.makespan_ns)} "
             f"({plan.crossbars_used} of {crossbars} crossbars); costliest moves:"]
    lines += [f"  {e.name}: {e.device} -> {e.forced.device}, +{format_time_ns(e.saving_ns)} ({e.reason}"
              + (f", displaces {len(e.displaced)}" if e.displaced else "") + ")" for e in costly]
    marg = [(p.crossbars, curve.marginal_ns(p.crossbars)) for p in curve.points[:-1]]
    best = max(marg, key=lambda m: m[1] or 0.0, default=None)
    here = curve.marginal_ns(min(crossbars, curve.saturation))
    lines.append(f"  budget curve: 0 -> {format_time_ns(curve.points[0].makespan_ns)}, saturation "
                 f"{curve.saturation} -> {format_time_ns(curve.points[-1].makespan_ns)}; one more crossbar at "
                 f"{crossbars} saves {format_time_ns(here or 0.0)}"
                 + (f"; the most valuable crossbar takes the budget from {best[0]} to {best[0] + 1} "
                    f"({format_time_ns(best[1])})" if best else ""))
    return row, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2,yolov5n")
    parser.add_argument("--crossbars", default="100,25")
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--profile-dir", default="bench/results/profiles")
    parser.add_argument("--out", default="bench/results/explain.txt")
    args = parser.parse_args(argv)
    profile_dir = Path(args.profile_dir)
    profile_dir.mkdir(parents=True, exist_ok=True)
    rows, details = [], []
    header = [
        f"# cimsplit explain on the zoo: x86, 50 ns MVM, float32, --solver auto, time limit {args.time_limit:g} s per solve",
        f"# .venv/bin/python bench/explain.py --models {args.models} --crossbars {args.crossbars} "
        f"--time-limit {args.time_limit:g}",
    ]
    for name in args.models.split(","):
        for crossbars in (int(c) for c in args.crossbars.split(",")):
            row, lines = _run(name, crossbars, args.time_limit, profile_dir)
            rows.append(row)
            details += lines
            print("  ".join(row), file=sys.stderr, flush=True)
            text = "\n".join([  # rewritten after every model: a cut-short run keeps what it measured
                *header,
                format_table(["model", "ops", "capable", "plan", "status", *REASONS, "forced solves", "unproven",
                              "saturation", "changes", "curve solves", "plan s", "reasons s", "curve s", "total s",
                              "total/plan"], rows, [False] + [True] * 3 + [False] + [True] * 15),
                "",
                *details,
            ]) + "\n"
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
