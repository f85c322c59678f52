"""Differential fuzzing: random valid models compiled at several budgets and run against onnxruntime.

The default run checks a small fixed set of seeds (one of them int8 QDQ) and a
few hypothesis examples; ``bench/fuzz.py --seeds 0-999`` runs a campaign.  A
hypothesis failure is shrunk to a small model and printed in ONNX text syntax.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.printer
import pytest
from clutter import NO_OPS, add_clutter
from differential import check_model, check_seed, is_int8_seed
from export import BATCH, as_dynamic_export, as_opset_11
from hypothesis import HealthCheck, find, given, note, settings
from random_models import models, seeded_model

DEFAULT_SEEDS = (4, 10, 13, 14, 22)
"""Chosen to cover branches, a second input, Conv groups and auto pads, Resize, Gemm, several outputs and
an int8 QDQ model (seed 4) with CIM partitions, in about a second each."""


@pytest.mark.parametrize("seed", DEFAULT_SEEDS)
def test_seed_compiles_and_runs_like_onnxruntime(seed: int, tmp_path: Path) -> None:
    failures = check_seed(seed, tmp_path, budgets=(0, 2, 1000))
    assert [f.line() for f in failures] == []


@pytest.mark.parametrize("seed", (4, 13, 269, 274, 1699))
def test_seed_with_exporter_clutter_compiles_and_runs_like_onnxruntime(seed: int, tmp_path: Path) -> None:
    """Seeds 269 and 274 (int8) were not bit for bit before the front end did onnxruntime's rewrites
    (:mod:`cimsplit.compiler.ort_rewrites`): a Dropout, an Add of zero and a Cast after Q/DQ pairs (2.96 off), and
    a Conv -> Reshape -> Q (0.064 off), cut at float tensors the whole model never computes.  Seed 1699 (int8):
    Add -> Q/DQ -> two Transposes that cancel, with pairs -> HardSwish; the HardSwish's pair, merged away by
    onnxruntime, was converted to uint8 ahead, one more requantization even all on the host (0.0009 off;
    passes/rewrite/unsigned_cuts)."""
    failures = check_seed(seed, tmp_path, budgets=(0, 2, 1000), clutter=True)
    assert [f.line() for f in failures] == []


@pytest.mark.parametrize("seed", (7214, 7864))
def test_int8_cuts_are_unsigned_where_onnxruntime_makes_them_so(seed: int, tmp_path: Path) -> None:
    """At 2 crossbars (passes/rewrite/unsigned_cuts).  Seed 7214: a sliced 1x1 conv's parts' Qs -> Concat -> Slices
    of the row-sliced conv after it; that pair was left int8 while the input side was made uint8, and every part
    ran a float Conv (QLinearConv whole): 2.05 off.  Seed 7864: two Transposes that cancel, with Q/DQ pairs between
    them; onnxruntime removes them and the Conv after them runs in float, where the split, converting the cut pair
    after them, ran QLinearConv: 0.305 off."""
    assert [f.line() for f in check_seed(seed, tmp_path, max_steps=16, budgets=(2,))] == []


@pytest.mark.parametrize(("seed", "budget"), ((179, 2), (129, 10), (779, 10)))
def test_an_int8_throughput_plan_streams_frame_by_frame_bit_for_bit(seed: int, budget: int, tmp_path: Path) -> None:
    """``--objective throughput``, six frames on the stream schedule (runtime/steps.py's host pieces).  Seed 179: a
    piece read another's DequantizeLinear output and ran its operator in float (0.16 off).  Seed 129: the copy of
    a cut DequantizeLinear of a CIM result, a partition output, sat in the partition's first piece, which then
    waited for it while the serial bus held the transfer it waited on behind that piece's: no piece could run.
    Seed 779: the same wait, a DQ copy of a late CIM result read by an operator of a piece that began before it."""
    failures = check_seed(seed, tmp_path, max_steps=16, budgets=(budget,), objective="throughput", stream=6)
    assert [f.line() for f in failures] == []


@pytest.mark.parametrize(("seed", "quantizer"), ((14, "qoperator"), (694, "conv-only"), (9, "u8u8"), (4, "symmetric")))
def test_seed_in_another_quantizer_configuration(seed: int, quantizer: str, tmp_path: Path) -> None:
    """Seed 14 in QOperator format: a partition ending at a com.microsoft QLinearAdd's int8 tensor, whose type onnx
    cannot infer, so the Transfer after it failed onnx.checker's full check of partitioned.onnx (the top level now
    declares every tensor between calls).  Seed 694 quantized for Conv only: its output is a float MatMul's ->
    GlobalAveragePool, 1.5e-8 from the whole model's when the MatMul runs alone, now compared like a float output."""
    assert [f.line() for f in check_seed(seed, tmp_path, max_steps=16, budgets=(2,), quantizer=quantizer)] == []


def test_a_float_output_of_an_int8_stream_is_compared_as_run_check_compares_it(tmp_path: Path) -> None:
    """Seed 18659 (Conv-only quantization, clutter, dynamic batch): its output is a float op's after the last DQ, and
    the stream's pieces computed it 2.4e-7 from the whole partition's; like ``run --check``, the stream check wants bit
    identity only for outputs a DQ, Q or QLinear op writes (``run_cmd.exact_outputs``)."""
    failures = check_seed(18659, tmp_path, max_steps=16, budgets=(1000,), clutter=True, dynamic=True,
                          quantizer="conv-only", objective="throughput", stream=6)
    assert [f.line() for f in failures] == []


def test_a_pad_onnxruntime_keeps_before_a_quantized_conv_stays(tmp_path: Path) -> None:
    """Seed 5249 (u8s8 per tensor, exporter clutter): a zero Pad between a DequantizeLinear and a Conv with ``auto_pad``
    VALID, which onnxruntime keeps (the Conv runs in float) and onnxslim fused (QLinearConv): 0.756 off even all on
    the host (compiler/ort_rewrites.fuse_pads)."""
    failures = check_seed(5249, tmp_path, max_steps=16, budgets=(0, 2), clutter=True, quantizer="u8s8-per-tensor")
    assert [f.line() for f in failures] == []


@pytest.mark.parametrize("seed", (8519, 8769))
def test_contrib_quantizers_with_exporter_clutter_and_a_dynamic_batch(seed: int, tmp_path: Path) -> None:
    """Quantized with com.microsoft Q/DQ (``UseQDQContribOps``), whose types onnx cannot infer: seed 8519's Cast
    between a MatMul and its Q stayed, and the MatMul alone in its partition ran as MatMulIntegerToFloat (0.175
    off); seed 8769's If on the batch stayed unfolded where onnxruntime folds it (0.821 off).  The front end now
    infers and slims with the Q/DQ in the standard domain (ort_rewrites.standard_quantizers)."""
    failures = check_seed(seed, tmp_path, max_steps=16, budgets=(0, 2), quantizer="contrib-ops", clutter=True, dynamic=True)
    assert [f.line() for f in failures] == []


def test_a_folded_if_leaves_two_pairs_onnxruntime_merges(tmp_path: Path) -> None:
    """Seed 42889 (dedicated pairs, clutter, dynamic batch): DQ -> If(batch == 1) -> Slice -> Reshape -> Q of another
    scale.  At batch 1 onnxruntime inlines the If's Identity after its no-op rules ran, carries the last Q back over
    the Slice to it, drops it a step later and merges the two pairs now next to each other (DoubleQDQPairsRemover):
    0.0215 off even all on the host, where the front end had dropped the Identity first and merged nothing
    (compiler/ort_rewrites.rewrite_as_onnxruntime, compiler/double_pairs)."""
    failures = check_seed(42889, tmp_path, max_steps=16, budgets=(0, 2), clutter=True, dynamic=True, quantizer="dedicated-pairs")
    assert [f.line() for f in failures] == []


def test_a_graph_onnxslim_breaks_is_slimmed_without_its_fusions(tmp_path: Path) -> None:
    """Seed 7246 (float): onnxslim's fusions return a graph whose Sigmoid and Conv read a tensor nothing computes
    (a Transpose -> Reshape gone with an Add folded into the Conv both read); the front end then slims without
    the fusions, and the model compiles and runs like onnxruntime."""
    from cimsplit.compiler.frontend import load

    path = tmp_path / "model.onnx"
    onnx.save(seeded_model(7246, max_steps=16), str(path))
    graph = load(path).model.graph
    known = {t.name for t in graph.initializer} | {vi.name for vi in graph.input}
    for node in graph.node:
        assert all(name in known for name in node.input if name), node.name
        known.update(node.output)
    assert [f.line() for f in check_seed(7246, tmp_path / "check", max_steps=16, budgets=(0, 2))] == []


@pytest.mark.parametrize("seed", (4, 13))
def test_clutter_adds_three_no_ops_and_constant_weights_deterministically(seed: int) -> None:
    """Seed 13 (float) and seed 4's float model: three no-op nodes after three activations, every float
    weight still there (as an initializer or a Constant node), the same bytes twice, the same outputs."""
    import onnxruntime as ort
    from onnx import numpy_helper

    model = seeded_model(seed, max_steps=16)
    cluttered = add_clutter(model, seed)
    assert cluttered.SerializeToString() == add_clutter(model, seed).SerializeToString()
    added = [n for n in cluttered.graph.node if n.name.startswith("clutter")]
    assert len(added) == 3 and {n.op_type for n in added} <= set(NO_OPS)
    weights = {t.name: numpy_helper.to_array(t).tobytes() for t in model.graph.initializer if t.dims}
    kept = {t.name: numpy_helper.to_array(t).tobytes() for t in cluttered.graph.initializer if t.name in weights}
    kept |= {n.output[0]: numpy_helper.to_array(n.attribute[0].t).tobytes() for n in cluttered.graph.node if n.op_type == "Constant"}
    assert kept == weights
    feeds = {vi.name: np.random.default_rng(seed).standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim])
             .astype(np.float32) for vi in model.graph.input}
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
           for m in (model, cluttered)]
    for got, want in zip(*run):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("seed", (13, 209, 2029))
def test_seed_exported_with_a_dynamic_batch_compiles_and_runs_like_onnxruntime(seed: int, tmp_path: Path) -> None:
    """Compiled with ``--input-shape`` (the harness fixes the symbolic batch to 1; the reference runs the model at
    that batch, as ``run --check`` does).  Seed 2029 (int8): Conv -> If(batch == 1) -> Q, a float Conv with a
    symbolic batch, QLinearConv at batch 1, one step (1.41) apart.  Seed 209 (int8): a view
    ``x.view(x.size(0), ...)`` after a Q/DQ pair, read by a MatMul and an AveragePool; onnxruntime carries the DQ
    over the Reshape with one Q and a DQ per reader, which stay int8, so the MatMul runs in float.  cimsplit
    inserted nothing there, converted the cut pair, and partitioned.onnx ran a QLinearMatMul: 3.03 off."""
    assert [f.line() for f in check_seed(seed, tmp_path, max_steps=16, budgets=(0, 2), dynamic=True)] == []


def test_dynamic_export_gives_a_symbolic_batch_and_views_from_shapes() -> None:
    """Seed 13: every input and output batch symbolic, each constant-shape Reshape (and one added same-shape view)
    reading its target from Shape -> Gather -> Unsqueeze -> Concat, one If on the batch, the same bytes twice,
    the same outputs."""
    import onnxruntime as ort

    model = seeded_model(13, max_steps=16)
    exported = as_dynamic_export(model, 13)
    assert exported.SerializeToString() == as_dynamic_export(model, 13).SerializeToString()
    assert all(vi.type.tensor_type.shape.dim[0].dim_param == BATCH for vi in [*exported.graph.input, *exported.graph.output])
    producers = {out: n for n in exported.graph.node for out in n.output}
    reshapes = [n for n in exported.graph.node if n.op_type == "Reshape"]
    assert len(reshapes) == 1 + sum(n.op_type == "Reshape" for n in model.graph.node)
    assert [n.op_type for n in exported.graph.node].count("If") == 1
    for reshape in reshapes:
        chain, tensor = [], reshape.input[1]
        for _ in range(4):
            chain.append(producers[tensor].op_type)
            tensor = producers[tensor].input[0]
        assert chain == ["Concat", "Unsqueeze", "Gather", "Shape"] and tensor == reshape.input[0]
    feeds = {vi.name: np.random.default_rng(13).standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim])
             .astype(np.float32) for vi in model.graph.input}
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
           for m in (model, exported)]
    for got, want in zip(*run):
        np.testing.assert_array_equal(got, want)


def test_opset_11_export_writes_the_forms_opset_11_has() -> None:
    """Seed 123 (Split, Resize, HardSwish) with a dynamic batch (an Unsqueeze on the batch): opset 11, Split's sizes
    and Unsqueeze's axes as attributes, Resize with an empty roi, HardSwish as x * HardSigmoid(x, 1/6, 1/2); onnx's
    full check passes and onnxruntime's outputs match the opset-17 model's (to float rounding: HardSigmoid is not
    HardSwish's kernel)."""
    import onnxruntime as ort

    model = as_dynamic_export(seeded_model(123, max_steps=16), 123)
    old = as_opset_11(model)
    assert [o.version for o in old.opset_import if o.domain == ""] == [11]
    kinds = {n.op_type: n for n in old.graph.node}
    assert "HardSwish" not in kinds and {"HardSigmoid", "Split", "Resize", "Unsqueeze"} <= set(kinds)
    assert len(kinds["Split"].input) == 1 and [a.name for a in kinds["Split"].attribute] == ["axis", "split"]
    assert list(kinds["Unsqueeze"].input)[1:] == [] and [a.ints for a in kinds["Unsqueeze"].attribute] == [[0]]
    assert kinds["Resize"].input[1] != ""
    feeds = {vi.name: np.random.default_rng(123).standard_normal([d.dim_value or 1 for d in vi.type.tensor_type.shape.dim])
             .astype(np.float32) for vi in model.graph.input}
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds) for m in (model, old)]
    for got, want in zip(*run):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", (123, 4))
def test_seed_at_opset_11_compiles_and_runs_like_onnxruntime(seed: int, tmp_path: Path) -> None:
    """As an opset-11 exporter writes it, with a dynamic batch; seed 4 quantized per tensor (opset 11 has no
    per-channel Q/DQ)."""
    assert [f.line() for f in check_seed(seed, tmp_path, max_steps=16, budgets=(0, 2), dynamic=True, opset=11)] == []


def test_default_seeds_cover_the_operator_set() -> None:
    ops = {node.op_type for seed in DEFAULT_SEEDS for node in seeded_model(seed).graph.node}
    assert {"Conv", "Add"} <= ops
    assert any(is_int8_seed(seed) for seed in DEFAULT_SEEDS)


def test_generator_is_deterministic() -> None:
    assert seeded_model(11).SerializeToString() == seeded_model(11).SerializeToString()


def test_generator_covers_the_operator_set_over_a_campaign() -> None:
    """Over 60 seeds every operator family of issue 13 appears, and every model is valid for onnxruntime."""
    import onnxruntime as ort

    ops: set[str] = set()
    attrs: set[str] = set()
    outputs = set()
    for seed in range(60):
        model = seeded_model(seed, max_steps=16)
        outputs.add(len(model.graph.output))
        for node in model.graph.node:
            ops.add(node.op_type)
            attrs.update(f"{node.op_type}.{a.name}" for a in node.attribute)
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert {"Conv", "Gemm", "MatMul", "BatchNormalization", "Relu", "Add", "Mul", "Concat", "Split", "Slice", "Reshape",
            "Flatten", "Transpose", "MaxPool", "AveragePool", "GlobalAveragePool", "Resize", "Sigmoid"} <= ops
    assert {"Conv.group", "Conv.dilations", "Conv.strides", "Conv.pads", "Conv.auto_pad"} <= attrs
    assert max(outputs) >= 3


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)
@given(model=models(max_steps=8))
def test_random_model_compiles_and_runs_like_onnxruntime(model, tmp_path_factory) -> None:
    note(onnx.printer.to_text(model))
    work = tmp_path_factory.mktemp("hyp")
    path = work / "model.onnx"
    onnx.save(model, str(path))
    assert [f.line() for f in check_model(path, work, quantized=False, budgets=(2, 1000))] == []


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(model=models(max_steps=14))
def test_random_model_property_campaign(model, tmp_path_factory) -> None:
    note(onnx.printer.to_text(model))
    work = tmp_path_factory.mktemp("hyp")
    path = work / "model.onnx"
    onnx.save(model, str(path))
    assert [f.line() for f in check_model(path, work, quantized=False)] == []


def test_failures_shrink_to_small_models() -> None:
    """What hypothesis reports for a property that fails on models with a Resize: the one-node model x -> Resize."""
    found = find(models(), lambda m: any(n.op_type == "Resize" for n in m.graph.node),
                 settings=settings(database=None, derandomize=True, max_examples=500))
    assert [n.op_type for n in found.graph.node] == ["Resize"]
    assert [vi.name for vi in found.graph.input] == ["x"]


def test_a_wrong_split_is_caught(tmp_path: Path, monkeypatch) -> None:
    """The harness is not vacuous: a runtime that perturbs an output is reported as a mismatch."""
    from cimsplit.runtime import Session

    original = Session.run

    def perturbed(self, feeds):  # noqa: ANN001, ANN202
        out = original(self, feeds)
        return {k: v + np.float32(1e-2) for k, v in out.items()}

    monkeypatch.setattr(Session, "run", perturbed)
    model = seeded_model(1)
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    failures = check_model(path, tmp_path, quantized=False, budgets=(2,))
    assert [f.kind for f in failures] == ["mismatch"]
