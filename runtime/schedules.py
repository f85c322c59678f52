"""The schedules a timed run executes, read from the plan, and the executor built for one.

* :func:`latency_schedule`: one frame on its own, as the earliest-start replay of
  plan.json's ``timeline`` times it (:func:`cimsplit.runtime.timeline.replay`:
  host operators in the plan's order, CIM operators as soon as their inputs
  are there, no bus contention).  For a latency plan that is the plan's own
  schedule (its makespan is the plan's); a throughput plan's timeline is its
  stream schedule S, whose gaps leave room for other frames, which one frame
  alone does not wait for.
* :func:`stream_schedule`: the plan's periodic stream schedule (``stream``,
  ``period_ns``, ``frames_in_flight``), serial bus; for a plan written before
  streams, the timeline with two frames in flight and the host taking the
  first ready frame (the untimed runtime's behaviour).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx

from cimsplit.errors import CimsplitError
from cimsplit.runtime.devices import Device
from cimsplit.runtime.emulation import ModeledCimKernel, ModeledCimSimulator
from cimsplit.runtime.plan import PartitionRecord, Plan
from cimsplit.runtime.steps import host_pieces
from cimsplit.runtime.timed import ExecSchedule, TimedExecutor
from cimsplit.runtime.timeline import replay

__all__ = [
    "latency_schedule",
    "stream_schedule",
    "stream_frames_in_flight",
    "build_executor",
    "cim_durations_ns",
    "UNTIMED_STREAM_FRAMES",
]

UNTIMED_STREAM_FRAMES = 2
"""Frames in flight of a stream whose plan has no stream schedule (as the untimed runtime)."""


def cim_durations_ns(plan: Plan) -> dict[str, float]:
    """CIM operator -> modeled latency (T_acc, eq. 2-3), from the timeline."""
    return {op.name: op.duration_ns for op in plan.timeline.operators if op.device == "cim"}


def latency_schedule(plan: Plan) -> ExecSchedule:
    timeline = replay(plan.timeline)
    host = {op.name: (timeline.start_ns[op.name], op.duration_ns) for op in plan.timeline.operators if op.device == "host"}
    return ExecSchedule(host, {}, 0.0, 1, False, timeline.makespan_ns, dict(timeline.finish_ns))


def stream_schedule(plan: Plan) -> ExecSchedule:
    stream = plan.stream
    if stream is None or plan.period_ns is None:
        host = {op.name: (op.start_ns, op.duration_ns) for op in plan.timeline.operators if op.device == "host"}
        return ExecSchedule(host, {}, None, UNTIMED_STREAM_FRAMES, False, plan.makespan_ns,
                            {op.name: op.finish_ns for op in plan.timeline.operators})
    host = {t.name: (t.start_ns, t.duration_ns) for t in stream.tasks if t.kind == "operator" and t.resource == "host"}
    moves = {t.name: t.start_ns for t in stream.tasks if t.kind == "transfer"}
    starts = {}
    for tr in plan.transfers:
        name = f"{tr.tensor}->{tr.dst_device}"
        if name not in moves:
            raise CimsplitError(f"the plan's stream schedule has no task for transfer {name}", hint="recompile")
        starts[(tr.tensor, tr.dst_device)] = moves[name]
    return ExecSchedule(host, starts, plan.period_ns, stream_frames_in_flight(plan), True, stream.latency_ns, {})


def stream_frames_in_flight(plan: Plan) -> int:
    """The plan's ``frames_in_flight``, else what its stream needs: ceil(latency / period)."""
    if plan.frames_in_flight:
        return plan.frames_in_flight
    if plan.stream is None or not plan.period_ns:
        return UNTIMED_STREAM_FRAMES
    return max(1, math.ceil(plan.stream.latency_ns / plan.period_ns - 1e-9))


def _arrivals_ns(plan: Plan, schedule: ExecSchedule, cim_kernels: Mapping[str, ModeledCimKernel]) -> dict[str, float]:
    """Tensor -> when it reaches the host in the schedule (CIM results; host ones and inputs are early)."""
    if schedule.transfer_start_ns:
        return {tr.tensor: schedule.transfer_start_ns[(tr.tensor, tr.dst_device)] + tr.latency_ns
                for tr in plan.transfers if tr.dst_device == "host"}
    finish = schedule.finish_ns
    made = {t: finish[s.operator] for k in cim_kernels.values() for s in k.steps if s.operator for t in s.outputs}
    return {tr.tensor: made.get(tr.tensor, 0.0) + tr.latency_ns for tr in plan.transfers if tr.dst_device == "host"}


def build_executor(plan: Plan, files: Mapping[str, Path], host: Device, cim: ModeledCimSimulator,
                   cim_kernels: Mapping[str, ModeledCimKernel], schedule: ExecSchedule) -> TimedExecutor:
    """The timed executor of ``schedule``: host partitions cut into pieces and loaded on ``host``."""
    arrivals = _arrivals_ns(plan, schedule, cim_kernels)
    pieces = []
    hosts: Sequence[PartitionRecord] = [p for p in plan.partitions if p.device == "host"]
    for part in hosts:
        model = onnx.load(str(files[part.name]))
        for piece in host_pieces(part.name, model, part.outputs, schedule.host_ns, arrivals, schedule.period_ns or None):
            pieces.append((piece, host.load(piece.model)))
    cims = [(cim_kernels[p.name], p.inputs, p.outputs) for p in plan.partitions if p.device == "cim"]
    return TimedExecutor(pieces, cim, cims, plan.transfers, [s.name for s in plan.model.inputs],
                         [s.name for s in plan.model.outputs], schedule)
