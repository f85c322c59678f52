"""Argument groups shared by subcommands (Polygraphy style): model, hardware, solver."""

from __future__ import annotations

import argparse


def add_model_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("model", metavar="MODEL", help="ONNX model file")
    group.add_argument(
        "--input-shape", metavar="NAME=D0,D1,...", action="append", default=[],
        help="fix the shape of a graph input with symbolic or unknown dims (repeatable)",
    )


def add_hardware_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("hardware")
    group.add_argument("--hw", default="x86", metavar="x86|arm|FILE.toml", help="hardware preset or TOML file (default x86)")
    group.add_argument("--crossbars", metavar="C", help="number of crossbars C")
    group.add_argument("--mvm-latency", metavar="T", help="latency of one MVM, e.g. 50ns or 0.05us")
    group.add_argument("--bus-bandwidth", metavar="B", help="CPU-CIM bus and CIM internal bandwidth, e.g. 20.48GB/s")
    group.add_argument("--crossbar-size", metavar="RxC", help="crossbar rows x columns, e.g. 256x256")
    group.add_argument("--host-profile", metavar="FILE", help="host latencies measured by `cimsplit profile` (default: profile this machine)")
    group.add_argument("--paper-exact", action="store_true", help="no graph input/output transfers (the paper's model)")


def add_solver_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("solver")
    group.add_argument("--solver", default="auto", help="auto|gurobi|highs|cpsat (default auto)")
    group.add_argument("--time-limit", type=float, default=60.0, metavar="SECONDS", help="solver time limit (default 60)")
    group.add_argument("--mip-gap", type=float, default=None, metavar="GAP", help="relative MIP gap to stop at")
    group.add_argument("--plain", action="store_true", help="the paper's plain formulation, without cuts or tightenings")
    group.add_argument("--verbose", action="store_true", help="show solver output")
