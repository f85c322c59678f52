"""The schema of ``plan.json``: frozen records with ``to_json``/``from_json`` (DESIGN §5).

The compiler's emit stage writes a :class:`Plan` through :meth:`Plan.to_json`;
the runtime reads it back with :func:`read_plan`.  One record type per entry:
:class:`PartitionRecord`, :class:`TransferRecord`, :class:`TimelineOperator`,
:class:`TimelineEdge`, :class:`TensorSpec`.  The file is deterministic (sorted
keys, floats written by ``repr``, see :func:`dumps`).

Sections of the file:

``version``     format version of this file (:data:`PLAN_VERSION`)
``model``       original model path, fingerprint, graph inputs/outputs (name, dtype, shape)
``partitions``  execution order: name, device, file, nodes, inputs, outputs
``transfers``   name, tensor, src_device, dst_device, bytes, latency_ns
``timeline``    the modeled schedule to replay: per operator its device, start,
                duration, graph input/output transfer times; per edge its transfer
                time; the makespan (equal to the placement's validated makespan)
``makespan_ns`` the predicted latency
``objective``   ``latency`` or ``throughput``: what the placement minimized
``period_ns``   the stream's modeled period (for a latency plan: its placement's minimum period)
``frames_in_flight``  ceil(stream latency / period): frames that overlap in the steady state
``stream``      the periodic schedule: ``latency_ns`` (one frame in the stream) and ``tasks``, each
                ``name``, ``kind`` (operator|transfer), ``resource`` (host|bus|cim), ``start_ns``,
                ``duration_ns``; frame f runs a task at f * period_ns + start_ns.  Operator tasks
                are named by the operator, transfer tasks ``TENSOR->DEVICE`` as the
                ``transfers`` entries (tensor, dst_device); older plans have none of these four keys

Every other top-level key is the placement report (``cimsplit partition
--json``: ``hardware``, ``operators``, ``edges``, ``cpu_only_ns``, ``speedup``,
``crossbars_used``, ``crossbar_budget``, ``operators_on_cim``,
``model_latency_ort_all_ns``, ``speedup_vs_ort_all``, ``solver``,
``baselines``, ``warnings``); :attr:`Plan.report` keeps it as the mapping it
is, since the runtime never reads it.  This module is stdlib only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cimsplit.errors import CimsplitError

__all__ = [
    "PLAN_VERSION",
    "SUPPORTED_VERSIONS",
    "TensorSpec",
    "ModelRecord",
    "PartitionRecord",
    "TransferRecord",
    "TimelineOperator",
    "TimelineEdge",
    "PlanTimeline",
    "StreamTaskRecord",
    "StreamRecord",
    "Plan",
    "read_plan",
    "dumps",
]

PLAN_VERSION = 1
SUPPORTED_VERSIONS = (1,)

_PLAN_KEYS = ("version", "model", "partitions", "transfers", "timeline", "makespan_ns", "objective", "period_ns",
              "frames_in_flight", "stream")


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output: name, numpy dtype name, shape (a dim is an int, a symbol or None)."""

    name: str
    dtype: str
    shape: tuple[int | str | None, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TensorSpec:
        return cls(data["name"], data["dtype"], tuple(data["shape"]))


@dataclass(frozen=True)
class ModelRecord:
    """The original model: path, fingerprint of the simplified model, graph inputs and outputs."""

    path: str
    fingerprint: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "fingerprint": self.fingerprint,
                "inputs": [s.to_json() for s in self.inputs], "outputs": [s.to_json() for s in self.outputs]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelRecord:
        return cls(data["path"], data["fingerprint"], tuple(TensorSpec.from_json(s) for s in data["inputs"]),
                   tuple(TensorSpec.from_json(s) for s in data["outputs"]))


@dataclass(frozen=True)
class PartitionRecord:
    """One partition to execute: its device, its ONNX file (relative to the plan) and boundary tensors."""

    name: str
    device: str
    file: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "device": self.device, "file": self.file,
                "nodes": list(self.nodes), "inputs": list(self.inputs), "outputs": list(self.outputs)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionRecord:
        return cls(data["name"], data["device"], data["file"], tuple(data["nodes"]), tuple(data["inputs"]),
                   tuple(data["outputs"]))


@dataclass(frozen=True)
class TransferRecord:
    """One explicit copy of a tensor from its producer's device to a consumer's device (eq. 4)."""

    name: str
    tensor: str
    src_device: str
    dst_device: str
    bytes: int
    latency_ns: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "tensor": self.tensor, "src_device": self.src_device,
                "dst_device": self.dst_device, "bytes": int(self.bytes), "latency_ns": float(self.latency_ns)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TransferRecord:
        return cls(data["name"], data["tensor"], data["src_device"], data["dst_device"], int(data["bytes"]),
                   float(data["latency_ns"]))


@dataclass(frozen=True)
class TimelineOperator:
    """One operator of the modeled schedule; a CIM operator also pays its graph input/output transfers."""

    name: str
    device: str
    start_ns: float
    finish_ns: float
    duration_ns: float
    input_transfer_ns: float
    output_transfer_ns: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "device": self.device, "start_ns": float(self.start_ns),
                "finish_ns": float(self.finish_ns), "duration_ns": float(self.duration_ns),
                "input_transfer_ns": float(self.input_transfer_ns), "output_transfer_ns": float(self.output_transfer_ns)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TimelineOperator:
        return cls(data["name"], data["device"], float(data["start_ns"]), float(data["finish_ns"]),
                   float(data["duration_ns"]), float(data["input_transfer_ns"]), float(data["output_transfer_ns"]))


@dataclass(frozen=True)
class TimelineEdge:
    """A workload edge and its transfer latency, paid only when its ends sit on different devices."""

    src: str
    dst: str
    latency_ns: float

    def to_json(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "latency_ns": float(self.latency_ns)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TimelineEdge:
        return cls(data["src"], data["dst"], float(data["latency_ns"]))


@dataclass(frozen=True)
class PlanTimeline:
    """The modeled schedule in plain numbers, enough to replay it without the solver."""

    operators: tuple[TimelineOperator, ...]
    edges: tuple[TimelineEdge, ...]
    makespan_ns: float

    def to_json(self) -> dict[str, Any]:
        return {"operators": [op.to_json() for op in self.operators], "edges": [e.to_json() for e in self.edges],
                "makespan_ns": float(self.makespan_ns)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanTimeline:
        return cls(tuple(TimelineOperator.from_json(op) for op in data["operators"]),
                   tuple(TimelineEdge.from_json(e) for e in data["edges"]), float(data["makespan_ns"]))


@dataclass(frozen=True)
class StreamTaskRecord:
    """One task of a stream's single-frame schedule S: frame f runs it at f * period + ``start_ns``."""

    name: str
    kind: str
    """``operator`` or ``transfer``."""
    resource: str
    """``host``, ``bus`` or ``cim`` (each CIM operator is its own resource)."""
    start_ns: float
    duration_ns: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "resource": self.resource, "start_ns": float(self.start_ns),
                "duration_ns": float(self.duration_ns)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StreamTaskRecord:
        return cls(data["name"], data["kind"], data["resource"], float(data["start_ns"]), float(data["duration_ns"]))


@dataclass(frozen=True)
class StreamRecord:
    """The periodic schedule of a stream: one frame's latency and its tasks."""

    latency_ns: float
    tasks: tuple[StreamTaskRecord, ...]

    def to_json(self) -> dict[str, Any]:
        return {"latency_ns": float(self.latency_ns), "tasks": [t.to_json() for t in self.tasks]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StreamRecord:
        return cls(float(data["latency_ns"]), tuple(StreamTaskRecord.from_json(t) for t in data["tasks"]))


@dataclass(frozen=True)
class Plan:
    """plan.json: what the runtime executes, plus the placement report it carries along."""

    model: ModelRecord
    partitions: tuple[PartitionRecord, ...]
    transfers: tuple[TransferRecord, ...]
    timeline: PlanTimeline
    makespan_ns: float
    report: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """The other top-level keys (the placement report, see the module docstring); read-only."""
    version: int = PLAN_VERSION
    objective: str | None = None
    """``latency`` or ``throughput``; None in plans written before streams were modeled (latency)."""
    period_ns: float | None = None
    """The stream's modeled period; None in plans written before streams were modeled."""
    frames_in_flight: int | None = None
    stream: StreamRecord | None = None

    @property
    def model_latency_ort_all_ns(self) -> float | None:
        """Whole-model onnxruntime latency with all optimizations, when the report has it."""
        value = self.report.get("model_latency_ort_all_ns")
        return None if value is None else float(value)

    @property
    def speedup_vs_ort_all(self) -> float | None:
        """Speedup over whole-model onnxruntime with all optimizations, when the report has it."""
        value = self.report.get("speedup_vs_ort_all")
        return None if value is None else float(value)

    def partition(self, name: str) -> PartitionRecord:
        for part in self.partitions:
            if part.name == name:
                return part
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = dict(self.report)
        document.update(
            version=self.version,
            model=self.model.to_json(),
            partitions=[p.to_json() for p in self.partitions],
            transfers=[t.to_json() for t in self.transfers],
            timeline=self.timeline.to_json(),
            makespan_ns=float(self.makespan_ns),
        )
        if self.objective is not None:
            document["objective"] = self.objective
        if self.period_ns is not None:
            document["period_ns"] = float(self.period_ns)
        if self.frames_in_flight is not None:
            document["frames_in_flight"] = int(self.frames_in_flight)
        if self.stream is not None:
            document["stream"] = self.stream.to_json()
        return document

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        """Parse a plan document; a wrong version is a ``ValueError``, a missing key a ``KeyError``."""
        if data.get("version") not in SUPPORTED_VERSIONS:
            raise ValueError(f"unsupported version {data.get('version')!r}")
        return cls(
            model=ModelRecord.from_json(data["model"]),
            partitions=tuple(PartitionRecord.from_json(p) for p in data["partitions"]),
            transfers=tuple(TransferRecord.from_json(t) for t in data["transfers"]),
            timeline=PlanTimeline.from_json(data["timeline"]),
            makespan_ns=float(data["makespan_ns"]) if "makespan_ns" in data else float(data["timeline"]["makespan_ns"]),
            report={k: v for k, v in data.items() if k not in _PLAN_KEYS},
            version=int(data["version"]),
            objective=str(data["objective"]) if data.get("objective") is not None else None,
            period_ns=float(data["period_ns"]) if data.get("period_ns") is not None else None,
            frames_in_flight=int(data["frames_in_flight"]) if data.get("frames_in_flight") is not None else None,
            stream=StreamRecord.from_json(data["stream"]) if data.get("stream") is not None else None,
        )


def read_plan(path: str | Path) -> Plan:
    """Read and check a plan.json file; unreadable, wrong-version or damaged is a :class:`CimsplitError`."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CimsplitError(f"cannot read {path}: {exc}") from exc
    try:
        if data.get("version") not in SUPPORTED_VERSIONS:
            raise CimsplitError(f"{path} has unsupported version {data.get('version')!r}",
                                hint="recompile with this cimsplit")
        return Plan.from_json(data)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise CimsplitError(f"{path} is not a valid cimsplit plan (missing {exc})", hint="recompile") from exc


def dumps(obj: Any) -> str:
    """Deterministic JSON text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(obj, sort_keys=True, indent=2, allow_nan=False) + "\n"
