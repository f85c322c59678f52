"""Open a compile directory for the runtime: its plan.json (:mod:`cimsplit.runtime.plan`), checked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cimsplit.errors import CimsplitError
from cimsplit.runtime.plan import PartitionRecord, Plan, TensorSpec, TransferRecord, read_plan

__all__ = ["Manifest", "load_manifest"]


@dataclass(frozen=True)
class Manifest:
    """A compile directory and the plan it holds."""

    directory: Path
    plan: Plan

    @property
    def model_path(self) -> str:
        return self.plan.model.path

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.plan.model.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.plan.model.outputs

    @property
    def partitions(self) -> tuple[PartitionRecord, ...]:
        return self.plan.partitions

    @property
    def transfers(self) -> tuple[TransferRecord, ...]:
        return self.plan.transfers

    def path(self, part: PartitionRecord) -> Path:
        """The ONNX file of ``part`` in this directory."""
        return self.directory / part.file


def load_manifest(plan_dir: str | Path) -> Manifest:
    """Parse ``plan_dir/plan.json``; a missing or malformed directory is a :class:`CimsplitError`."""
    directory = Path(plan_dir)
    if not directory.is_dir():
        raise CimsplitError(f"no such directory: {directory}", hint="pass the -o DIR of `cimsplit compile`")
    plan_path = directory / "plan.json"
    if not plan_path.is_file():
        raise CimsplitError(f"{directory} is not a cimsplit compile directory (no plan.json)",
                            hint="pass the -o DIR of `cimsplit compile`")
    manifest = Manifest(directory, read_plan(plan_path))
    for part in manifest.partitions:
        if directory.resolve() not in manifest.path(part).resolve().parents:
            raise CimsplitError(f"partition file {manifest.path(part)} is outside {directory}", hint="recompile")
        if not manifest.path(part).is_file():
            raise CimsplitError(f"partition file {manifest.path(part)} is missing", hint="recompile")
    return manifest
