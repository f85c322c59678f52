"""A zoo YOLO's budget chains as ``sweep --paper`` solves them, with a fixed host profile and where the time goes.

One chain per MVM latency (budgets 200, 100, 50, 25, largest first, proofs and segment solves carried
down by :func:`~cimsplit.passes.placement.budget_chain.solve_chain`, one solver thread), ``--workers``
chains at a time like the sweep's workers.  ``--model`` (default yolov5n; yolov8n) picks the int8 zoo model;
the host profile is a saved file (default the model's int8 profile under bench/results/profiles,
e.g. yolov8n-int8.json), not this machine's cache, so two runs on different
commits solve the same problems.  Per point: status, gap, time, makespan, and the sliced
decomposition's segment solves and seconds (from its log line).

    nice .venv/bin/python bench/yolo_chains.py [--model yolov5n] [--mvm-latency 50,100,500,1000] [--crossbars 25,50,100,200]
        [--time-limit 60] [--workers 2] [--profile bench/results/profiles/MODEL-int8.json] [--out FILE]

``--trace C,T``: one point alone instead (no chain): the whole-operator step, then the sliced
decomposition for ``--time-limit`` seconds, printing every solve of a segment of more than 20
operators (budget, deterministic seconds, crossbars used, span, bound, proven, wall seconds).
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent


class _Segments(logging.Handler):
    """Keeps the last "cp-sat sliced: N segment solves in X s" line."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.last = "-"

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith("cp-sat sliced:"):
            self.last = text.removeprefix("cp-sat sliced: ")


def chain(model: str, mvm_ns: float, crossbars: list[int], time_limit_s: float, profile_path: str) -> list[str]:
    """Solve one latency's chain; the table lines of its points (in the order they were settled)."""
    from cimsplit.passes.placement import SolveOptions
    from cimsplit.passes.placement.budget_chain import solve_chain

    handler = _Segments()
    logger = logging.getLogger("cimsplit.passes.placement.solvers.cpsat.sliced_staged")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    problems = _problems(model, crossbars, mvm_ns, profile_path)
    lines: dict[int, str] = {}
    for i, _, result in solve_chain(problems, SolveOptions(time_limit_s=time_limit_s, threads=1)):
        s = result.solver
        segments = handler.last if s.time_s > 0 else "-"
        handler.last = "-"
        lines[i] = (f"{model} {crossbars[i]:>4} {int(mvm_ns):>5}  {s.status:<10} {100 * s.gap:>7.3f} {s.time_s:>7.2f} "
                    f"{result.schedule.makespan_ns / 1e6:>9.4f}   {segments}")
    return [lines[i] for i in range(len(crossbars)) if i in lines]


def _problems(model: str, crossbars: list[int], mvm_ns: float, profile_path: str) -> list:
    """The int8 zoo ``model``'s sliced problems at ``mvm_ns`` and each budget, costed with the saved profile."""
    import onnx

    from cimsplit.compiler.costs import build_costs
    from cimsplit.compiler.frontend import load
    from cimsplit.compiler.hardware import load_hardware
    from cimsplit.compiler.host_profile import HostProfile, check_fingerprint
    from cimsplit.compiler.slicing import slice_costs
    from cimsplit.models import zoo
    from cimsplit.passes.placement.driver import problem_from_costs

    preset = load_hardware("x86")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{model}.onnx"
        onnx.save(zoo.build(model, int8=True), path)
        loaded = load(path, crossbar_size=(preset.crossbar_rows, preset.crossbar_cols))
    profile = HostProfile.load(Path(profile_path))
    check_fingerprint(profile, loaded.fingerprint)
    problems = []
    for c in crossbars:
        costs = build_costs(loaded.workload, load_hardware("x86", crossbars=c, mvm_latency_ns=mvm_ns), profile)
        problems.append(problem_from_costs(loaded.workload, costs, slice_costs(loaded.model, loaded.workload, costs)))
    return problems


def trace(model: str, c: int, mvm_ns: float, time_limit_s: float, profile_path: str) -> None:
    """``--trace``: where one point's sliced decomposition spends its time (module docstring)."""
    from dataclasses import replace

    from cimsplit.passes.placement import SolveOptions, place
    from cimsplit.passes.placement.sliced_place import slicing_kinds
    from cimsplit.passes.placement.slicing import with_kinds
    from cimsplit.passes.placement.solvers.cpsat import sliced_segments
    from cimsplit.passes.placement.solvers.cpsat.sliced_split import split_sliced

    (problem,) = _problems(model, [c], mvm_ns, profile_path)
    begin = time.perf_counter()
    whole = place(replace(problem, slicings=()), SolveOptions(time_limit_s=time_limit_s / 2, threads=1))
    print(f"# whole-operator step: {whole.solver.status} {whole.schedule.makespan_ns / 1e6:.4f} ms, bound "
          f"{whole.solver.bound_ns / 1e6:.4f} in {time.perf_counter() - begin:.1f} s ({whole.solver.reason})", flush=True)
    sliced = with_kinds(problem, slicing_kinds("auto"))
    seg = split_sliced(sliced)
    print(f"# sliced segments (operators): {[len(m) for m in seg.members]}, exact {seg.exact}", flush=True)
    run = sliced_segments._SlicedDecomposition.run
    start = time.perf_counter()

    def traced(self, job):
        key, limit, seconds = job[:3]
        at = time.perf_counter()
        out = run(self, job)
        if out is not None and len(self.seg.members[key[0]]) > 20:
            print(f"{at - start:7.2f} s  segment {key[0]} budget {limit:3d} det {seconds:4.2f} s -> used {out.used:3d} "
                  f"span {out.span_ns / 1e6:.4f} bound {out.bound_ns / 1e6:.4f} proven {out.finished!s:<5} "
                  f"wall {time.perf_counter() - at:.2f} s", flush=True)
        return out

    sliced_segments._SlicedDecomposition.run = traced
    parts = sliced_segments.solve_sliced_by_segments(sliced, time_limit_s=time_limit_s, threads=1,
                                                     warm_start=whole.schedule)
    print(f"# sliced decomposition: {parts.schedule.makespan_ns / 1e6:.4f} ms, bound {parts.bound_ns / 1e6:.4f} ms, "
          f"{parts.solves} solves in {parts.time_s:.1f} s; load average {os.getloadavg()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mvm-latency", default="50,100,500,1000", help="ns")
    parser.add_argument("--crossbars", default="25,50,100,200")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default="yolov5n", help="int8 zoo model")
    parser.add_argument("--profile", default=None, help="default bench/results/profiles/MODEL-int8.json")
    parser.add_argument("--out", default=None)
    parser.add_argument("--trace", default=None, metavar="C,T")
    args = parser.parse_args()
    if args.profile is None:
        args.profile = str(HERE / "results" / "profiles" / f"{args.model}-int8.json")
    if args.trace:
        c, t = args.trace.split(",")
        trace(args.model, int(c), float(t), args.time_limit, args.profile)
        return 0
    latencies = [float(x) for x in args.mvm_latency.split(",")]
    crossbars = [int(x) for x in args.crossbars.split(",")]
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    head = [f"# {' '.join(sys.argv)}", f"# commit {commit}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"load average at start {os.getloadavg()}",
            "# model      C  Tmvm  status        gap%  time_s  makespan_ms   sliced segment solves"]
    print("\n".join(head), flush=True)
    begin = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = [pool.submit(chain, args.model, t, crossbars, args.time_limit, args.profile) for t in latencies]
        body = [line for future in futures for line in future.result()]
    wall = time.perf_counter() - begin
    tail = [f"# wall {wall:.1f} s; load average at end {os.getloadavg()}"]
    print("\n".join(body + tail), flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(head + body + tail) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
