"""Compile time against model size: chains and random DAGs of 1k, 2k and 5k nodes.

    .venv/bin/python bench/compile_scale.py [--sizes 1000,2000,5000] [--kinds chain,dag]
        [--time-limit 10] [--profile-stages] [--cprofile OUT.prof]

A chain is one Conv then alternating Relu / Add (a bias), the shape of the
620 s case of issue 13; a random DAG joins each node to one or two random
earlier tensors (Add of two, or Relu / Conv of one).  Every compile runs the
pipeline's stages in process (passes.pipeline): load (read, simplify, workload),
host profile, costs, placement, artefacts (annotate, split, plan), write.  The host profile is a
synthetic one (1 us per node) unless ``--profile-stages`` measures it
on this machine, so the figure is the compiler's own time.  Printed: total
seconds, each stage's share, and the ratio to the smallest size of the same
kind (near-linear growth shows as a ratio near the size ratio).  Saved under
bench/results/compile_scale.txt.  Nothing here is an assertion.
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RESULTS = Path(__file__).parent / "results" / "compile_scale.txt"
C, H = 8, 8  # activations are [1, C, H, H]


def chain(n: int) -> onnx.ModelProto:
    """x -> Conv -> Relu -> Add(b) -> Relu -> Add(b) ... (n nodes) -> y."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((C, C, 3, 3)).astype(np.float32) * 0.1, "w"),
             numpy_helper.from_array(np.full((1, C, 1, 1), 0.01, np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["t0"], name="conv", pads=[1, 1, 1, 1])]
    for i in range(1, n):
        out = "y" if i == n - 1 else f"t{i}"
        if i % 2:
            nodes.append(helper.make_node("Relu", [f"t{i - 1}"], [out], name=f"relu{i}"))
        else:
            nodes.append(helper.make_node("Add", [f"t{i - 1}", "b"], [out], name=f"add{i}"))
    return _model(nodes, inits)


def random_dag(n: int, seed: int = 0) -> onnx.ModelProto:
    """Each node reads one or two random earlier tensors; every tensor nobody reads is summed into y."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((C, C, 3, 3)).astype(np.float32) * 0.1, "w")]
    tensors, nodes, read = ["x"], [], set()
    for i in range(n - 1):
        kind = rng.choice(["add", "relu", "conv"], p=[0.4, 0.45, 0.15])
        window = tensors[-32:]  # recent tensors: wide but not unboundedly long-lived
        a = window[rng.integers(len(window))]
        out = f"t{i}"
        if kind == "add":
            b = window[rng.integers(len(window))]
            nodes.append(helper.make_node("Add", [a, b], [out], name=f"add{i}"))
            read |= {a, b}
        elif kind == "relu":
            nodes.append(helper.make_node("Relu", [a], [out], name=f"relu{i}"))
            read.add(a)
        else:
            nodes.append(helper.make_node("Conv", [a, "w"], [out], name=f"conv{i}", pads=[1, 1, 1, 1]))
            read.add(a)
        tensors.append(out)
    leaves = [t for t in tensors if t not in read and t != "x"] or [tensors[-1]]
    nodes.append(helper.make_node("Sum", leaves, ["y"], name="sum"))
    return _model(nodes, inits)


def _model(nodes, inits) -> onnx.ModelProto:
    shape = [1, C, H, H]
    graph = helper.make_graph(nodes, "scale", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def synthetic_profile(loaded):
    """1 us per node: a profile of the right model without profiling it."""
    import onnxruntime as ort

    from cimsplit.compiler.host_profile import FORMAT_VERSION, HostProfile, cpu_model

    nodes = {n.name: {"op_type": n.op_type, "median_ns": 1000.0, "p10_ns": 1000.0, "p90_ns": 1000.0, "samples": 1}
             for n in loaded.model.graph.node}
    total = 1000.0 * len(nodes)
    return HostProfile(format_version=FORMAT_VERSION, fingerprint=loaded.fingerprint, ort_version=ort.__version__,
                       cpu=cpu_model(), threads=1, runs=1, warmup=0, nodes=nodes,
                       model_median_ns={"optimizations_off": total, "optimizations_all": total})


def compile_stages(path: Path, out: Path, time_limit_s: float, measure_profile: bool) -> dict[str, float]:
    """The pipeline's stages (passes.pipeline), each timed in seconds; the host profile timed on its own."""
    from cimsplit.compiler.frontend import ModelSpec
    from cimsplit.compiler.hardware import load_hardware
    from cimsplit.compiler.host_profile import profile_model
    from cimsplit.passes.emit.artifacts import write_artifacts
    from cimsplit.passes.pipeline import _REWRITE, CompileOptions, cost_model, load_model, place_model, run_stages
    from cimsplit.passes.placement.options import SolveOptions

    times: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        times[stage] = now - clock
        clock = now

    hardware = load_hardware("x86", crossbars=100)
    spec = ModelSpec(str(path))
    loaded = load_model(spec, hardware)
    lap("load")
    profile = profile_model(loaded, runs=1, warmup=0, progress=False) if measure_profile else synthetic_profile(loaded)
    lap("profile")
    options = CompileOptions(solve=SolveOptions(time_limit_s=time_limit_s), host_profile=profile)
    costed = cost_model(spec, hardware, options, loaded=loaded)
    lap("costs")
    placed = place_model(costed, options)
    lap("place")
    artifacts = run_stages(_REWRITE, placed, done=["load", "costs", "placement"])
    lap("artifacts")
    write_artifacts(out, artifacts, force=True)
    lap("write")
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,2000,5000")
    parser.add_argument("--kinds", default="chain,dag")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--profile-stages", action="store_true", help="measure the host profile instead of a synthetic one")
    parser.add_argument("--cprofile", metavar="OUT.prof", help="write a cProfile of the largest compile")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    builders = {"chain": chain, "dag": random_dag}
    stages = ["load", "profile", "costs", "place", "artifacts", "write"]
    lines = [f"compile time by stage (time limit {args.time_limit:g} s, "
             f"{'measured' if args.profile_stages else 'synthetic'} host profile)",
             f"{'kind':6} {'nodes':>6} {'total s':>8} {'x smallest':>10}  " + " ".join(f"{s:>9}" for s in stages)]
    print(lines[0])
    print(lines[1])
    with tempfile.TemporaryDirectory() as folder:
        for kind in kinds:
            first = None
            for n in sizes:
                path = Path(folder) / f"{kind}{n}.onnx"
                onnx.save(builders[kind](n), str(path))
                profiler = cProfile.Profile() if args.cprofile and n == max(sizes) and kind == kinds[-1] else None
                if profiler:
                    profiler.enable()
                times = compile_stages(path, Path(folder) / f"out_{kind}{n}", args.time_limit, args.profile_stages)
                if profiler:
                    profiler.disable()
                    profiler.dump_stats(args.cprofile)
                total = sum(times.values())
                first = first or (n, total)
                ratio = f"{total / first[1]:.1f} ({n / first[0]:.0f}x n)"
                shares = " ".join(f"{100 * times[s] / total:8.1f}%" for s in stages)
                line = f"{kind:6} {n:>6} {total:8.1f} {ratio:>10}  {shares}"
                print(line, flush=True)
                lines.append(line)
    if not args.no_save:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text("\n".join(["$ .venv/bin/python bench/compile_scale.py " + " ".join(argv or sys.argv[1:]), *lines]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
