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
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

from cimsplit.compiler.frontend import ModelSpec
from cimsplit.compiler.hardware import load_hardware
from cimsplit.models import zoo
from cimsplit.passes.emit.artifacts import write_artifacts
from cimsplit.passes.pipeline import CompileOptions, compile_model
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.runtime import Session

CIMSPLIT = str(Path(sys.executable).parent / "cimsplit")


def run_check(out: Path) -> tuple[bool, float]:
    """`cimsplit run OUT --check` as a user runs it: (passed, largest absolute difference over the outputs)."""
    done = subprocess.run([CIMSPLIT, "run", str(out), "--check"], capture_output=True, text=True)
    diffs = [float(d) for d in re.findall(r"max abs diff (\S+),", done.stdout)]
    if done.returncode not in (0, 1) or not diffs:
        sys.stderr.write(done.stderr)
    return done.returncode == 0, max(diffs, default=float("nan"))


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
                        compiled = compile_model(ModelSpec(str(model_path)), hardware,
                                                 CompileOptions(solve=SolveOptions(time_limit_s=args.time_limit)))
                        result, built = compiled.result, compiled.artifacts
                        out = write_artifacts(Path(tmp) / f"out_{model_path.stem}_{crossbars}_{int(t_mvm)}", built)
                        with Session(out) as session:
                            assert session.timeline.makespan_ns == built.plan.makespan_ns
                        ok, max_abs_diff = run_check(out)
                        failures += not ok
                        rows += 1
                        plan = built.plan
                        print(f"{name:<13} {'int8' if int8 else 'fp32':<5} {crossbars:>4} {int(t_mvm):>5} "
                              f"{len(compiled.costed.loaded.workload.operators):>4} {len(plan.partitions):>5} {len(plan.transfers):>5} "
                              f"{plan.makespan_ns / 1e6:>8.3f}ms {result.speedup:>6.2f}x "
                              f"{result.solver.name + '/' + result.solver.status:<16} "
                              f"{max_abs_diff:>12.3g} {'ok' if ok else 'FAIL':<5} "
                              f"{time.perf_counter() - start:>5.1f}s", flush=True)
    print(f"{rows - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
