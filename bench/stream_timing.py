"""Streams (issue 14): latency plan vs throughput plan, and measured vs modeled with timed CIM emulation.

For each model (ResNet-18, ResNet-50, YOLOv5n) and crossbar budget (25, 100),
x86, T_mvm 50 ns, host costs profiled on this machine (a fresh profile per
model, taken at the start of this run): compile the latency plan and the
throughput plan (``compile --objective throughput``), then run each with
``--cim-timing modeled``:

* the modeled period of each plan and the throughput plan's improvement,
  (P_latency / P_throughput - 1) in % (more frames per second);
* a stream of ``--frames`` frames (Pipe-it's 50 images) on the plan's periodic
  schedule: the measured steady-state period (spacing of the finishes of
  frames m..N-1-m, m = N // 10, leaving out fill and drain; the end-to-end
  (last - first finish) / (N - 1) is in the .json) against ``period_ns``,
  after one untimed pass of the same stream (onnxruntime's arena grows to hold
  the tensors of K frames in flight; a first stream faults in fresh memory);
  ``--streams`` such streams one after the other, the median period reported
  and their spread beside it (one stream of 50 frames varies by several % from
  run to run on a 2-core machine);
* ``--repeat`` single frames before each stream: the median measured latency
  over all of them against the modeled latency of one frame alone (the plan's
  schedule replayed earliest-start: the makespan of a latency plan; a
  throughput plan's stream schedule has gaps for other frames that one frame
  alone does not wait for).

Ratios are measured/modeled (target 0.9-1.15 on a quiet machine; the load
average is printed before and after, since neighbours on the machine inflate
the host's real times and so the measured ones).  Saves the table under
bench/results/stream_timing.txt (and .json).

With ``--measure-pieces N`` each plan is compiled with ``--measure-pieces
--measure-frames N`` (host pieces measured where the runtime runs them,
``runtime/piece_costs.py``) and the table adds the period and latency predicted
with those costs and the ratios against them.

    .venv/bin/python bench/stream_timing.py [--models resnet18,resnet50,yolov5n]
        [--crossbars 25,100] [--frames 50] [--streams 5] [--repeat 10] [--time-limit 60] [--measure-pieces N]
        [--out bench/results/stream_timing]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from cimsplit.cli import main as cimsplit
from cimsplit.models import zoo
from cimsplit.runtime import Session
from cimsplit.runtime.piece_costs import (
    cpu_means,
    cpu_medians,
    gap_medians,
    host_pieces_of,
    latency_prediction,
    stream_gaps,
    stream_prediction,
)

RESULTS = Path(__file__).resolve().parent / "results" / "stream_timing"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def compile_plan(model: Path, out: Path, crossbars: int, objective: str, time_limit: float,
                 measure_frames: int = 0) -> str | None:
    """`cimsplit compile` in this process: None when it succeeds, else its last error line.

    ``measure_frames``: also ``--measure-pieces --measure-frames N`` (0: not)."""
    # Whole operators, both objectives: a sliced latency plan reports no stream period to compare with.
    flags = ["compile", str(model), "-o", str(out), "--crossbars", str(crossbars), "--mvm-latency", "50ns",
             "--time-limit", str(time_limit), "--slicing", "off"]
    if measure_frames:
        flags += ["--measure-pieces", "--measure-frames", str(measure_frames)]
    if objective != "latency":
        flags += ["--objective", objective]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            status = cimsplit(flags)
        except SystemExit as exc:  # argparse's usage errors (a cimsplit without --objective)
            status = exc.code
    return None if status == 0 else (err.getvalue().strip().splitlines() or [f"exit {status}"])[-1]


def measure(out: Path, frames: int, repeat: int, streams: int = 1) -> dict[str, float | int | bool | None]:
    """Timed runs of a compile directory: modeled and measured latency and period.

    ``streams`` streams of ``frames`` frames are run one after the other; the measured period is
    their median (the run it comes from gives the other stream figures), their spread beside it."""
    with Session(out, cim_timing="modeled") as session:
        plan = session.manifest.plan
        rng = np.random.default_rng(0)
        feeds = {s.name: rng.standard_normal([int(d) for d in s.shape]).astype(s.dtype) for s in session.input_specs}
        single = session.run(feeds)
        session.measure_latency(feeds)  # warm-up: loads the pieces, fills onnxruntime's arena
        # Rounds of single frames and a stream, as --measure-pieces measures: a frame's time comes in bursts.
        singles, runs = [], []
        for k in range(max(1, streams)):
            singles += [session.measure_latency(feeds) for _ in range(repeat)]
            runs.append(session.measure_stream([feeds] * frames, warm_up=(k == 0)))
        latency = statistics.median(r.latencies_ns[0] for r in singles)
        periods = sorted(r.period_ns for r in runs)
        run = next(r for r in runs if r.period_ns == periods[(len(periods) - 1) // 2])  # the median (lower) run
        host = [t for t in run.tasks if t.resource == "host"]
        pieces = host_pieces_of(plan.report)
        # What these runs would have measured without preemption: the executor's rules, dry, on their
        # host pieces' CPU times and gaps (a neighbour's load inflates wall times, not the host thread's CPU time).
        cpu_latency = session.predict("latency", 1, cpu_medians(singles), gap_medians(singles)).latencies_ns[0]
        cpu_period = session.predict("stream", frames, cpu_means([run]), stream_gaps([run])).period_ns
        measured_pieces = cpu_means([run])
        pieces_period, ops_period = stream_prediction(session, frames, pieces)
        same = all(np.allclose(out[k], v, atol=1e-4, rtol=1e-3) for r in runs for out in r.outputs
                   for k, v in single.items())
        return {"modeled_latency_ns": session.timeline.makespan_ns, "measured_latency_ns": latency,
                "stream_latency_ns": plan.stream.latency_ns if plan.stream else None,
                "modeled_period_ns": plan.period_ns, "measured_period_ns": run.period_ns,
                "measured_periods_ns": periods,
                "measured_period_end_to_end_ns": run.period_end_to_end_ns,
                "frames_in_flight": session.frames_in_flight, "outputs_equal": same,
                "host_pieces": sum(1 for t in run.tasks if t.resource == "host" and t.frame == 0),
                "host_wall_over_modeled": sum(t.finish_ns - t.start_ns for t in host) / sum(t.modeled_ns for t in host),
                "host_cpu_over_modeled": sum(t.cpu_ns for t in host) / sum(t.modeled_ns for t in host),
                "partitions": len(plan.partitions),
                "cpu_latency_ns": cpu_latency, "cpu_period_ns": cpu_period,
                "host_cpu_over_pieces": (sum(t.cpu_ns for t in host) / sum(
                    {p.name: p.measured_ns for p in pieces.stream.pieces}[t.name] for t in host)
                    if pieces and pieces.stream and set(measured_pieces) <= {p.name for p in pieces.stream.pieces} else None),
                "pieces_latency_ns": latency_prediction(session, pieces),
                "pieces_period_ns": pieces_period, "ops_period_ns": ops_period,
                "pieces_steady_period_ns": pieces.stream.predicted_ns if pieces and pieces.stream else None}


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.3f}" if a and b else "n/a"


def spread(values: list[float]) -> str:
    """(max - min) / median in %."""
    return f"{(values[-1] - values[0]) / values[(len(values) - 1) // 2] * 100:.0f}%" if len(values) > 1 else "-"


def ms(ns: float | None) -> str:
    return f"{ns / 1e6:.3f}" if ns else "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,yolov5n")
    parser.add_argument("--crossbars", default="25,100")
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--streams", type=int, default=5, help="streams of --frames frames per plan; P meas is "
                        "their median (default 5)")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--measure-pieces", type=int, default=0, metavar="N",
                        help="compile with --measure-pieces --measure-frames N and add the ratios against that "
                             "prediction (P pcs, L pcs); 0: not (default)")
    parser.add_argument("--out", default=str(RESULTS), help="results path without suffix (.txt and .json)")
    args = parser.parse_args()

    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    say(f"bench/stream_timing.py {' '.join(sys.argv[1:])}".rstrip())
    say(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cpus, load average at start {load_average()}")
    say("x86, T_mvm 50 ns, host costs profiled on this machine now; times in ms; ratios measured/modeled")
    header = (f"{'model':<9} {'C':>4} {'plan':<10} {'P model':>9} {'improv':>7} {'P meas':>9} {'P ratio':>7} "
              f"{'P rng':>5} {'K':>2} {'L model':>9} {'L meas':>9} {'L ratio':>7} {'pieces':>6} {'host':>5} {'cpu':>5} {'same':>4}")
    if args.measure_pieces:
        header += f" {'P pcs':>9} {'P ratio':>7} {'L pcs':>9} {'L ratio':>7} {'cpu pcs':>7} {'Pcpu r':>6} {'Lcpu r':>6} {'P ops N':>9} {'P ratio':>7}"
    say(header)
    rows = []
    with tempfile.TemporaryDirectory(prefix="cimsplit-stream-") as tmp:
        os.environ["CIMSPLIT_CACHE_DIR"] = str(Path(tmp) / "profiles")  # profile afresh, once per model
        for name in args.models.split(","):
            model = Path(tmp) / f"{name}.onnx"
            onnx.save(zoo.build(name), model)
            for crossbars in (int(c) for c in args.crossbars.split(",")):
                periods: dict[str, float | None] = {}
                for objective in ("latency", "throughput"):
                    out = Path(tmp) / f"{name}_{crossbars}_{objective}"
                    error = compile_plan(model, out, crossbars, objective, args.time_limit, args.measure_pieces)
                    if error:
                        say(f"{name:<9} {crossbars:>4} {objective:<10} compile failed: {error}")
                        continue
                    row = {"model": name, "crossbars": crossbars, "objective": objective,
                           **measure(out, args.frames, args.repeat, args.streams), "load_average": load_average()}
                    periods[objective] = row["modeled_period_ns"]  # type: ignore[assignment]
                    improvement = ""
                    if objective == "throughput" and periods.get("latency") and row["modeled_period_ns"]:
                        row["improvement_pct"] = (periods["latency"] / row["modeled_period_ns"] - 1) * 100  # type: ignore[operator]
                        improvement = f"{row['improvement_pct']:.1f}%"
                    rows.append(row)
                    say(f"{name:<9} {crossbars:>4} {objective:<10} {ms(row['modeled_period_ns']):>9} {improvement:>7} "  # type: ignore[arg-type]
                        f"{ms(row['measured_period_ns']):>9} {ratio(row['measured_period_ns'], row['modeled_period_ns']):>7} "  # type: ignore[arg-type]
                        f"{spread(row['measured_periods_ns']):>5} "  # type: ignore[arg-type]
                        f"{row['frames_in_flight']:>2} {ms(row['modeled_latency_ns']):>9} {ms(row['measured_latency_ns']):>9} "  # type: ignore[arg-type]
                        f"{ratio(row['measured_latency_ns'], row['modeled_latency_ns']):>7} {row['host_pieces']:>6} "  # type: ignore[arg-type]
                        f"{row['host_wall_over_modeled']:>5.2f} {row['host_cpu_over_modeled']:>5.2f} "
                        f"{'yes' if row['outputs_equal'] else 'NO':>4}"
                        + (f" {ms(row['pieces_period_ns']):>9} {ratio(row['measured_period_ns'], row['pieces_period_ns']):>7} "  # type: ignore[arg-type]
                           f"{ms(row['pieces_latency_ns']):>9} {ratio(row['measured_latency_ns'], row['pieces_latency_ns']):>7} "  # type: ignore[arg-type]
                           f"{row['host_cpu_over_pieces'] or float('nan'):>7.2f} "
                           f"{ratio(row['cpu_period_ns'], row['pieces_period_ns']):>6} {ratio(row['cpu_latency_ns'], row['pieces_latency_ns']):>6} "  # type: ignore[arg-type]
                           f"{ms(row['ops_period_ns']):>9} {ratio(row['measured_period_ns'], row['ops_period_ns']):>7}"  # type: ignore[arg-type]
                           if args.measure_pieces else ""))
    say(f"load average at end {load_average()}")
    say(f"P: stream period (measured over {args.frames} frames: spacing of the finishes of frames "
        f"{args.frames // 10}..{args.frames - 1 - args.frames // 10}; the median of {args.streams} such streams, "
        f"P rng their spread (max - min) / median); L: one frame alone (median of {args.streams} x {args.repeat}, "
        f"{args.repeat} before each stream); K: frames in flight; "
        "improv: throughput plan's P against the latency plan's; pieces: host runs per frame; host, cpu: the "
        "stream's host pieces, wall time and CPU time of the host thread (which neighbours' preemption does not "
        "inflate), over their modeled time; same: every frame's outputs equal the single-frame outputs"
        + ("; P pcs, L pcs: the period and one frame's latency predicted with the host pieces measured at compile "
           f"(--measure-pieces: 5 rounds of 10 single frames and a stream of {args.measure_pieces} frames) and the "
           "ratios against them; "
           "cpu pcs: the stream's host pieces' CPU time over their costs measured at compile; Pcpu r, Lcpu r: the "
           "period and latency these runs would have had without preemption (the executor's rules, dry, on their "
           "pieces' CPU times and the executor's gaps before them) over the pieces' prediction; P ops N: the "
           "period the executor's rules give a "
           f"stream of {args.frames} frames with the per-operator costs (a stream of few frames against many in "
           "flight is mostly fill and drain), and the ratio against it.  P pcs is predicted for the same stream "
           "length"
           if args.measure_pieces else ""))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    print(f"saved {out.with_suffix('.txt')} and {out.with_suffix('.json')}")
    return 0 if all(r["outputs_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
