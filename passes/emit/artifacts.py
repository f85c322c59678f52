"""The files of a compile directory (DESIGN §5): what they hold in memory, and writing them atomically.

:func:`cimsplit.passes.pipeline.compile_model` (or ``build_artifacts`` there,
for a placement made elsewhere) builds :class:`CompileArtifacts` through the
annotate, split and plan stages (plan.json, trace.json, and explain.json when
the plan was explained); :func:`write_artifacts` writes them into a directory
atomically.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from cimsplit.passes.emit.directory import write_directory_atomically
from cimsplit.passes.rewrite.split import SplitResult
from cimsplit.runtime.plan import Plan, dumps

__all__ = ["CompileArtifacts", "write_artifacts", "write_plan", "write_trace", "ANNOTATED", "PARTITIONED", "PLAN", "TRACE",
           "EXPLAIN"]

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


def _save_model(model: onnx.ModelProto, path: Path) -> None:
    path.write_bytes(model.SerializeToString())


def write_plan(path: Path, plan: Plan) -> None:
    path.write_text(dumps(plan.to_json()), encoding="utf-8")


def write_trace(path: Path, trace: dict[str, Any]) -> None:
    path.write_text(dumps(trace), encoding="utf-8")


def write_artifacts(out_dir: Path, artifacts: CompileArtifacts, force: bool = False, protect: tuple[Path, ...] = ()) -> Path:
    """Write annotated.onnx, one file per partition, partitioned.onnx, plan.json, trace.json atomically."""

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
