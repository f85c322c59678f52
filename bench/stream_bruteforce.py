"""Throughput objective vs exhaustive search on 202 tiny random DAGs (issue 14's must-show).

Per seed: the unbounded period (vs min over all assignments of the resource bound),
--frames-in-flight 1 and a --max-latency between the K=1 frame and the minimum-period
frame (vs the residue-order x stage enumeration with GLOP LPs of
tests/passes/placement/_stream_brute.py).  Prints one line per seed and a summary.

    .venv/bin/python bench/stream_bruteforce.py [START STOP] > bench/results/stream_bruteforce.txt
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.passes.placement.test_stream_bruteforce import check_seed  # noqa: E402


def main() -> int:
    start, stop = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (0, 212)
    seeds = range(start, stop)
    print(f"# {' '.join(sys.argv)}: seeds {start}..{stop - 1}")
    begin = time.perf_counter()
    failures, lps, bounded, infeasible, skipped = 0, 0, 0, 0, 0
    for seed in seeds:
        try:
            row = check_seed(seed)
        except AssertionError as exc:
            failures += 1
            print(f"seed {seed}: DISAGREE {exc}")
            continue
        if row.get("skipped"):
            skipped += 1
            print(f"seed {seed}: skipped (more than the enumeration's limit of LPs)")
            continue
        lps += int(row.get("lps", 0)) + int(row.get("lps_k", 0))
        if "max_latency" in row:
            bounded += 1
            infeasible += row["bounded"] is None
        print(f"seed {seed}: n={row['n']} unbounded P={row['unbounded']:g} K=1 P={row['k1']:g} "
              f"max_latency={row.get('max_latency', '-')} P={row.get('bounded', '-')} "
              f"(brute force LPs {row.get('lps', 0)} + {row.get('lps_k', 0)})")
    elapsed = time.perf_counter() - begin
    print(f"\n{len(seeds) - skipped} seeds checked ({skipped} skipped) x (unbounded, --frames-in-flight 1, "
          f"--max-latency): {failures} disagreements; "
          f"{bounded} --max-latency cases ({infeasible} infeasible, agreed); {lps} brute-force LPs; {elapsed:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
