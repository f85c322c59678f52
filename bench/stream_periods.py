"""Latency plan vs throughput plan: the stream period each one gives (issue 14's must-show).

ResNet-18, ResNet-50 and YOLOv5n (zoo, int8 QDQ like the paper's sweeps) at 25 and 100
crossbars, x86 preset, 50 ns MVM.  Host latencies: the fixed table of tests/_profiles.py
(deterministic, the same on every machine; not this machine's profile).  Per point:
the latency plan's makespan and its own minimum period (modulo construction), the
throughput plan's period (the stream MILP) and the improvement, and the throughput plan
under --frames-in-flight 2 (bounded model, time-limited).

    .venv/bin/python bench/stream_periods.py > bench/results/stream_periods.txt
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
from cimsplit.compiler.units import format_time_ns  # noqa: E402
from cimsplit.models import zoo  # noqa: E402
from cimsplit.passes.pipeline import CompileOptions, cost_model, load_model  # noqa: E402
from cimsplit.passes.placement import SolveOptions, place  # noqa: E402
from tests._profiles import table_profile  # noqa: E402

MODELS = ("resnet18", "resnet50", "yolov5n")
CROSSBARS = (25, 100)
TIME_LIMIT_S = 30.0


def main() -> int:
    print(f"# {' '.join(sys.argv)}\n# host latencies: tests/_profiles.table_profile (fixed table), x86 preset, "
          f"50 ns MVM, int8 QDQ zoo models, time limit {TIME_LIMIT_S:g} s\n")
    header = ("model", "C", "latency plan: makespan", "its period", "its frame in stream", "K",
              "throughput plan: period", "frame", "K", "improvement", "K<=2: period", "frame", "status")
    print(" | ".join(header))
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(zoo.build(name, int8=True), str(path))
            for crossbars in CROSSBARS:
                hw = hardware_from_flags("x86", crossbars=str(crossbars), mvm_latency="50ns")
                spec = ModelSpec(str(path), {}, {})
                loaded = load_model(spec, hw)
                costed = cost_model(spec, hw, CompileOptions(host_profile=table_profile(loaded)), loaded=loaded)
                problem = costed.problem
                begin = time.perf_counter()
                lat = place(problem, SolveOptions(time_limit_s=TIME_LIMIT_S))
                thr = place(problem, SolveOptions(objective="throughput", time_limit_s=TIME_LIMIT_S))
                k2 = place(problem, SolveOptions(objective="throughput", frames_in_flight=2, time_limit_s=TIME_LIMIT_S))
                gain = 100.0 * (lat.stream.period_ns - thr.stream.period_ns) / lat.stream.period_ns
                print(" | ".join([
                    name, str(crossbars), format_time_ns(lat.schedule.makespan_ns), format_time_ns(lat.stream.period_ns),
                    format_time_ns(lat.stream.latency_ns), str(lat.stream.frames_in_flight),
                    format_time_ns(thr.stream.period_ns), format_time_ns(thr.stream.latency_ns),
                    str(thr.stream.frames_in_flight), f"{gain:.1f} %",
                    format_time_ns(k2.stream.period_ns), format_time_ns(k2.stream.latency_ns), k2.solver.status,
                ]) + f"   ({time.perf_counter() - begin:.1f} s; latency {lat.solver.status}, throughput "
                     f"{thr.solver.status})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
