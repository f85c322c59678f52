"""Per-conv diagnosis of host-latency prediction on zoo models: shape, kernel variant, predicted vs profiled,
the nearest calibration samples of its kind and their held-out error, and which nodes carry the profiled time.

Reads cached zoo profiles (``bench/predictor_offline.py --profiles``) and a calibration's recorded samples;
measures nothing.

    .venv/bin/python bench/predictor_diagnosis.py --host-model bench/results/board_quiet3.json \\
        --profiles /tmp/zoo_profiles --models mobilenet_v2 [--int8] [-o FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import numpy as np

from cimsplit.cli.table import format_table
from cimsplit.compiler.host_model import HostModel, fit_samples, operator_features, operator_kind, shape_folds
from cimsplit.compiler.host_prediction import predict_latencies
from cimsplit.compiler.host_profile import HostProfile, operator_latencies
from cimsplit.compiler.host_regression import evaluate, solve
from cimsplit.compiler.qdq_kernels import int8_kernels
from cimsplit.files import write_atomic
from cimsplit.models import zoo

sys.path.insert(0, str(Path(__file__).parent))
from predictor_offline import zoo_loaded  # noqa: E402


def conv_shape(f) -> tuple[int, int, int, int, int, int, bool]:
    """(k, stride, c_in, c_out, h_in, h_out, depthwise) read off a conv's descriptors."""
    k = int(f.get("k", 1))
    depthwise = f["n"] == k * k and k > 1
    c_out = int(f["m"])
    c_in = c_out if depthwise else int(round(f["n"] / (k * k)))
    h_out = math.sqrt(f["n_mvm"] / (c_out if depthwise else 1))
    h_in = math.sqrt(f["n_in"] / c_in)
    return k, max(1, round(h_in / h_out)), c_in, c_out, round(h_in), round(h_out), depthwise


def held_out_errors(method: str, features, t_ns) -> list[float]:
    """Each sample's relative error when its shape fold is held out."""
    folds = shape_folds(features)
    errors = [math.nan] * len(features)
    for fold in sorted(set(folds)):
        train = [i for i in range(len(features)) if folds[i] != fold]
        coefficients = solve(method, [features[i] for i in train], [t_ns[i] for i in train])
        for i in range(len(features)):
            if folds[i] == fold:
                errors[i] = evaluate(method, coefficients, features[i]) / t_ns[i] - 1
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host-model", required=True)
    parser.add_argument("--profiles", type=Path, required=True)
    parser.add_argument("--models", nargs="+", default=["mobilenet_v2"], choices=zoo.NAMES)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--int8", action="store_true")
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args(argv)
    host = HostModel.load(args.host_model)
    refit = dataclasses.replace(host, fits=fit_samples(host.samples))
    by_kind: dict[str, list] = {}
    for s in host.samples:
        by_kind.setdefault(s.kind, []).append(s)
    held: dict[str, list[float]] = {}
    lines = [f"# predictor diagnosis: {args.host_model} refitted, profiles {args.profiles}, command {' '.join(sys.argv)}"]
    for name in args.models:
        label = name + ("-int8" if args.int8 else "")
        loaded = zoo_loaded(name, args.int8)
        rounds = [HostProfile.load(args.profiles / f"{label}{f'-{r}' if r else ''}.json").for_model(loaded.model)
                  for r in range(args.rounds)]
        lat = [operator_latencies(loaded.workload, p) for p in rounds]
        truth = {op: min(r[op] for r in lat) for op in lat[0]}
        guess, _ = predict_latencies(loaded.workload, loaded.model, refit)
        types = {n.name: n.op_type for n in loaded.model.graph.node}
        kernels = int8_kernels(loaded.model.graph, host.machine.get("machine"))
        rows = []
        for op in loaded.workload.operators:
            if op.op_type != "Conv" or not truth.get(op.name):
                continue
            kind = operator_kind(op, types, kernels.get(op.name, ""))
            f = operator_features(op)
            k, s, c_in, c_out, h_in, h_out, dw = conv_shape(f)
            samples = by_kind.get(kind, [])
            if kind not in held and samples:
                held[kind] = held_out_errors(refit.fits[kind].method, [x.features for x in samples], [x.t_ns for x in samples])
            near = []
            for i, x in enumerate(samples):
                xs = conv_shape(x.features)
                if xs[0] == k and xs[1] == s and xs[6] == dw:
                    distance = abs(math.log(xs[2] / c_in)) + abs(math.log(xs[3] / c_out)) + 2 * abs(math.log(xs[5] / max(h_out, 1)))
                    near.append((distance, i, xs))
            near.sort()
            near_text = "; ".join(f"{xs[2]}->{xs[3]}@{xs[4]} {100 * held[kind][i]:+.0f}%" for _, i, xs in near[:3])
            # which nodes of the operator carry its profiled time
            node_share = sorted(((rounds[0].nodes[n]["median_ns"], types.get(n, "?")) for n in op.nodes), reverse=True)
            carried = ",".join(f"{t}:{v / 1e3:.0f}" for v, t in node_share if v > 0)
            rows.append([op.name[-28:], kind.removeprefix("int8:"), f"{k}x{k}/{s}", "dw" if dw else "", f"{c_in}->{c_out}",
                         f"{h_in}->{h_out}", f"{truth[op.name] / 1e3:.1f}", f"{guess.get(op.name, math.nan) / 1e3:.1f}",
                         f"{100 * (guess.get(op.name, math.nan) / truth[op.name] - 1):+.0f}", near_text, carried])
        ratios = np.array([float(r[7]) / float(r[6]) for r in rows])
        lines += ["", f"{label}: conv MAPE {100 * np.mean(np.abs(ratios - 1)):.1f} %, "
                  f"sum conv profiled {sum(float(r[6]) for r in rows) / 1e3:.2f} ms predicted {sum(float(r[7]) for r in rows) / 1e3:.2f} ms",
                  format_table(["operator", "kind", "k/s", "dw", "channels", "spatial", "profiled us", "predicted us", "err %",
                                "nearest grid samples (held-out err)", "nodes carrying time (us)"], rows,
                               [False, False, False, False, False, False, True, True, True, False, False])]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        write_atomic(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
