"""`cimsplit profile`: measure per-node host latencies with ONNX Runtime and save them.

    cimsplit profile MODEL [--input-shape NAME=D0,...] [--runs 30] [--warmup 5]
                     [--threads 1] [--seed 0] [--profile-level all|off] [-o host.json] [--force]

Profile on the target board, compile anywhere with ``--host-profile host.json``.
An existing output file is replaced only with ``--force``.
"""

from __future__ import annotations

import argparse
import os
import sys

from cimsplit.cli.args import ModelArgs, OutputArgs
from cimsplit.cli.table import format_table
from cimsplit.compiler.units import format_time_ns
from cimsplit.errors import CimsplitError

OUTPUT = OutputArgs("file", required=False, help="write the profile as JSON", force_help="overwrite FILE if it exists")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "profile", help="measure per-node host latencies with ONNX Runtime's profiler",
        description="Profile the simplified model on this machine at the optimization level of the runtime's host "
                    "partitions (every kernel of ORT's optimized graph charged to the nodes it came from; "
                    "--profile-level off for one kernel per node), warm-up runs dropped, median/p10/p90 per node, "
                    "and time the whole model with optimizations off and on.",
    )
    ModelArgs.add_to_parser(parser)
    parser.add_argument("--runs", type=int, default=30, metavar="N", help="recorded runs (default 30)")
    parser.add_argument("--warmup", type=int, default=5, metavar="N", help="warm-up runs, not recorded (default 5)")
    parser.add_argument("--threads", type=int, default=1, metavar="N", help="ORT intra-op threads (default 1, like the paper's single-core hosts)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the random inputs (default 0)")
    OUTPUT.add_to_parser(parser)
    parser.add_argument("--profile-level", choices=("all", "off"), default="all",
                        help="graph optimizations of the profiled session: all (default, what the runtime runs) "
                             "or off (ORT's nodes are the model's nodes one to one)")
    parser.add_argument("--top", type=int, default=10, metavar="K", help="nodes shown in the summary (default 10)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cimsplit.compiler.frontend import load
    from cimsplit.compiler.host_profile import profile_model

    if args.runs < 1:
        raise CimsplitError(f"--runs must be at least 1, not {args.runs}", hint="e.g. --runs 30")
    if args.warmup < 0:
        raise CimsplitError(f"--warmup must be zero or more, not {args.warmup}", hint="e.g. --warmup 5")
    if args.threads < 1:
        raise CimsplitError(f"--threads must be at least 1, not {args.threads}", hint="e.g. --threads 1")
    output = OUTPUT.parse(args, protect=[args.model]).path
    spec = ModelArgs.parse(args)
    loaded = load(spec.path, dict(spec.input_shapes), frozen_inputs=dict(spec.frozen_inputs))
    profile = profile_model(
        loaded, runs=args.runs, warmup=args.warmup, threads=args.threads, seed=args.seed,
        progress=False if args.no_progress else None, level=args.profile_level,
    )
    total_ns = profile.sum_of_medians_ns
    print(
        f"host profile of {args.model} (fingerprint {profile.fingerprint}): {len(profile.nodes)} nodes, "
        f"cpu {profile.cpu}, onnxruntime {profile.ort_version}, {profile.threads} thread(s), "
        f"median of {profile.runs} runs after {profile.warmup} warm-up runs, optimization level {profile.level}"
    )
    ranked = sorted(profile.nodes.items(), key=lambda item: (-item[1]["median_ns"], item[0]))[: max(args.top, 0)]
    if ranked:
        print(f"top {len(ranked)} nodes by median:")
        rows = [
            [name, str(stats.get("op_type", "?")), format_time_ns(stats["median_ns"]), format_time_ns(stats["p10_ns"]),
             format_time_ns(stats["p90_ns"]), f"{100 * stats['median_ns'] / total_ns:.1f}%" if total_ns else "-"]
            for name, stats in ranked
        ]
        print(format_table(["node", "op_type", "median", "p10", "p90", "share"], rows, [False, False, True, True, True, True]))
    off, on = profile.model_median_ns["optimizations_off"], profile.model_median_ns["optimizations_all"]
    print(f"sum of per-node medians:              {format_time_ns(total_ns)}")
    print(f"whole model, optimizations off:       {format_time_ns(off)}  (sum / model = {total_ns / off:.2f}x)")
    print(f"whole model, all optimizations:       {format_time_ns(on)}  (sum / model = {total_ns / on:.2f}x)")
    before, after = profile.load_average_before, profile.load_average_after
    if before is not None and after is not None:
        print(f"load average (1 min) {before[0]:.2f} before, {after[0]:.2f} after, on {os.cpu_count() or 1} cores")
    for warning in profile.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if output is not None:
        profile.save(output)
        print(f"wrote {output}")
    return 0
