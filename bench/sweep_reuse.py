"""Budget chains in a sweep: the `sweep --paper` grid (int8 zoo, x86) with reuse on and off.

    .venv/bin/python bench/sweep_reuse.py [--models resnet18,resnet50,mobilenet_v2,yolov5n]
        [--time-limit 60] [--workers 2] [--image-size N] [--out bench/results/sweep_reuse.txt]

Profiles are measured first (a one-point sweep per model, shared by both runs
through the profile cache), so the timed runs compare the per-point work only.
Prints both wall times and their ratio, the points whose schedule was reused
from another budget (``reused_from``), per model the proven points of each run,
and the points where reuse gives a shorter schedule.  Wall times depend on the
machine's load: read them as a ratio measured in one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from cimsplit.passes.sweep.grid import PAPER_MODELS
from cimsplit.passes.sweep.run import SweepSpec, run_sweep


def timed(spec: SweepSpec, out: Path, workers: int) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    outcome = run_sweep(spec, out, workers=workers, reports=False)
    return time.perf_counter() - start, outcome.rows


def monotone_breaks(rows: list[dict]) -> int:
    """Pairs of budgets (same model and MVM latency) where the larger budget's makespan is longer."""
    breaks = 0
    for r in rows:
        for s in rows:
            if (r["model"], r["mvm_latency_ns"]) == (s["model"], s["mvm_latency_ns"]) and s["crossbars"] > r["crossbars"] \
                    and s["makespan_ns"] is not None and r["makespan_ns"] is not None \
                    and s["makespan_ns"] > r["makespan_ns"] * (1 + 1e-9):
                breaks += 1
    return breaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(PAPER_MODELS))
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "sweep_reuse.txt")
    args = parser.parse_args()
    models = tuple(args.models.split(","))
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("CIMSPLIT_CACHE_DIR", str(Path(tmp) / "cache"))
        base = SweepSpec(models, int8=True, image_size=args.image_size, time_limit_s=args.time_limit)
        warm = SweepSpec(models, int8=True, image_size=args.image_size, crossbars=(25,), mvm_latencies_ns=(50.0,),
                         time_limit_s=1.0)
        run_sweep(warm, Path(tmp) / "warm", workers=1, reports=False)
        load = os.getloadavg()[0]
        on_s, on = timed(base, Path(tmp) / "on", args.workers)
        off_s, off = timed(SweepSpec(**{**base.__dict__, "reuse": False}), Path(tmp) / "off", args.workers)
    lines.append("$ .venv/bin/python bench/sweep_reuse.py " + " ".join(sys.argv[1:]))
    lines.append(f"sweep --paper-like grid: {', '.join(models)} (int8, x86), {len(on)} points, --time-limit {args.time_limit:g}, "
                 f"{args.workers} workers; load average {load:.2f} -> {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    lines.append(f"reuse on   {on_s:8.2f} s   points reused from another budget: "
                 f"{sum(1 for r in on if r['reused_from'] is not None)}")
    lines.append(f"reuse off  {off_s:8.2f} s   ratio off / on = {off_s / on_s:.2f}")
    lines.append(f"larger budget with a longer makespan (pairs): on {monotone_breaks(on)}, off {monotone_breaks(off)}")
    lines.append(f"{'model':14s} {'proven on':>9s} {'proven off':>10s} {'time on s':>9s} {'time off s':>10s} {'shorter on':>10s} {'longer on':>9s}")
    for model in models:
        a = [r for r in on if r["model"] == model]
        b = [r for r in off if r["model"] == model]
        shorter = sum(1 for x, y in zip(a, b) if x["makespan_ns"] and y["makespan_ns"] and x["makespan_ns"] < y["makespan_ns"] * (1 - 1e-9))
        longer = sum(1 for x, y in zip(a, b) if x["makespan_ns"] and y["makespan_ns"] and x["makespan_ns"] > y["makespan_ns"] * (1 + 1e-9))
        lines.append(f"{model:14s} {sum(r['status'] == 'optimal' for r in a):9d} {sum(r['status'] == 'optimal' for r in b):10d} "
                     f"{sum(r['time_s'] or 0.0 for r in a):9.1f} {sum(r['time_s'] or 0.0 for r in b):10.1f} {shorter:10d} {longer:9d}")
    lines.append("per point (on | off): model crossbars mvm_ns makespan_ns status time_s reused_from | makespan_ns status time_s")
    for x, y in zip(on, off):
        lines.append(f"  {x['model']:12s} {x['crossbars']:4d} {x['mvm_latency_ns']:6g} {x['makespan_ns']:14.1f} {x['status']:10s} "
                     f"{x['time_s']:6.2f} {x['reused_from'] if x['reused_from'] is not None else '-':>4} | "
                     f"{y['makespan_ns']:14.1f} {y['status']:10s} {y['time_s']:6.2f}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
