"""Element-wise chains onnxruntime runs as one kernel, found in its real optimized graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from graphs import OPSET, parse, save
from onnx import numpy_helper

from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_chains import Chain, fused_chains
from cimsplit.compiler.ort_profiler import optimized_model
from cimsplit.models.quantize import quantize_qdq


def _block() -> onnx.ModelProto:
    """x[1,4,8] -> GELU as PyTorch exports it (Div, Erf, Add, Mul, Mul) -> residual Add of x -> LayerNormalization
    (the Add read by it alone: a SkipLayerNormalization) -> Relu."""
    consts = [numpy_helper.from_array(np.array(v, np.float32), name) for name, v in
              (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5), ("gamma", np.ones(8)), ("beta", np.zeros(8)))]
    return parse(f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        block (float[1,4,8] x) => (float[1,4,8] y) {{
          d = Div(x, sqrt2)
          e = Erf(d)
          a = Add(e, one)
          m = Mul(x, a)
          g = Mul(m, half)
          s = Add(g, x)
          n = LayerNormalization <axis = -1> (s, gamma, beta)
          y = Relu(n)
        }}""", consts)


def _chains(model: onnx.ModelProto, tmp_path: Path) -> tuple[list[Chain], dict[str, str]]:
    loaded = load(save(model, tmp_path))
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    kinds = {op.name: "/".join(types[node] for node in op.nodes) for op in loaded.workload.operators}
    return fused_chains(loaded.model, optimized_model(loaded.model), loaded.workload), kinds


def test_gelu_and_skip_layer_normalization_are_chains_of_their_operators(tmp_path: Path) -> None:
    chains, kinds = _chains(_block(), tmp_path)
    assert [(c.kind, c.elements, [kinds[op] for op in c.operators]) for c in chains] == [
        ("Gelu", 32.0, ["Div", "Erf", "Add", "Mul", "Mul"]),
        ("SkipLayerNormalization", 32.0, ["Add", "LayerNormalization"]),
    ]


def test_a_quantized_block_has_no_chain(tmp_path: Path) -> None:
    """Between Q/DQ pairs onnxruntime fuses none of them: each operator is its own kernel."""
    chains, _ = _chains(quantize_qdq(_block()), tmp_path)
    assert chains == []


def test_without_optimizations_nothing_is_a_chain(tmp_path: Path) -> None:
    loaded = load(save(_block(), tmp_path))
    assert fused_chains(loaded.model, optimized_model(loaded.model, "off"), loaded.workload) == []
