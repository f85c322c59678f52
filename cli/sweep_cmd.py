"""`cimsplit sweep`: partition every point of a design-space grid (DESIGN §7, paper section V).

    cimsplit sweep MODEL... -o DIR [--hw x86,arm] [--crossbars 25,50,100,200]
                   [--mvm-latency 50,100,500,1000ns] [--host-profile HW=FILE ...]
                   [--workers N | --scheduler ADDRESS]
    cimsplit sweep --paper -o DIR      # the paper's grid: 4 zoo models, x86, 4 x 4 configurations
    cimsplit sweep --paper --hw x86,arm --host-profile arm=PROFILES_DIR -o DIR   # ... and the ARM board

MODEL is an ONNX file or a zoo name (built into DIR/models/NAME.onnx).  Lists
and ranges: ``25,50,100``; ``0:400:25`` (START:STOP:STEP, both ends inclusive);
times take a unit once at the end (``50:1000:50ns``).  ``x86`` means this
machine (profiled here); other hosts need ``--host-profile HW=FILE`` measured
on the board, else their points fail with that message.  Rerunning with the
same DIR solves only the points still missing.  Exit status 1 when some points
failed (their errors are in the results), 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from cimsplit.cli.args import SolverArgs
from cimsplit.errors import CimsplitError

SOLVER = SolverArgs(verbose=False, time_limit_help="solver time limit per point (default 60)", stream=True,
                    latency_list=True)

EPILOG = """\
values: lists (25,50,100) or ranges START:STOP:STEP with both ends inclusive
(0:400:25 = 0,25,...,400); a time unit written once at the end applies to
every bare number (50:1000:50ns, 0.05,1us; no unit = ns).

hosts: x86 means this machine, profiled here (cached per model). Any other
host (arm, a TOML file) needs latencies measured on that board: run
`cimsplit profile MODEL -o FILE` there and pass --host-profile arm=FILE (or a
folder of MODEL.json); without one its points fail with that message.

resume: the journal DIR/journal.jsonl keeps every finished point; rerunning
with the same DIR solves only the points that are missing or whose costs or
solver settings changed. Exit status 1 if some points failed.
"""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "sweep", help="design-space exploration over models, hosts, crossbar counts and MVM latencies",
        description="Partition every (model, host, crossbars, MVM latency) point; write results.csv/json, "
        "the paper's Fig. 3-5 and Table I.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("models", nargs="*", metavar="MODEL", help="ONNX files or zoo names (resnet18, resnet50, mobilenet_v2, yolov5n)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder (rerun with it to resume)")
    parser.add_argument("--paper", action="store_true",
                        help="the paper's grid (section V): resnet18, resnet50, mobilenet_v2, yolov5n with crossbars "
                        "25,50,100,200 and MVM latency 50,100,500,1000ns, on x86 (this machine) unless --hw adds "
                        "hosts with their --host-profile; zoo models as int8 QDQ like the paper's (--float for float32); "
                        "the paper's solver limit was 600 s, add --time-limit 600 for it")
    grid = parser.add_argument_group("grid")
    grid.add_argument("--hw", metavar="HW,...", help="hosts: presets (x86, arm) or TOML files, comma-separated (default x86)")
    grid.add_argument("--crossbars", metavar="LIST|A:B:S", help="crossbar counts, e.g. 25,50,100,200 or 0:400:25 (default 25,50,100,200)")
    grid.add_argument("--mvm-latency", metavar="LIST|A:B:S", help="MVM latencies, e.g. 50,100,500,1000ns or 50:1000:50ns (default 50,100,500,1000ns)")
    grid.add_argument("--host-profile", metavar="HW=FILE", action="append", default=[],
                      help="host profile for host HW (a FILE from `cimsplit profile`, or a DIR of MODEL.json); repeatable")
    grid.add_argument("--host-model", metavar="HW=FILE", action="append", default=[],
                      help="predict host HW's latencies from a calibration (`cimsplit calibrate`); repeatable")
    model = parser.add_argument_group("models")
    model.add_argument("--input-shape", metavar="NAME=D0,D1,...", action="append", default=[],
                       help="fix the shape of a graph input of the model files (repeatable)")
    model.add_argument("--image-size", type=int, default=None, metavar="S", help="input side of zoo models (default 224, yolov5n 640)")
    precision = model.add_mutually_exclusive_group()
    precision.add_argument("--int8", action="store_true", help="build zoo models as int8 QDQ (the default with --paper)")
    precision.add_argument("--float", action="store_true", help="with --paper: build the zoo models as float32")
    model.add_argument("--paper-exact", action="store_true", help="no graph input/output transfers (the paper's model)")
    SOLVER.add_to_parser(parser)
    where = parser.add_argument_group("execution").add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=None, metavar="N", help="local worker processes (default: CPU count; 1 = in this process)")
    where.add_argument("--scheduler", metavar="ADDRESS", help="run the points on a Dask distributed cluster, e.g. tcp://host:8786")
    parser.add_argument("--no-plots", action="store_true", help="write results and Table I only")
    parser.set_defaults(func=run)


def _host_profiles(items: list[str], flag: str = "--host-profile") -> dict[str, str]:
    profiles: dict[str, str] = {}
    for item in items:
        host, sep, path = item.partition("=")
        if not sep or not host or not path:
            raise CimsplitError(f"cannot read {flag} {item!r}", hint=f"write HW=FILE, e.g. {flag} arm=arm.json")
        profiles[host] = path
    return profiles


def spec_from_args(args: argparse.Namespace) -> Any:
    """The :class:`SweepSpec` of the command line (``--paper`` fixes the grid)."""
    from cimsplit.compiler.frontend import parse_input_shapes
    from cimsplit.passes.sweep.grid import PAPER_CROSSBARS, PAPER_HOSTS, PAPER_MODELS, PAPER_MVM_LATENCIES_NS, parse_int_values, parse_time_values
    from cimsplit.passes.sweep.run import SweepSpec

    if args.paper:
        given = [flag for flag, value in (("MODEL", args.models), ("--crossbars", args.crossbars),
                                          ("--mvm-latency", args.mvm_latency)) if value]
        if given:
            raise CimsplitError(f"--paper fixes the grid, so {given[0]} cannot be given with it", hint="drop --paper to choose the grid")
        models = PAPER_MODELS
    elif args.float:
        raise CimsplitError("--float only applies to --paper", hint="zoo models are float32 unless --int8 is given")
    elif not args.models:
        raise CimsplitError("no model to sweep", hint="pass ONNX files or zoo names, or --paper for the paper's grid")
    else:
        models = tuple(args.models)
    hosts = tuple(h.strip() for h in args.hw.split(",") if h.strip()) if args.hw is not None else PAPER_HOSTS
    if not hosts:
        raise CimsplitError(f"--hw {args.hw!r} names no host", hint="e.g. --hw x86,arm")
    solve = SOLVER.parse(args)  # a bad --solver or --mip-gap fails now, not in every point
    crossbars = parse_int_values(args.crossbars) if args.crossbars else PAPER_CROSSBARS
    latencies = parse_time_values(args.mvm_latency) if args.mvm_latency else PAPER_MVM_LATENCIES_NS
    return SweepSpec(
        models=models, hosts=hosts, crossbars=crossbars, mvm_latencies_ns=latencies,
        host_profiles=_host_profiles(args.host_profile),
        host_models=_host_profiles(getattr(args, "host_model", []), "--host-model"), input_shapes=parse_input_shapes(args.input_shape),
        image_size=args.image_size, int8=args.int8 or (args.paper and not args.float), solver=solve.solver,
        time_limit_s=solve.time_limit_s, mip_gap=solve.mip_gap, plain=solve.plain, paper_exact=args.paper_exact,
        objective=solve.objective, max_latencies_ns=SolverArgs.max_latencies(args), frames_in_flight=solve.frames_in_flight,
        slicing=solve.slicing,
    )


class _ProgressBar:
    """tqdm bar: points done / total, the running best speedup as postfix."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.best = 0.0

    def preparing(self, model: str, host: str) -> None:
        sys.stderr.write(f"sweep: preparing {model} for {host} (front end, host profile, costs)\n")

    def started(self, total: int, reused: list[dict[str, Any]]) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=len(reused), unit="point", desc="sweep", file=sys.stderr, disable=None, dynamic_ncols=True)
        for row in reused:
            self._best(row)

    def _best(self, row: dict[str, Any]) -> None:
        if row.get("speedup") is not None and row["speedup"] > self.best:
            self.best = row["speedup"]
            self.bar.set_postfix_str(f"best {self.best:.2f}x ({row['model']}, {row['host']}, C={row['crossbars']}, {row['mvm_latency_ns']:g} ns)")

    def point_done(self, row: dict[str, Any]) -> None:
        self._best(row)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run(args: argparse.Namespace) -> int:
    from cimsplit.passes.sweep.run import run_sweep

    spec = spec_from_args(args)
    progress = _ProgressBar()
    try:
        outcome = run_sweep(spec, args.output, workers=args.workers, scheduler=args.scheduler, observer=progress, reports=not args.no_plots)
    finally:
        progress.close()
    done = [r for r in outcome.rows if r["status"] != "error"]
    print(f"swept {len(outcome.rows)} points into {outcome.directory}: {outcome.computed} solved now, "
          f"{outcome.reused} from an earlier run, {outcome.failed} failed")
    if done:
        best = max(done, key=lambda r: r["speedup"])
        print(f"best speedup {best['speedup']:.2f}x: {best['model']} on {best['host']}, "
              f"{best['crossbars']} crossbars, MVM {best['mvm_latency_ns']:g} ns")
    print("wrote " + ", ".join(sorted(p.name for p in outcome.files)))
    if outcome.failed:
        for message, count in sorted(Counter(r["error"] for r in outcome.rows if r["status"] == "error").items()):
            sys.stderr.write(f"error: {count} point(s): {message}\n")
        return 1
    return 0
