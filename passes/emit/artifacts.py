"""Turn a partitioning decision into the files of a compile directory (DESIGN §5).

``build_artifacts`` runs annotate then split on the simplified model and
builds plan.json / trace.json (and explain.json, given an explanation) in memory; ``write_artifacts`` writes them into
a directory atomically.  Both only read the decision (a
:class:`PlacementResult` over a :class:`Workload`); nothing here re-solves.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from cimsplit.compiler.hardware import Hardware
from cimsplit.compiler.workload import Workload
from cimsplit.passes.emit.directory import write_directory_atomically
from cimsplit.passes.emit.explanation import explanation_to_json
from cimsplit.passes.emit.plan import build_plan, build_trace
from cimsplit.passes.placement.explain import Explanation, critical_operators
from cimsplit.passes.placement.result import PlacementResult
from cimsplit.passes.rewrite.annotate import annotate, complete_placements, placements_from_schedule
from cimsplit.passes.rewrite.split import SplitResult, split
from cimsplit.runtime.plan import Plan, dumps

__all__ = ["CompileArtifacts", "build_artifacts", "write_artifacts", "write_plan", "write_trace", "ANNOTATED", "PARTITIONED", "PLAN", "TRACE",
           "EXPLAIN"]

log = logging.getLogger(__name__)

ANNOTATED = "annotated.onnx"
PARTITIONED = "partitioned.onnx"
PLAN = "plan.json"
TRACE = "trace.json"
EXPLAIN = "explain.json"


@dataclass(frozen=True)
class CompileArtifacts:
    annotated: onnx.ModelProto
    split: SplitResult
    plan: Plan
    trace: dict[str, Any]
    explain: dict[str, Any] | None = None
    """explain.json's document, when the compile explained its plan."""


def build_artifacts(
    model: onnx.ModelProto,
    workload: Workload,
    result: PlacementResult,
    hardware: Hardware,
    *,
    model_path: str,
    fingerprint: str,
    report: dict[str, Any] | None = None,
    explanation: Explanation | None = None,
) -> CompileArtifacts:
    """Annotate ``model`` with ``result``'s placement and timing, split it, build the manifest.

    ``report`` is the partitioner's JSON report (``partition --json``); plan.json
    holds it plus the split and timeline sections.  ``explanation`` (of ``result``)
    stamps each node's reason and forced-move makespan and becomes explain.json.
    The trace marks the schedule's critical path.
    """
    if list(result.problem.names) != [op.name for op in workload.operators]:
        raise ValueError("the partition result must list the workload's operators in workload order")
    try:
        placements = complete_placements(model, placements_from_schedule(workload, result.schedule))
        reasons = None if explanation is None else {
            e.name: (f"{e.reason}: {e.detail}", e.forced_makespan_ns) for e in explanation.operators}
        annotated = annotate(model, placements, reasons)
    except ValueError as exc:
        raise ValueError(f"annotate pass failed (after partition): {exc}") from exc
    devices = {name: p.device for name, p in placements.items()}
    try:
        split_result = split(annotated, devices, hardware.element_bytes, hardware.bus_bandwidth_bytes_per_s)
    except ValueError as exc:
        raise ValueError(f"split pass failed (after annotate): {exc}") from exc
    plan = build_plan(report or {}, model, model_path, fingerprint, split_result.plan, result)
    critical = [result.problem.names[v] for v in sorted(critical_operators(result.problem, result.schedule))]
    trace = build_trace(plan.timeline, Path(model_path).stem, critical)
    log.info("split into %d partitions with %d transfers", len(split_result.plan.partitions), len(split_result.plan.transfers))
    explain = None if explanation is None else explanation_to_json(explanation)
    return CompileArtifacts(annotated, split_result, plan, trace, explain)


def _save_model(model: onnx.ModelProto, path: Path) -> None:
    path.write_bytes(model.SerializeToString())


def write_plan(path: Path, plan: Plan) -> None:
    path.write_text(dumps(plan.to_json()), encoding="utf-8")


def write_trace(path: Path, trace: dict[str, Any]) -> None:
    path.write_text(dumps(trace), encoding="utf-8")


def write_artifacts(out_dir: Path, artifacts: CompileArtifacts, force: bool = False, protect: tuple[Path, ...] = ()) -> Path:
    """Write annotated.onnx, one file per partition, partitioned.onnx, plan.json, trace.json
    (and explain.json when explained) atomically."""

    def write(tmp: Path) -> None:
        _save_model(artifacts.annotated, tmp / ANNOTATED)
        for entry in artifacts.plan.partitions:
            _save_model(artifacts.split.partitions[entry.name], tmp / entry.file)
        _save_model(artifacts.split.partitioned, tmp / PARTITIONED)
        write_plan(tmp / PLAN, artifacts.plan)
        write_trace(tmp / TRACE, artifacts.trace)
        if artifacts.explain is not None:
            (tmp / EXPLAIN).write_text(dumps(artifacts.explain), encoding="utf-8")

    return write_directory_atomically(Path(out_dir), write, force=force, protect=protect)
