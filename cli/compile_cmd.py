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
from pathlib import Path

from cimsplit.cli.args import add_hardware_args, add_model_args, add_solver_args, check_solver_args, costed_model, partition_from_args


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "compile", help="partition a model and write partitioned ONNX files, plan.json and trace.json",
        description="Partition MODEL between host and CIM (ILP of section IV-B), annotate it, split it into "
                    "per-device ONNX partitions joined by explicit transfers, and write everything into DIR.",
    )
    add_model_args(parser)
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    parser.add_argument("--force", action="store_true", help="replace DIR if it exists and is not empty")
    parser.add_argument("--explain", action="store_true",
                        help="also write explain.json and stamp the reasons on annotated.onnx (one re-solve per "
                             "CIM-capable operator and per budget where the placement changes)")
    add_hardware_args(parser)
    add_solver_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cimsplit.cli.explain_cmd import explain_from_args
    from cimsplit.compiler.units import format_time_ns
    from cimsplit.passes.emit.artifacts import build_artifacts, write_artifacts
    from cimsplit.passes.emit.directory import check_destination
    from cimsplit.passes.emit.report import result_to_json

    check_solver_args(args)
    out_dir = Path(args.output)
    model_path = Path(args.model)
    check_destination(out_dir, args.force, protect=[model_path])  # fail before the expensive part
    costed = costed_model(args)
    hardware, loaded, profile, costs = costed.hardware, costed.loaded, costed.profile, costed.costs
    result = partition_from_args(args, costed)
    explanation = explain_from_args(args, costed, result) if args.explain else None
    artifacts = build_artifacts(
        loaded.model, loaded.workload, result, hardware,
        model_path=str(model_path.resolve()), fingerprint=loaded.fingerprint,
        report=result_to_json(result, loaded.workload, costs, profile=profile) | _frozen_report(args),
        explanation=explanation,
    )
    write_artifacts(out_dir, artifacts, force=args.force, protect=(model_path,))

    plan = artifacts.plan
    parts = plan.partitions
    by_device = {d: sum(1 for p in parts if p.device == d) for d in ("host", "cim")}
    print(f"compiled {args.model} -> {out_dir}")
    print(f"solver: {result.solver.name} ({result.solver.status}), crossbars used {result.crossbars_used} of {hardware.crossbars}")
    print(f"predicted latency {format_time_ns(result.schedule.makespan_ns)}, CPU-only {format_time_ns(result.cpu_only_ns)}, "
          f"speedup {result.speedup:.2f}x")
    if plan.speedup_vs_ort_all and plan.model_latency_ort_all_ns is not None:
        print(f"whole model on onnxruntime (all optimizations) {format_time_ns(plan.model_latency_ort_all_ns)}, "
              f"speedup {plan.speedup_vs_ort_all:.2f}x")
    print(f"partitions: {len(parts)} ({by_device['host']} host, {by_device['cim']} cim): "
          + ", ".join(f"{p.name} ({len(p.nodes)} nodes)" for p in parts))
    total_bytes = sum(t.bytes for t in plan.transfers)
    print(f"transfers: {len(plan.transfers)}, {total_bytes} bytes, "
          f"{format_time_ns(sum(t.latency_ns for t in plan.transfers))} on the bus")
    print("files: annotated.onnx, " + ", ".join(p.file for p in parts) + ", partitioned.onnx, plan.json, trace.json"
          + ("" if explanation is None else ", explain.json"))
    if explanation is not None:
        print(f"explained in {explanation.time_s:.2f} s ({explanation.solves} solves): `cimsplit explain {out_dir}`")
    return 0


def _frozen_report(args: argparse.Namespace) -> dict:
    """``--freeze-input`` values for plan.json, so that ``run --check`` feeds them to the original model."""
    from cimsplit.compiler.freeze import parse_frozen_inputs

    frozen = parse_frozen_inputs(args.freeze_input)
    return {"frozen_inputs": frozen} if frozen else {}
