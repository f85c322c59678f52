"""How far this machine's truth moves between two profiles hours apart: the floor under issue 16's targets.

    .venv/bin/python bench/truth_drift.py --then bench/results/predictor_error_spr_s39_rescaled.json \\
        [--runs 10] [--rounds 3] [-o bench/results/truth_drift.txt]

``--then`` is a ``bench/predictor_error.py`` result: every operator's profiled time (its truth) at that hour.  Each of
its models is profiled again now the same way (the per-node median of ``--rounds`` profiles) and the two truths are
compared with the predictor's own measures: the convolutions' mean absolute percentage difference and the
whole-model sum's, now against then.  A predictor fitted at one hour and judged at another cannot be closer to the
truth than the truth is to itself, on average, across that time.  Nothing here is an assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import onnx
from predictor_error import median_profile

from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_profile import operator_latencies, profile_model
from cimsplit.files import write_atomic
from cimsplit.models import zoo


def truth_now(label: str, runs: int, rounds: int) -> dict[str, float]:
    """Every operator's latency in ns now: the per-node median of ``rounds`` profiles of the zoo model ``label``."""
    name, _, variant = label.partition(" ")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.onnx"
        onnx.save(zoo.build(name, int8=variant == "int8"), path)
        loaded = load(path, None)
    profiles = [profile_model(loaded, runs=runs, warmup=2, progress=False) for _ in range(rounds)]
    return operator_latencies(loaded.workload, median_profile(profiles))


def compare(then: dict, now: dict[str, float]) -> tuple[float, float, int]:
    """(conv mean abs % difference, sum % difference, convs) of ``now`` against ``then``'s operators."""
    ops = [o for o in then["per_operator"] if o["profiled_ns"] > 0 and now.get(o["name"], 0) > 0]
    convs = [abs(now[o["name"]] / o["profiled_ns"] - 1) for o in ops if o["kind"].split(":")[-1].startswith("Conv")]
    total_then, total_now = sum(o["profiled_ns"] for o in ops), sum(now[o["name"]] for o in ops)
    return 100 * sum(convs) / max(1, len(convs)), 100 * (total_now / total_then - 1), len(convs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--then", type=Path, required=True, help="a bench/predictor_error.py .json result")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-o", "--output", type=Path, default=Path(__file__).parent / "results" / "truth_drift.txt")
    args = parser.parse_args()
    results = {}
    for row in json.loads(args.then.read_text()):
        results.setdefault(row["model"], row)  # every calibration's row holds the same truth
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"$ .venv/bin/python bench/truth_drift.py {' '.join(sys.argv[1:])}",
             f"now: {stamp}, runs={args.runs}, rounds={args.rounds}; load before {os.getloadavg()[0]:.2f}",
             f"{'model':24s} {'convs':>5s} {'conv % now vs then':>19s} {'sum % now vs then':>18s}"]
    print("\n".join(lines), flush=True)
    within = [0, 0]
    for label, then in results.items():
        conv_pct, sum_pct, convs = compare(then, truth_now(label, args.runs, args.rounds))
        within[0] += conv_pct <= 8.0
        within[1] += abs(sum_pct) <= 5.0
        lines.append(f"{label:24s} {convs:5d} {conv_pct:19.1f} {sum_pct:+18.1f}")
        print(lines[-1], flush=True)
    lines.append(f"the truth within issue 16's targets of itself: convolutions (8 %) {within[0]} of {len(results)}, "
                 f"sums (5 %) {within[1]} of {len(results)}; load after {os.getloadavg()[0]:.2f}")
    print(lines[-1])
    write_atomic(args.output, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
