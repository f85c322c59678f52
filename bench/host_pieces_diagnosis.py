"""Why the stream's host pieces cost more than the plan says (issue 14's missed timing): one model, per piece.

For each plan (latency and throughput) of one model and crossbar budget
(default YOLOv5n, 100 crossbars, x86, 50 ns, whole operators), every host
piece the timed stream runs, in CPU time of the host thread (``thread_time``,
which neighbours' preemption does not inflate):

* ``model``: the plan's modeled cost (sum of the whole-model profile's per-op medians);
* ``stream``: median CPU time in the timed stream (the plan's frames in flight);
* ``k1``: the same with one frame in flight;
* ``loop``: the piece run alone, warm, ``--loop`` times in a row, on the same inputs;
* ``kern``: the sum of the kernel times ORT's profiler reports for the piece's own ONNX model
  (``ort_profiler.measure`` at level all), and ``whole``: its session.run median there.

``loop - kern`` is the per-call cost outside kernels; ``kern - model`` what the
piece's kernels cost beyond the whole-model attribution; ``stream - loop`` what
a deep pipeline's cold inputs add.

    .venv/bin/python bench/host_pieces_diagnosis.py [--model yolov5n] [--crossbars 100] [--frames 20]
        [--loop 30] [--out bench/results/host_pieces_diagnosis]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from cimsplit.compiler.ort_profiler import measure as profile_measure
from cimsplit.models import zoo
from cimsplit.runtime import Session

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stream_timing import compile_plan, load_average  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "host_pieces_diagnosis"


def piece_cpu(run, name: str) -> float:
    return statistics.median(t.cpu_ns for t in run.tasks if t.resource == "host" and t.name == name)


def values_of(executor, feeds) -> dict[str, np.ndarray]:
    """Every tensor of one frame (host pieces and CIM partitions in dependency order)."""
    values = dict(feeds)
    units = [(hp.kernel, hp.piece.inputs, hp.piece.outputs) for hp in executor._pieces]
    units += [(k, tuple(i), tuple(o)) for k, i, o in executor._cim_partitions]
    while units:
        runnable = [u for u in units if all(t in values for t in u[1])]
        for kernel, ins, outs in runnable:
            out = kernel.run({t: values[t] for t in ins})
            values.update((t, out[t]) for t in outs)
        units = [u for u in units if u not in runnable]
    return values


def diagnose(out: Path, frames: int, loop: int, say) -> None:
    with Session(out, cim_timing="modeled") as session:
        rng = np.random.default_rng(0)
        feeds = {s.name: rng.standard_normal([int(d) for d in s.shape]).astype(s.dtype) for s in session.input_specs}
        feeds = session.check_feeds(feeds)
        deep = session.measure_stream([feeds] * frames, warm_up=True)
        executor = session._executor("stream")
        k = executor.schedule.frames_in_flight
        # One frame at a time, in frame order (a period past one frame's latency orders the serial bus so).
        executor.schedule = dataclasses.replace(executor.schedule, frames_in_flight=1,
                                                period_ns=executor.schedule.modeled_latency_ns + 1.0)
        period = deep_period = executor.schedule.period_ns
        executor.run([feeds] * 3)
        single = executor.run([feeds] * frames)
        executor.schedule = dataclasses.replace(executor.schedule, frames_in_flight=k, period_ns=session.manifest.plan.period_ns)
        del period, deep_period
        values = values_of(executor, feeds)
        say(f"K = {k}; {len(executor._pieces)} host pieces; times in us (CPU time)")
        say(f"{'piece':<14} {'nodes':>5} {'model':>9} {'stream':>9} {'k1':>9} {'loop':>9} {'cold':>9} {'kern':>9} {'whole':>9} "
            f"{'in KiB':>7} {'str/mod':>7} {'loop/mod':>8} {'cold/mod':>8} {'kern/mod':>8}")
        totals = dict.fromkeys(("model", "stream", "k1", "loop", "cold", "kern", "whole"), 0.0)
        for hp in executor._pieces:
            piece = hp.piece
            piece_feeds = {t: values[t] for t in piece.inputs}
            for _ in range(3):
                hp.kernel.run(piece_feeds)
            samples = []
            for _ in range(loop):
                cpu = time.thread_time_ns()
                hp.kernel.run(piece_feeds)
                samples.append(time.thread_time_ns() - cpu)
            flush = np.zeros(64 * 2**20 // 8)
            cold = []
            for _ in range(loop):
                flush += 1.0  # evicts the caches (L2 2 MiB/core, L3 32 MiB here): inputs and weights come from DRAM
                cpu = time.thread_time_ns()
                hp.kernel.run(piece_feeds)
                cold.append(time.thread_time_ns() - cpu)
            shapes = {t: tuple(v.shape) for t, v in piece_feeds.items()}
            profiled = profile_measure(piece.model, shapes, runs=loop, warmup=3, progress=False)
            row = {"model": piece.duration_ns, "stream": piece_cpu(deep, piece.name), "k1": piece_cpu(single, piece.name),
                   "loop": statistics.median(samples), "cold": statistics.median(cold), "kern": sum(s.median_ns for s in profiled.nodes.values()),
                   "whole": profiled.model_median_ns["optimizations_all"]}
            for key, value in row.items():
                totals[key] += value
            in_kib = sum(v.nbytes for v in piece_feeds.values()) / 1024
            say(f"{piece.name:<14} {len(piece.model.graph.node):>5} " + " ".join(f"{row[k] / 1e3:>9.1f}" for k in row)
                + f" {in_kib:>7.0f} {row['stream'] / row['model']:>7.2f} {row['loop'] / row['model']:>8.2f} "
                  f"{row['cold'] / row['model']:>8.2f} {row['kern'] / row['model']:>8.2f}")
        say(f"{'total':<14} {'':>5} " + " ".join(f"{totals[k] / 1e3:>9.1f}" for k in totals)
            + f" {'':>7} {totals['stream'] / totals['model']:>7.2f} {totals['loop'] / totals['model']:>8.2f} "
              f"{totals['cold'] / totals['model']:>8.2f} {totals['kern'] / totals['model']:>8.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="yolov5n")
    parser.add_argument("--crossbars", type=int, default=100)
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--loop", type=int, default=30)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--objectives", default="latency,throughput")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    say(f"bench/host_pieces_diagnosis.py {' '.join(sys.argv[1:])}".rstrip())
    say(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cpus, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="cimsplit-diag-") as tmp:
        os.environ["CIMSPLIT_CACHE_DIR"] = str(Path(tmp) / "profiles")
        model = Path(tmp) / f"{args.model}.onnx"
        onnx.save(zoo.build(args.model), model)
        for objective in args.objectives.split(","):
            out = Path(tmp) / objective
            error = compile_plan(model, out, args.crossbars, objective, args.time_limit)
            if error:
                say(f"{objective}: compile failed: {error}")
                continue
            say(f"\n{args.model} {args.crossbars} crossbars, {objective} plan")
            diagnose(out, args.frames, args.loop, say)
    say(f"load average at end {load_average()}")
    out = Path(args.out).with_suffix(".txt")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
