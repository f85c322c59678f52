"""`cimsplit inspect MODEL`: the workload DAG as a table (or JSON) with GEMM shapes (eq. 1)."""

from __future__ import annotations

import argparse
import json
import sys

from cimsplit.cli.args import ModelArgs
from cimsplit.compiler.units import parse_crossbar_size
from cimsplit.compiler.workload import Workload
from cimsplit.errors import CimsplitError

__all__ = ["register", "run", "workload_json", "workload_table"]


def _crossbar_size(text: str) -> tuple[int, int]:
    """``--crossbar-size`` of inspect, which has no hardware to validate it: both sides must be positive."""
    try:
        rows, cols = parse_crossbar_size(text)
    except CimsplitError:
        rows = cols = 0
    if rows <= 0 or cols <= 0:
        raise CimsplitError(f"bad --crossbar-size {text!r}", hint="write ROWSxCOLS with positive integers, e.g. 256x256")
    return rows, cols


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("inspect", help="show the workload DAG: operators, fusion, CIM capability, GEMM shapes")
    ModelArgs.add_to_parser(parser)
    parser.add_argument("--crossbar-size", default="256x256", metavar="RxC", help="crossbar rows x columns (default 256x256)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cimsplit.compiler.frontend import load

    crossbar_size = _crossbar_size(args.crossbar_size)
    spec = ModelArgs.parse(args)
    loaded = load(spec.path, dict(spec.input_shapes), crossbar_size=crossbar_size, frozen_inputs=dict(spec.frozen_inputs))
    if args.json:
        sys.stdout.write(json.dumps(workload_json(loaded.workload), indent=2) + "\n")
    else:
        sys.stdout.write(workload_table(loaded.workload))
    return 0


def _totals(workload: Workload) -> dict[str, int]:
    return {
        "operators": len(workload.operators),
        "cim_capable": len(workload.cim_capable),
        "crossbars": workload.total_crossbars,
    }


def workload_json(workload: Workload) -> dict:
    """The ``--json`` document: operators, edges, totals."""
    return {
        "operators": [
            {
                "name": op.name, "op_type": op.op_type, "nodes": list(op.nodes), "cim_capable": op.cim_capable,
                "reason": op.reason, "m": op.m, "n": op.n, "n_mvm": op.n_mvm, "crossbars": op.crossbars,
                "n_in": op.n_in, "n_out": op.n_out,
            }
            for op in workload.operators
        ],
        "edges": [{"src": e.src, "dst": e.dst, "elements": e.elements} for e in workload.edges],
        "totals": _totals(workload),
    }


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def _abbreviate(names: tuple[str, ...], width: int = 40) -> str:
    """Fused node names, cut to about ``width`` characters with a count of the rest."""
    if not names:
        return "-"
    text = ",".join(names)
    if len(text) <= width:
        return text
    shown: list[str] = []
    for name in names:
        if len(",".join(shown + [name])) > width - 10 and shown:
            break
        shown.append(name)
    return ",".join(shown) + f",+{len(names) - len(shown)} more"


def workload_table(workload: Workload) -> str:
    """An aligned text table, one row per operator, then the totals."""
    header = ("name", "op", "fused", "cim", "M", "N", "N_mvm", "crossbars", "N_in", "N_out")
    rows = [header]
    for op in workload.operators:
        fused = _abbreviate(op.nodes[1:])
        rows.append((
            op.name, op.op_type, fused, "yes" if op.cim_capable else f"no: {op.reason}",
            _cell(op.m), _cell(op.n), _cell(op.n_mvm), _cell(op.crossbars), str(op.n_in), str(op.n_out),
        ))
    numeric = {4, 5, 6, 7, 8, 9}
    order = range(len(header))
    widths = {c: max(len(r[c]) for r in rows) for c in order}
    lines = []
    for r in rows:
        cells = [r[c].rjust(widths[c]) if c in numeric else r[c].ljust(widths[c]) for c in order]
        lines.append("  ".join(cells).rstrip())
    totals = _totals(workload)
    lines.append("")
    lines.append(f"operators: {totals['operators']}   CIM-capable: {totals['cim_capable']}   "
                 f"crossbars to offload every capable operator: {totals['crossbars']} "
                 f"({workload.crossbar_rows}x{workload.crossbar_cols})")
    return "\n".join(lines) + "\n"
