"""How far a stream of N frames is from its steady state: the executor's rules, dry, with the plan's own costs.

For each compile directory, the period the timed runtime's estimator
(spacing of the finishes of frames m..N-1-m, m = N // 10) would measure on a
stream of N frames if every host piece took exactly its per-operator cost,
over the plan's steady-state ``period_ns``.  With K frames in flight a stream
of fewer than several K frames is mostly fill and drain, so a measured
period of such a stream is not comparable with ``period_ns`` (compare it with
``Session.predict("stream", N)`` instead).  No timing is measured.

    .venv/bin/python bench/stream_fill.py DIR [DIR ...] [--frames 20,50,100,200,400] [--out FILE.txt]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cimsplit.runtime import Session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", metavar="DIR")
    parser.add_argument("--frames", default="20,50,100,200,400")
    parser.add_argument("--out", help="also write the table here")
    args = parser.parse_args()
    counts = [int(n) for n in args.frames.split(",")]
    lines = [f"bench/stream_fill.py {' '.join(sys.argv[1:])}",
             "period of an N-frame stream (dry run, per-operator costs) over the plan's period_ns"]
    lines.append(f"{'directory':<28} {'objective':<10} {'K':>3} {'P ms':>8} " + " ".join(f"{'N=' + str(n):>7}" for n in counts))
    for directory in args.dirs:
        with Session(directory, cim_timing="modeled") as session:
            plan = session.manifest.plan
            if not plan.period_ns:
                lines.append(f"{Path(directory).name:<28} no stream schedule")
                continue
            ratios = [(session.predict("stream", n).period_ns or 0.0) / plan.period_ns for n in counts]
            lines.append(f"{Path(directory).name:<28} {plan.objective or 'latency':<10} {session.frames_in_flight:>3} "
                         f"{plan.period_ns / 1e6:>8.3f} " + " ".join(f"{r:>7.3f}" for r in ratios))
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
