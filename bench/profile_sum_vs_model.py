"""Does the sum of per-operator host medians match the whole model under all optimizations?

For each zoo model, float and int8 (``zoo.build(..., int8=True)``: onnxruntime's
``quantize_static`` QDQ), this profiles the simplified model at the level the
runtime's host partitions run (``--profile-level all``: every kernel of ORT's
optimized graph charged to the operators it came from) and prints the sum of
per-operator medians (the ILP's CPU-only makespan) over the median of a timed
``session.run`` with ``ORT_ENABLE_ALL``; the target is 0.85x-1.15x.  The 1-minute
load average before and after each profile is printed beside its row: on a
shared machine a neighbour's load moves the ratio (a per-node median skips the
runs in which a neighbour preempted that node, a whole run's median cannot).
So each row also gives the whole model's median CPU time of the calling thread
(``time.thread_time_ns`` around ``session.run`` of one more single-threaded
ORT_ENABLE_ALL session; ORT runs a one-thread session on the caller), which
preemption does not inflate, and the sum over it.  One measurement, no
assertion; the table is also written under bench/results/.

    .venv/bin/python bench/profile_sum_vs_model.py [--models resnet18,mobilenet_v2] [--runs 20] [--level all]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_profile import SUM_OVER_MODEL, operator_latencies, profile_model
from cimsplit.compiler.ort_profiler import random_inputs
from cimsplit.compiler.units import format_time_ns
from cimsplit.models import zoo

RESULTS = Path(__file__).resolve().parent / "results" / "profile_sum_vs_model.txt"


def whole_model_cpu_ns(loaded, runs: int, warmup: int) -> float:
    """Median CPU time of the calling thread for one single-threaded ORT_ENABLE_ALL session.run."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(loaded.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = random_inputs(loaded.model, loaded.input_shapes, 0)
    times_ns = []
    for index in range(warmup + runs):
        start = time.thread_time_ns()
        session.run(None, feeds)
        if index >= warmup:
            times_ns.append(time.thread_time_ns() - start)
    return float(np.median(times_ns))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,yolov5n",
                        help="comma-separated zoo names (default: the four of the paper)")
    parser.add_argument("--variants", default="float,int8", help="float, int8 or both (default both)")
    parser.add_argument("--image-size", type=int, default=None, help="default: each model's own")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--level", choices=("all", "off"), default="all", help="profiled optimization level")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"where the table is saved (default {RESULTS})")
    args = parser.parse_args(argv)
    models = [name.strip() for name in args.models.split(",") if name.strip()]
    variants = [name.strip() for name in args.variants.split(",") if name.strip()]
    for name in models:
        if name not in zoo.NAMES:
            parser.error(f"unknown zoo model {name!r}; known: {', '.join(zoo.NAMES)}")
    if not set(variants) <= {"float", "int8"}:
        parser.error("--variants takes float and/or int8")

    low, high = SUM_OVER_MODEL
    lines = [
        f"# bench/profile_sum_vs_model.py --models {','.join(models)} --variants {','.join(variants)} "
        f"--runs {args.runs} --warmup {args.warmup} --threads {args.threads} --level {args.level}"
        + (f" --image-size {args.image_size}" if args.image_size else ""),
        f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores; "
        f"target {low:.2f}x-{high:.2f}x; sum = sum of per-operator medians at level {args.level}, "
        "model = whole-model median with all optimizations",
        f"{'model':<14} {'variant':<7} {'ops':>4} {'charged':>7} {'sum':>10} {'model':>10} {'sum/model':>9} "
        f"{'in band':>7}  {'load before':>11} {'load after':>10} {'profiled':>8} {'model cpu':>10} {'sum/cpu':>8}",
    ]
    print("\n".join(lines), flush=True)
    for name in models:
        for variant in variants:
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / f"{name}.onnx"
                onnx.save(zoo.build(name, image_size=args.image_size, int8=variant == "int8"), path)
                loaded = load(path)
            start = time.perf_counter()
            profile = profile_model(loaded, runs=args.runs, warmup=args.warmup, threads=args.threads,
                                    progress=False, level=args.level)
            elapsed_s = time.perf_counter() - start
            total_ns = sum(operator_latencies(loaded.workload, profile).values())
            whole_ns = profile.model_median_ns["optimizations_all"]
            ratio = total_ns / whole_ns
            kernels = sum(1 for stats in profile.nodes.values() if stats["samples"])
            cpu_ns = whole_model_cpu_ns(loaded, args.runs, args.warmup) if args.threads == 1 else float("nan")
            line = (f"{name:<14} {variant:<7} {len(loaded.workload.operators):>4} {kernels:>7} "
                    f"{format_time_ns(total_ns):>10} {format_time_ns(whole_ns):>10} {ratio:>8.3f}x "
                    f"{'yes' if low <= ratio <= high else 'NO':>7}  {profile.load_average_before[0]:>11.2f} "
                    f"{profile.load_average_after[0]:>10.2f} {elapsed_s:>7.1f}s {format_time_ns(cpu_ns):>10} "
                    f"{total_ns / cpu_ns:>7.3f}x")
            print(line, flush=True)
            lines.append(line)
    lines.append("# charged: simplified nodes charged any kernel time; load: 1-minute load average; "
                 "model cpu: whole-model median CPU time of the calling thread (not inflated by preemption)")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"saved {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
