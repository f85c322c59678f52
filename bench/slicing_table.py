"""Operator slicing (TSO) against whole-operator placement on the zoo, with a split-run check of every sliced plan.

For each model (ResNet-18, ResNet-50, YOLOv5n), crossbars C in {25, 50, 100} and
T_mvm in {50, 500} ns on the x86 preset: cost the model once (host profile
cached per model, slicing candidates of every kind), place it with
``--slicing off`` and ``--slicing all`` on the same costs, and print the
makespans, their ratio, crossbars used, operators sliced (KS / OFM) and the
solver's status and gap.  Every plan that slices is annotated, split, written
and run with ``cimsplit run --check`` (float: atol 1e-4, rtol 1e-3; int8 QDQ:
bit for bit).  (``auto`` is ``all`` since the sliced problem's proven bound decides it: bench/sliced_proofs.py.)

    .venv/bin/python bench/slicing_table.py [--models resnet18,resnet50,yolov5n] [--crossbars 25,50,100]
        [--mvm-latency 50,500] [--time-limit 60] [--int8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).parent))
from zoo_compile_run import run_check  # noqa: E402

from cimsplit.compiler.frontend import ModelSpec  # noqa: E402
from cimsplit.compiler.hardware import load_hardware  # noqa: E402
from cimsplit.models import zoo  # noqa: E402
from cimsplit.passes.emit.artifacts import write_artifacts  # noqa: E402
from cimsplit.passes.emit.report import result_to_json  # noqa: E402
from cimsplit.passes.pipeline import CompileOptions, build_artifacts, cost_model, load_model, place_model  # noqa: E402
from cimsplit.passes.placement.options import SolveOptions  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,yolov5n")
    parser.add_argument("--crossbars", default="25,50,100")
    parser.add_argument("--mvm-latency", default="50,500", help="ns")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--int8", action="store_true", help="the int8 QDQ zoo models instead of float32")
    args = parser.parse_args()
    print(f"{'model':<9} {'C':>4} {'Tmvm':>5} {'whole ms':>9} {'sliced ms':>9} {'ratio':>6} {'xbar w/s':>9} "
          f"{'sliced':>6} {'ks/ofm':>6} {'auto':>5} {'solver (sliced)':<22} {'gap':>7} {'check':<14} {'time':>6}")
    failures = 0
    with tempfile.TemporaryDirectory(prefix="cimsplit-slicing-") as tmp:
        for name in args.models.split(","):
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(zoo.build(name, int8=args.int8), path)
            spec = ModelSpec(str(path))
            for crossbars in (int(c) for c in args.crossbars.split(",")):
                for t_mvm in (float(t) for t in args.mvm_latency.split(",")):
                    begin = time.perf_counter()
                    hardware = load_hardware("x86", crossbars=crossbars, mvm_latency_ns=t_mvm)
                    loaded = load_model(spec, hardware)
                    all_options = CompileOptions(solve=SolveOptions(time_limit_s=args.time_limit, slicing="all"))
                    costed = cost_model(spec, hardware, all_options, loaded=loaded)
                    whole = place_model(costed, CompileOptions(solve=SolveOptions(time_limit_s=args.time_limit,
                                                                                  slicing="off"))).result
                    placed = place_model(costed, all_options)
                    sliced = placed.result
                    kinds = [sliced.problem.slicings[v][sliced.schedule.slicing[v]].kind for v in sliced.sliced]
                    check = "-"
                    if sliced.sliced:
                        built = build_artifacts(placed.model, placed.workload, sliced, hardware,
                                                model_path=str(path), fingerprint=placed.fingerprint,
                                                report=result_to_json(sliced, placed.workload, costed.costs))
                        out = write_artifacts(Path(tmp) / f"out_{name}_{crossbars}_{int(t_mvm)}", built)
                        ok, diff = run_check(out)
                        failures += not ok
                        check = f"{'ok' if ok else 'FAIL'} {diff:.2g}"
                    auto = "all"
                    print(f"{name:<9} {crossbars:>4} {int(t_mvm):>5} {whole.schedule.makespan_ns / 1e6:>9.3f} "
                          f"{sliced.schedule.makespan_ns / 1e6:>9.3f} "
                          f"{sliced.schedule.makespan_ns / whole.schedule.makespan_ns:>6.3f} "
                          f"{whole.crossbars_used:>4}/{sliced.crossbars_used:<4} {len(sliced.sliced):>6} "
                          f"{kinds.count('ks'):>2}/{kinds.count('ofm'):<3} {auto:>5} "
                          f"{sliced.solver.name + '/' + sliced.solver.status:<22} {sliced.solver.gap:>7.2%} "
                          f"{check:<14} {time.perf_counter() - begin:>5.0f}s", flush=True)
    print(f"{failures} split-run failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
