"""Compile and split-run every zoo model, float and int8, over crossbars x MVM latency, checking outputs.

For each model (ResNet-18, ResNet-50, MobileNetV2, YOLOv5n), float32 and int8
QDQ, crossbars C in {25, 100} and T_mvm in {50, 1000} ns: build the model,
compile it (front end, host profile cached per model, ILP, annotate, split,
atomic write), run the split once with seeded inputs and compare with the
original model in plain onnxruntime (atol 1e-4, rtol 1e-3, one quantization step
for quantized outputs, as `run --check`).
Prints one row per configuration and the count of failures.

    .venv/bin/python bench/zoo_compile_run.py [--image-size S] [--models a,b]
        [--crossbars 25,100] [--mvm-latency 50,1000] [--time-limit 60]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import onnx

from cimsplit.cli.run_cmd import compare, quantization_steps, random_inputs, reference_outputs
from cimsplit.compiler.costs import build_costs
from cimsplit.compiler.frontend import load
from cimsplit.compiler.hardware import load_hardware
from cimsplit.compiler.host_profile import cached_profile
from cimsplit.models import zoo
from cimsplit.passes.emit.artifacts import build_artifacts, write_artifacts
from cimsplit.passes.emit.report import result_to_json
from cimsplit.passes.placement.driver import place, problem_from_costs
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.runtime import Session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=None, help="input side (default: each model's own)")
    parser.add_argument("--models", default=",".join(zoo.NAMES))
    parser.add_argument("--crossbars", default="25,100")
    parser.add_argument("--mvm-latency", default="50,1000", help="ns")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--no-int8", action="store_true")
    args = parser.parse_args()

    header = (f"{'model':<13} {'dtype':<5} {'C':>4} {'Tmvm':>5} {'ops':>4} {'parts':>5} {'xfers':>5} "
              f"{'predicted':>10} {'speedup':>7} {'solver':<16} {'max abs diff':>12} {'check':<5} {'time':>6}")
    print(header)
    failures = 0
    rows = 0
    with tempfile.TemporaryDirectory(prefix="cimsplit-zoo-") as tmp:
        for name in args.models.split(","):
            for int8 in (False,) if args.no_int8 else (False, True):
                model_path = Path(tmp) / f"{name}{'_int8' if int8 else ''}.onnx"
                onnx.save(zoo.build(name, image_size=args.image_size, int8=int8), model_path)
                for crossbars in (int(c) for c in args.crossbars.split(",")):
                    for t_mvm in (float(t) for t in args.mvm_latency.split(",")):
                        start = time.perf_counter()
                        hardware = load_hardware("x86", crossbars=crossbars, mvm_latency_ns=t_mvm)
                        loaded = load(model_path, crossbar_size=(hardware.crossbar_rows, hardware.crossbar_cols))
                        profile = cached_profile(loaded)
                        costs = build_costs(loaded.workload, hardware, profile)
                        result = place(problem_from_costs(loaded.workload, costs), SolveOptions(time_limit_s=args.time_limit))
                        built = build_artifacts(loaded.model, loaded.workload, result, hardware,
                                                model_path=str(model_path), fingerprint=loaded.fingerprint,
                                                report=result_to_json(result, loaded.workload, costs, profile=profile))
                        out = write_artifacts(Path(tmp) / f"out_{model_path.stem}_{crossbars}_{int(t_mvm)}", built)
                        with Session(out) as session:
                            feeds = random_inputs(session.input_specs, 0, {})
                            got = session.run(feeds)
                            assert session.timeline.makespan_ns == built.plan.makespan_ns
                        ref = reference_outputs(str(model_path), feeds, list(got), 1)
                        diffs = compare(got, ref, quantization_steps(str(model_path)))
                        ok = all(row[3] for row in diffs)
                        failures += not ok
                        rows += 1
                        plan = built.plan
                        print(f"{name:<13} {'int8' if int8 else 'fp32':<5} {crossbars:>4} {int(t_mvm):>5} "
                              f"{len(loaded.workload.operators):>4} {len(plan.partitions):>5} {len(plan.transfers):>5} "
                              f"{plan.makespan_ns / 1e6:>8.3f}ms {result.speedup:>6.2f}x "
                              f"{result.solver.name + '/' + result.solver.status:<16} "
                              f"{max(row[1] for row in diffs):>12.3g} {'ok' if ok else 'FAIL':<5} "
                              f"{time.perf_counter() - start:>5.1f}s", flush=True)
    print(f"{rows - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
