"""How the sweep engine scales: the paper's grid in-process vs a local pool, and a resumed rerun.

    .venv/bin/python bench/sweep_paper.py [--image-size 64] [--workers N] [--models resnet18,mobilenet_v2]

Profiles are measured first (a one-point sweep) so the timed runs compare the
per-point work only.  Prints wall times and ratios measured in this run; the
machine's load changes them, so read them as ratios, not as absolute speed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from cimsplit.passes.sweep.run import SweepSpec, run_sweep


def timed(spec: SweepSpec, out: Path, workers: int) -> tuple[float, int, int]:
    start = time.perf_counter()
    outcome = run_sweep(spec, out, workers=workers, reports=False)
    return time.perf_counter() - start, outcome.computed, outcome.reused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CIMSPLIT_CACHE_DIR"] = str(Path(tmp) / "cache")
        models = tuple(args.models.split(","))
        run_sweep(SweepSpec(models, crossbars=(25,), mvm_latencies_ns=(50.0,), image_size=args.image_size),
                  Path(tmp) / "warm", workers=1, reports=False)
        spec = SweepSpec(models, image_size=args.image_size)  # the paper's 4 x 4 configurations on x86
        serial, n, _ = timed(spec, Path(tmp) / "serial", 1)
        pooled, _, _ = timed(spec, Path(tmp) / "pooled", args.workers)
        resumed, computed, reused = timed(spec, Path(tmp) / "pooled", args.workers)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {n} points of {', '.join(models)} at {args.image_size}px")
    print(f"in-process      {serial:7.2f} s  ({serial / n * 1e3:.0f} ms per point, front end and costing included)")
    print(f"{args.workers} workers       {pooled:7.2f} s  ratio in-process / pool = {serial / pooled:.2f}")
    print(f"resumed rerun   {resumed:7.2f} s  ratio in-process / rerun = {serial / resumed:.2f} ({computed} solved, {reused} reused)")


if __name__ == "__main__":
    main()
