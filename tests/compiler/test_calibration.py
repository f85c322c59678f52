"""The calibration grid: fixed, covering every kind early, and free of the zoo models' GEMM shapes."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from cimsplit.compiler import calibration
from cimsplit.compiler.cache_flush import FLUSH_PREFIX, flush_buffer, flush_bytes_for, last_level_cache_bytes
from cimsplit.compiler.calibration import (
    calibrate,
    measure_point,
    measured_operator,
    point_model,
)
from cimsplit.compiler.calibration_grid import (
    DOWNSAMPLING_POINTS,
    ELEMENT_OPS,
    EXPORT_OPS,
    FUSED_DEPTHWISE,
    LARGE,
    MAX_MACS,
    POOLED,
    POWER_OF_TWO,
    POWER_OF_TWO_POINTS,
    QUANTIZED_EXPORT_OPS,
    ROW_KINDS,
    ROW_LENGTHS,
    SPATIAL,
    SQUEEZED,
    TRANSPOSED_KERNELS,
    TRANSPOSED_POINTS,
    WIDE,
    GridPoint,
    gemm_descriptors,
    grid,
    has_weights,
)
from cimsplit.compiler.calibration_models import BLOCKED_KINDS, IMAGE_CHANNELS, MEASURED_NODE, build_point
from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_chains import CHAIN_KINDS, KERNEL_KINDS
from cimsplit.compiler.host_fused import QUANTIZED_SILU
from cimsplit.compiler.host_glue import GLUE_KINDS, REORDER_KINDS
from cimsplit.compiler.host_model import (
    RUNS_IN_FLOAT,
    HostModel,
    Sample,
    is_gemm_kind,
    operator_features,
    operator_kind,
    plain_kind,
)
from cimsplit.compiler.host_variants import op_variants
from cimsplit.compiler.kernel_attribution import attribute_kernels
from cimsplit.compiler.ort_profiler import TURN_RUNS, optimized_model
from cimsplit.compiler.qdq_kernels import int8_kernels, onnxruntime_converts_int8_pairs, onnxruntime_runs_nchwc
from cimsplit.errors import CimsplitError

ZOO_SHAPES = Path(__file__).with_name("zoo_gemm_shapes.json")


def _zoo_shapes() -> set[tuple[int, int, int]]:
    return {tuple(s) for s in json.loads(ZOO_SHAPES.read_text())["shapes"]}


def test_grid_is_deterministic() -> None:
    assert grid() == grid()
    assert grid(int8=True) == grid(int8=True)
    assert grid(seed=1) != grid()
    # int8 doubles the grid but for the float-only fused kind (the quantizer folds a Clip into the int8 range) and
    # chain kinds (host_chains), and on x86 adds each int8 kind's three kernel variants (an int8 input, output or
    # both kept int8).  On x86 it also adds 12 + 2 points (2 at LARGE) of each of the four layout-glue kinds
    # (host_glue), and 14 of the float NCHWc reorder (in both grids).  Chain kinds have 12 points each, Gelu and SiLU
    # 2 more at LARGE (SkipLayerNormalization works on rows).
    glue = 4 * 14 if onnxruntime_converts_int8_pairs() else 0
    fused = sum(p.kind == FUSED_DEPTHWISE for p in grid())
    chains = sum(p.kind in CHAIN_KINDS for p in grid())
    assert fused == len([p for p in grid() if p.kind == "Conv-depthwise"]) > 0 and chains == 12 * len(CHAIN_KINDS) + 4
    exports = sum(p.kind in EXPORT_OPS and p.kind not in QUANTIZED_EXPORT_OPS for p in grid())  # (the quantizer leaves them float)
    in_float = sum(p.kind in RUNS_IN_FLOAT for p in grid())  # (onnxruntime has no int8 kernel: predicted in float)
    reorders = sum(p.kind in REORDER_KINDS for p in grid())  # (float NCHWc glue: in both grids alike)
    float_only = fused + chains + exports + in_float + reorders
    silu = 12 + 2  # int8 only: a quantized conv's SiLU chain (host_fused.QUANTIZED_SILU), 2 of them at LARGE
    assert sum(p.kind == QUANTIZED_SILU for p in grid(int8=True)) == silu and not any(p.kind == QUANTIZED_SILU for p in grid())
    assert len(grid(int8=True)) == (5 if onnxruntime_converts_int8_pairs() else 2) * (len(grid()) - float_only) + float_only + glue + silu


def test_every_kind_comes_early() -> None:
    kinds = {"Conv", "Conv-depthwise", "Gemm", "MatMul", "ConvTranspose", *ELEMENT_OPS, *EXPORT_OPS}
    first = grid()[: 4 * len(kinds)]
    reorders = set(REORDER_KINDS) if onnxruntime_runs_nchwc() else set()
    assert {p.kind for p in first} == kinds | {FUSED_DEPTHWISE, *CHAIN_KINDS} | reorders
    glue = set(GLUE_KINDS) if onnxruntime_converts_int8_pairs() else set()
    quantized = kinds - set(EXPORT_OPS) - RUNS_IN_FLOAT | QUANTIZED_EXPORT_OPS
    s8 = {f"int8:{k}{suffix}" for k in quantized for suffix in ("-s8in", "-s8out", "-s8") if onnxruntime_converts_int8_pairs()}
    assert {p.kind for p in grid(int8=True)[: 8 * len(kinds)]} == (kinds | {f"int8:{k}" for k in quantized} | s8 | glue
                                                                   | {FUSED_DEPTHWISE, *CHAIN_KINDS, QUANTIZED_SILU} | reorders)


def test_zoo_shapes_are_held_out() -> None:
    zoo = _zoo_shapes()
    assert len(zoo) == 86
    shapes = {gemm_descriptors(p) for p in grid(int8=True)} - {None}
    assert shapes and not shapes & zoo


def test_power_of_two_convs_are_a_fixed_sample_of_their_own() -> None:
    """Each seed draws its own sample of the power-of-two convs, the same every time, within the grid's MACs."""
    def sample(seed: int) -> set[GridPoint]:
        return {p for p in grid(seed=seed) if p.kind == "Conv" and {p.get("c_in"), p.get("c_out")} <= set(POWER_OF_TWO)
                and p.get("h") in SPATIAL}

    first = sample(0)
    assert len(first) == POWER_OF_TWO_POINTS and first == sample(0) != sample(1)
    assert {p.get("k") for p in first} == {1, 3} and {p.get("s") for p in first} == {1, 2}
    assert max(m * n * n_mvm for m, n, n_mvm in map(gemm_descriptors, first)) <= MAX_MACS


def test_large_maps_have_points_of_every_kind_but_attentions() -> None:
    """At LARGE (260 x 260) each element kind has two points, 16 and 40 channels (1.08 M and 2.70 M elements; 88 would
    be over MAX_ELEMENTS), rounded to 16 and 32 for the NCHWc kinds and the reorder, and none the row kinds; each depthwise kind 21
    (16 and 40 channels with k 3/5/7, 88 with k 3/5 and 176 with k 3 at stride 1, all four with k 3/5/7 at stride 2:
    the others over MAX_MACS); convs keep their maps within 12 M elements and MAX_MACS, the 3 -> 16 stems of
    k 5 and 7 at stride 2 among them."""
    large = [p for p in grid(int8=True) if dict(p.params).get("h") == LARGE]
    element = [p for p in large if gemm_descriptors(p) is None]
    kinds = {p.kind for p in grid(int8=True) if gemm_descriptors(p) is None and plain_kind(p.kind).removeprefix("int8:") not in ROW_KINDS}
    assert {p.kind for p in element} == kinds and len(element) == 2 * len(kinds)
    blocked = [plain_kind(p.kind).removeprefix("int8:") in BLOCKED_KINDS or p.kind in REORDER_KINDS for p in element]
    assert {p.get("c") for p, b in zip(element, blocked) if b} == {16, 32}
    assert {p.get("c") for p, b in zip(element, blocked) if not b} == {16, 40}
    for kind in ("Conv-depthwise", FUSED_DEPTHWISE, "int8:Conv-depthwise"):
        assert len([p for p in large if p.kind == kind]) == 21
    convs = [p for p in large if p.kind == "Conv"]
    assert len([p for p in large if p.kind == "int8:Conv"]) == len(convs) > 0
    assert all(max(p.get("c_in"), p.get("c_out") / p.get("s") ** 2) * LARGE ** 2 <= 12e6 for p in convs)
    assert all(m * n * n_mvm <= MAX_MACS for m, n, n_mvm in map(gemm_descriptors, convs))
    assert {(p.get("c_in"), p.get("c_out"), p.get("k"), p.get("s")) for p in convs} >= {(3, 16, 5, 2), (3, 16, 7, 2)}


def test_held_out_shapes_are_dropped() -> None:
    """Every point of a held-out shape is dropped (a 1x1 conv at 36 with stride 2 has the shape of one at 18)."""
    shape = (64, 2048, 18 * 18)
    same = [p for p in grid() if gemm_descriptors(p) == shape]
    assert {(p.get("h"), p.get("s")) for p in same} == {(36, 2), (18, 1)}
    kept = grid(held_out=[shape])
    assert not set(same) & set(kept) and len(kept) == len(grid()) - 2


@pytest.mark.parametrize("index", range(0, 40, 3))
def test_points_lower_to_their_descriptors(tmp_path: Path, index: int) -> None:
    """The front end sees each micro-model as one operator of the point's kind, with the grid's GEMM shape (a chain
    kind's model is several, measured whole)."""
    point = [p for p in grid() if p.kind not in CHAIN_KINDS][index]
    path = tmp_path / "point.onnx"
    model = build_point(point)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    loaded = load(path)
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    variants = op_variants(loaded.model)
    op = measured_operator(point, [(op, operator_kind(op, types, variant=variants.get(op.name, "")))
                                   for op in loaded.workload.operators])
    features = operator_features(op)
    if gemm_descriptors(point) is not None:
        assert (features["m"], features["n"], features["n_mvm"]) == gemm_descriptors(point)


@pytest.mark.slow
def test_zoo_shape_fixture_is_current(tmp_path: Path) -> None:
    from cimsplit.models import zoo

    shapes = set()
    for name in ("resnet18", "resnet50", "mobilenet_v2", "yolov5n"):
        path = tmp_path / f"{name}.onnx"
        onnx.save(zoo.build(name), path)
        shapes |= {(op.m, op.n, op.n_mvm) for op in load(path).workload.operators if op.m is not None}
    assert shapes == _zoo_shapes()


def test_int8_points_have_the_descriptors_of_their_float_twins() -> None:
    float_points = grid()
    int8_points = [p for p in grid(int8=True) if p.kind.startswith("int8:") and p.kind != QUANTIZED_SILU]  # (no float twin)
    twins = {(p.kind, p.params, p.variant): gemm_descriptors(p) for p in float_points}
    assert all(gemm_descriptors(p) == twins[(plain_kind(p.kind).removeprefix("int8:"), p.params, p.variant)] for p in int8_points)
    assert any(gemm_descriptors(p) is not None for p in int8_points)


@pytest.mark.parametrize(("c_in", "convs"), [(3, 1), (16, 3)])
def test_conv_points_sit_between_pointwise_convs(tmp_path: Path, c_in: int, convs: int) -> None:
    """A conv reading an image stays alone; any other sits between two 8-channel 1x1 convs, and is the one measured."""
    point = GridPoint("Conv", (("c_in", c_in), ("c_out", 40), ("h", 18), ("k", 3), ("s", 2)))
    model = build_point(point)
    assert [node.op_type for node in model.graph.node] == ["Conv"] * convs
    onnx.save(model, tmp_path / "point.onnx")
    loaded = load(tmp_path / "point.onnx")
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    op = measured_operator(point, [(op, operator_kind(op, types)) for op in loaded.workload.operators])
    # 40 output channels, 3x3 over c_in channels, 9 x 9 output positions
    assert (op.m, op.n, op.n_mvm) == (40, 9 * c_in, 81)


@pytest.mark.parametrize(("kind", "op_types", "n_in"), [
    # Concat of two 1x1 convs' outputs (2 x 16 x 10 x 10 elements in), read by a 1x1 conv: blocked, as in a CNN.
    ("Concat", ["Conv", "Conv", "Concat", "Conv"], 2 * 16 * 100),
    # A view read by a Relu (onnxruntime hands its buffer on); as the graph's output it would be copied.
    ("Reshape", ["Reshape", "Relu"], 16 * 100),
    ("Flatten", ["Flatten", "Relu"], 16 * 100),
])
def test_concat_and_view_points_sit_in_their_network_context(tmp_path: Path, kind: str, op_types: list[str], n_in: int) -> None:
    point = GridPoint(kind, (("c", 16), ("h", 10)))
    model = build_point(point)
    onnx.checker.check_model(model, full_check=True)
    assert [node.op_type for node in model.graph.node] == op_types
    onnx.save(model, tmp_path / "point.onnx")
    loaded = load(tmp_path / "point.onnx")
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    op = measured_operator(point, [(op, operator_kind(op, types)) for op in loaded.workload.operators])
    assert op.op_type == kind and op.n_in == n_in


@pytest.mark.parametrize(("kind", "variant", "n_out"), [
    # A pool's outputs times its window's taps: 16 x 5 x 5 outputs (3x3 stride 2 on 10 x 10) x 9, 16 x 10 x 10 x 25 at
    # 5x5 stride 1, 16 x 5 x 5 x 4 at 2x2 stride 2; a global pool's 16 outputs, an upsampling's 16 x 20 x 20.
    ("MaxPool", 0, 16 * 25 * 9), ("MaxPool", 1, 16 * 100 * 25), ("AveragePool", 0, 16 * 25 * 4),
    ("GlobalAveragePool", 0, 16), ("Resize", 0, 16 * 400),
])
def test_pool_points_run_blocked_between_convs(tmp_path: Path, kind: str, variant: int, n_out: int) -> None:
    """Between two 1x1 convs onnxruntime runs a pool (a Resize as PyTorch exports an upsampling: an Upsample) on their
    NCHWc layout (a CNN's, 2-3x a plain input's speed)."""
    point = GridPoint(kind, (("c", 16), ("h", 10)), variant)
    model = point_model(point)
    assert [node.op_type for node in model.graph.node] == ["Conv", kind, "Conv"]
    onnx.save(model, tmp_path / "point.onnx")
    loaded = load(tmp_path / "point.onnx")
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    op = measured_operator(point, [(op, operator_kind(op, types)) for op in loaded.workload.operators])
    assert op.op_type == kind and operator_features(op) == {"n_in": 16 * 100, "n_out": n_out}
    blocked = {node.op_type for node in optimized_model(model).graph.node if node.domain == "com.microsoft.nchwc"}
    if not blocked:
        pytest.skip("onnxruntime uses no NCHWc layout on this CPU")
    assert {"Resize": "Upsample"}.get(kind, kind) in blocked


def test_the_measured_conv_is_charged_its_own_kernel_only(tmp_path: Path) -> None:
    """Between its two neighbours (an NCHWc chain on x86), the measured conv's region is that conv alone."""
    point = GridPoint("Conv", (("c_in", 16), ("c_out", 40), ("h", 18), ("k", 1), ("s", 1)))
    onnx.save(build_point(point), tmp_path / "point.onnx")
    loaded = load(tmp_path / "point.onnx")
    regions = attribute_kernels(loaded.model, optimized_model(loaded.model))
    assert [region.nodes for region in regions if MEASURED_NODE in region.nodes] == [(MEASURED_NODE,)]
    assert len(regions) == 3


@pytest.mark.parametrize(("kind", "n_out"), [
    ("int8:Add", 16 * 100), ("int8:Concat", 2 * 16 * 100), ("int8:Sigmoid", 16 * 100), ("int8:Relu-s8out", 16 * 100),
    ("int8:HardSigmoid-s8in", 16 * 100), ("int8:Erf-s8out", 16 * 100), ("int8:Div-s8", 16 * 100),
    ("int8:BatchNormalization", 16 * 100), ("int8:BatchNormalization-s8out", 16 * 100), ("int8:Pad", 16 * 144),
])
def test_int8_element_points_read_quantized_ops_not_a_graph_input(tmp_path: Path, kind: str, n_out: int) -> None:
    """Each operand is a conv's output (an activation's the Add of two): no QuantizeLinear of a float graph input is
    the measured op's (it was its kernel, which no network runs), and a kept int8 activation has a point (it had none);
    an op whose graph output the quantizer leaves float (HardSigmoid, Erf, Div...) is read by a conv, so its kernel
    kinds have points too (none could be built)."""
    if "-s8" in kind and not onnxruntime_converts_int8_pairs():
        pytest.skip("no kernel kinds where onnxruntime keeps int8 pairs")
    point = GridPoint(kind, (("c", 16), ("h", 10)))
    model = point_model(point)
    assert [i.name for i in model.graph.input] == ["x"]
    onnx.save(model, tmp_path / "point.onnx")
    loaded = load(tmp_path / "point.onnx")
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    kernels = int8_kernels(loaded.model.graph)
    op = measured_operator(point, [(op, operator_kind(op, types, kernels.get(op.name, ""))) for op in loaded.workload.operators])
    assert operator_kind(op, types, kernels.get(op.name, "")) == kind and op.n_out == n_out
    inputs = {node.name: node.input[0] for node in loaded.model.graph.node}
    assert not [node for node in op.nodes if types[node] == "QuantizeLinear" and inputs[node] == "x"]


def test_the_budget_keeps_the_fits_share_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each sample keeps FIT_S_PER_SAMPLE of the budget back for the fits: with a share of 2/3 of the
    budget the second point no longer fits (2 x 2/3 > 1), without one all three are measured; the
    fits' time is recorded beside the measuring's."""
    points = [GridPoint("Relu", (("c", c), ("h", 8))) for c in (8, 16, 24)]
    monkeypatch.setattr(calibration, "FIT_S_PER_SAMPLE", 20.0)
    kept = calibrate(budget_s=30.0, points=points, runs=2, warmup=1)
    assert kept.campaign["measured"] == 1 and kept.campaign["fit_s"] >= 0.0
    monkeypatch.setattr(calibration, "FIT_S_PER_SAMPLE", 0.0)
    assert calibrate(budget_s=30.0, points=points, runs=2, warmup=1).campaign["measured"] == 3


def test_a_fused_depthwise_point_measures_the_conv_with_its_clip(tmp_path: Path) -> None:
    """``Conv-depthwise+Clip``: the depthwise conv between its pointwise neighbours, a Clip(0, 6) after it, and the
    operator measured is the depthwise conv with that Clip fused in (its nodes' times are the sample's)."""
    point = GridPoint(FUSED_DEPTHWISE, (("c", 16), ("h", 10), ("k", 3), ("s", 1)))
    model = build_point(point)
    onnx.checker.check_model(model, full_check=True)
    assert [node.op_type for node in model.graph.node] == ["Conv", "Conv", "Clip", "Conv"]
    onnx.save(model, tmp_path / "point.onnx")
    loaded = load(tmp_path / "point.onnx")
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    op = measured_operator(point, [(op, operator_kind(op, types)) for op in loaded.workload.operators])
    assert [types[node] for node in op.nodes] == ["Conv", "Clip"]
    # 16 channels, 3x3 each, 10 x 10 outputs per channel
    assert (op.m, op.n, op.n_mvm) == gemm_descriptors(point) == (16, 9, 16 * 100)


@pytest.mark.parametrize(("kind", "n_out"), [
    ("Erf", 16 * 100), ("LayerNormalization", 16 * 100),
    ("Gather", 8 * 100),  # half the channels
    ("Squeeze", 16 * 100),  # a view, read by a Relu
    ("Unsqueeze", 16 * 100),
    ("Sqrt", 16 * 100),
    ("ReduceMean", 16 * 10),  # one mean per row of the last axis (10 x 10 per channel)
    ("Pad", 16 * 12 * 12),  # a pixel around each 10 x 10 map
    ("BatchNormalization", 16 * 100), ("PRelu", 16 * 100), ("Softplus", 16 * 100), ("Exp", 16 * 100),
])
def test_transformer_kinds_lower_to_one_operator_of_their_kind(tmp_path: Path, kind: str, n_out: int) -> None:
    point = GridPoint(kind, (("c", 16), ("h", 10)))
    model = build_point(point)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, tmp_path / "point.onnx")
    loaded = load(tmp_path / "point.onnx")
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    op = measured_operator(point, [(op, operator_kind(op, types)) for op in loaded.workload.operators])
    assert [types[node] for node in op.nodes] == [kind]
    assert (op.n_in, op.n_out) == (16 * 100, n_out)


def test_export_kinds_are_drawn_from_their_own_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kinds exporters leave (a decomposed LayerNormalization's ReduceMean and Sqrt, an Unsqueeze, ...) have 12
    points each plus their large maps (none for ReduceMean, a row kind); without them every other point and the order
    are as they were, so an extended calibration keeps its earlier samples' meaning."""
    from cimsplit.compiler import calibration_grid

    full = grid(int8=True)
    int8 = {p.kind.removeprefix("int8:").split("-s8")[0] for p in full if p.kind.startswith("int8:")}
    assert int8 & set(EXPORT_OPS) == QUANTIZED_EXPORT_OPS == {"Unsqueeze", "Pad", "ReduceMean", "BatchNormalization"}
    # 2 at LARGE: 16 and 40 channels of 260 x 260 are within MAX_ELEMENTS (3e6), 88 are not
    assert {op: sum(p.kind == op for p in full) for op in EXPORT_OPS} == {op: 12 if op == "ReduceMean" else 14 for op in EXPORT_OPS}
    def squeezed(p: GridPoint) -> bool:
        return p.get("h") == POOLED and bool({p.get("c_in"), p.get("c_out")} & set(SQUEEZED)) if "Conv" in p.kind else False

    def earlier(points: list[GridPoint]) -> list[GridPoint]:  # (the ConvTranspose queue is shuffled after them)
        return [p for p in points if "ConvTranspose" not in p.kind]

    monkeypatch.setattr(calibration_grid, "_squeeze_points", list)  # (the squeeze-and-excitation convs likewise)
    assert earlier([p for p in full if not squeezed(p)]) == earlier(grid(int8=True))
    monkeypatch.setattr(calibration_grid, "EXPORT_OPS", ())
    assert earlier([p for p in full if not any(op in p.kind for op in EXPORT_OPS) and not squeezed(p)]) == earlier(grid(int8=True))


def test_transposed_conv_points_double_their_map_and_match_their_workload_descriptors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ConvTranspose points (stride 2, kernels 2, 3, 4, down to one output channel) come from their own stream, last: without them every other point
    and the order are as they were.  Each point's model doubles its map, and the descriptors the grid matches samples by
    are the workload's (what ``--extend`` compares)."""
    from cimsplit.compiler import calibration_grid

    full = grid(int8=True)
    points = [p for p in full if p.kind == "ConvTranspose"]
    assert len(points) == TRANSPOSED_POINTS and {p.get("k") for p in points} == set(TRANSPOSED_KERNELS)
    assert min(p.get("c_out") for p in points) == 1
    assert all(math.prod(gemm_descriptors(p)) <= MAX_MACS for p in points)
    for point in points[:3]:
        model = build_point(point)
        out = next(v for v in model.graph.value_info if v.name == "t")
        assert [d.dim_value for d in out.type.tensor_type.shape.dim] == [1, point.get("c_out"), 2 * point.get("h"), 2 * point.get("h")]
        onnx.save(model, tmp_path / "point.onnx")
        (op,) = [op for op in load(tmp_path / "point.onnx").workload.operators if op.op_type == "ConvTranspose"]
        features = operator_features(op)
        assert gemm_descriptors(point) == (features["m"], features["n"], features["n_mvm"]) == (
            point.get("c_out") * point.get("k") ** 2, point.get("c_in"), point.get("h") ** 2)
    assert is_gemm_kind("ConvTranspose") and {p.kind for p in full if "ConvTranspose" in p.kind} == {"ConvTranspose"}
    monkeypatch.setattr(calibration_grid, "_transposed_points", lambda rng: [])
    assert [p for p in full if "ConvTranspose" not in p.kind] == grid(int8=True)


def test_row_kinds_run_along_rows_as_long_as_a_transformers() -> None:
    """A LayerNormalization, Softmax-last or SkipLayerNormalization point works along rows of ROW_LENGTHS (the one its
    spatial size stands for), about as many elements as that size's c x h x h (rows rounded to the nearest)."""
    points = [p for p in grid() if p.kind in ROW_KINDS]
    assert {p.kind for p in points} == ROW_KINDS and len(points) == 12 * len(ROW_KINDS)
    for p in points:
        d = p.get("w")
        h = SPATIAL[ROW_LENGTHS.index(d)]
        assert abs(p.elements() - p.get("c") * h * h) <= p.get("c") * d / 2
        assert build_point(p).graph.input[0].type.tensor_type.shape.dim[-1].dim_value == d


@pytest.mark.parametrize("kind", CHAIN_KINDS)
def test_chain_points_run_as_one_fused_kernel_measured_whole(kind: str) -> None:
    """onnxruntime runs a chain point as its one fused kernel; its sample is the sum of its operators' times by its
    elements; an int8 grid has no int8 twin of it (between Q/DQ pairs nothing is fused)."""
    point = next(p for p in grid() if p.kind == kind)
    (kernel,) = [node.op_type for node in optimized_model(point_model(point)).graph.node]
    assert KERNEL_KINDS[kernel] == kind  # (SiLU's is a QuickGelu)
    sample, _ = measure_point(point, threads=1, runs=1, warmup=0)
    assert (sample.kind, sample.features) == (kind, {"n_in": point.elements(), "n_out": point.elements()})
    assert sample.t_ns > 0
    assert not [p for p in grid(int8=True) if p.kind.startswith("int8:") and kind in p.kind and p.kind != QUANTIZED_SILU]


def test_pooled_points_are_pointwise_convs_on_one_pixel() -> None:
    """Squeeze-and-excitation convs and heads after a global pool: 1x1, stride 1, one output pixel (one MVM)."""
    pooled = [p for p in grid() if p.kind == "Conv" and p.get("h") == POOLED]
    squeezed = [p for p in pooled if {p.get("c_in"), p.get("c_out")} & set(SQUEEZED)]
    # every C_in x C_out pair of the grid but the 1360-output image conv, and the squeeze-and-excitation pairs
    assert len(pooled) == 8 * 7 - 1 + len(squeezed) and len(squeezed) == 2 * len(SQUEEZED) * len(WIDE)
    assert {(min(p.get("c_in"), p.get("c_out")), max(p.get("c_in"), p.get("c_out"))) for p in squeezed} == {
        (n, w) for n in SQUEEZED for w in WIDE}
    assert {(p.get("k"), p.get("s")) for p in pooled} == {(1, 1)}
    assert gemm_descriptors(pooled[0]) == (pooled[0].get("c_out"), pooled[0].get("c_in"), 1)


def test_patch_points_are_unpadded_stems_and_downsamplings() -> None:
    """Stems of 4, 8 and 16 on an image to the first four map sizes, 6 output counts each, less those over the MAC
    cap (k 8: 344 and 680 outputs at 68 x 68; k 16: 88 and more at 68, 344 and 680 at 36): 24 + 22 + 18; and the
    2 x 2 downsamplings' sample."""
    patches = [p for p in grid() if p.kind == "Conv" and p.get("k") == p.get("s") > 1]
    stems = [p for p in patches if p.get("c_in") == IMAGE_CHANNELS]
    assert len(stems) == 24 + 22 + 18 and {p.get("k") for p in stems} == {4, 8, 16}
    assert len(patches) - len(stems) == DOWNSAMPLING_POINTS and {p.get("k") for p in patches if p not in stems} == {2}
    stem = GridPoint("Conv", (("c_in", IMAGE_CHANNELS), ("c_out", 40), ("h", 160), ("k", 16), ("s", 16)))
    conv = next(node for node in build_point(stem).graph.node if node.name == MEASURED_NODE)
    assert next(a.ints for a in conv.attribute if a.name == "pads") == [0, 0, 0, 0]
    assert gemm_descriptors(stem) == (40, 3 * 16 * 16, 10 * 10)


def test_a_flushed_point_reads_the_buffer_first_and_computes_the_same(tmp_path: Path) -> None:
    """A GEMM point's model reads the flush input before anything else, its output is the unflushed model's to
    the bit (x + 0 * max), and the measured operator is the same conv; an element-wise point is never flushed."""
    point = GridPoint("Conv", (("c_in", 16), ("c_out", 40), ("h", POOLED), ("k", 1), ("s", 1)))
    plain, model = point_model(point), point_model(point, flush_bytes=4096)
    assert [i.name for i in model.graph.input] == ["x", FLUSH_PREFIX]
    assert [d.dim_value for d in model.graph.input[1].type.tensor_type.shape.dim] == [1024]
    assert model.graph.node[0].input[0] == FLUSH_PREFIX and model.graph.node[0].op_type == "ReduceMax"
    onnx.checker.check_model(model, full_check=True)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]  # the neighbour conv's input
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    flush = flush_buffer(4096)
    assert flush.shape == (1024,) and flush_buffer(4096) is flush  # written once per campaign
    (want,) = ort.InferenceSession(plain.SerializeToString()).run(None, {"x": x})
    (got,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, FLUSH_PREFIX: flush})
    assert np.array_equal(want, got)
    onnx.save(model, tmp_path / "point.onnx")
    loaded = load(tmp_path / "point.onnx")
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    op = measured_operator(point, [(op, operator_kind(op, types)) for op in loaded.workload.operators])
    assert [types[node] for node in op.nodes] == ["Conv"] and (op.m, op.n, op.n_mvm) == (40, 16, 1)
    relu = GridPoint("Relu", (("c", 16), ("h", 10)))
    assert point_model(relu, flush_bytes=4096) == point_model(relu)


def test_a_flushed_point_is_measured_as_its_conv_alone() -> None:
    """Measured with a flush, a point's sample is its conv's: the same features as without (the flush's own
    nodes are other operators), and a positive time."""
    point = GridPoint("Conv", (("c_in", 16), ("c_out", 40), ("h", 10), ("k", 3), ("s", 1)))
    plain, _ = measure_point(point, threads=1, runs=1, warmup=0)
    sample, _ = measure_point(point, threads=1, runs=1, warmup=0, flush_bytes=1 << 16)
    assert sample.features == plain.features and sample.kind == "Conv" and sample.t_ns > 0
    assert plain.profiled_ns is None and sample.profiled_ns is not None and sample == sample.remixed()


def test_the_flush_is_the_largest_cache(tmp_path: Path) -> None:
    """sysfs sizes (L1d 48K, L2 1024K, L3 32768K) -> the L3's 32 MiB; unreadable or absent sizes -> 32 MiB."""
    for index, size in enumerate(("48K", "1024K", "32768K", "garbage")):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    assert last_level_cache_bytes(tmp_path) == 32 << 20
    (tmp_path / "index2" / "size").write_text("2M\n")
    assert last_level_cache_bytes(tmp_path) == 2 << 20
    assert last_level_cache_bytes(tmp_path / "absent") == 32 << 20


def test_the_flush_reads_the_largest_cache_up_to_128_mib(tmp_path: Path) -> None:
    """A Zen 3's 32 MiB L3 is read whole; a VM that reports a 480 MiB L3 gets 128 MiB."""
    (tmp_path / "index3").mkdir()
    (tmp_path / "index3" / "size").write_text("32768K\n")
    assert flush_bytes_for(tmp_path) == 32 << 20
    (tmp_path / "index3" / "size").write_text("491520K\n")
    assert last_level_cache_bytes(tmp_path) == 480 << 20
    assert flush_bytes_for(tmp_path) == 128 << 20


@pytest.mark.parametrize("kind", ["MatMul", "int8:MatMul"])
def test_matmul_points_measure_a_product_of_two_activations(tmp_path: Path, kind: str) -> None:
    """(3, 60, 40) x (3, 40, 100): one operator of the kind, its operands made by weight products (quantized as
    a network's), GEMM descriptors (100 columns, K = 40, 3 x 60 rows); never flushed (no weight to evict)."""
    point = GridPoint(kind, (("b", 3), ("m", 60), ("k", 40), ("n", 100)))
    assert gemm_descriptors(point) == (100, 40, 180) and not has_weights(point)
    assert is_gemm_kind(kind)  # fitted by the GEMM methods, on its descriptors
    assert point_model(point, flush_bytes=4096) == point_model(point)
    onnx.save(point_model(point), tmp_path / "point.onnx")
    loaded = load(tmp_path / "point.onnx")
    types = {node.name: node.op_type for node in loaded.model.graph.node}
    kernels = int8_kernels(loaded.model.graph)
    op = measured_operator(point, [(op, operator_kind(op, types, kernels.get(op.name, ""))) for op in loaded.workload.operators])
    assert operator_kind(op, types, kernels.get(op.name, "")) == kind and op.product_shape == (180, 40, 100)
    producers = [o for o in loaded.workload.operators if o is not op]
    assert len(producers) == 2 and all(o.cim_capable for o in producers)
    assert len([p for p in grid() if p.kind == "MatMul"]) == 2 * 3 * 3 * 3


def test_an_extended_calibration_measures_only_the_kinds_it_lacks(tmp_path: Path) -> None:
    """Relu measured before; Relu and Sigmoid asked for: only Sigmoid is measured, Relu's samples are kept as they
    were, and both are fitted; an extension that measures nothing keeps the earlier level.  An earlier calibration at
    another thread count, or whose profiles took turns run by run, is refused."""
    relu = [GridPoint("Relu", (("c", c), ("h", 8))) for c in (8, 16, 24)]
    sigmoid = [GridPoint("Sigmoid", (("c", c), ("h", 8))) for c in (8, 16, 24)]
    earlier = calibrate(budget_s=30.0, points=relu, runs=1, warmup=0)
    earlier.save(tmp_path / "earlier.json")
    earlier = HostModel.load(tmp_path / "earlier.json")
    extended = calibrate(budget_s=30.0, points=relu + sigmoid, runs=1, warmup=0, extend=earlier)
    assert extended.campaign["grid_points"] == 3 and extended.campaign["kept"] == 3
    assert extended.samples[:3] == earlier.samples and {s.kind for s in extended.samples[3:]} == {"Sigmoid"}
    assert set(extended.fits) == {"Relu", "Sigmoid"} and extended.campaign["extends"] == str(tmp_path / "earlier.json")
    nothing_new = calibrate(budget_s=30.0, points=relu, runs=1, warmup=0, extend=dataclasses.replace(earlier, level="basic"))
    assert nothing_new.campaign["measured"] == 0 and nothing_new.level == "basic"  # (the level its samples were profiled at)
    with pytest.raises(CimsplitError, match="threads 1, this campaign's is 2"):
        calibrate(budget_s=30.0, points=sigmoid, threads=2, extend=earlier)
    run_by_run = dataclasses.replace(earlier, campaign={key: v for key, v in earlier.campaign.items() if key != "turn_runs"})
    with pytest.raises(CimsplitError, match=f"turns of 1, this campaign's is {TURN_RUNS}"):  # (its profiles' sessions' turns)
        calibrate(budget_s=30.0, points=sigmoid, extend=run_by_run)


def test_an_extended_calibration_completes_the_gemm_points_it_lacks() -> None:
    """Convs A and B measured before; A and a patch conv P asked for: only P is measured, A's sample is kept and B's,
    a point the grid no longer has, dropped."""
    def conv(c_in: int, h: int, k: int, s: int) -> GridPoint:
        return GridPoint("Conv", (("c_in", c_in), ("c_out", 16), ("h", h), ("k", k), ("s", s)))

    a, b, patch = conv(16, 8, 3, 1), conv(16, 8, 1, 1), conv(IMAGE_CHANNELS, 16, 4, 4)
    earlier = calibrate(budget_s=30.0, points=[a, b], runs=1, warmup=0, flush_bytes=0)
    extended = calibrate(budget_s=30.0, points=[a, patch], runs=1, warmup=0, flush_bytes=0, extend=earlier)
    assert (extended.campaign["grid_points"], extended.campaign["kept"], extended.campaign["dropped"]) == (1, 1, 1)
    assert extended.samples[0] == earlier.samples[0]
    features = extended.samples[1].features
    assert (features["m"], features["n"], features["n_mvm"]) == gemm_descriptors(patch) == (16, 3 * 4 * 4, 4 * 4)


def test_an_extension_measures_again_the_kinds_whose_points_changed() -> None:
    """A calibration from before points version 2 held its int8 element points' layout glue: extending it drops
    those samples and lists their points again; its float samples and its int8 conv's (a weight) are kept."""
    relu, int8_relu = GridPoint("Relu", (("c", 8), ("h", 8))), GridPoint("int8:Relu", (("c", 8), ("h", 8)))
    conv = GridPoint("int8:Conv", (("c_in", 16), ("c_out", 16), ("h", 8), ("k", 3), ("s", 1)))
    m, n, n_mvm = gemm_descriptors(conv)
    elements = {"n_in": 512.0, "n_out": 512.0}
    samples = [Sample("Relu", elements, 100.0), Sample("int8:Relu", elements, 200.0),
               Sample("int8:Conv", {"m": m, "n": n, "n_mvm": n_mvm}, 300.0)]
    old = HostModel(ort_version=ort.__version__, cpu="cpu", machine={}, threads=1, level="all", int8=True, fits={},
                    samples=tuple(samples), campaign={"attribution": 4})
    stale = calibration._stale(old, [relu, int8_relu, conv])
    assert stale == {"int8:Relu"}
    assert calibration._lacking([relu, int8_relu, conv], samples, stale) == ([int8_relu], [samples[0], samples[2]], 1)
    current = dataclasses.replace(old, campaign={"points": calibration.POINTS_VERSION})
    assert calibration._stale(current, [relu, int8_relu, conv]) == set()


def test_an_extension_measures_the_element_points_added_at_large_maps() -> None:
    """A calibration from before points version 3 has no element points at LARGE; its samples of those kinds (whose
    points are told apart by nothing) are kept and only the LARGE points are listed; a GEMM point at LARGE is listed
    by its shape whatever the version; a current calibration lists none."""
    relu, large_relu = GridPoint("Relu", (("c", 8), ("h", 8))), GridPoint("Relu", (("c", 16), ("h", LARGE)))
    conv = GridPoint("Conv", (("c_in", 16), ("c_out", 16), ("h", LARGE), ("k", 1), ("s", 1)))
    samples = [Sample("Relu", {"n_in": 512.0, "n_out": 512.0}, 100.0)]
    old = HostModel(ort_version=ort.__version__, cpu="cpu", machine={}, threads=1, level="all", int8=False, fits={},
                    samples=tuple(samples), campaign={"points": 2})
    points = [relu, large_relu, conv]
    assert calibration._added(old, points) == {large_relu}
    assert calibration._lacking(points, samples, (), calibration._added(old, points)) == ([large_relu, conv], samples, 0)
    current = dataclasses.replace(old, campaign={"points": calibration.POINTS_VERSION})
    assert calibration._lacking(points, samples, (), calibration._added(current, points)) == ([conv], samples, 0)


def test_no_calibration_point_runs_an_inlined_function(tmp_path: Path) -> None:
    """Attribution 5 charges what onnxruntime saves without a name (an inlined function body's kernels) and 4 did not:
    a calibration measured with either is the same, since no point's optimized graph has such a kernel."""
    from cimsplit.compiler.kernel_attribution import CALIBRATION_ATTRIBUTIONS
    from cimsplit.compiler.ort_profiler import UNNAMED

    assert CALIBRATION_ATTRIBUTIONS == {4, 5}
    first = {}
    for point in grid(int8=True):
        if not point.kind.startswith("glue:"):
            first.setdefault(plain_kind(point.kind), point)
    for point in first.values():  # (through the front end, which names every node, as calibration profiles it)
        onnx.save(point_model(point), tmp_path / "point.onnx")
        model = load(tmp_path / "point.onnx").model
        assert not [n.op_type for n in optimized_model(model, "all").graph.node if n.name.startswith(UNNAMED)], point.kind


def test_a_quantized_silu_point_measures_the_activation_nodes_of_its_first_conv() -> None:
    """A 16-channel 1x1 conv with its SiLU, read by another (the zoo's QDQ recipe): the sample is the SiLU's nodes
    after the first conv (Sigmoid, Mul and their Q/DQ), at the conv's 16 x 10 x 10 outputs."""
    point = GridPoint(QUANTIZED_SILU, (("c", 16), ("h", 10)))
    types = [node.op_type for node in point_model(point).graph.node]
    assert types.count("Conv") == 2 and {"Sigmoid", "Mul", "QuantizeLinear", "DequantizeLinear"} <= set(types)
    sample, _ = measure_point(point, threads=1, runs=2, warmup=1)
    assert (sample.kind, dict(sample.features)) == (QUANTIZED_SILU, {"n_in": 1600.0, "n_out": 1600.0}) and sample.t_ns > 0
