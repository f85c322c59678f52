"""`cimsplit explain`: why every operator sits where it does, and what a crossbar is worth.

    cimsplit explain DIR   [--operator NAME ...] [--json] [--budget-curve [--plot FILE]]
    cimsplit explain MODEL [model, hardware and solver flags] [same options]

On a compiled directory it reads ``explain.json`` (written by ``compile --explain``); on a
model it solves the plan, then every forced move and the budget curve with the
same solver and limits.  Each operator gets one reason (not CIM-capable, never
profitable, on the CIM with its saving, crowded out by the budget, off the
critical path) and the makespan if forced to the other device.  A forced move
better than the plan's proven optimum is reported as an internal error (exit 3).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from cimsplit.cli.args import HardwareArgs, ModelArgs, SolverArgs
from cimsplit.cli.table import format_table
from cimsplit.compiler.units import format_time_ns
from cimsplit.errors import CimsplitError

EXPLAIN_FILE = "explain.json"
SOLVER = SolverArgs()


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "explain", help="why each operator is on the host or the CIM, with the exact cost of moving it",
        description="Explain a compiled directory (its explain.json) or a model (solved here): for every operator "
                    "the reason it sits on its device and the makespan if it were forced to the other one; "
                    "the exact makespan at every crossbar budget up to saturation.",
    )
    ModelArgs.add_to_parser(parser)
    parser.add_argument("--operator", metavar="NAME", action="append", default=None,
                        help="explain only this operator (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the explanation as JSON")
    parser.add_argument("--budget-curve", action="store_true",
                        help="print the makespan at every budget and write a plot (see --plot)")
    parser.add_argument("--plot", metavar="FILE", default=None,
                        help="where --budget-curve writes its plot (default <model>_budget_curve.png here)")
    HardwareArgs.add_to_parser(parser)
    SOLVER.add_to_parser(parser)
    parser.set_defaults(func=run)


def _from_directory(directory: Path) -> dict[str, Any]:
    path = directory / EXPLAIN_FILE
    if not path.is_file():
        raise CimsplitError(f"{directory} has no {EXPLAIN_FILE}",
                            hint="compile it with --explain, or run `cimsplit explain MODEL`")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CimsplitError(f"cannot read {path}: {exc}") from exc


def _from_model(args: argparse.Namespace) -> tuple[dict[str, Any], float]:
    from cimsplit.passes.emit.explanation import explanation_to_json
    from cimsplit.passes.pipeline import cost_model, explain_placement, place_model

    options = replace(SOLVER.parse(args), slicing="off")  # explanations are of whole-operator placements
    compile_options = HardwareArgs.compile_options(args, options)
    costed = cost_model(ModelArgs.parse(args), HardwareArgs.parse(args), compile_options)
    plan = place_model(costed, compile_options).result
    for warning in plan.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    unknown = sorted(set(args.operator or ()) - set(plan.problem.names))
    if unknown:
        raise CimsplitError(f"the model has no operator {unknown[0]!r}",
                            hint="`cimsplit inspect MODEL` lists the operators")

    explanation = explain_placement(costed.loaded.workload, plan, options, operators=args.operator)
    return explanation_to_json(explanation), explanation.time_s


def _forced_text(op: dict[str, Any]) -> str:
    if op["forced_makespan_ns"] is None:
        return "-" if op["forced_device"] is None else "impossible"
    text = format_time_ns(op["forced_makespan_ns"])
    if op["forced_status"] not in ("optimal", "shortcut") and op["forced_gap"]:
        text += f" (gap {100 * op['forced_gap']:.2g} %)"
    return text


def _print_operators(document: dict[str, Any]) -> None:
    counts = Counter(op["reason"] for op in document["operators"])
    print(f"plan: makespan {format_time_ns(document['makespan_ns'])} ({document['status']}), crossbars used "
          f"{document['crossbars_used']} of {document['crossbar_budget']}")
    print("reasons: " + ", ".join(f"{reason} {count}" for reason, count in sorted(counts.items())))
    rows = [[op["name"], op["device"], op["reason"], op["forced_device"] or "-", _forced_text(op),
             "-" if op["saving_ns"] is None else f"+{format_time_ns(op['saving_ns'])}", str(op["crossbars"]),
             "yes" if op["critical"] else "", op["detail"]] for op in document["operators"]]
    print(format_table(["operator", "device", "reason", "forced to", "forced makespan", "cost of moving",
                        "crossbars", "critical", "why"], rows,
                       [False, False, False, False, True, True, True, False, False]))


def _print_curve(document: dict[str, Any]) -> None:
    points = document["budget_curve"]
    runs: list[list[dict[str, Any]]] = []
    for p in points:  # one row per budget interval of one placement
        if runs and not p["placement_changed"]:
            runs[-1].append(p)
        else:
            runs.append([p])
    rows = []
    for run in runs:
        first, last = run[0], run[-1]
        span = str(first["crossbars"]) if first is last else f"{first['crossbars']}-{last['crossbars']}"
        marginal = last["marginal_ns"]
        rows.append([span, format_time_ns(first["makespan_ns"]), str(first["operators_on_cim"]),
                     "-" if marginal is None else format_time_ns(marginal)])
    print(f"budget curve: saturation at {document['saturation_crossbars']} crossbars; the placement changes at "
          f"{len(document['placement_changes'])} budgets, the makespan at {len(document['makespan_changes'])}")
    print(format_table(["crossbars", "makespan", "ops on CIM", "next crossbar saves"], rows,
                       [True, True, True, True]))


def run(args: argparse.Namespace) -> int:
    from cimsplit.passes.placement.validate import InternalError

    target = Path(args.model)
    elapsed = None
    try:
        if target.is_dir():
            document = _from_directory(target)
            if args.operator:
                names = {op["name"] for op in document["operators"]}
                unknown = sorted(set(args.operator) - names)
                if unknown:
                    raise CimsplitError(f"{target} has no operator {unknown[0]!r}")
                document["operators"] = [op for op in document["operators"] if op["name"] in set(args.operator)]
        else:
            document, elapsed = _from_model(args)
    except InternalError as exc:
        sys.stderr.write(f"internal error: {exc}\n")
        return 3
    plot = None
    if args.budget_curve:
        from cimsplit.passes.emit.explanation import plot_budget_curve

        stem = target.stem if target.suffix else target.name
        plot = plot_budget_curve(document, args.plot or f"{stem}_budget_curve.png", f"{stem}: makespan vs crossbar budget")
    if args.json:
        print(json.dumps(document, sort_keys=True, indent=2))
        return 0
    _print_operators(document)
    if args.budget_curve:
        print()
        _print_curve(document)
        print(f"plot: {plot}")
    if elapsed is not None:
        print(f"explained in {elapsed:.2f} s with {document['solves']} solves besides the plan")
    return 0
