"""How repeatable are per-operator host medians?  Profile twice back to back.

For every operator whose median is above 100 us (in either run) this prints
both medians and the spread |a - b| / min(a, b); the target is within 20%.
Smaller operators are summarised only: ORT reports whole microseconds, so their
relative spread says more about the clock than about the host.  One
measurement, no assertion: the machine may be busy.

    .venv/bin/python bench/profile_spread.py [--model resnet50] [--int8] [--level all] [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import onnx

from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_profile import operator_latencies, profile_model
from cimsplit.compiler.units import format_time_ns
from cimsplit.models import zoo

THRESHOLD_NS = 100_000.0
TARGET = 0.20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", choices=zoo.NAMES)
    parser.add_argument("--image-size", type=int, default=None)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--int8", action="store_true", help="the zoo's int8 QDQ variant")
    parser.add_argument("--level", choices=("all", "off"), default="all", help="profiled optimization level")
    parser.add_argument("--all", action="store_true", help="print every operator above the threshold, not only the worst 15")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{args.model}.onnx"
        onnx.save(zoo.build(args.model, image_size=args.image_size, int8=args.int8), path)
        loaded = load(path)
    first, second = (
        operator_latencies(loaded.workload, profile_model(loaded, runs=args.runs, warmup=args.warmup,
                                                          threads=args.threads, level=args.level))
        for _ in range(2)
    )
    rows = []
    for op in loaded.workload.operators:
        a, b = first[op.name], second[op.name]
        if max(a, b) > THRESHOLD_NS:
            rows.append((abs(a - b) / min(a, b) if min(a, b) > 0 else float("inf"), op.name, op.op_type, a, b))
    rows.sort(reverse=True)
    print(f"{args.model}: {len(loaded.workload.operators)} operators, {len(rows)} above {format_time_ns(THRESHOLD_NS)}; "
          f"{args.runs} runs after {args.warmup} warm-up, {args.threads} thread(s), level {args.level}, "
          "two profiles back to back")
    for spread, name, op_type, a, b in rows if args.all else rows[:15]:
        print(f"  {name:<40} {op_type:<10} {format_time_ns(a):>10} {format_time_ns(b):>10}  spread {100 * spread:5.1f}%")
    if rows:
        within = sum(1 for row in rows if row[0] <= TARGET)
        spreads = sorted(row[0] for row in rows)
        print(f"within {100 * TARGET:.0f}%: {within}/{len(rows)} operators; median spread {100 * spreads[len(spreads) // 2]:.1f}%, "
              f"worst {100 * spreads[-1]:.1f}%")
    total_a, total_b = sum(first.values()), sum(second.values())
    print(f"sum of medians: {format_time_ns(total_a)} vs {format_time_ns(total_b)} "
          f"(spread {100 * abs(total_a - total_b) / min(total_a, total_b):.1f}%)")
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
