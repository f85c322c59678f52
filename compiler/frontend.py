"""The front end: ONNX file -> simplified model + workload DAG (DESIGN §2).

``load`` runs, in order: :func:`loader.read_model` (existence, ONNX parse,
external-data safety, opset, checker), :func:`loader.resolve_input_shapes`
(``--input-shape``), :func:`simplify.simplify` (onnxslim, node names, static
shapes), :func:`workload_builder.build_workload` (fusion, GEMM lowering, DAG)
and :func:`fingerprint.fingerprint`.  The input file is never modified.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from cimsplit.compiler.fingerprint import fingerprint
from cimsplit.compiler.freeze import freeze_inputs
from cimsplit.compiler.loader import apply_input_shapes, parse_input_shapes, read_model, resolve_input_shapes
from cimsplit.compiler.simplify import simplify
from cimsplit.compiler.workload import Workload
from cimsplit.compiler.workload_builder import build_workload

__all__ = ["ModelSpec", "LoadedModel", "load", "parse_input_shapes"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSpec:
    """Which model to compile: its ONNX file and the static shapes of inputs with symbolic dims."""

    path: str
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    frozen_inputs: Mapping[str, list[float]] = field(default_factory=dict)
    """``--freeze-input`` values: inputs made constants before simplification (:mod:`freeze`)."""


@dataclass(frozen=True)
class LoadedModel:
    """A validated, simplified model and its workload DAG.

    ``model`` is the SIMPLIFIED model: constants and shape subgraphs folded,
    BatchNormalization folded into Conv, Identity removed, every node named
    uniquely, a static shape for every tensor in ``value_info``.
    ``input_shapes`` are the static shapes of its graph inputs (feed these).
    """

    path: str
    model: onnx.ModelProto = field(repr=False)
    workload: Workload = field(repr=False)
    fingerprint: str
    input_shapes: dict[str, tuple[int, ...]]


def load(
    path: str | Path,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    crossbar_size: tuple[int, int] = (256, 256),
    frozen_inputs: Mapping[str, list[float]] | None = None,
) -> LoadedModel:
    """Load ``path`` and build its workload for ``crossbar_size`` (rows, cols) crossbars.

    ``frozen_inputs`` (``--freeze-input``) become constants before simplification (:mod:`freeze`).
    """
    start = time.perf_counter()
    model = read_model(path)
    shapes = resolve_input_shapes(model, input_shapes)
    apply_input_shapes(model, shapes)
    model = freeze_inputs(model, frozen_inputs or {})
    simplified = simplify(model, {name: dims for name, dims in shapes.items() if name not in (frozen_inputs or {})})
    workload = build_workload(simplified, crossbar_size)
    used_inputs = {vi.name for vi in simplified.graph.input}
    loaded = LoadedModel(
        path=str(path),
        model=simplified,
        workload=workload,
        fingerprint=fingerprint(simplified),
        input_shapes={name: dims for name, dims in shapes.items() if name in used_inputs},
    )
    log.info("loaded %s: %d nodes -> %d operators (%d CIM-capable) in %.2f s", path, len(simplified.graph.node),
             len(workload.operators), len(workload.cim_capable), time.perf_counter() - start)
    return loaded
