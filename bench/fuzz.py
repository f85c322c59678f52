"""Differential fuzzing campaign: random valid models through compile and run, against onnxruntime.

    .venv/bin/python bench/fuzz.py --seeds 0-999 [--budgets 0,2,10,1000] [--time-limit 2]
                                   [--max-steps 10] [--clutter] [--dynamic] [--quantizer NAME|random] [--opset 11] [--int8-only]
                                   [--keep DIR] [--save bench/results/fuzz_campaign.txt]

Every seed's model (tests/fuzz/random_models.py; its int8 QDQ variant for
every 5th seed) is compiled at each budget with a deterministic host profile
and checked as tests/fuzz/differential.py describes.  Prints one line per
failure, then the counts by failure class and the time taken.  ``--keep``
keeps failing seeds' models and outputs under DIR for reproduction.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fuzz"))

from differential import BUDGETS, check_seed, is_int8_seed, quantizer_of  # noqa: E402


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return seeds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-19", help="e.g. 0-999 or 3,7,10-20")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    parser.add_argument("--time-limit", type=float, default=2.0, help="solver time limit per compile (s)")
    parser.add_argument("--max-steps", type=int, default=16, help="most operators drawn per model")
    parser.add_argument("--clutter", action="store_true", help="add exporter clutter to every model (tests/fuzz/clutter.py)")
    parser.add_argument("--dynamic", action="store_true",
                        help="give every model a symbolic batch and PyTorch's views computed from it (tests/fuzz/export.py)")
    parser.add_argument("--quantizer", default="s8s8-per-channel",
                        help="the int8 seeds' onnxruntime quantizer configuration (tests/fuzz/quantizers.py), or random: one per seed")
    parser.add_argument("--opset", type=int, choices=(11, 17), default=17,
                        help="11: models as an opset-11 exporter writes them (tests/fuzz/export.py)")
    parser.add_argument("--int8-only", action="store_true", help="only the seeds whose model is quantized (every 5th)")
    parser.add_argument("--objective", choices=("latency", "throughput"), default="latency", help="the compiles' objective")
    parser.add_argument("--stream", type=int, default=0, metavar="N",
                        help="also stream N frames on the plan's schedule with the CIM emulated, each equal to one frame's")
    parser.add_argument("--keep", type=Path, help="keep failing seeds' folders here")
    parser.add_argument("--save", type=Path, help="also write the summary to this file")
    args = parser.parse_args()
    seeds = [s for s in parse_seeds(args.seeds) if is_int8_seed(s) or not args.int8_only]
    budgets = tuple(int(b) for b in args.budgets.split(","))
    counts: collections.Counter[str] = collections.Counter()
    failing: dict[str, list[int]] = collections.defaultdict(list)
    lines: list[str] = []
    start = time.perf_counter()
    for i, seed in enumerate(seeds):
        with tempfile.TemporaryDirectory(prefix=f"fuzz{seed}-") as tmp:
            work = Path(tmp)
            failures = check_seed(seed, work, max_steps=args.max_steps, clutter=args.clutter, dynamic=args.dynamic,
                                  quantizer=args.quantizer, opset=args.opset, budgets=budgets,
                                  time_limit_s=args.time_limit, keep=args.keep is not None, objective=args.objective,
                                  stream=args.stream)
            for failure in failures:
                counts[failure.kind] += 1
                if seed not in failing[failure.kind]:
                    failing[failure.kind].append(seed)
                int8 = f" (int8 {quantizer_of(seed, args.quantizer)})" if is_int8_seed(seed) else ""
                line = f"seed {seed}{int8}: {failure.line()}"
                lines.append(line)
                print(line, flush=True)
            if failures and args.keep is not None:
                shutil.copytree(work, args.keep / f"seed{seed}", dirs_exist_ok=True)
        if (i + 1) % 50 == 0:
            print(f"... {i + 1}/{len(seeds)} seeds, {time.perf_counter() - start:.0f} s", flush=True)
    elapsed = time.perf_counter() - start
    n_int8 = sum(1 for s in seeds if is_int8_seed(s))
    modes = (", with exporter clutter" if args.clutter else "") + (", dynamic batch" if args.dynamic else "")
    modes += f", quantizer {args.quantizer}" + (f", opset {args.opset}" if args.opset != 17 else "")
    modes += (f", objective {args.objective}" if args.objective != "latency" else "") + (f", streams of {args.stream}" if args.stream else "")
    summary = [
        f"fuzz campaign: seeds {args.seeds} ({len(seeds)} models, {n_int8} int8 QDQ{modes}), budgets {args.budgets} crossbars, "
        f"time limit {args.time_limit:g} s, at most {args.max_steps} steps per model",
        f"compiles: {len(seeds) * len(budgets)}, failing seeds: {len({s for v in failing.values() for s in v})}",
        "failures by class: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"),
        *(f"  {k}: seeds {' '.join(map(str, v[:30]))}{' ...' if len(v) > 30 else ''}" for k, v in sorted(failing.items())),
        f"time: {elapsed:.0f} s ({elapsed / max(1, len(seeds)):.2f} s per seed)",
    ]
    print("\n".join(summary))
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        args.save.write_text("\n".join([*lines, *summary]) + "\n")
    return 1 if counts else 0


if __name__ == "__main__":
    sys.exit(main())
