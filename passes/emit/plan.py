"""Build the plan (``plan.json``) and the modeled trace (``trace.json``) of a compile (DESIGN §5).

The plan's schema is :mod:`cimsplit.runtime.plan` (the runtime owns it); this
module fills a :class:`~cimsplit.runtime.plan.Plan` from the split and the
placement, beside the placement report (``cimsplit partition --json``).

``trace.json`` is the same schedule in Chrome trace format (the format of
onnxruntime's profiler, loadable in Perfetto): one track per device, one
track per overlapping lane of the bus; ``ts``/``dur`` in microseconds.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from cimsplit.passes.placement.result import PlacementResult
from cimsplit.passes.placement.slicing import expanded_view
from cimsplit.passes.placement.stream.tasks import PeriodicSchedule
from cimsplit.passes.rewrite.partitions import SplitPlan
from cimsplit.runtime.plan import (
    PLAN_VERSION,
    ModelRecord,
    PartitionRecord,
    Plan,
    PlanTimeline,
    StreamRecord,
    StreamTaskRecord,
    TensorSpec,
    TimelineEdge,
    TimelineOperator,
    TransferRecord,
    dumps,
)

__all__ = [
    "PLAN_VERSION",
    "tensor_specs",
    "timeline_section",
    "split_section",
    "build_plan",
    "stream_section",
    "build_trace",
    "dumps",
]

log = logging.getLogger(__name__)

_US_PER_NS = 1e-3
_CRITICAL_TID = 100
"""First track id of the critical-path tracks (the bus tracks count up from 3)."""
_CRITICAL_COLOUR = "terrible"
"""A Chrome trace reserved colour name (red)."""


def tensor_specs(values: list[onnx.ValueInfoProto]) -> tuple[TensorSpec, ...]:
    """name, numpy dtype name and static shape of graph inputs or outputs."""
    specs = []
    for vi in values:
        tt = vi.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
        specs.append(TensorSpec(vi.name, dtype, shape))
    return tuple(specs)


def timeline_section(result: PlacementResult) -> PlanTimeline:
    """The modeled schedule in plain numbers, enough to replay it without the solver.

    The replay rule is the re-timer's (:mod:`cimsplit.passes.placement.simulate`): host
    operators one at a time in order of modeled start, CIM operators when their
    inputs arrive, a crossing edge delays its consumer by its transfer time, a
    CIM operator pays its graph-input transfer before and its graph-output
    transfer after (this last one counts in the makespan).  A sliced operator
    appears as its parts (``<op>/cim``, ``<op>/host``, ``<op>/join``).
    """
    problem, schedule = expanded_view(result.problem, result.schedule)  # sliced operators as their parts
    operators = []
    for v, name in enumerate(problem.names):
        host = schedule.on_host[v]
        operators.append(TimelineOperator(
            name=name,
            device="host" if host else "cim",
            start_ns=float(schedule.start_ns[v]),
            finish_ns=float(schedule.finish_ns[v]),
            duration_ns=float(problem.t_host_ns[v] if host else problem.t_cim_ns[v]),  # type: ignore[arg-type]
            input_transfer_ns=0.0 if host else float(problem.t_in_ns[v]),
            output_transfer_ns=0.0 if host or not problem.writes_output[v] else float(problem.t_out_ns[v]),
        ))
    edges = tuple(TimelineEdge(problem.names[u], problem.names[v], float(t)) for u, v, t in problem.edges)
    return PlanTimeline(tuple(operators), edges, float(schedule.makespan_ns))


def split_section(plan: SplitPlan) -> tuple[tuple[PartitionRecord, ...], tuple[TransferRecord, ...]]:
    """``partitions`` and ``transfers`` of plan.json, in execution order."""
    partitions = tuple(
        PartitionRecord(p.name, p.device, f"{p.name}.onnx", tuple(p.nodes), tuple(p.inputs), tuple(p.outputs))
        for p in plan.partitions
    )
    return partitions, tuple(plan.transfers)


def build_plan(
    report: Mapping[str, Any],
    model: onnx.ModelProto,
    model_path: str,
    fingerprint: str,
    split_plan: SplitPlan,
    result: PlacementResult,
) -> Plan:
    """plan.json: the placement report plus model, partitions, transfers and timeline."""
    initializers = {t.name for t in model.graph.initializer}
    partitions, transfers = split_section(split_plan)
    model_record = ModelRecord(
        path=str(model_path),
        fingerprint=fingerprint,
        inputs=tensor_specs([i for i in model.graph.input if i.name not in initializers]),
        outputs=tensor_specs(list(model.graph.output)),
    )
    stream = result.stream
    return Plan(
        model=model_record,
        partitions=partitions,
        transfers=transfers,
        timeline=timeline_section(result),
        makespan_ns=float(report.get("makespan_ns", result.schedule.makespan_ns)),
        report={k: v for k, v in report.items() if k not in _TYPED_KEYS},
        objective=result.objective,
        period_ns=None if stream is None else float(stream.period_ns),
        frames_in_flight=None if stream is None else int(stream.frames_in_flight),
        stream=None if stream is None else stream_section(stream, model, report.get("operators", ()), transfers),
    )


_TYPED_KEYS = ("version", "model", "partitions", "transfers", "timeline", "makespan_ns", "objective", "period_ns",
               "frames_in_flight", "stream")


def stream_section(stream: PeriodicSchedule, model: onnx.ModelProto, operators: Sequence[Mapping[str, Any]],
                   transfers: Sequence[TransferRecord]) -> StreamRecord:
    """plan.json's ``stream``: the placement's periodic schedule with transfers named ``TENSOR->DEVICE``.

    Tensor transfers already carry their tensor's name; a CIM operator's graph input/output
    transfer (``OP:input->cim`` in the placement, which knows no tensor names) is renamed
    after the graph inputs it reads / outputs it writes (``operators``: the report's entries
    with each operator's ONNX ``nodes``), unless that name is taken.
    """
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = {i.name for i in model.graph.input if i.name not in initializers}
    graph_outputs = {o.name for o in model.graph.output}
    nodes = {n.name: n for n in model.graph.node}
    members = {op["name"]: [nodes[m] for m in op.get("nodes", ()) if m in nodes] for op in operators}
    names = {t.name for t in stream.tasks}
    records = []
    for task in stream.tasks:
        name = task.name
        for suffix, wanted, side in ((":input->cim", graph_inputs, "input"), (":output->host", graph_outputs, "output")):
            op = name[: -len(suffix)] if name.endswith(suffix) else None
            if op is None or op not in members:
                continue
            tensors = list(dict.fromkeys(t for n in members[op] for t in getattr(n, side) if t in wanted))
            renamed = f"{'+'.join(tensors)}{suffix[len(':' + side):]}"
            if tensors and renamed not in names:
                names.add(renamed)
                name = renamed
        records.append(StreamTaskRecord(name, task.kind, task.resource, task.start_ns, task.duration_ns))
    split_names = {f"{t.tensor}->{t.dst_device}" for t in transfers}
    # A QDQ model's cut lies between Q and DQ (the int8 tensor crosses): name such a transfer after
    # the DequantizeLinear's quantized input, as the split does.
    producer = {o: n for n in model.graph.node for o in n.output}
    for k, record in enumerate(records):
        tensor, _, device = record.name.rpartition("->")
        node = producer.get(tensor)
        if record.kind == "transfer" and record.name not in split_names and node is not None \
                and node.op_type == "DequantizeLinear" and f"{node.input[0]}->{device}" in split_names:
            records[k] = StreamTaskRecord(f"{node.input[0]}->{device}", record.kind, record.resource, record.start_ns,
                                          record.duration_ns)
    unmatched = [r.name for r in records if r.kind == "transfer" and r.name not in split_names]
    if unmatched:
        log.debug("stream transfers without a split transfer of that name: %s", unmatched[:5])
    return StreamRecord(float(stream.latency_ns), tuple(records))


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


def build_trace(timeline: PlanTimeline | Mapping[str, Any], model_name: str = "model",
                critical: Collection[str] = ()) -> dict[str, Any]:
    """Chrome trace (Perfetto-loadable) of the modeled schedule in ``timeline`` (typed, or its JSON mapping).

    Operators named in ``critical`` (the plan's critical path) are coloured, carry
    ``critical_path: true`` and are repeated on a "critical path" track.
    """
    if not isinstance(timeline, PlanTimeline):
        timeline = PlanTimeline.from_json(timeline)
    pid = 1
    tids = {"host": 1, "cim": 2}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"cimsplit modeled schedule: {model_name}"}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": "host"}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 2, "args": {"name": "cim"}},
    ]
    ops = {op.name: op for op in timeline.operators}
    for op in timeline.operators:
        events.append({
            "name": op.name, "cat": "Node", "ph": "X", "pid": pid, "tid": tids[op.device],
            "ts": op.start_ns * _US_PER_NS, "dur": op.duration_ns * _US_PER_NS,
            "args": {"device": op.device, "start_ns": op.start_ns, "finish_ns": op.finish_ns},
        })
        if op.name in critical:
            events[-1]["args"]["critical_path"] = True
            events[-1]["cname"] = _CRITICAL_COLOUR
    path = [op for op in timeline.operators if op.name in critical]
    path_lanes = _lanes([(op.start_ns, op.finish_ns) for op in path])
    for lane in sorted(set(path_lanes)):
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": _CRITICAL_TID + lane,
                       "args": {"name": "critical path" if lane == 0 else f"critical path ({lane + 1})"}})
    for op, lane in zip(path, path_lanes):
        events.append({
            "name": op.name, "cat": "CriticalPath", "ph": "X", "pid": pid, "tid": _CRITICAL_TID + lane,
            "ts": op.start_ns * _US_PER_NS, "dur": op.duration_ns * _US_PER_NS, "cname": _CRITICAL_COLOUR,
            "args": {"device": op.device},
        })
    bus: list[tuple[str, float, float, dict[str, Any]]] = []
    for edge in timeline.edges:
        src, dst = ops[edge.src], ops[edge.dst]
        if src.device != dst.device and edge.latency_ns > 0:
            bus.append((f"{edge.src} -> {edge.dst}", src.finish_ns, edge.latency_ns,
                        {"src": edge.src, "dst": edge.dst, "src_device": src.device, "dst_device": dst.device}))
    for op in timeline.operators:
        if op.input_transfer_ns > 0:
            bus.append((f"inputs -> {op.name}", 0.0, op.input_transfer_ns, {"dst": op.name, "src_device": "host", "dst_device": "cim"}))
        if op.output_transfer_ns > 0:
            bus.append((f"{op.name} -> outputs", op.finish_ns, op.output_transfer_ns, {"src": op.name, "src_device": "cim", "dst_device": "host"}))
    lanes = _lanes([(start, start + dur) for _, start, dur, _ in bus])
    for lane in sorted(set(lanes)):
        label = "bus" if lane == 0 else f"bus (overlap {lane})"
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 3 + lane, "args": {"name": label}})
    for (name, start, dur, args), lane in zip(bus, lanes):
        events.append({
            "name": name, "cat": "Transfer", "ph": "X", "pid": pid, "tid": 3 + lane,
            "ts": start * _US_PER_NS, "dur": dur * _US_PER_NS, "args": {**args, "latency_ns": dur},
        })
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"makespan_ns": timeline.makespan_ns}}

