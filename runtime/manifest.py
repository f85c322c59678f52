"""Read and check a compile directory's manifest (plan.json) for the runtime."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cimsplit.errors import CimsplitError

__all__ = ["Manifest", "PartitionEntry", "TransferEntry", "TensorSpec", "load_manifest"]

SUPPORTED_VERSIONS = (1,)


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple[int | str | None, ...]


@dataclass(frozen=True)
class PartitionEntry:
    name: str
    device: str
    path: Path
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class TransferEntry:
    name: str
    tensor: str
    src_device: str
    dst_device: str
    bytes: int
    latency_ns: float


@dataclass(frozen=True)
class Manifest:
    directory: Path
    plan: dict[str, Any]
    model_path: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    partitions: tuple[PartitionEntry, ...]
    transfers: tuple[TransferEntry, ...]


def _specs(entries: list[dict[str, Any]]) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(e["name"], e["dtype"], tuple(e["shape"])) for e in entries)


def load_manifest(plan_dir: str | Path) -> Manifest:
    """Parse ``plan_dir/plan.json``; a missing or malformed directory is a :class:`CimsplitError`."""
    directory = Path(plan_dir)
    if not directory.is_dir():
        raise CimsplitError(f"no such directory: {directory}", hint="pass the -o DIR of `cimsplit compile`")
    plan_path = directory / "plan.json"
    if not plan_path.is_file():
        raise CimsplitError(f"{directory} is not a cimsplit compile directory (no plan.json)",
                            hint="pass the -o DIR of `cimsplit compile`")
    try:
        plan = json.loads(plan_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CimsplitError(f"cannot read {plan_path}: {exc}") from exc
    try:
        if plan.get("version") not in SUPPORTED_VERSIONS:
            raise CimsplitError(f"{plan_path} has unsupported version {plan.get('version')!r}",
                                hint="recompile with this cimsplit")
        partitions = tuple(
            PartitionEntry(p["name"], p["device"], directory / p["file"], tuple(p["inputs"]), tuple(p["outputs"]))
            for p in plan["partitions"]
        )
        transfers = tuple(
            TransferEntry(t["name"], t["tensor"], t["src_device"], t["dst_device"], int(t["bytes"]), float(t["latency_ns"]))
            for t in plan["transfers"]
        )
        manifest = Manifest(
            directory, plan, plan["model"]["path"], _specs(plan["model"]["inputs"]), _specs(plan["model"]["outputs"]),
            partitions, transfers,
        )
        plan["timeline"]["operators"], plan["timeline"]["edges"]  # noqa: B018 - presence check
    except (KeyError, TypeError, AttributeError) as exc:
        raise CimsplitError(f"{plan_path} is not a valid cimsplit plan (missing {exc})", hint="recompile") from exc
    for part in partitions:
        if not part.path.is_file():
            raise CimsplitError(f"partition file {part.path} is missing", hint="recompile")
    return manifest
