"""Host latencies T_host,v measured with ONNX Runtime, saved and loaded as JSON (IV-A1).

A :class:`HostProfile` holds per-node medians (and p10/p90) in ns of the
*simplified* model, keyed by ONNX node name and recording each node's position,
plus the model fingerprint, the ORT version, the CPU model, the profiled
optimization level (``all`` by default: the kernels the runtime's host
partitions run, see ``ort_profiler``), the whole-model medians with
optimizations off and on, and the load average before and after.  Users
profile on the target board (``cimsplit profile``) and compile anywhere with
``--host-profile``; without it, this machine is profiled once per (model
fingerprint, level, threads, CPU, ORT version) and the result is cached under
``$CIMSPLIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/cimsplit``, else
``~/.cache/cimsplit``.

The fingerprint ignores names, so a re-export of the same architecture with
other node names shares it: :meth:`HostProfile.for_model` then re-keys the
latencies by position (equal fingerprints mean equal nodes in equal order).

A profile whose sum of per-node medians is not within ``SUM_OVER_MODEL`` of
the whole model at the same level (for models of at least ``CHECKED_FROM_NS``) says so (:attr:`HostProfile.warnings`); the
cache re-measures such a profile once before using it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx
import onnxruntime as ort

from cimsplit.compiler.opaque import profilable_part
from cimsplit.compiler.ort_profiler import LEVELS, measure
from cimsplit.compiler.units import format_time_ns
from cimsplit.compiler.workload import Workload
from cimsplit.errors import CimsplitError
from cimsplit.files import write_atomic
from cimsplit.machine import cpu_model

__all__ = [
    "FORMAT_VERSION",
    "PROFILED_HERE",
    "SUM_OVER_MODEL",
    "CHECKED_FROM_NS",
    "HostProfile",
    "profile_model",
    "profile_onnx",
    "operator_latencies",
    "check_fingerprint",
    "cpu_model",
]

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)  # version 1: level "off", no node positions, no load averages
PROFILED_HERE = "profiled on this machine"
SUM_OVER_MODEL = (0.85, 1.15)
"""Band of sum of per-node medians / whole-model median (same level) outside which a profile is suspect."""
CHECKED_FROM_NS = 1e6
"""Whole models faster than this (1 ms) are not checked against SUM_OVER_MODEL: there the fixed cost of a
``session.run`` outside any kernel and the profiler's 1 us resolution per kernel, not the profile, set the ratio."""
_NODE_KEYS = ("median_ns", "p10_ns", "p90_ns")
_MODEL_KEYS = ("optimizations_off", "optimizations_all")


class _Loaded(Protocol):
    """What the profiler needs of ``cimsplit.compiler.frontend.LoadedModel``."""

    model: onnx.ModelProto
    fingerprint: str
    input_shapes: dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class HostProfile:
    format_version: int
    fingerprint: str
    ort_version: str
    cpu: str
    threads: int
    runs: int
    warmup: int
    nodes: dict[str, dict[str, Any]]
    """node name -> {"median_ns", "p10_ns", "p90_ns", "op_type", "samples", "index"} ("index": position in the graph)."""
    model_median_ns: dict[str, float]
    """{"optimizations_off": ns, "optimizations_all": ns}: whole-model ``session.run`` medians."""
    seed: int = 0
    level: str = "all"
    """Optimization level the per-node latencies were profiled at ("all" or "off")."""
    load_average_before: tuple[float, float, float] | None = None
    load_average_after: tuple[float, float, float] | None = None
    """1, 5 and 15-minute load averages when profiling started and ended (None: not recorded)."""
    source: str = field(default=PROFILED_HERE, compare=False)
    """The file it was loaded from, or PROFILED_HERE; not saved."""
    cache_file: str | None = field(default=None, compare=False)
    """Where the cached copy lives when it was profiled on this machine; not saved."""
    remeasured: bool = field(default=False, compare=False)
    """The cache measured it twice because the first profile was outside SUM_OVER_MODEL (saved only when true, so
    a profile read back from the cache warns in the same words)."""

    @property
    def sum_of_medians_ns(self) -> float:
        """Sum of per-node medians: the CPU-only latency the ILP sees (``fsum``: the same whatever the nodes' order,
        so a profile read back from its cache reports the figures it was saved with)."""
        return math.fsum(float(stats["median_ns"]) for stats in self.nodes.values())

    @property
    def whole_model_ns(self) -> float | None:
        """Whole-model median at the profiled level (None when not measured)."""
        return self.model_median_ns.get(f"optimizations_{self.level}")

    @property
    def sum_over_model(self) -> float | None:
        """Sum of per-node medians / whole-model median at the same level."""
        whole = self.whole_model_ns
        return self.sum_of_medians_ns / whole if whole else None

    @property
    def warnings(self) -> tuple[str, ...]:
        """One sentence with the figures when sum / whole model is outside SUM_OVER_MODEL, else nothing.

        Models below CHECKED_FROM_NS are not checked.
        """
        ratio = self.sum_over_model
        low, high = SUM_OVER_MODEL
        if ratio is None or low <= ratio <= high or (self.whole_model_ns or 0.0) < CHECKED_FROM_NS:
            return ()
        loads = ""
        if self.load_average_before is not None and self.load_average_after is not None:
            loads = (f"; load average {self.load_average_before[0]:.2f} before, {self.load_average_after[0]:.2f} after "
                     f"on {os.cpu_count() or 1} cores")
        spread = sum(float(stats["p90_ns"]) - float(stats["p10_ns"]) for stats in self.nodes.values())
        again = " (measured twice)" if self.remeasured else ""
        return (
            f"host profile{again}: the sum of per-node medians {format_time_ns(self.sum_of_medians_ns)} is "
            f"{ratio:.2f}x the whole model's {format_time_ns(self.whole_model_ns)} at optimization level "
            f"{self.level} (expected {low:.2f}-{high:.2f}x); summed p90 - p10 spread {format_time_ns(spread)}{loads}; "
            "host latencies may be off, profile on a quiet machine with `cimsplit profile`",
        )

    def for_model(self, model: onnx.ModelProto) -> HostProfile:
        """This profile keyed by ``model``'s node names: re-keyed by position when the names differ.

        Call it only after :func:`check_fingerprint`: equal fingerprints mean the
        same nodes in the same order.  A profile without positions (format 1), or
        whose positions do not line up with ``model``, is returned unchanged.
        """
        names = [node.name for node in model.graph.node]
        if all(name in self.nodes for name in names):
            return self
        by_index = {stats.get("index"): stats for stats in self.nodes.values()}
        if len(by_index) != len(self.nodes) or set(by_index) != set(range(len(names))):
            return self
        if any(by_index[index].get("op_type", node.op_type) != node.op_type for index, node in enumerate(model.graph.node)):
            return self
        log.info("host profile %s: node names differ from the model's, matched by position", self.source)
        return dataclasses.replace(self, nodes={name: dict(by_index[index]) for index, name in enumerate(names)})

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "fingerprint": self.fingerprint,
            "ort_version": self.ort_version,
            "cpu": self.cpu,
            "threads": self.threads,
            "runs": self.runs,
            "warmup": self.warmup,
            "seed": self.seed,
            "level": self.level,
            "load_average_before": list(self.load_average_before) if self.load_average_before else None,
            "load_average_after": list(self.load_average_after) if self.load_average_after else None,
            "sum_over_model": self.sum_over_model,
            "nodes": self.nodes,
            "model_median_ns": self.model_median_ns,
            **({"remeasured": True} if self.remeasured else {}),
        }

    def summary(self) -> dict[str, Any]:
        """What ``Costs.host_profile`` records: where the latencies came from, and the whole-model medians."""
        return {
            "source": self.source,
            "fingerprint": self.fingerprint,
            "cpu": self.cpu,
            "ort_version": self.ort_version,
            "threads": self.threads,
            "runs": self.runs,
            "warmup": self.warmup,
            "level": self.level,
            "sum_over_model": self.sum_over_model,
            "load_average_before": list(self.load_average_before) if self.load_average_before else None,
            "load_average_after": list(self.load_average_after) if self.load_average_after else None,
            "model_median_ns": dict(self.model_median_ns),
        }

    def describe(self) -> str:
        """One line naming the profile used, for the CLI."""
        where = self.source if self.cache_file is None else f"{self.source} (cached in {self.cache_file})"
        return (
            f"host profile: {where}; cpu {self.cpu}, onnxruntime {self.ort_version}, "
            f"{self.threads} thread(s), median of {self.runs} runs at optimization level {self.level}, "
            f"whole model {format_time_ns(self.model_median_ns['optimizations_all'])} with all optimizations"
        )

    def save(self, path: str | Path) -> None:
        """Write sorted, indented JSON atomically (same profile, same bytes)."""
        write_atomic(Path(path), json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> HostProfile:
        """Read and validate a profile written by :meth:`save`."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CimsplitError(f"host profile {str(path)!r} does not exist", hint="write one with `cimsplit profile MODEL -o FILE`") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise CimsplitError(f"cannot read host profile {str(path)!r}: {exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise CimsplitError(f"host profile {str(path)!r} is not JSON", hint="write one with `cimsplit profile MODEL -o FILE`") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = PROFILED_HERE) -> HostProfile:
        where = f"host profile {source!r}"
        if not isinstance(data, dict):
            raise CimsplitError(f"{where} is not a JSON object")
        required = ("format_version", "fingerprint", "ort_version", "cpu", "threads", "runs", "warmup", "nodes", "model_median_ns")
        missing = [key for key in required if key not in data]
        if missing:
            raise CimsplitError(f"{where} lacks {', '.join(missing)}", hint="write it again with `cimsplit profile`")
        if data["format_version"] not in _READABLE_VERSIONS or isinstance(data["format_version"], bool):
            raise CimsplitError(
                f"{where} has format version {data['format_version']!r}, this cimsplit reads versions "
                f"{', '.join(map(str, _READABLE_VERSIONS))}",
                hint="write it again with `cimsplit profile`",
            )
        level = data.get("level", "off" if data["format_version"] == 1 else None)
        if level not in LEVELS:
            raise CimsplitError(f"{where}: 'level' must be one of {', '.join(LEVELS)}, not {level!r}")
        nodes = data["nodes"]
        if not isinstance(nodes, dict):
            raise CimsplitError(f"{where}: 'nodes' is not an object of node name -> latencies")
        for name, stats in nodes.items():
            if not isinstance(stats, dict) or any(not _is_number(stats.get(key)) for key in _NODE_KEYS):
                raise CimsplitError(f"{where}: node {name!r} lacks numeric {', '.join(_NODE_KEYS)}")
        medians = data["model_median_ns"]
        if not isinstance(medians, dict) or any(not _is_number(medians.get(key)) for key in _MODEL_KEYS):
            raise CimsplitError(f"{where}: 'model_median_ns' lacks numeric {', '.join(_MODEL_KEYS)}")
        return cls(
            format_version=FORMAT_VERSION,
            fingerprint=str(data["fingerprint"]),
            ort_version=str(data["ort_version"]),
            cpu=str(data["cpu"]),
            threads=_count(data, "threads", where, least=1),
            runs=_count(data, "runs", where, least=1),
            warmup=_count(data, "warmup", where, least=0),
            seed=_count(data, "seed", where, least=0, default=0),
            level=level,
            load_average_before=_load_average(data.get("load_average_before"), where),
            load_average_after=_load_average(data.get("load_average_after"), where),
            nodes={name: dict(stats) for name, stats in nodes.items()},
            model_median_ns={key: float(medians[key]) for key in _MODEL_KEYS},
            source=source,
            remeasured=data.get("remeasured") is True,
        )


def profile_model(
    loaded: _Loaded, runs: int = 30, warmup: int = 5, threads: int = 1, seed: int = 0, progress: bool | None = None,
    level: str = "all", given_inputs: Mapping[str, np.ndarray] | None = None, uncharged: frozenset[str] = frozenset(),
) -> HostProfile:
    """Profile the front end's simplified model on this machine (``given_inputs``, ``uncharged``:
    :func:`.ort_profiler.measure`'s)."""
    return profile_onnx(
        loaded.model, fingerprint=loaded.fingerprint, input_shapes=loaded.input_shapes, runs=runs, warmup=warmup,
        threads=threads, seed=seed, progress=progress, level=level, given_inputs=given_inputs, uncharged=uncharged,
    )


def profile_onnx(
    model: onnx.ModelProto,
    *,
    fingerprint: str,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    runs: int = 30,
    warmup: int = 5,
    threads: int = 1,
    seed: int = 0,
    progress: bool | None = None,
    level: str = "all",
    given_inputs: Mapping[str, np.ndarray] | None = None,
    uncharged: frozenset[str] = frozenset(),
) -> HostProfile:
    """Profile any ONNX model whose nodes have unique names (see ``ort_profiler``)."""
    names = [node.name for node in model.graph.node]
    if any(not name for name in names) or len(set(names)) != len(names):
        raise CimsplitError("every node must have a unique, non-empty name to be profiled", hint="load the model through cimsplit's front end")
    # Nodes onnxruntime cannot load (custom domains) are left out of the measured model; see compiler/opaque.py.
    measured, unprofiled = profilable_part(model)
    measurement = measure(measured, input_shapes, runs=runs, warmup=warmup, threads=threads, seed=seed,
                          progress=progress, level=level, given_inputs=given_inputs, uncharged=uncharged)
    index = {name: position for position, name in enumerate(names)}
    nodes = {
        name: {"op_type": s.op_type, "median_ns": s.median_ns, "p10_ns": s.p10_ns, "p90_ns": s.p90_ns,
               "samples": s.samples, "index": index[name]}
        for name, s in measurement.nodes.items()
    }
    nodes |= {node.name: {"op_type": node.op_type, "median_ns": 0.0, "p10_ns": 0.0, "p90_ns": 0.0, "samples": 0,
                          "opaque": True, "index": index[node.name]}
              for node in model.graph.node if node.name in unprofiled}
    return HostProfile(
        format_version=FORMAT_VERSION,
        fingerprint=fingerprint,
        ort_version=ort.__version__,
        cpu=cpu_model(),
        threads=threads,
        runs=runs,
        warmup=warmup,
        seed=seed,
        level=measurement.level,
        load_average_before=measurement.load_average_before,
        load_average_after=measurement.load_average_after,
        nodes=nodes,
        model_median_ns=dict(measurement.model_median_ns),
    )


def operator_latencies(workload: Workload, profile: HostProfile) -> dict[str, float]:
    """T_host,v in ns: the sum of the medians of v's nodes (a fused activation adds to its producer)."""
    latencies: dict[str, float] = {}
    for op in workload.operators:
        total = 0.0
        for node in op.nodes:
            stats = profile.nodes.get(node)
            if stats is None:
                raise CimsplitError(
                    f"host profile {profile.source!r} has no latency for node {node!r} of operator {op.name!r}",
                    hint="profile this model again with `cimsplit profile MODEL -o FILE`",
                )
            total += float(stats["median_ns"])
        latencies[op.name] = total
    return latencies


def check_fingerprint(profile: HostProfile, fingerprint: str) -> None:
    """A profile measured on another model (or another simplification of it) is an error."""
    if profile.fingerprint != fingerprint:
        raise CimsplitError(
            f"host profile {profile.source!r} was measured on a model with fingerprint {profile.fingerprint}, "
            f"but this model's fingerprint is {fingerprint}",
            hint="profile this model with `cimsplit profile MODEL -o FILE`",
        )


def _count(data: dict[str, Any], key: str, where: str, least: int, default: int | None = None) -> int:
    """``data[key]`` as an integer >= ``least`` (a JSON integer, not a string, bool or null)."""
    value = data.get(key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise CimsplitError(f"{where}: {key!r} must be an integer >= {least}, got {json.dumps(value)}",
                            hint="write it again with `cimsplit profile`")
    return value


def _load_average(value: Any, where: str) -> tuple[float, float, float] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 3 or not all(_is_number(x) for x in value):
        raise CimsplitError(f"{where}: a load average is a list of three numbers (1, 5, 15 minutes), not {value!r}")
    return (float(value[0]), float(value[1]), float(value[2]))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
