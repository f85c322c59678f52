"""The manifest (``plan.json``) and the modeled trace (``trace.json``) of a compile (DESIGN §5).

``plan.json`` is what the runtime executes; it is deterministic (sorted keys,
floats written by ``repr``) and holds, beside the partitioner's report:

``version``     format version of this file
``model``       original model path, fingerprint, graph inputs/outputs (name, dtype, shape)
``partitions``  execution order: name, device, file, nodes, inputs, outputs
``transfers``   name, tensor, src_device, dst_device, bytes, latency_ns
``timeline``    the modeled schedule to replay: per operator its device, start,
                duration, graph input/output transfer times; per edge its transfer
                time; the makespan (equal to the partitioner's validated makespan)

``trace.json`` is the same schedule in Chrome trace format (the format of
onnxruntime's profiler, loadable in Perfetto): one track per device, one
track per overlapping lane of the bus; ``ts``/``dur`` in microseconds.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import onnx

from cimsplit.passes.rewrite.partitions import SplitPlan
from cimsplit.passes.placement.result import PlacementResult

__all__ = [
    "PLAN_VERSION",
    "tensor_specs",
    "timeline_section",
    "split_section",
    "build_plan",
    "build_trace",
    "dumps",
]

PLAN_VERSION = 1
_US_PER_NS = 1e-3


def tensor_specs(values: list[onnx.ValueInfoProto]) -> list[dict[str, Any]]:
    """name, numpy dtype name and static shape of graph inputs or outputs."""
    specs = []
    for vi in values:
        tt = vi.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
        specs.append({"name": vi.name, "dtype": dtype, "shape": shape})
    return specs


def timeline_section(result: PlacementResult) -> dict[str, Any]:
    """The modeled schedule in plain numbers, enough to replay it without the solver.

    The replay rule is the re-timer's (:mod:`cimsplit.passes.placement.simulate`): host
    operators one at a time in order of modeled start, CIM operators when their
    inputs arrive, a crossing edge delays its consumer by its transfer time, a
    CIM operator pays its graph-input transfer before and its graph-output
    transfer after (this last one counts in the makespan).
    """
    problem, schedule = result.problem, result.schedule
    operators = []
    for v, name in enumerate(problem.names):
        host = schedule.on_host[v]
        operators.append({
            "name": name,
            "device": "host" if host else "cim",
            "start_ns": float(schedule.start_ns[v]),
            "finish_ns": float(schedule.finish_ns[v]),
            "duration_ns": float(problem.t_host_ns[v] if host else problem.t_cim_ns[v]),
            "input_transfer_ns": 0.0 if host else float(problem.t_in_ns[v]),
            "output_transfer_ns": 0.0 if host or not problem.writes_output[v] else float(problem.t_out_ns[v]),
        })
    edges = [
        {"src": problem.names[u], "dst": problem.names[v], "latency_ns": float(t)}
        for u, v, t in problem.edges
    ]
    return {"operators": operators, "edges": edges, "makespan_ns": float(schedule.makespan_ns)}


def split_section(plan: SplitPlan) -> dict[str, Any]:
    """``partitions`` and ``transfers`` of plan.json, in execution order."""
    return {
        "partitions": [
            {
                "name": p.name, "device": p.device, "file": f"{p.name}.onnx",
                "nodes": list(p.nodes), "inputs": list(p.inputs), "outputs": list(p.outputs),
            }
            for p in plan.partitions
        ],
        "transfers": [
            {
                "name": t.name, "tensor": t.tensor, "src_device": t.src_device, "dst_device": t.dst_device,
                "bytes": int(t.bytes), "latency_ns": float(t.latency_ns),
            }
            for t in plan.transfers
        ],
    }


def build_plan(
    report: dict[str, Any],
    model: onnx.ModelProto,
    model_path: str,
    fingerprint: str,
    split_plan: SplitPlan,
    result: PlacementResult,
) -> dict[str, Any]:
    """plan.json: the partitioner's report plus model, partitions, transfers and timeline."""
    plan: dict[str, Any] = dict(report)
    initializers = {t.name for t in model.graph.initializer}
    plan["version"] = PLAN_VERSION
    plan["model"] = {
        "path": str(model_path),
        "fingerprint": fingerprint,
        "inputs": tensor_specs([i for i in model.graph.input if i.name not in initializers]),
        "outputs": tensor_specs(list(model.graph.output)),
    }
    plan.update(split_section(split_plan))
    plan["timeline"] = timeline_section(result)
    plan.setdefault("makespan_ns", float(result.schedule.makespan_ns))
    return plan


def _lanes(intervals: list[tuple[float, float]]) -> list[int]:
    """Greedy interval partitioning: lane per interval so that no two on a lane overlap."""
    ends: list[float] = []
    lanes = [0] * len(intervals)
    for i in sorted(range(len(intervals)), key=lambda k: (intervals[k][0], intervals[k][1], k)):
        start, end = intervals[i]
        lane = next((k for k, e in enumerate(ends) if e <= start), None)
        if lane is None:
            ends.append(end)
            lane = len(ends) - 1
        else:
            ends[lane] = end
        lanes[i] = lane
    return lanes


def build_trace(timeline: dict[str, Any], model_name: str = "model") -> dict[str, Any]:
    """Chrome trace (Perfetto-loadable) of the modeled schedule in ``timeline``."""
    pid = 1
    tids = {"host": 1, "cim": 2}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"cimsplit modeled schedule: {model_name}"}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": "host"}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 2, "args": {"name": "cim"}},
    ]
    ops = {op["name"]: op for op in timeline["operators"]}
    for op in timeline["operators"]:
        events.append({
            "name": op["name"], "cat": "Node", "ph": "X", "pid": pid, "tid": tids[op["device"]],
            "ts": op["start_ns"] * _US_PER_NS, "dur": op["duration_ns"] * _US_PER_NS,
            "args": {"device": op["device"], "start_ns": op["start_ns"], "finish_ns": op["finish_ns"]},
        })
    bus: list[tuple[str, float, float, dict[str, Any]]] = []
    for edge in timeline["edges"]:
        src, dst = ops[edge["src"]], ops[edge["dst"]]
        if src["device"] != dst["device"] and edge["latency_ns"] > 0:
            bus.append((f"{edge['src']} -> {edge['dst']}", src["finish_ns"], edge["latency_ns"],
                        {"src": edge["src"], "dst": edge["dst"], "src_device": src["device"], "dst_device": dst["device"]}))
    for op in timeline["operators"]:
        if op["input_transfer_ns"] > 0:
            bus.append((f"inputs -> {op['name']}", 0.0, op["input_transfer_ns"], {"dst": op["name"], "src_device": "host", "dst_device": "cim"}))
        if op["output_transfer_ns"] > 0:
            bus.append((f"{op['name']} -> outputs", op["finish_ns"], op["output_transfer_ns"], {"src": op["name"], "src_device": "cim", "dst_device": "host"}))
    lanes = _lanes([(start, start + dur) for _, start, dur, _ in bus])
    for lane in sorted(set(lanes)):
        label = "bus" if lane == 0 else f"bus (overlap {lane})"
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 3 + lane, "args": {"name": label}})
    for (name, start, dur, args), lane in zip(bus, lanes):
        events.append({
            "name": name, "cat": "Transfer", "ph": "X", "pid": pid, "tid": 3 + lane,
            "ts": start * _US_PER_NS, "dur": dur * _US_PER_NS, "args": {**args, "latency_ns": dur},
        })
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"makespan_ns": timeline["makespan_ns"]}}


def dumps(obj: Any) -> str:
    """Deterministic JSON text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(obj, sort_keys=True, indent=2, allow_nan=False) + "\n"
