"""Issue 12's must-show: int8 QDQ zoo models split-run bit-identical, bytes copied == bytes planned.

For each zoo model (ResNet-18, ResNet-50, MobileNetV2, YOLOv5n) quantized with
onnxruntime's ``quantize_static`` in four configurations (U8S8 and S8S8, per-tensor
and per-channel weight scales) and each crossbar budget C in {25, 50, 100, 200}
(T_mvm 50 ns, x86 preset): compile (front end, this machine's host profile cached
per model, placement, annotate, split), run the split once on a seeded input and
compare with the whole model in onnxruntime at the partitions' optimization level
(all optimizations).  One row per case: partitions, transfers, bytes planned and
copied, the largest output difference and whether the outputs are bit-identical.

    .venv/bin/python bench/int8_bit_exact.py [--image-size 64] [--models a,b]
        [--crossbars 25,50,100,200] [--time-limit 5] [--out bench/results/int8_bit_exact.txt]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from cimsplit.cli.run_cmd import random_inputs, reference_outputs
from cimsplit.compiler.costs import build_costs
from cimsplit.compiler.frontend import load
from cimsplit.compiler.hardware import load_hardware
from cimsplit.compiler.profile_cache import cached_profile
from cimsplit.models import zoo
from cimsplit.models.quantize import quantization_label
from cimsplit.passes.emit.artifacts import write_artifacts
from cimsplit.passes.emit.report import result_to_json
from cimsplit.passes.pipeline import build_artifacts
from cimsplit.passes.placement.driver import place, problem_from_costs
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.runtime import Session

CONFIGS = [(act, per_channel) for act in ("uint8", "int8") for per_channel in (False, True)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=64, help="input side (default 64; 0: each model's own)")
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,yolov5n")
    parser.add_argument("--crossbars", default="25,50,100,200")
    parser.add_argument("--time-limit", type=float, default=5.0, help="solver time limit per compile, s")
    parser.add_argument("--out", default="bench/results/int8_bit_exact.txt", help="where the table is saved too")
    args = parser.parse_args()

    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    size = args.image_size or None
    say(f"int8 QDQ zoo models at image size {size or 'full'}, x86 preset, T_mvm 50 ns, "
        f"solver time limit {args.time_limit:g} s; reference: whole model in onnxruntime, all optimizations")
    say(f"{'model':<13} {'quantization':<19} {'C':>4} {'ops':>4} {'cim':>4} {'parts':>5} {'xfers':>5} "
        f"{'planned B':>10} {'copied B':>10} {'max abs diff':>12} {'bit-exact':<9} {'time':>6}")
    rows = failures = 0
    with tempfile.TemporaryDirectory(prefix="cimsplit-int8-") as tmp:
        for name in args.models.split(","):
            for activations, per_channel in CONFIGS:
                label = quantization_label(activations, per_channel)
                model_path = Path(tmp) / f"{name}_{activations}_{'ch' if per_channel else 't'}.onnx"
                onnx.save(zoo.build(name, image_size=size, int8=True, activations=activations,
                                    per_channel=per_channel), model_path)
                loaded = load(model_path)
                profile = cached_profile(loaded)
                for crossbars in (int(c) for c in args.crossbars.split(",")):
                    start = time.perf_counter()
                    hardware = load_hardware("x86", crossbars=crossbars, mvm_latency_ns=50.0)
                    costs = build_costs(loaded.workload, hardware, profile)
                    result = place(problem_from_costs(loaded.workload, costs), SolveOptions(time_limit_s=args.time_limit))
                    built = build_artifacts(loaded.model, loaded.workload, result, hardware,
                                            model_path=str(model_path), fingerprint=loaded.fingerprint,
                                            report=result_to_json(result, loaded.workload, costs, profile=profile))
                    out = write_artifacts(Path(tmp) / f"out_{model_path.stem}_{crossbars}", built)
                    with Session(out) as session:
                        feeds = random_inputs(session.input_specs, 0, {})
                        got = session.run(feeds)
                        stats = session.transfer_stats
                    ref = reference_outputs(str(model_path), feeds, list(got), 1)
                    exact = all(got[k].dtype == ref[k].dtype and got[k].tobytes() == ref[k].tobytes() for k in ref)
                    diff = max(float(np.abs(got[k].astype(np.float64) - ref[k]).max()) for k in ref)
                    planned = sum(t.bytes for t in built.plan.transfers)
                    ok = exact and stats.bytes == planned == stats.modeled_bytes
                    failures += not ok
                    rows += 1
                    say(f"{name:<13} {label:<19} {crossbars:>4} {len(loaded.workload.operators):>4} "
                        f"{result.schedule.on_host.count(False):>4} {len(built.plan.partitions):>5} "
                        f"{len(built.plan.transfers):>5} {planned:>10} {stats.bytes:>10} {diff:>12.3g} "
                        f"{'yes' if exact else 'NO':<9} {time.perf_counter() - start:>5.1f}s")
    say(f"{rows - failures} of {rows} cases bit-identical with bytes copied == bytes planned")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
