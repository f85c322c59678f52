"""Layout glue (compiler/host_glue.py): what onnxruntime inserts where a conv's blocked layout meets another."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.calibration import measure_point, measured_operator, point_model
from cimsplit.compiler.calibration_grid import GridPoint, grid
from cimsplit.compiler.calibration_models import MEASURED_NODE, build_glue_point
from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_glue import GLUE_KINDS, REORDER_KINDS, layout_glue
from cimsplit.compiler.host_model import HostModel, KindFit, Sample, fit_kind, operator_kind
from cimsplit.compiler.host_prediction import predict_latencies
from cimsplit.compiler.ort_profiler import optimized_model
from cimsplit.compiler.qdq_kernels import int8_kernels, onnxruntime_converts_int8_pairs, onnxruntime_runs_nchwc
from cimsplit.models.quantize import quantize_qdq

x86 = pytest.mark.skipif(not onnxruntime_converts_int8_pairs(), reason="onnxruntime keeps int8 pairs off x86")
nchwc = pytest.mark.skipif(not onnxruntime_runs_nchwc(), reason="onnxruntime has no NCHWc layout off x86")


def _loaded(model: onnx.ModelProto, tmp_path: Path):
    onnx.save(model, tmp_path / "m.onnx")
    return load(tmp_path / "m.onnx")


def _loaded_point(point: GridPoint):
    with tempfile.TemporaryDirectory() as folder:
        return _loaded(point_model(point), Path(folder))


def _residual_block() -> onnx.ModelProto:
    """x (8 x 10 x 10) -> conv1 -> conv2 -> conv3, Add(conv1, conv3) -> conv4, all 1x1, 16 channels in between."""
    rng = np.random.default_rng(0)
    inits = []

    def weight(name: str, c_out: int, c_in: int) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal((c_out, c_in, 1, 1)) * 0.1).astype(np.float32), name))
        return name

    nodes = [helper.make_node("Conv", ["x", weight("w1", 16, 8)], ["a"], name="conv1"),
             helper.make_node("Conv", ["a", weight("w2", 16, 16)], ["b"], name="conv2"),
             helper.make_node("Conv", ["b", weight("w3", 16, 16)], ["d"], name="conv3"),
             helper.make_node("Add", ["a", "d"], ["e"], name="add"),
             helper.make_node("Conv", ["e", weight("w4", 8, 16)], ["y"], name="conv4")]
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return quantize_qdq(onnx.shape_inference.infer_shapes(model))


@x86
def test_a_residual_projection_pays_the_glue_back_to_float(tmp_path: Path) -> None:
    """conv1's output forks (conv2 and the Add), so its pair stays int8 and the Add runs in float: conv3 hands its
    output over as DQ -> float Transpose -> Q -> DQ, 16 x 10 x 10 elements each.  conv3 and conv4 read a tensor
    quantized outside the NHWC chain (conv2's and the Add's QuantizeLinear) through a uint8 Transpose to NHWC, in
    the region of their QLinearConv with that producer's DequantizeLinear: theirs (a point's conv reads a conv's
    NHWC output, no Transpose).  conv1 reads the graph input (its glue is a calibration point's too).  The Add, an
    element operator, dequantizes conv1's kept int8 output and quantizes its own: its glue, all of it."""
    loaded = _loaded(_residual_block(), tmp_path)
    glue = layout_glue(loaded.model, loaded.workload)
    assert glue == {"conv3": [("glue:Transpose-u8", 1600.0), ("glue:DequantizeLinear", 1600.0), ("glue:QuantizeLinear", 1600.0),
                              ("glue:Transpose-f32", 1600.0), ("glue:DequantizeLinear", 1600.0)],
                    "conv4": [("glue:Transpose-u8", 1600.0)],
                    "add": [("glue:DequantizeLinear", 1600.0), ("glue:QuantizeLinear", 1600.0)]}


@x86
@pytest.mark.parametrize("kind", ["int8:Conv", "int8:Conv-s8in", "int8:Conv-s8out", "int8:Conv-s8",
                                  "int8:Conv-depthwise", "int8:Conv-depthwise-s8in", "int8:Conv-depthwise-s8out"])
def test_calibration_points_carry_no_glue(tmp_path: Path, kind: str) -> None:
    """A point's conv sits between two convs of its kind: its fit holds no glue, so the predictor may add the model's."""
    params = (("c_in", 40), ("c_out", 88), ("h", 18), ("k", 1), ("s", 1)) if "depthwise" not in kind else \
        (("c", 88), ("h", 18), ("k", 3), ("s", 2))
    loaded = _loaded(point_model(GridPoint(kind, params)), tmp_path)
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    kernels = int8_kernels(loaded.model.graph)
    op = measured_operator(GridPoint(kind, params), [(o, operator_kind(o, types, kernels.get(o.name, "")))
                                                     for o in loaded.workload.operators])
    assert op.name not in layout_glue(loaded.model, loaded.workload)


@x86
@pytest.mark.parametrize(("kind", "glue"), [
    # a QLinearConv's NHWC output back to NCHW for the Reshape, the graph output's DequantizeLinear (16 x 10 x 10)
    ("int8:Reshape", [("glue:Transpose-u8", 1600.0), ("glue:DequantizeLinear", 1600.0)]),
    # the NHWC MaxPool (3x3/2 to 5 x 5) runs in the chain; its output goes back to NCHW and float
    ("int8:MaxPool", [("glue:Transpose-u8", 400.0), ("glue:DequantizeLinear", 400.0)]),
    ("int8:Add", [("glue:DequantizeLinear", 1600.0)]),  # a QLinearAdd, then the graph output's DequantizeLinear
    ("Reshape", []),
])
def test_an_element_point_holds_glue_a_network_may_run_without(tmp_path: Path, kind: str, glue: list) -> None:
    """What calibration does not charge to the point (the predictor adds the network's own)."""
    point = GridPoint(kind, (("c", 16), ("h", 10)))
    loaded = _loaded(point_model(point), tmp_path)
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    op = measured_operator(point, [(o, operator_kind(o, types)) for o in loaded.workload.operators])
    assert layout_glue(loaded.model, loaded.workload).get(op.name, []) == glue


@x86
def test_calibration_profiles_an_element_point_without_its_glue(monkeypatch: pytest.MonkeyPatch) -> None:
    """The int8 Reshape point is profiled with its Transpose and DequantizeLinear kernels charged to no node."""
    from cimsplit.compiler import host_profile

    seen: list[frozenset[str]] = []
    profile_model = host_profile.profile_model

    def recording(*args, uncharged: frozenset[str] = frozenset(), **kwargs):
        seen.append(uncharged)
        return profile_model(*args, uncharged=uncharged, **kwargs)

    monkeypatch.setattr(host_profile, "profile_model", recording)
    point = GridPoint("int8:Reshape", (("c", 16), ("h", 10)))
    sample, _ = measure_point(point, threads=1, runs=1, warmup=0)
    optimized = {node.name: node.op_type for node in optimized_model(_loaded_point(point).model).graph.node}
    assert len(seen) == 1 and sorted(optimized[name] for name in seen[0]) == ["DequantizeLinear", "Transpose"]
    assert sample.kind == "int8:Reshape" and sample.t_ns >= 0


@pytest.mark.parametrize(("kind", "types", "shape"), [
    ("glue:DequantizeLinear", (TensorProto.UINT8, TensorProto.FLOAT), [1, 16, 10, 10]),
    ("glue:QuantizeLinear", (TensorProto.FLOAT, TensorProto.UINT8), [1, 16, 10, 10]),
    ("glue:Transpose-u8", (TensorProto.UINT8, TensorProto.UINT8), [1, 10, 10, 16]),
    ("glue:Transpose-f32", (TensorProto.FLOAT, TensorProto.FLOAT), [1, 10, 10, 16]),
])
def test_glue_points_are_the_lone_kernel(kind: str, types: tuple[int, int], shape: list[int]) -> None:
    model = build_glue_point(GridPoint(kind, (("c", 16), ("h", 10))))
    onnx.checker.check_model(model, full_check=True)
    assert [node.name for node in model.graph.node] == [MEASURED_NODE]
    assert model.graph.input[0].type.tensor_type.elem_type == types[0]
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == shape
    assert model.graph.output[0].type.tensor_type.elem_type == types[1]


def test_glue_kinds_are_in_the_int8_grid_only_on_x86() -> None:
    """Each of the four glue kinds has the 12 + 2 points (2 at LARGE) of an element kind."""
    glue = [p for p in grid(int8=True) if p.kind in GLUE_KINDS]
    assert len(glue) == (4 * 14 if onnxruntime_converts_int8_pairs() else 0)
    assert not any(p.kind in GLUE_KINDS for p in grid())
    assert glue == [p for p in grid(int8=True) if p.kind in GLUE_KINDS]


def test_a_glue_fit_recovers_its_overhead_and_cost_per_element() -> None:
    """t = 2500 ns + 0.06 ns per element, exactly: the element fit predicts it at sizes it did not see."""
    samples = [Sample("glue:DequantizeLinear", {"n_in": float(n), "n_out": float(n)}, 2500 + 0.06 * n)
               for n in (1600, 5184, 20736, 82944, 331776, 1327104)]
    fit = fit_kind("glue:DequantizeLinear", samples)
    assert fit is not None and fit.method == "relative-elements"
    assert fit.predict_ns({"n_in": 75264.0, "n_out": 75264.0}) == pytest.approx(2500 + 0.06 * 75264, rel=1e-9)


@x86
@pytest.mark.parametrize("points", [1, 2])
def test_the_predictor_adds_an_element_operators_glue_to_a_calibration_without_it(points: int) -> None:
    """The int8 Reshape point as a network: Reshape 100 + 1 ns per element (1600), its Transpose back to NCHW
    10 + 0.5 ns and its output's DequantizeLinear 20 + 0.25 ns per element: 1700 + 810 + 420 = 2930 ns from a
    calibration whose points leave their glue out (version 2), 1700 from one whose points held it."""
    def fit(kind: str, overhead: float, per_element: float) -> KindFit:
        return KindFit(kind, "relative-elements", (overhead, 0.0, per_element), 10, 0.0, {}, {})

    fits = {"int8:Reshape": fit("int8:Reshape", 100.0, 1.0), "glue:Transpose-u8": fit("glue:Transpose-u8", 10.0, 0.5),
            "glue:DequantizeLinear": fit("glue:DequantizeLinear", 20.0, 0.25),
            **{kind: fit(kind, 1e6, 1.0) for kind in ("glue:QuantizeLinear", "glue:Transpose-f32")}}
    board = HostModel(ort_version="", cpu="", machine={}, threads=1, level="all", int8=True, fits=fits,
                      campaign={"points": points})
    loaded = _loaded_point(GridPoint("int8:Reshape", (("c", 16), ("h", 10))))
    latencies, _ = predict_latencies(loaded.workload, loaded.model, board)
    reshape = next(op.name for op in loaded.workload.operators if op.op_type == "Reshape")
    assert latencies[reshape] == (2930.0 if points == 2 else 1700.0)


def _squeeze_excitation(residual: bool = False) -> onnx.ModelProto:
    """x (8 x 10 x 10) -> conv1 (16) -> GlobalAveragePool -> fc (1x1, 16) -> Sigmoid -> Mul(conv1, scale) -> conv2 (8):
    the scaling Mul runs in plain NCHW between blocked convs, as in EfficientNet's blocks.  ``residual``: a conv0 (8)
    first, and conv2's output added to conv0's (onnxruntime fuses the Add into conv2's kernel, as in EfficientNet's
    repeated blocks)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)
             for name, shape in (("w0", (8, 8, 1, 1)), ("w1", (16, 8, 1, 1)), ("wf", (16, 16, 1, 1)), ("w2", (8, 16, 1, 1)))]
    first = "r" if residual else "x"
    nodes = [*([helper.make_node("Conv", ["x", "w0"], ["r"], name="conv0")] if residual else []),
             helper.make_node("Conv", [first, "w1"], ["a"], name="conv1"),
             helper.make_node("GlobalAveragePool", ["a"], ["p"], name="pool"),
             helper.make_node("Conv", ["p", "wf"], ["f"], name="fc"),
             helper.make_node("Sigmoid", ["f"], ["g"], name="gate"),
             helper.make_node("Mul", ["a", "g"], ["m"], name="scale"),
             helper.make_node("Conv", ["m", "w2"], ["c" if residual else "y"], name="conv2"),
             *([helper.make_node("Add", ["c", "r"], ["y"], name="add")] if residual else [])]
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits if residual else inits[1:])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@nchwc
def test_a_conv_with_a_fused_add_pays_its_reorder_too(tmp_path: Path) -> None:
    """With the residual Add in conv2's kernel, the region holding the reorder is conv2's and the Add's: still conv2's."""
    loaded = _loaded(_squeeze_excitation(residual=True), tmp_path)
    glue = layout_glue(loaded.model, loaded.workload)
    assert {op: [g for g in kernels if g[0] in REORDER_KINDS] for op, kernels in glue.items()} == {
        "conv2": [("glue:ReorderInput", 1600.0)]}


@nchwc
def test_a_blocked_conv_after_a_plain_op_pays_its_reorder(tmp_path: Path) -> None:
    """The Mul's output (16 x 10 x 10) is blocked again for conv2: that reorder is conv2's.  conv1's blocked output
    goes back to NCHW for the Mul, the fc's gate likewise: not glue (REORDER_KINDS); conv1's input is the graph's
    (a point's image conv has that too)."""
    loaded = _loaded(_squeeze_excitation(), tmp_path)
    glue = layout_glue(loaded.model, loaded.workload)
    assert {op: [g for g in kernels if g[0] in REORDER_KINDS] for op, kernels in glue.items()} == {
        "conv2": [("glue:ReorderInput", 1600.0)]}
    # predicted: conv2's kind plus its reorder, when the calibration has the reorder kind (10 + 1 ns per element)
    def fit(kind: str, overhead: float, per_element: float) -> KindFit:
        return KindFit(kind, "relative-elements", (overhead, 0.0, per_element), 10, 0.0, {}, {})

    fits = {kind: fit(kind, 100.0, 0.0) for kind in ("Conv", "GlobalAveragePool", "Sigmoid", "Mul")}
    fits["Conv"] = KindFit("Conv", "relative-linear", (100.0, 0.0, 0.0, 0.0, 0.0), 10, 0.0, {}, {})
    board = HostModel(ort_version="", cpu="", machine={"machine": "x86_64"}, threads=1, level="all", int8=False, fits=fits,
                      campaign={"points": 3})
    without, _ = predict_latencies(loaded.workload, loaded.model, board)
    board = HostModel(**{**board.__dict__, "fits": {**fits, **{kind: fit(kind, 10.0, 1.0) for kind in REORDER_KINDS}}})
    with_reorders, _ = predict_latencies(loaded.workload, loaded.model, board)
    by_name = {op.name: op.nodes[0] for op in loaded.workload.operators}
    assert {by_name[op]: with_reorders[op] - without[op] for op in without} == {
        "conv1": 0.0, "pool": 0.0, "fc": 0.0, "scale": 0.0, "conv2": 1610.0}  # (the gate is fc's activation)


@nchwc
@pytest.mark.parametrize("params", [(("c_in", 40), ("c_out", 88), ("h", 18), ("k", 3), ("s", 1)),
                                    (("c", 88), ("h", 18), ("k", 3), ("s", 2))])
def test_float_conv_points_carry_no_reorders(tmp_path: Path, params: tuple) -> None:
    """A float conv point sits between two blocked convs: no reorder is charged to it, so the fit holds none."""
    kind = "Conv" if len(params) == 5 else "Conv-depthwise"
    loaded = _loaded(point_model(GridPoint(kind, params)), tmp_path)
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    op = measured_operator(GridPoint(kind, params), [(o, operator_kind(o, types)) for o in loaded.workload.operators])
    assert op.name not in layout_glue(loaded.model, loaded.workload)


def test_reorder_points_are_whole_blocks_from_their_own_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    from cimsplit.compiler import calibration_grid

    full = grid()
    reorders = [p for p in full if p.kind in REORDER_KINDS]
    assert len(reorders) == (14 if onnxruntime_runs_nchwc() else 0) and all(p.get("c") % 16 == 0 for p in reorders)
    monkeypatch.setattr(calibration_grid, "REORDER_KINDS", ())
    assert [p for p in full if p.kind not in REORDER_KINDS] == grid()
