"""Does the sum of per-operator host medians match the whole-model latency?

The ILP's CPU-only makespan is the sum of per-operator medians measured with
ORT's profiler and graph optimizations off.  This prints it beside the
whole-model median of a timed ``session.run`` loop with optimizations off
(target ratio 0.8x-1.25x: the profiler's per-node split loses little) and with
all optimizations (what plain onnxruntime gives a user; the gap is what graph
fusions are worth).  On a loaded machine the ratio drops below 1: a per-node
median skips, node by node, the runs in which a neighbour preempted it, while
a whole run's median cannot.  One measurement, no assertion.

    .venv/bin/python bench/profile_sum_vs_model.py [--model resnet50] [--image-size 224] [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import onnx

from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_profile import operator_latencies, profile_model
from cimsplit.compiler.units import format_time_ns
from cimsplit.models import zoo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", choices=zoo.NAMES)
    parser.add_argument("--image-size", type=int, default=None)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{args.model}.onnx"
        onnx.save(zoo.build(args.model, image_size=args.image_size), path)
        loaded = load(path)
    start = time.perf_counter()
    profile = profile_model(loaded, runs=args.runs, warmup=args.warmup, threads=args.threads)
    elapsed_s = time.perf_counter() - start
    latencies = operator_latencies(loaded.workload, profile)
    total_ns = sum(latencies.values())
    off, on = profile.model_median_ns["optimizations_off"], profile.model_median_ns["optimizations_all"]
    print(f"{args.model}: {len(loaded.model.graph.node)} nodes, {len(loaded.workload.operators)} operators; "
          f"cpu {profile.cpu}, onnxruntime {profile.ort_version}, {args.threads} thread(s), "
          f"{args.runs} runs after {args.warmup} warm-up, profiled in {elapsed_s:.1f} s")
    print(f"sum of per-operator medians:        {format_time_ns(total_ns)}")
    print(f"whole model, optimizations off:     {format_time_ns(off)}   sum/model = {total_ns / off:.3f}x  (target 0.8x-1.25x)")
    print(f"whole model, all optimizations:     {format_time_ns(on)}   sum/model = {total_ns / on:.3f}x")
    print(f"sum of all node medians (incl. constant-only nodes): {format_time_ns(profile.sum_of_medians_ns)}")
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
