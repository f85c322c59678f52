"""`cimsplit compile`: partition a model and write its split into a directory.

    cimsplit compile MODEL -o DIR [--input-shape NAME=D0,...] [hardware args]
                     [solver args] [--force] [--explain]

DIR receives ``annotated.onnx`` (every node stamped with its device and
modeled timing), one ONNX file per partition (``host_0.onnx``, ``cim_0.onnx``,
...), ``partitioned.onnx`` (partition calls and transfers; runs in plain
onnxruntime), ``plan.json`` (the manifest `cimsplit run` executes) and
``trace.json`` (the modeled schedule for Perfetto, critical path marked).  With
``--explain`` it also holds ``explain.json`` (why each operator sits where it does,
the forced-move costs and the budget curve: what `cimsplit explain DIR` prints),
and annotated.onnx's nodes carry their reason and forced-move makespan.  That is
opt-in because it costs one re-solve per CIM-capable operator whose move a cheap
schedule does not settle and one per budget where the placement changes: the zoo
YOLOv5n at 32x32 px took 403 s with ``--time-limit 5`` (2-core machine), its plan 3 s.
The directory is written atomically; an existing non-empty DIR is replaced only with ``--force``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cimsplit.cli.args import HardwareArgs, ModelArgs, OutputArgs, SolverArgs

if TYPE_CHECKING:
    from cimsplit.runtime.piece_costs import HostPieces

OUTPUT = OutputArgs("directory", required=True, help="output directory", force_help="replace DIR if it exists and is not empty")
SOLVER = SolverArgs(stream=True)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "compile", help="partition a model and write partitioned ONNX files, plan.json and trace.json",
        description="Partition MODEL between host and CIM (ILP of section IV-B), annotate it, split it into "
                    "per-device ONNX partitions joined by explicit transfers, and write everything into DIR.",
    )
    ModelArgs.add_to_parser(parser)
    OUTPUT.add_to_parser(parser)
    parser.add_argument("--explain", action="store_true",
                        help="also write explain.json and stamp the reasons on annotated.onnx (one re-solve per "
                             "CIM-capable operator and per budget where the placement changes)")
    parser.add_argument("--measure-pieces", action="store_true",
                        help="after the split, run the plan on this machine with the CIM and bus emulated, measure "
                             "each host piece's CPU time (and the executor's gap before it) where the runtime runs it, "
                             "and record in plan.json the latency and period predicted with those costs (host_pieces)")
    parser.add_argument("--measure-frames", type=int, default=20, metavar="N",
                        help="frames of each of the 5 measuring streams with --measure-pieces (default 20; each follows 10 single frames)")
    HardwareArgs.add_to_parser(parser)
    SOLVER.add_to_parser(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cimsplit.compiler.units import format_time_ns
    from cimsplit.errors import CimsplitError
    from cimsplit.passes.emit.artifacts import write_artifacts
    from cimsplit.passes.pipeline import compile_model

    if args.measure_frames < 2:
        raise CimsplitError(f"--measure-frames must be at least 2, got {args.measure_frames}", hint="e.g. --measure-frames 20")
    solve = SOLVER.parse(args)
    output = OUTPUT.parse(args, protect=[args.model])  # fail before the expensive part
    hardware = HardwareArgs.parse(args)
    spec = ModelArgs.parse(args)
    options = dataclasses.replace(HardwareArgs.compile_options(args, solve), explain=bool(args.explain))
    compiled = compile_model(spec, hardware, options)
    result = compiled.result
    for warning in result.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    out_dir = output.path
    assert out_dir is not None  # -o is required
    write_artifacts(out_dir, compiled.artifacts, force=output.force, protect=(Path(spec.path),))
    measured = _measure_pieces(out_dir, args.measure_frames) if args.measure_pieces else None

    plan = compiled.artifacts.plan
    parts = plan.partitions
    by_device = {d: sum(1 for p in parts if p.device == d) for d in ("host", "cim")}
    print(f"compiled {args.model} -> {out_dir}")
    print(f"solver: {result.solver.name} ({result.solver.status}), crossbars used {result.crossbars_used} of {hardware.crossbars}")
    print(f"predicted latency {format_time_ns(result.schedule.makespan_ns)}, CPU-only {format_time_ns(result.cpu_only_ns)}, "
          f"speedup {result.speedup:.2f}x")
    if result.stream is not None:
        print(f"stream ({result.objective} plan): period {format_time_ns(result.stream.period_ns)} "
              f"({1e9 / result.stream.period_ns if result.stream.period_ns > 0 else float('inf'):.1f} frames/s), "
              f"frame latency {format_time_ns(result.stream.latency_ns)}, {result.stream.frames_in_flight} frames in flight")
    if plan.speedup_vs_ort_all and plan.model_latency_ort_all_ns is not None:
        print(f"whole model on onnxruntime (all optimizations) {format_time_ns(plan.model_latency_ort_all_ns)}, "
              f"speedup {plan.speedup_vs_ort_all:.2f}x")
    print(f"partitions: {len(parts)} ({by_device['host']} host, {by_device['cim']} cim): "
          + ", ".join(f"{p.name} ({len(p.nodes)} nodes)" for p in parts))
    total_bytes = sum(t.bytes for t in plan.transfers)
    print(f"transfers: {len(plan.transfers)}, {total_bytes} bytes, "
          f"{format_time_ns(sum(t.latency_ns for t in plan.transfers))} on the bus")
    if measured is not None:
        for what, timing in (("latency", measured.latency), ("period", measured.stream)):
            if timing is not None:
                print(f"host pieces measured here: {len(timing.pieces)} pieces, {timing.measured_over_modeled:.2f}x their "
                      f"per-operator costs; {what} predicted with them {format_time_ns(timing.predicted_ns)} "
                      f"(per-operator costs: {format_time_ns(timing.ops_predicted_ns)}, plan {format_time_ns(timing.plan_ns)})")
    explanation = compiled.placed.explanation
    print("files: annotated.onnx, " + ", ".join(p.file for p in parts) + ", partitioned.onnx, plan.json, trace.json"
          + ("" if explanation is None else ", explain.json"))
    if explanation is not None:
        print(f"explained in {explanation.time_s:.2f} s ({explanation.solves} solves): `cimsplit explain {out_dir}`")
    return 0


def _measure_pieces(out_dir: Path, frames: int) -> HostPieces:
    """Measure the written plan's host pieces on this machine and record them in its plan.json."""
    from cimsplit.runtime import Session
    from cimsplit.runtime.piece_costs import measure_host_pieces, write_host_pieces

    with Session(out_dir, cim_timing="modeled") as session:
        measured = measure_host_pieces(session, repeat=10, frames=frames)
    write_host_pieces(out_dir, measured)
    return measured
