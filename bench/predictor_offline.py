"""Compare host-latency predictors offline: held-out error on a calibration's samples, and the zoo on cached profiles.

Both parts run on fixed data, so every candidate is judged on the same numbers:

1. **Held-out error per kind**: every method refitted on the calibration's
   recorded samples, holding out whole shapes (5 folds), one input-channel
   count at a time, and one spatial size at a time (the zoo's channel counts
   and sizes are none of the grid's); the fit as saved in the calibration
   ("before") against the fit chosen by this cimsplit ("after").
2. **Zoo**: each zoo model (float and int8) is profiled ``--rounds`` times on
   this machine and cached under ``--profiles`` (reused when present); the
   truth is each operator's smallest median over the rounds (a shared machine's
   load only adds time).  Both predictors are evaluated against it: conv MAPE,
   whole-model sum error, and the conv MAPE after dividing out the model's
   geometric-mean conv ratio (what is left when a uniform slow-down is removed).

    .venv/bin/python bench/predictor_offline.py --host-model bench/results/board_pointwise.json \\
        --profiles /tmp/zoo_profiles [--rounds 5] [-o bench/results/predictor_offline.txt]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from cimsplit.cli.table import format_table
from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_model import (
    METHODS,
    HostModel,
    channel_folds,
    cross_validated_mape,
    fit_samples,
    is_gemm_kind,
    operator_kind,
)
from cimsplit.compiler.host_prediction import predicted_profile
from cimsplit.compiler.host_profile import HostProfile, operator_latencies, profile_model
from cimsplit.compiler.qdq_kernels import int8_kernels
from cimsplit.files import write_atomic
from cimsplit.models import zoo

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "yolov5n")


def zoo_loaded(name: str, int8: bool):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.onnx"
        onnx.save(zoo.build(name, int8=int8), path)
        return load(path)


def cached_zoo_profile(loaded, label: str, folder: Path, runs: int) -> HostProfile:
    """The profile of ``loaded`` saved under ``folder`` (measured and saved the first time)."""
    path = folder / f"{label}.json"
    if path.exists():
        return HostProfile.load(path).for_model(loaded.model)
    folder.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    begin = time.perf_counter()
    profile = profile_model(loaded, runs=runs, warmup=2, progress=False)
    profile.save(path)
    print(f"profiled {label} in {time.perf_counter() - begin:.0f} s, load {load_before[0]:.2f} -> {os.getloadavg()[0]:.2f}",
          file=sys.stderr, flush=True)
    return profile


def _spatial_folds(features) -> list[int | None]:
    """Fold by input spatial size H_in W_in (GEMM kinds with a channel count only)."""
    folds: list[int | None] = []
    for f, channels in zip(features, channel_folds(features)):
        c_in = f["n"] / f.get("k", 1.0) ** 2 if "m" in f else 0
        c = channels or (c_in if c_in > 0 else None)
        folds.append(None if c is None else round(f["n_in"] / (f["m"] if f["n"] == f.get("k", 1.0) ** 2 else c)))
    return folds


def _scores(method: str, features, t_ns, schemes) -> list[str]:
    values = [cross_validated_mape(method, features, t_ns, folds) if method in METHODS else None for folds in schemes]
    return [("-" if v is None else f"{100 * v:.1f}") for v in values] + ["-"] * (3 - len(schemes))


def held_out_table(host_model: HostModel, after: dict) -> list[str]:
    by_kind: dict[str, list] = {}
    for sample in host_model.samples:
        by_kind.setdefault(sample.kind, []).append(sample)
    rows = []
    for kind in sorted(after):
        before_fit, after_fit = host_model.fits.get(kind), after[kind]
        features = [s.features for s in by_kind[kind]]
        t_ns = [s.t_ns for s in by_kind[kind]]
        schemes = [None]
        if is_gemm_kind(kind):
            schemes += [channel_folds(features), _spatial_folds(features)]

        before_method = before_fit.method if before_fit else "-"
        corrected = "-" if after_fit.correction is None else f"{100 * after_fit.correction.cv_mape:.1f}"
        rows.append([kind, str(len(t_ns)), before_method, *_scores(before_method, features, t_ns, schemes), after_fit.method,
                     *_scores(after_fit.method, features, t_ns, schemes), corrected])
    return [format_table(["kind", "samples", "before", "shape %", "channel %", "spatial %", "after", "shape %", "channel %",
                          "spatial %", "+ridge %"], rows, [False, True, False, True, True, True, False, True, True, True, True])]


def zoo_rows(host_model: HostModel, after: HostModel, args: argparse.Namespace) -> tuple[list[list[str]], list[str]]:
    rows, kinds_lines = [], []
    for name in args.models:
        for int8 in (False, True):
            label = name + ("-int8" if int8 else "")
            loaded = zoo_loaded(name, int8)
            rounds = [operator_latencies(loaded.workload, cached_zoo_profile(
                loaded, label + (f"-{r}" if r else ""), args.profiles, args.runs)) for r in range(args.rounds)]
            truth = {op: min(r[op] for r in rounds) for op in rounds[0]}
            types = {node.name: node.op_type for node in loaded.model.graph.node}
            kernels = int8_kernels(loaded.model.graph, host_model.machine.get("machine"))
            row = [label]
            for candidate in (host_model, after):
                guess = operator_latencies(loaded.workload, predicted_profile(loaded, candidate))
                convs = [op.name for op in loaded.workload.operators if op.op_type == "Conv" and truth[op.name] > 0]
                ratios = np.array([guess[op] / truth[op] for op in convs])
                geo = math.exp(float(np.mean(np.log(ratios))))
                sum_true, sum_guess = sum(truth.values()), sum(guess.values())
                row += [f"{100 * np.mean(np.abs(ratios - 1)):.1f}", f"{100 * (sum_guess - sum_true) / sum_true:+.1f}",
                        f"{100 * np.mean(np.abs(ratios / geo - 1)):.1f}"]
                if candidate is after:
                    by_kind: dict[str, list[float]] = {}
                    for op in loaded.workload.operators:
                        kind = operator_kind(op, types, kernels.get(op.name, ""))
                        by_kind.setdefault(kind, [0.0, 0.0])
                        by_kind[kind][0] += truth[op.name]
                        by_kind[kind][1] += guess[op.name]
                    kinds_lines.append(f"  {label}: " + ", ".join(
                        f"{k} {v[0] / 1e6:.2f}->{v[1] / 1e6:.2f}" for k, v in sorted(by_kind.items())))
            rows.append(row)
            print(" | ".join(row), file=sys.stderr, flush=True)
    return rows, kinds_lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host-model", required=True, metavar="FILE")
    parser.add_argument("--profiles", type=Path, required=True, help="folder of the cached zoo profiles")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=zoo.NAMES)
    parser.add_argument("-o", "--output", type=Path, default=None)
    args = parser.parse_args(argv)
    host_model = HostModel.load(args.host_model)
    load_before = os.getloadavg()
    after = dataclasses.replace(host_model, fits=fit_samples(host_model.samples))
    rows, kinds_lines = zoo_rows(host_model, after, args)
    lines = [
        f"# predictor offline: calibration {args.host_model} ({len(host_model.samples)} samples, measured at load "
        f"{host_model.campaign.get('load_average_before')}), refitted here",
        f"# zoo truth: profile_model runs={args.runs}, smallest median of {args.rounds} rounds per operator, cached in "
        f"{args.profiles}",
        f"# load average (1, 5, 15 min) before {', '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores",
        f"# command: {' '.join(sys.argv)}",
        "",
        "held-out MAPE per kind (shape: whole shapes in 5 folds; channel: one input-channel count out at a time; "
        "spatial: one input size out at a time; +ridge: the linear fit with its kernel ridge correction, the worse of "
        "shape and channel)",
        *held_out_table(host_model, after.fits),
        "",
        "zoo, same profiles: conv MAPE %, sum error %, conv MAPE % after removing the geometric-mean conv ratio",
        format_table(["model", "before conv", "before sum", "before shape", "after conv", "after sum", "after shape"], rows,
                     [False, True, True, True, True, True, True]),
        "",
        "per kind, after, sum of T_host profiled -> predicted (ms):",
        *kinds_lines,
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output is not None:
        write_atomic(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
