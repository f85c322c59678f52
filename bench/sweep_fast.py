"""How long `cimsplit sweep --paper` takes, and whether a faster version keeps every result.

    .venv/bin/python bench/sweep_fast.py --out DIR [--cimsplit PATH] [--models resnet18,...]
        [--compare OTHER_DIR] [--time-limit 60] [--workers 2]

Runs ``cimsplit sweep --paper -o DIR --no-plots`` (or the given models with ``--int8``, the
paper's grid) with the ``cimsplit`` executable given (another checkout's venv for a before/after),
times it and prints the load averages before and after, then per model the points proven, the
largest and the summed point time.  ``--compare`` puts another run's results beside it: per point
the two makespans and statuses, and how many makespans differ by more than the gap limit (1e-6).
Wall times depend on the machine's load: read them beside the load printed with them.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from pathlib import Path


def rows(directory: Path) -> dict[tuple[str, int, float], dict[str, str]]:
    with open(directory / "results.csv", newline="") as f:
        return {(r["model"], int(r["crossbars"]), float(r["mvm_latency_ns"])): r for r in csv.DictReader(f)}


def summary(found: dict[tuple[str, int, float], dict[str, str]]) -> list[str]:
    lines = []
    for model in dict.fromkeys(k[0] for k in found):
        mine = [r for k, r in found.items() if k[0] == model]
        times = [float(r["time_s"] or 0.0) for r in mine]
        proven = sum(r["status"] == "optimal" for r in mine)
        lines.append(f"# {model}: proven {proven}/{len(mine)}, max time {max(times):.1f} s, sum {sum(times):.1f} s")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--cimsplit", default=str(Path(sys.executable).with_name("cimsplit")))
    parser.add_argument("--models", default="", help="comma-separated zoo models (default: --paper)")
    parser.add_argument("--compare", type=Path, help="another run's folder to compare with")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.models:
        command = [args.cimsplit, "sweep", *args.models.split(","), "--int8"]
    else:
        command = [args.cimsplit, "sweep", "--paper"]
    command += ["-o", str(args.out), "--no-plots", "--workers", str(args.workers), "--time-limit", str(args.time_limit)]
    load_before = os.getloadavg()
    begin = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall_s = time.perf_counter() - begin
    load_after = os.getloadavg()
    found = rows(args.out)
    print(f"# {' '.join(command[1:])}")
    print(f"# wall time {wall_s:.1f} s; load average (1/5/15 min) before {load_before[0]:.2f}/{load_before[1]:.2f}/"
          f"{load_before[2]:.2f}, after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} on {os.cpu_count()} CPUs")
    for line in summary(found):
        print(line)
    if args.compare is None:
        return
    other = rows(args.compare)
    print(f"# beside {args.compare}: model C T_mvm | this: status time_s makespan_ms | other: status time_s makespan_ms")
    differ = 0
    for key, r in found.items():
        o = other.get(key)
        if o is None:
            continue
        a, b = float(r["makespan_ns"]), float(o["makespan_ns"])
        differ += abs(a - b) > 1e-6 * max(a, b)
        print(f"{key[0]:14s} {key[1]:4d} {key[2]:6.0f} | {r['status']:10s} {float(r['time_s']):6.2f} {a / 1e6:9.4f} | "
              f"{o['status']:10s} {float(o['time_s']):6.2f} {b / 1e6:9.4f}")
    print(f"# makespans differing by more than 1e-6: {differ} of {len(found)}")
    for line in summary(other):
        print(line.replace("# ", "# other: ", 1))


if __name__ == "__main__":
    main()
