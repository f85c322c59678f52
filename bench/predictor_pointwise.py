"""Why MobileNetV2's pointwise convs were predicted 2.3x their profiled cost: the same shapes in the whole model and in
the calibration's context, as host profiling charges them and as onnxruntime's kernels time them.

For every distinct pointwise Conv shape of MobileNetV2 (float), in one process and interleaved (the machine is
shared: compare columns of one round, not rounds or machines):

* ``model``: the operator's T_host in the whole model, as ``profile_model`` charges it (p10 of ``--runs``);
* ``ctx``: the calibration point of that shape (``calibration_models.build_point``: the conv between two
  8-channel pointwise convs), charged the same way;
* ``raw model`` / ``raw ctx``: the minimum of onnxruntime's own ``<kernel>_kernel_time`` events of the kernels
  charged to that operator, from one profiled session of ``--runs`` runs (no split by weights; a conv kernel that also
  adds a residual counts whole here, while ``model`` charges part of it to the Add).

It also prints how many kernel regions the attribution makes of each zoo model (one region's time is split among
its nodes by their level-off times).  No assertion on the figures.

    .venv/bin/python bench/predictor_pointwise.py [--runs 20] [--rounds 2] [-o bench/results/predictor_pointwise_diagnosis.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from cimsplit.cli.table import format_table
from cimsplit.compiler.calibration_models import MEASURED_NODE, GridPoint, build_point
from cimsplit.compiler.frontend import LoadedModel, load
from cimsplit.compiler.host_model import operator_kind
from cimsplit.compiler.host_profile import profile_model
from cimsplit.compiler.kernel_attribution import attribute_kernels
from cimsplit.compiler.ort_profiler import optimized_model
from cimsplit.files import write_atomic
from cimsplit.models import zoo


def _load(model: onnx.ModelProto) -> LoadedModel:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        onnx.save(model, path)
        return load(path)


def _charged_p10_us(loaded: LoadedModel, runs: int) -> dict[str, float]:
    """Operator -> p10 of its charged T_host in us."""
    profile = profile_model(loaded, runs=runs, warmup=2, progress=False)
    return {op.name: sum(profile.nodes[node]["p10_ns"] for node in op.nodes) / 1e3 for op in loaded.workload.operators}


def _raw_min_us(loaded: LoadedModel, runs: int) -> dict[str, float]:
    """Operator -> sum over the kernels charged to it of each kernel's minimum ``_kernel_time`` in us."""
    optimized = optimized_model(loaded.model)
    owner = {}
    for region in attribute_kernels(loaded.model, optimized):
        for kernel, _ in region.kernels:
            owner[kernel] = region.nodes
    with tempfile.TemporaryDirectory() as folder:
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
        options.enable_profiling, options.profile_file_prefix = True, os.path.join(folder, "raw")
        options.log_severity_level = 3
        session = ort.InferenceSession(loaded.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = {i.name: rng.standard_normal(loaded.input_shapes.get(i.name) or i.shape).astype(np.float32)
                 for i in session.get_inputs()}
        for _ in range(runs + 2):
            session.run(None, feeds)
        with open(session.end_profiling(), encoding="utf-8") as handle:
            events = json.load(handle)
    times: dict[str, list[float]] = defaultdict(list)
    for event in events:
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith("_kernel_time"):
            times[name.removesuffix("_kernel_time")].append(float(event["dur"]))
    by_node = {node: op.name for op in loaded.workload.operators for node in op.nodes}
    result: dict[str, float] = defaultdict(float)
    for kernel, values in times.items():
        ops = [by_node[node] for node in owner.get(kernel, ()) if node in by_node]
        if ops:  # a conv's kernel that also adds a residual is the conv's (its region's first node)
            result[ops[0]] += min(values)
    return dict(result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("-o", "--output", type=Path, default=None)
    args = parser.parse_args(argv)
    lines = [f"# {' '.join(sys.argv)}", f"# onnxruntime {ort.__version__}, {os.cpu_count()} cores", ""]
    for name in ("resnet18", "resnet50", "mobilenet_v2", "yolov5n"):
        for int8 in (False, True):
            loaded = _load(zoo.build(name, int8=int8))
            regions = attribute_kernels(loaded.model, optimized_model(loaded.model))
            convs = {node.name for node in loaded.model.graph.node if node.op_type == "Conv"}
            most = max(sum(node in convs for node in region.nodes) for region in regions)
            lines.append(f"attribution: {name}{' int8' if int8 else ''}: {len(loaded.model.graph.node)} nodes, "
                         f"{len(regions)} regions, at most {most} Conv(s) in one region")
    print("\n".join(lines), flush=True)
    model = _load(zoo.build("mobilenet_v2"))
    types = {node.name: node.op_type for node in model.model.graph.node}
    pointwise = [op for op in model.workload.operators
                 if op.m is not None and operator_kind(op, types) == "Conv" and op.weight_shape[2] == 1]
    shapes: dict[tuple[int, int, int], list[str]] = defaultdict(list)
    for op in pointwise:
        shapes[(op.weight_shape[1], op.weight_shape[0], round(op.n_mvm ** 0.5))].append(op.name)
    points = {shape: _load(build_point(GridPoint("Conv", (("c_in", shape[0]), ("c_out", shape[1]), ("h", shape[2]),
                                                            ("k", 1), ("s", 1)))))
              for shape in sorted(shapes)}
    for round_index in range(args.rounds):
        load_before = os.getloadavg()
        whole, whole_raw = _charged_p10_us(model, args.runs), _raw_min_us(model, args.runs)
        rows, sums = [], np.zeros(4)
        for shape, point in points.items():
            measured = next(op.name for op in point.workload.operators if MEASURED_NODE in op.nodes)
            ctx, ctx_raw = _charged_p10_us(point, args.runs)[measured], _raw_min_us(point, args.runs).get(measured, 0.0)
            ops = shapes[shape]
            values = np.array([np.mean([whole[op] for op in ops]), ctx, np.mean([whole_raw.get(op, 0.0) for op in ops]),
                               ctx_raw])
            sums += len(ops) * values
            rows.append([*map(str, shape), str(len(ops)), *(f"{v:.1f}" for v in values), f"{values[1] / values[0]:.2f}",
                         f"{values[3] / values[2]:.2f}" if values[2] else "-"])
        rows.append(["sum", "", "", str(len(pointwise)), *(f"{v:.0f}" for v in sums), f"{sums[1] / sums[0]:.2f}",
                     f"{sums[3] / sums[2]:.2f}" if sums[2] else "-"])
        text = (f"\nround {round_index}: load {load_before[0]:.2f} -> {os.getloadavg()[0]:.2f}; us per operator "
                f"(mean over the operators of a shape)\n"
                + format_table(["c_in", "c_out", "h", "ops", "model", "ctx", "raw model", "raw ctx", "ctx/model",
                                "raw ctx/model"], rows, [True] * 10))
        lines.append(text)
        print(text, flush=True)
    if args.output is not None:
        write_atomic(args.output, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
