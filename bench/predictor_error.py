"""How well does a board calibration predict the zoo's host latencies, and what does predicting cost the plan?

For each paper zoo model (ResNet-18/50, MobileNetV2, YOLOv5n at their default
sizes), float and int8: profile it on this machine (the truth), predict every
operator's T_host from ``--host-model`` (the calibration), and print

* per-operator absolute percentage error, mean and max, over all operators
  and over the convolutions (issue 16 target: conv mean <= 8 %);
* the whole-model sum of T_host, predicted against profiled (target within 5 %);
* the plan cost of predicting: the placement compiled with predicted costs,
  re-timed with profiled costs (``simulate``), against the placement compiled
  with profiled costs (target within 2 %).

It first checks that none of the zoo's GEMM shapes is a calibration sample
(the grid holds them out).  The truth is the per-node median of ``--rounds``
profiles (separate sessions); how far the rounds are from it is printed as the
errors' noise floor.  No assertion on the figures.

Before each round, some of each calibration's points of the model's kinds are measured again
(:mod:`cimsplit.compiler.calibration_check`): their median ratios of now to the board's times (GEMM kinds, the
others) say how much slower or faster this machine runs than when it was calibrated, and the errors are also printed
with each prediction scaled by its class's ratio ("at now"), which separates the predictor's error from the machine's
drift.  The kernel classes (:func:`~cimsplit.compiler.calibration_check.drift_class`) are GEMM kinds, depthwise
convs and element kinds.  Each calibration is also evaluated as a user would re-anchor it before compiling
(``cimsplit calibrate --check B -o NEW``): rescaled by the first round's check, before any truth is profiled
(rows "B rescaled"; their plan cost is that board's).  The targets are the unscaled ones.

    .venv/bin/python bench/predictor_error.py --host-model board.json [other.json ...] [--runs 10] [--rounds 3] \\
        [--time-limit 20] [--onnx FILE@x=1,3,48,320 ...] [-o bench/results/predictor_error.txt]

``-o`` saves the table and, beside it, a .json with every operator's profiled and predicted time.
``--onnx``: exported models as well (PaddleOCR's from ``bench/pypi_exports.py``'s cache), evaluated as they are.

Several calibrations are compared against the same profiles (the truth drifts between runs on a shared VM).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from cimsplit.cli.table import format_table
from cimsplit.compiler.calibration_check import DRIFT_CLASSES, SpeedCheck, reference_points, rescaled, speed_check
from cimsplit.compiler.costs import build_costs
from cimsplit.compiler.frontend import load
from cimsplit.compiler.hardware import load_hardware
from cimsplit.compiler.host_model import HostModel, operator_kind
from cimsplit.compiler.host_prediction import predicted_profile
from cimsplit.compiler.host_profile import HostProfile, operator_latencies, profile_model
from cimsplit.compiler.qdq_kernels import int8_kernels
from cimsplit.compiler.workload import Workload
from cimsplit.files import write_atomic
from cimsplit.models import zoo
from cimsplit.passes.placement.driver import place, problem_from_costs
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.simulate import host_order_by_start, simulate

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "yolov5n")


def _pct(values: list[float]) -> tuple[float, float]:
    return (100 * float(np.mean(values)), 100 * float(np.max(values))) if values else (float("nan"), float("nan"))


def median_profile(rounds: list[HostProfile]) -> HostProfile:
    """One profile whose node medians are the medians of ``rounds``' (separate sessions: on a shared VM a whole
    session can run 5-10 % slow, which one profile would take for the truth)."""
    nodes = {node: dict(stats, median_ns=float(np.median([r.nodes[node]["median_ns"] for r in rounds])))
             for node, stats in rounds[0].nodes.items()}
    return dataclasses.replace(rounds[0], nodes=nodes)


def truth_spread(workload: Workload, rounds: list[HostProfile], truth: dict[str, float]) -> tuple[float, float]:
    """How far the rounds are from their median, the truth: the convs' mean absolute percentage difference (mean over
    rounds) and the largest |difference| of a round's whole-model sum, in %: the noise floor of the errors."""
    convs = [op.name for op in workload.operators if op.op_type == "Conv" and truth[op.name] > 0]
    conv_mapes, sums = [], []
    for profile in rounds:
        latencies = operator_latencies(workload, profile)
        conv_mapes.append(np.mean([abs(latencies[n] - truth[n]) / truth[n] for n in convs]) if convs else np.nan)
        sums.append(abs(sum(latencies.values()) / sum(truth.values()) - 1))
    return 100 * float(np.mean(conv_mapes)), 100 * float(np.max(sums))


def now_then(ratios: dict[str, float] | None) -> str:
    return "-" if ratios is None else "/".join(f"{ratios[name]:.2f}" for name in DRIFT_CLASSES)


def median_check(checks: list[SpeedCheck]) -> SpeedCheck:
    """One check whose references' times now are the medians of ``checks``' (the same references, one check a round)."""
    return SpeedCheck(tuple(dataclasses.replace(r, now_ns=float(np.median([c.references[i].now_ns for c in checks])))
                            for i, r in enumerate(checks[0].references)))


def exported(spec: str) -> tuple[str, Path, dict[str, tuple[int, ...]]]:
    """``--onnx FILE[@NAME=D0,D1,...]`` as (label, path, input shapes)."""
    file, _, shape = spec.partition("@")
    name, _, dims = shape.partition("=")
    return Path(file).stem, Path(file), ({name: tuple(int(d) for d in dims.split(","))} if shape else {})


def evaluate(name: str, int8: bool, host_models: dict[str, HostModel], args: argparse.Namespace,
             file: tuple[Path, dict[str, tuple[int, ...]]] | None = None) -> list[dict]:
    """One result per calibration of ``host_models``, all against the same truth (one median profile); ``file``:
    an exported model and its input shapes instead of the zoo's ``name``."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.onnx"
        if file is None:
            onnx.save(zoo.build(name, int8=int8), path)
        loaded = load(path, None) if file is None else load(file[0], file[1])
    zoo_shapes = {(op.m, op.n, op.n_mvm) for op in loaded.workload.operators if op.m is not None}
    for calibration, host_model in host_models.items():
        calibrated = {tuple(int(s.features[k]) for k in ("m", "n", "n_mvm")) for s in host_model.samples if "m" in s.features}
        if file is None and calibrated & zoo_shapes:
            raise SystemExit(f"{name}: calibration {calibration} holds zoo shapes {sorted(calibrated & zoo_shapes)[:3]}")
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    kinds = {calibration: {operator_kind(op, types, kernels.get(op.name, "")) for op in loaded.workload.operators}
             for calibration, host_model in host_models.items()
             for kernels in [int8_kernels(loaded.model.graph, host_model.machine.get("machine"))]}
    references = {calibration: reference_points(host_model, kinds[calibration], args.references)
                  for calibration, host_model in host_models.items()}
    checks: dict[str, list[SpeedCheck]] = {calibration: [] for calibration in host_models}
    rounds = []
    begin = time.perf_counter()
    for _ in range(args.rounds):  # the machine's speed now is measured in the same turns as the truth
        for calibration, host_model in host_models.items():
            checks[calibration].append(speed_check(host_model, references[calibration]))
        rounds.append(profile_model(loaded, runs=args.runs, warmup=2, progress=False))
    profiled_s = time.perf_counter() - begin
    profile = median_profile(rounds)
    truth = operator_latencies(loaded.workload, profile)
    spread_conv, spread_sum = truth_spread(loaded.workload, rounds, truth)
    hardware = load_hardware("x86")
    options = SolveOptions(time_limit_s=args.time_limit)
    true_problem = problem_from_costs(loaded.workload, build_costs(loaded.workload, hardware, profile))
    best = place(true_problem, options)
    results = []
    boards = dict(host_models)
    for calibration, host_model in host_models.items():  # re-anchored before the truth, as a user would
        if checks[calibration] and checks[calibration][0].references:
            boards[f"{calibration} rescaled"] = rescaled(host_model, checks[calibration][0])
    for calibration, host_model in boards.items():
        # An export's kinds the calibration lacks take the truth (left out of the errors, listed in the row)
        predicted = predicted_profile(loaded, host_model, allow_unpredicted=file is not None, measured=profile)
        guess = operator_latencies(loaded.workload, predicted)
        kernels = int8_kernels(loaded.model.graph, host_model.machine.get("machine"))
        check = median_check(checks[calibration]) if references.get(calibration) else None
        errors, conv_errors, conv_errors_now, by_kind, per_op = [], [], [], {}, []
        sum_guess_now = 0.0
        for op in loaded.workload.operators:
            if truth[op.name] <= 0 or op.name in predicted.unpredicted:
                continue  # ORT ran no kernel for it (folded or fused away), or not predicted: no percentage to take
            error = abs(guess[op.name] - truth[op.name]) / truth[op.name]
            errors.append(error)
            kind = operator_kind(op, types, kernels.get(op.name, ""))
            now = guess[op.name] * (check.ratio_for(kind) if check is not None else float("nan"))
            sum_guess_now += now
            per_op.append({"name": op.name, "kind": kind, "profiled_ns": truth[op.name], "predicted_ns": guess[op.name],
                           "gemm": [op.m, op.n, op.n_mvm] if op.m is not None else None})
            by_kind.setdefault(kind, [0.0, 0.0])
            by_kind[kind][0] += truth[op.name]
            by_kind[kind][1] += guess[op.name]
            if op.op_type == "Conv":
                conv_errors.append(error)
                conv_errors_now.append(abs(now - truth[op.name]) / truth[op.name])
        guess_problem = problem_from_costs(loaded.workload, build_costs(loaded.workload, hardware, predicted))
        chosen = place(guess_problem, options)
        retimed = simulate(true_problem, chosen.schedule.on_host, host_order_by_start(chosen.schedule))
        mean, worst = _pct(errors)
        conv_mean, conv_worst = _pct(conv_errors)
        sum_true, sum_guess = sum(truth.values()), sum(guess.values())
        results.append({
            "model": name + (" int8" if int8 else ""), "calibration": calibration, "operators": len(errors),
            "convs": len(conv_errors), "mape": mean, "max_ape": worst, "conv_mape": conv_mean, "conv_max_ape": conv_worst,
            "sum_profiled_ns": sum_true, "sum_predicted_ns": sum_guess,
            "sum_error_pct": 100 * (sum_guess - sum_true) / sum_true,
            "board_now_then": check.ratios() if check else None,
            "board_references": [dataclasses.asdict(r) for r in check.references] if check else [],
            "conv_mape_at_now": _pct(conv_errors_now)[0] if check else float("nan"), "sum_error_at_now_pct": 100 * (sum_guess_now / sum_true - 1),
            "plan_profiled_ns": best.schedule.makespan_ns, "plan_predicted_retimed_ns": retimed.makespan_ns,
            "plan_cost_pct": 100 * (retimed.makespan_ns - best.schedule.makespan_ns) / best.schedule.makespan_ns,
            "solver_status": f"{best.solver.status}/{chosen.solver.status}", "profiled_s": profiled_s,
            "truth_conv_spread_pct": spread_conv, "truth_sum_spread_pct": spread_sum,
            "unpredicted": sorted({operator_kind(op, types, kernels.get(op.name, "")) for op in loaded.workload.operators
                                   if op.name in predicted.unpredicted}),
            "by_kind": {k: {"profiled_ns": v[0], "predicted_ns": v[1]} for k, v in sorted(by_kind.items())},
            "per_operator": per_op,
        })
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host-model", required=True, metavar="FILE", nargs="+",
                        help="one calibration, or several compared against the same profiles")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=zoo.NAMES, help="zoo models (none: --onnx only)")
    parser.add_argument("--onnx", nargs="+", default=[], metavar="FILE[@NAME=D0,D1,...]",
                        help="exported models too, as they are (float or int8), with an input's shape fixed")
    parser.add_argument("--float-only", action="store_true")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="profiles per model; the truth is their per-node median")
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--references", type=int, default=32, metavar="N",
                        help="board points measured again before each round, for the machine's speed now (0: none)")
    parser.add_argument("-o", "--output", type=Path, default=None, help="save the table (and a .json beside it)")
    args = parser.parse_args(argv)
    host_models = {file: HostModel.load(file) for file in args.host_model}
    load_before = os.getloadavg()
    rows, results = [], []
    several = len(host_models) > 1 or args.references > 0  # (each board is also evaluated rescaled)
    cases = [(name, int8, None) for name in args.models for int8 in ((False,) if args.float_only else (False, True))]
    cases += [(label, False, (path, shapes)) for label, path, shapes in map(exported, args.onnx)]
    for name, int8, file in cases:
        for result in evaluate(name, int8, host_models, args, file):
            results.append(result)
            rows.append([result["model"], *([result["calibration"]] if several else []),
                         str(result["operators"]), f"{result['mape']:.1f}", f"{result['max_ape']:.0f}",
                         f"{result['conv_mape']:.1f}", f"{result['conv_max_ape']:.0f}", f"{result['sum_error_pct']:+.1f}",
                         f"{result['plan_cost_pct']:+.2f}", now_then(result["board_now_then"]),
                         f"{result['conv_mape_at_now']:.1f}", f"{result['sum_error_at_now_pct']:+.1f}",
                         f"{result['truth_conv_spread_pct']:.1f}",
                         f"{result['truth_sum_spread_pct']:.1f}", result["solver_status"], " ".join(result["unpredicted"]) or "-"])
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    lines = [
        f"# predictor error: calibration {file} ({model.campaign.get('measured')} points in "
        f"{model.campaign.get('elapsed_s')} s, load {model.campaign.get('load_average_before')} -> "
        f"{model.campaign.get('load_average_after')}), cpu {model.cpu}, onnxruntime {model.ort_version}, level "
        f"{model.level}, {model.threads} thread(s)" for file, model in host_models.items()
    ]
    host_model = next(iter(host_models.values()))
    lines += [
        f"# truth: per-node median of {args.rounds} profile_model rounds of runs={args.runs}; "
        f"plans: x86 preset (100 crossbars, 50 ns), solver auto, {args.time_limit:g} s",
        f"# load average (1, 5, 15 min) before {', '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores",
        "# targets (issue 16): conv MAPE <= 8 %, |sum error| <= 5 %, plan cost <= 2 %",
        "# rounds' conv % / sum %: the noise floor, how far the rounds are from their median (convs' mean absolute "
        "difference; the largest |difference| of a round's sum)",
        f"# board now/then: the median ratios of {args.references} of the calibration's points (of the model's kinds) "
        "measured again before each round to the board's times, GEMM kinds / depthwise convs / element kinds; 'at now': "
        "the predictions scaled by their class's; 'B rescaled': board B rescaled by the first round's check (calibrate --check B -o NEW)",
        "",
        format_table(["model", *(["calibration"] if several else []), "ops", "MAPE %", "max %", "conv MAPE %",
                      "conv max %", "sum err %", "plan cost %", "board now/then", "conv MAPE at now %",
                      "sum err at now %", "rounds' conv %", "rounds' sum %", "solver", "not predicted (profiled)"],
                     rows, [False, *([False] if several else []), *[True] * 12, False, False]),
        "",
        "per kind, sum of T_host profiled -> predicted (ms):",
    ]
    for result in results:
        kinds = ", ".join(f"{k} {v['profiled_ns'] / 1e6:.2f}->{v['predicted_ns'] / 1e6:.2f}" for k, v in result["by_kind"].items())
        lines.append(f"  {result['model']}{' (' + result['calibration'] + ')' if several else ''}: {kinds}")
    fits = ", ".join(f"{kind} {fit.label} (cv {100 * (fit.held_out_mape or float('nan')):.0f}%, "
                     f"Pipe-it {100 * (fit.cv_mape.get('pipeit') or float('nan')):.0f}%)"
                     for kind, fit in sorted(host_model.fits.items()) if "Conv" in kind or "Gemm" in kind)
    lines.append(f"GEMM fits: {fits}")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output is not None:
        write_atomic(args.output, text)
        write_atomic(args.output.with_suffix(".json"), json.dumps(results, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
