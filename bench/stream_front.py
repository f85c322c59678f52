"""Latency/throughput fronts of the zoo models (issue 14, deliverable 5), PNG and SVG.

ResNet-18, ResNet-50, YOLOv5n (int8 QDQ), x86, 50 ns MVM, 25 and 100 crossbars; host
latencies from the fixed table of tests/_profiles.py (deterministic).  Points: the
throughput objective unbounded and with --max-latency at 1.05, 1.25, 1.5, 2 and 4 times
the latency plan's makespan; drawn by cimsplit.passes.sweep.front (the same figure
`cimsplit sweep --objective throughput --max-latency ...` writes).

    .venv/bin/python bench/stream_front.py bench/results/stream_front
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402

from cimsplit.compiler.frontend import ModelSpec  # noqa: E402
from cimsplit.compiler.hardware import hardware_from_flags  # noqa: E402
from cimsplit.errors import CimsplitError  # noqa: E402
from cimsplit.models import zoo  # noqa: E402
from cimsplit.passes.emit.figures import pyplot  # noqa: E402
from cimsplit.passes.pipeline import CompileOptions, cost_model, load_model  # noqa: E402
from cimsplit.passes.placement import SolveOptions, place  # noqa: E402
from cimsplit.passes.sweep.front import write_front  # noqa: E402
from tests._profiles import table_profile  # noqa: E402

MODELS = ("resnet18", "resnet50", "yolov5n")
CROSSBARS = (25, 100)
FACTORS = (1.05, 1.25, 1.5, 2.0, 4.0)
TIME_LIMIT_S = 20.0


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/stream_front")
    out.mkdir(parents=True, exist_ok=True)
    print(f"# {' '.join(sys.argv)}\n# table host profile, x86, 50 ns, int8; --max-latency = factor x latency "
          f"plan makespan; time limit {TIME_LIMIT_S:g} s per point\n")
    print("model | C | bound | period | frame latency | frames in flight | status | solve s")
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(zoo.build(name, int8=True), str(path))
            rows = []
            for crossbars in CROSSBARS:
                hw = hardware_from_flags("x86", crossbars=str(crossbars), mvm_latency="50ns")
                spec = ModelSpec(str(path), {}, {})
                loaded = load_model(spec, hw)
                problem = cost_model(spec, hw, CompileOptions(host_profile=table_profile(loaded)), loaded=loaded).problem
                makespan = place(problem, SolveOptions(time_limit_s=TIME_LIMIT_S)).schedule.makespan_ns
                for bound in (0.0, *(f * makespan for f in FACTORS)):
                    begin = time.perf_counter()
                    try:
                        result = place(problem, SolveOptions(objective="throughput", time_limit_s=TIME_LIMIT_S,
                                                             max_latency_ns=bound or None))
                    except CimsplitError as exc:
                        print(f"{name} | {crossbars} | {bound / 1e6:.2f} ms | - | - | - | {exc.one_line()} | "
                              f"{time.perf_counter() - begin:.1f}")
                        continue
                    s = result.stream
                    rows.append({"host": "x86", "crossbars": crossbars, "mvm_latency_ns": 50.0, "max_latency_ns": bound,
                                 "period_ns": s.period_ns, "stream_latency_ns": s.latency_ns})
                    label = f"{bound / 1e6:.2f} ms" if bound else "none"
                    print(f"{name} | {crossbars} | {label} | {s.period_ns / 1e6:.3f} ms | {s.latency_ns / 1e6:.2f} ms | "
                          f"{s.frames_in_flight} | {result.solver.status} | {time.perf_counter() - begin:.1f}", flush=True)
            with pyplot() as plt:
                for written in write_front(plt, out, name, rows, f"front_{name}"):
                    print(f"# wrote {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
