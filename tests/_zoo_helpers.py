"""Helpers shared by the zoo tests: op counts, shape inference, one onnxruntime run, ``cimsplit inspect``."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    return Counter(node.op_type for node in model.graph.node)


def conv_groups(model: onnx.ModelProto) -> list[int]:
    """The ``group`` attribute of every Conv, in graph order (1 when absent)."""
    groups = []
    for node in model.graph.node:
        if node.op_type == "Conv":
            groups.append(next((a.i for a in node.attribute if a.name == "group"), 1))
    return groups


def inferred_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Tensor name -> static shape, from ONNX shape inference (no execution)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    values = list(inferred.graph.value_info) + list(inferred.graph.output)
    return {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}


def run(model: onnx.ModelProto, batch: int = 1, seed: int = 0) -> list[np.ndarray]:
    """One onnxruntime CPU run on a seeded N(0, 1) image batch."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    size = inp.shape[-1]
    x = np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)
    return session.run(None, {inp.name: x})


def assert_sane(output: np.ndarray) -> None:
    """Finite (no NaN/Inf), not all zero, not exploded."""
    assert np.isfinite(output).all()
    assert np.abs(output).max() > 0
    assert np.abs(output).max() < 1e4


def initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    return next(onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


def every_conv_feeds_batchnorm(model: onnx.ModelProto, except_names: set[str] = frozenset()) -> bool:
    """True when each Conv's only consumer is a BatchNormalization (exporter style, before folding)."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    for node in model.graph.node:
        if node.op_type == "Conv" and node.name not in except_names:
            users = consumers.get(node.output[0], [])
            if [u.op_type for u in users] != ["BatchNormalization"]:
                return False
    return True


def inspect_json(model: onnx.ModelProto, folder: Path) -> dict:
    """``cimsplit inspect --json`` on ``model`` (saved into ``folder``): operators, edges, totals."""
    from cimsplit.cli import main

    path = folder / "model.onnx"
    onnx.save(model, path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["inspect", str(path), "--json"]) == 0
    return json.loads(out.getvalue())
