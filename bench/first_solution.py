"""How good is a placement after a few seconds: every point solved alone with a short time limit, against a long sweep.

    .venv/bin/python bench/first_solution.py --final DIR/results.csv [--models all] [--time-limit 5]
        [--workers 2] [--chains] [--out bench/results/first_solution.txt]

``--final`` is the ``results.csv`` of a sweep of the same models and grid with the long limit
(``cimsplit sweep MODELS --int8 --time-limit 60``).  This script sweeps the same points again with
``--time-limit`` (default 5 s, issue 17's "a solution within 0.5 % of the final one within 5 s")
and budget chains off, so every point is solved alone from its own start, as ``cimsplit partition``
would (``--chains``: on, as ``cimsplit sweep`` runs them; a point then also starts from the other
budgets' solves at its MVM latency).  Per point: how far the short solve's makespan is above the
best of both.  Prints how many points are within 0.5 % and 1 %.  The host profiles come from the
profile cache (shared with the long sweep: run it first).  Nothing here is an assertion: the figures
depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

from cimsplit.models import NAMES
from cimsplit.passes.sweep.run import SweepSpec, run_sweep


def read_final(path: Path) -> dict[tuple[str, int, float], float]:
    """(model, crossbars, MVM ns) -> makespan (ns) of a sweep's results.csv."""
    with path.open() as f:
        return {(r["model"], int(r["crossbars"]), float(r["mvm_latency_ns"])): float(r["makespan_ns"])
                for r in csv.DictReader(f) if r["makespan_ns"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--final", type=Path, required=True, help="results.csv of the long sweep")
    parser.add_argument("--models", default="all", help="comma-separated zoo names, or all")
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chains", action="store_true", help="budget chains on, as cimsplit sweep runs")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "first_solution.txt")
    args = parser.parse_args()
    final = read_final(args.final)
    models = tuple(NAMES if args.models == "all" else args.models.split(","))
    spec = SweepSpec(models, int8=True, time_limit_s=args.time_limit, reuse=args.chains)
    load = os.getloadavg()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = run_sweep(spec, Path(tmp), workers=args.workers, reports=False).rows
    wall = time.perf_counter() - start
    lines = ["$ .venv/bin/python bench/first_solution.py " + " ".join(sys.argv[1:]),
             f"{len(rows)} points, --time-limit {args.time_limit:g} per point, budget chains {'on' if args.chains else 'off'}, "
             f"{args.workers} workers, wall {wall:.1f} s; load average {load[0]:.2f} -> {os.getloadavg()[0]:.2f} "
             f"on {os.cpu_count()} CPUs",
             f"{'model':20s} {'xbars':>5s} {'T_mvm':>6s} {'short ms':>10s} {'final ms':>10s} {'excess %':>8s} {'time s':>7s} status"]
    excess: list[float] = []
    for r in rows:
        key = (r["model"], int(r["crossbars"]), float(r["mvm_latency_ns"]))
        short = r["makespan_ns"]
        if short is None or key not in final:
            lines.append(f"{key[0]:20s} {key[1]:5d} {key[2]:6g} {'-':>10s} {'-':>10s} {'-':>8s} {'-':>7s} {r['status'] or r['error']}")
            excess.append(float("inf"))
            continue
        best = min(short, final[key])
        excess.append(100.0 * (short - best) / best)
        lines.append(f"{key[0]:20s} {key[1]:5d} {key[2]:6g} {short / 1e6:10.4f} {final[key] / 1e6:10.4f} {excess[-1]:8.3f} "
                     f"{r['time_s']:7.2f} {r['status']}")
    worst = max(excess, default=0.0)
    lines.append(f"within 0.5 % of the final makespan: {sum(e <= 0.5 for e in excess)} of {len(excess)}; "
                 f"within 1 %: {sum(e <= 1.0 for e in excess)}; worst {worst:.3f} %")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
