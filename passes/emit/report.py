"""The partitioner's report as JSON-ready data (``cimsplit partition --json``, plan.json, sweeps).

Speedups are honest (DESIGN §3): against the CPU-only makespan the ILP sees
(sum of per-operator host medians) and, when the whole-model latency with all
ONNX Runtime optimizations is known, against that too.
"""

from __future__ import annotations

import math
from typing import Any

from cimsplit.passes.placement.result import PlacementResult, Schedule
from cimsplit.passes.placement.stream.tasks import PeriodicSchedule

__all__ = ["result_to_json", "schedule_summary", "stream_to_json", "whole_model_latency_ns"]


def _number(value: float) -> float | None:
    """JSON has no inf/nan: those become null."""
    return float(value) if math.isfinite(value) else None


def whole_model_latency_ns(costs: Any = None, profile: Any = None) -> float | None:
    """Median whole-model latency with all ORT optimizations, from a HostProfile or the costs' profile summary."""
    for source in (getattr(profile, "model_median_ns", None), (getattr(costs, "host_profile", None) or {}).get("model_median_ns")):
        if isinstance(source, dict) and source.get("optimizations_all") is not None:
            return float(source["optimizations_all"])
    return None


def schedule_summary(result: PlacementResult, schedule: Schedule) -> dict[str, Any]:
    """Makespan, speedup over CPU-only, operators on the CIM and crossbars used of one schedule."""
    problem = result.problem
    cpu = result.cpu_only_ns
    return {
        "makespan_ns": float(schedule.makespan_ns),
        "speedup": float(cpu / schedule.makespan_ns) if schedule.makespan_ns > 0 else 1.0,
        "operators_on_cim": sum(1 for h in schedule.on_host if not h),
        "crossbars_used": sum(c for c, h in zip(problem.crossbars, schedule.on_host) if not h),
    }


def result_to_json(result: PlacementResult, workload: Any = None, costs: Any = None, *,
                   profile: Any = None, model_latency_ns: float | None = None) -> dict[str, Any]:
    """The JSON document of a partitioning result (keys are stable; more may be added).

    ``workload`` (a :class:`Workload`) adds each operator's ONNX nodes and op type;
    ``costs`` adds the hardware; ``profile`` or ``model_latency_ns`` adds the
    speedup against whole-model onnxruntime with all optimizations.
    """
    problem = result.problem
    schedule = result.schedule
    ops = {op.name: op for op in workload.operators} if workload is not None else {}
    operators = []
    for v, name in enumerate(problem.names):
        op = ops.get(name)
        operators.append({
            "name": name,
            "nodes": list(op.nodes) if op is not None else [name],
            "op_type": op.op_type if op is not None else None,
            "device": "host" if schedule.on_host[v] else "cim",
            "t_host_ns": float(problem.t_host_ns[v]),
            "t_cim_ns": None if problem.t_cim_ns[v] is None else float(problem.t_cim_ns[v]),  # type: ignore[arg-type]
            "crossbars": int(problem.crossbars[v]),
            "start_ns": float(schedule.start_ns[v]),
            "finish_ns": float(schedule.finish_ns[v]),
        })
        if schedule.slicing and schedule.slicing[v] >= 0:
            option = problem.slicings[v][schedule.slicing[v]]
            operators[-1]["device"] = "cim+host"
            operators[-1]["slicing"] = {
                "kind": option.kind, "split": option.split, "crossbars": option.crossbars,
                "t_cim_ns": option.t_cim_ns, "t_host_ns": option.t_host_ns, "t_join_ns": option.t_join_ns}
    edges = [
        {
            "src": problem.names[u],
            "dst": problem.names[v],
            "t_transfer_ns": float(t),
            "crosses": schedule.on_host[u] != schedule.on_host[v],
        }
        for u, v, t in problem.edges
    ]
    stats = result.solver
    hardware = getattr(costs, "hardware", None)
    if hardware is not None and hasattr(hardware, "to_dict"):
        hardware_json: Any = hardware.to_dict()
    elif hardware is not None:
        from dataclasses import asdict

        hardware_json = asdict(hardware)
    else:
        hardware_json = {"crossbars": problem.budget}
    whole = model_latency_ns if model_latency_ns is not None else whole_model_latency_ns(costs, profile)
    document: dict[str, Any] = {
        "hardware": hardware_json,
        "operators": operators,
        "edges": edges,
        "makespan_ns": float(schedule.makespan_ns),
        "cpu_only_ns": float(result.cpu_only_ns),
        "speedup": float(result.speedup),
        "crossbars_used": int(result.crossbars_used),
        "crossbar_budget": int(problem.budget),
        "operators_on_cim": sum(1 for h in schedule.on_host if not h),
        "host_costs": dict(getattr(costs, "host_profile", None) or {}),
        "model_latency_ort_all_ns": whole,
        "speedup_vs_ort_all": (whole / schedule.makespan_ns) if whole and schedule.makespan_ns > 0 else None,
        "solver": {
            "name": stats.name,
            "status": stats.status,
            "objective_ns": _number(stats.objective_ns),
            "bound_ns": _number(stats.bound_ns),
            "gap": _number(stats.gap),
            "time_s": float(stats.time_s),
            "n_operators": int(stats.n_operators),
            "n_variables": int(stats.n_variables),
            "n_constraints": int(stats.n_constraints),
            "reason": stats.reason,
        },
        "baselines": {name: schedule_summary(result, s) for name, s in result.baselines.items()},
        "warnings": list(result.warnings),
        "objective": result.objective,
    }
    if result.stream is not None:
        document.update(stream_to_json(result.stream))
    if result.sliced:  # only then, so that a plan without slicing is the plan it always was
        document["operators_sliced"] = len(result.sliced)
    return document


def stream_to_json(stream: PeriodicSchedule) -> dict[str, Any]:
    """``period_ns``, ``frames_in_flight`` and ``stream`` (latency and tasks) of a periodic schedule."""
    return {
        "period_ns": float(stream.period_ns),
        "frames_in_flight": int(stream.frames_in_flight),
        "stream": {
            "latency_ns": float(stream.latency_ns),
            "tasks": [{"name": t.name, "kind": t.kind, "resource": t.resource, "start_ns": float(t.start_ns),
                       "duration_ns": float(t.duration_ns)} for t in stream.tasks],
        },
    }
