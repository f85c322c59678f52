"""Flag groups shared by subcommands, each parsing into a typed value (Polygraphy's ``BaseArgs`` style).

A group adds its flags with ``add_to_parser(parser)`` and turns the parsed
namespace into a frozen value with ``parse(args)``; every check of its flags
happens there, once.  Library code only ever sees those values:

``ModelArgs``     MODEL, ``--input-shape``, ``--freeze-input``
                                                 -> :class:`~cimsplit.compiler.frontend.ModelSpec`
``HardwareArgs``  ``--hw``, overrides, profile   -> :class:`~cimsplit.compiler.hardware.Hardware`
                  (``--paper-exact``, ``--op-latency`` -> :meth:`HardwareArgs.compile_options`)
``SolverArgs``    ``--solver``, ``--time-limit``, ``--mip-gap``, ``--plain``, ``--slicing``, ``--verbose``
                  (``stream=True``: ``--objective``, ``--max-latency``, ``--frames-in-flight``)
                                                 -> :class:`~cimsplit.passes.placement.options.SolveOptions`
``OutputArgs``    ``-o``, ``--force``            -> :class:`OutputSpec`
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cimsplit.errors import CimsplitError

if TYPE_CHECKING:
    from cimsplit.compiler.frontend import ModelSpec
    from cimsplit.compiler.hardware import Hardware
    from cimsplit.passes.pipeline import CompileOptions
    from cimsplit.passes.placement.options import SolveOptions

__all__ = ["ModelArgs", "HardwareArgs", "SolverArgs", "OutputArgs", "OutputSpec"]


class ModelArgs:
    """The model file and the shapes of its symbolic inputs."""

    @staticmethod
    def add_to_parser(parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("model")
        group.add_argument("model", metavar="MODEL", help="ONNX model file")
        group.add_argument(
            "--input-shape", metavar="NAME=D0,D1,...", action="append", default=[],
            help="fix the shape of a graph input with symbolic or unknown dims (repeatable)",
        )
        group.add_argument(
            "--freeze-input", metavar="NAME=VALUE", action="append", default=[],
            help="make a scalar or small graph input a constant and fold what depends on it, e.g. an If on it (repeatable)",
        )

    @staticmethod
    def parse(args: argparse.Namespace) -> ModelSpec:
        from cimsplit.compiler.freeze import parse_frozen_inputs
        from cimsplit.compiler.frontend import ModelSpec, parse_input_shapes

        return ModelSpec(args.model, parse_input_shapes(args.input_shape), parse_frozen_inputs(args.freeze_input))


class HardwareArgs:
    """The hardware preset or TOML file, every figure overridable, and the host profile."""

    @staticmethod
    def add_to_parser(parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("hardware")
        group.add_argument("--hw", default="x86", metavar="x86|arm|FILE.toml", help="hardware preset or TOML file (default x86)")
        group.add_argument("--crossbars", metavar="C", help="number of crossbars C")
        group.add_argument("--mvm-latency", metavar="T", help="latency of one MVM, e.g. 50ns or 0.05us")
        group.add_argument("--bus-bandwidth", metavar="B", help="CPU-CIM bus and CIM internal bandwidth, e.g. 20.48GB/s")
        group.add_argument("--crossbar-size", metavar="RxC", help="crossbar rows x columns, e.g. 256x256")
        group.add_argument("--element-bytes", metavar="B",
                           help="bytes per moved element for every tensor (default: each tensor's own, 1 int8, 4 float32)")
        group.add_argument("--bus-model", choices=("volume", "burst"),
                           help="transfer cost: volume = bytes / bandwidth (eq. 4, default), burst = bursts x CAS + bytes / bandwidth")
        group.add_argument("--burst-bytes", metavar="B", help="bytes per DRAM burst of the burst bus model (default 64)")
        group.add_argument("--cas-latency", metavar="T", help="CAS latency per burst of the burst bus model (default 13.75ns)")
        group.add_argument("--host-profile", metavar="FILE", help="host latencies measured by `cimsplit profile` (default: profile this machine)")
        group.add_argument("--op-latency", metavar="NAME=DURATION", action="append", default=[],
                           help="host latency of an operator onnxruntime cannot profile (custom domain), by node name or "
                                "op type, e.g. MyOp=2us (repeatable)")
        group.add_argument("--host-model", metavar="FILE",
                           help="predict host latencies from a board calibration (`cimsplit calibrate`) instead of profiling")
        group.add_argument("--allow-unpredicted", action="store_true",
                           help="with --host-model: profile on this machine the operator kinds the calibration lacks")
        group.add_argument("--paper-exact", action="store_true", help="no graph input/output transfers (the paper's model)")

    @staticmethod
    def parse(args: argparse.Namespace) -> Hardware:
        """``--hw`` then every override; ``--host-profile`` replaces the TOML's ``host_profile``."""
        from cimsplit.compiler.hardware import hardware_from_flags

        return hardware_from_flags(
            args.hw or "x86", crossbars=args.crossbars, mvm_latency=args.mvm_latency, bus_bandwidth=args.bus_bandwidth,
            crossbar_size=args.crossbar_size, element_bytes=args.element_bytes, host_profile=args.host_profile,
            host_model=args.host_model, bus_model=args.bus_model, burst_bytes=args.burst_bytes, cas_latency=args.cas_latency,
        )

    @staticmethod
    def compile_options(args: argparse.Namespace, solve: SolveOptions | None = None) -> CompileOptions:
        """The cost-model flags (``--paper-exact``, ``--op-latency``) and ``solve`` as compile options."""
        from cimsplit.compiler.opaque import parse_op_latencies
        from cimsplit.passes.pipeline import CompileOptions

        options = CompileOptions(paper_exact=bool(args.paper_exact), op_latencies=parse_op_latencies(args.op_latency),
                                 allow_unpredicted=bool(args.allow_unpredicted))
        return options if solve is None else dataclasses.replace(options, solve=solve)


class SolverArgs:
    """Which solver, how long, how exact; ``verbose=False`` leaves out ``--verbose`` (the sweep's workers)."""

    def __init__(self, verbose: bool = True, time_limit_help: str = "solver time limit (default 60)",
                 stream: bool = False, latency_list: bool = False) -> None:
        self.verbose = verbose
        self.time_limit_help = time_limit_help
        self.stream = stream
        self.latency_list = latency_list
        """``--max-latency`` takes a list (the sweep's front): read it with :meth:`max_latencies`."""

    def add_to_parser(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("solver")
        group.add_argument("--solver", default="auto", help="auto|gurobi|highs|cpsat (default auto)")
        group.add_argument("--time-limit", type=float, default=60.0, metavar="SECONDS", help=self.time_limit_help)
        group.add_argument("--mip-gap", type=float, default=None, metavar="GAP", help="relative MIP gap to stop at")
        group.add_argument("--plain", action="store_true", help="the paper's plain formulation, without cuts or tightenings")
        group.add_argument("--slicing", default="auto", metavar="off|ks|ofm|all",
                           help="split Conv/Gemm/MatMul operators between the CIM and the host (TSO): by output "
                                "channels (ks), output rows (ofm) or either (all); default auto (= all): slice exactly when "
                                "that is shorter, decided by the sliced problem's proven bound")
        if self.verbose:
            group.add_argument("--verbose", action="store_true", help="show solver output")
        if self.stream:
            group.add_argument("--objective", default="latency", metavar="latency|throughput",
                               help="minimize one frame's latency (default, the paper's) or a stream's period")
            if self.latency_list:
                group.add_argument("--max-latency", metavar="T,...", dest="max_latencies",
                                   help="throughput: frame-latency bounds, one point each (the latency/throughput "
                                        "front), e.g. 60,80,120ms; 0 = unbounded")
            else:
                group.add_argument("--max-latency", metavar="T",
                                   help="throughput: bound on one frame's latency in the stream, e.g. 2ms")
            group.add_argument("--frames-in-flight", metavar="K",
                               help="throughput: at most K frames overlap (latency <= K x period)")

    @staticmethod
    def parse(args: argparse.Namespace) -> SolveOptions:
        """Refuse bad solver flags before the (slow) loading and profiling."""
        from cimsplit.passes.placement.driver import SOLVER_CHOICES
        from cimsplit.passes.placement.options import SolveOptions

        if args.solver not in SOLVER_CHOICES:
            raise CimsplitError(f"unknown solver {args.solver!r}", hint=f"--solver takes one of {', '.join(SOLVER_CHOICES)}")
        if not (math.isfinite(args.time_limit) and args.time_limit > 0):
            raise CimsplitError(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
        if args.mip_gap is not None and not (math.isfinite(args.mip_gap) and 0 <= args.mip_gap < 1):
            raise CimsplitError(f"--mip-gap must be in [0, 1), got {args.mip_gap:g}")
        from cimsplit.passes.placement.options import SLICING_CHOICES

        slicing = getattr(args, "slicing", "auto")
        if slicing not in SLICING_CHOICES:
            raise CimsplitError(f"unknown slicing {slicing!r}", hint=f"--slicing takes one of {', '.join(SLICING_CHOICES)}")
        if args.solver == "gurobi":
            from cimsplit.passes.placement.solvers.gurobi import import_gurobipy

            import_gurobipy()
        objective, max_latency_ns, frames = SolverArgs._stream_flags(args)
        return SolveOptions(solver=args.solver, time_limit_s=args.time_limit, mip_gap=args.mip_gap, plain=args.plain,
                            verbose=bool(getattr(args, "verbose", False)), objective=objective,
                            max_latency_ns=max_latency_ns, frames_in_flight=frames, slicing=slicing)

    @staticmethod
    def max_latencies(args: argparse.Namespace) -> tuple[float, ...]:
        """The sweep's ``--max-latency`` list in ns (0 = unbounded), ``(0.0,)`` when not given."""
        from cimsplit.passes.sweep.grid import parse_time_values

        text = getattr(args, "max_latencies", None)
        if text is None:
            return (0.0,)
        items = [item.strip() for item in str(text).split(",")]
        zero = [item for item in items if item.rstrip("numsµ ") in ("0", "0.0")]
        rest = ",".join(item for item in items if item not in zero)
        values = (0.0,) * bool(zero) + (parse_time_values(rest, "--max-latency") if rest else ())
        if getattr(args, "objective", "latency") != "throughput":
            raise CimsplitError("--max-latency and --frames-in-flight bound a stream", hint="add --objective throughput")
        return tuple(sorted(set(values)))

    @staticmethod
    def _stream_flags(args: argparse.Namespace) -> tuple[str, float | None, int | None]:
        """``--objective``, ``--max-latency`` (a time with unit) and ``--frames-in-flight``, checked."""
        from cimsplit.compiler.units import parse_time_ns
        from cimsplit.passes.placement.options import OBJECTIVES

        objective = getattr(args, "objective", None) or "latency"
        if objective not in OBJECTIVES:
            raise CimsplitError(f"unknown objective {objective!r}", hint="--objective takes latency or throughput")
        max_latency, frames = getattr(args, "max_latency", None), getattr(args, "frames_in_flight", None)
        max_latency_ns = None
        if max_latency is not None:
            max_latency_ns = parse_time_ns(max_latency)
            if max_latency_ns <= 0:
                raise CimsplitError(f"--max-latency must be a positive time, got {max_latency}")
        k = None
        if frames is not None:
            try:
                k = int(frames)
            except ValueError:
                k = 0
            if k < 1 or str(k) != str(frames).strip():
                raise CimsplitError(f"--frames-in-flight must be a whole number >= 1, got {frames}")
        if objective == "latency" and (max_latency_ns is not None or k is not None):
            raise CimsplitError("--max-latency and --frames-in-flight bound a stream", hint="add --objective throughput")
        return objective, max_latency_ns, k


@dataclass(frozen=True)
class OutputSpec:
    """Where to write and whether an existing file or non-empty directory may be replaced."""

    path: Path | None
    force: bool


class OutputArgs:
    """``-o`` (a file or a directory) and ``--force``."""

    def __init__(self, kind: str, *, required: bool, help: str, force_help: str) -> None:
        if kind not in ("file", "directory"):
            raise ValueError(f"kind must be 'file' or 'directory', not {kind!r}")
        self.kind, self.required, self.help, self.force_help = kind, required, help, force_help

    def add_to_parser(self, parser: argparse.ArgumentParser) -> None:
        metavar = "DIR" if self.kind == "directory" else "FILE"
        parser.add_argument("-o", "--output", required=self.required, metavar=metavar, help=self.help)
        parser.add_argument("--force", action="store_true", help=self.force_help)

    def parse(self, args: argparse.Namespace, protect: Iterable[str | Path] = ()) -> OutputSpec:
        """Refuse a destination that cannot be written or would replace something without ``--force``.

        ``protect`` lists the inputs, which are never overwritten or deleted.
        """
        spec = OutputSpec(Path(args.output) if args.output else None, bool(args.force))
        if spec.path is None:
            return spec
        if self.kind == "directory":
            from cimsplit.passes.emit.directory import check_destination

            check_destination(spec.path, spec.force, protect=[Path(p) for p in protect])
            return spec
        path = spec.path
        if path.is_dir():
            raise CimsplitError(f"{path} is a directory", hint="pass -o with a file name")
        if path.exists() and any(path.resolve() == Path(p).resolve() for p in protect):
            raise CimsplitError(f"{path} is the input model", hint="pass -o with another file name")
        blocking = next((p for p in path.parents if p.exists()), None)
        if blocking is not None and not blocking.is_dir():
            raise CimsplitError(f"cannot create {path}: {blocking} is a file, not a folder")
        if path.exists() and not spec.force:
            raise CimsplitError(f"{path} already exists", hint="pass --force to overwrite it")
        return spec
