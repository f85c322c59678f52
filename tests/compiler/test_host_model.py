"""Host latency predictors: the fits recover known coefficients from synthetic timings (no measuring)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import onnx
import pytest
from graphs import parse, save, weights
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.calibration import POINTS_VERSION, fitted_model
from cimsplit.compiler.calibration_grid import GridPoint, gemm_descriptors, grid
from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_correction import HYPERPARAMETERS, MIN_GAIN, MIN_SAMPLES, fit_correction
from cimsplit.compiler.host_glue import GLUE_KINDS
from cimsplit.compiler.host_model import (
    HostModel,
    KindFit,
    Sample,
    blocked_macs,
    channel_folds,
    conv_regimes,
    fit_kind,
    operator_kind,
    shape_folds,
    solve,
)
from cimsplit.compiler.host_prediction import predict_latencies
from cimsplit.compiler.host_regression import HINGE_ELEMENTS, evaluate
from cimsplit.compiler.host_variants import op_variants
from cimsplit.compiler.ort_profiler import optimized_model
from cimsplit.compiler.qdq_kernels import onnxruntime_converts_int8_pairs
from cimsplit.compiler.workload import Operator
from cimsplit.errors import CimsplitError
from cimsplit.models.quantize import quantize_qdq


def _conv_features(count: int = 60) -> list[dict[str, float]]:
    """Descriptors of the first ``count`` float Conv grid points (n_in, n_out as the front end counts them)."""
    features = []
    for point in [p for p in grid() if p.kind == "Conv"][:count]:
        m, n, n_mvm = gemm_descriptors(point)
        c_in, h = point.get("c_in"), point.get("h")
        features.append({"m": m, "n": n, "n_mvm": n_mvm, "k": point.get("k"), "n_in": c_in * h * h, "n_out": m * n_mvm})
    return features


def test_relative_linear_recovers_its_coefficients() -> None:
    features = _conv_features()
    truth = np.array([5000.0, 0.2, 1.5, 0.5, 0.1])  # ns, ns/MAC, ns/input, ns/output, ns/weight
    t = [truth @ [1, f["m"] * f["n"] * f["n_mvm"], f["n_in"], f["n_out"], f["m"] * f["n"]] for f in features]
    np.testing.assert_allclose(solve("relative-linear", features, t), truth, rtol=1e-6)


def test_conv_regimes_are_read_off_the_gemm_descriptors() -> None:
    # 3x3 stride-2 conv, 40 -> 64 channels, 20x20 -> 10x10: N_v = 40*9, N_mvm = 100, N_in = 40*400;
    # stride^2 = N_in k^2 / (N_v N_mvm) = 16000*9 / (360*100) = 4.
    strided = {"m": 64, "n": 360, "n_mvm": 100, "k": 3, "n_in": 16000, "n_out": 6400}
    assert conv_regimes(strided) == [0.0, 1.0, 0.0, 1.0, 0.0]  # not 1x1, strided, not the image, 40 % 16 != 0, 64 % 16 == 0
    # 1x1 stride 1, 64 -> 24 at 14x14.
    assert conv_regimes({"m": 24, "n": 64, "n_mvm": 196, "k": 1, "n_in": 64 * 196, "n_out": 24 * 196}) == [1.0, 0.0, 0.0, 0.0, 1.0]
    # The stem: 7x7/2 from 3 channels, 224 -> 112.
    assert conv_regimes({"m": 64, "n": 147, "n_mvm": 112 * 112, "k": 7, "n_in": 3 * 224 * 224, "n_out": 64 * 112 * 112})[:3] == [
        0.0, 1.0, 1.0]
    # Depthwise 3x3/2, 32 channels 112 -> 56: N_v = 9, N_mvm = 56*56*32, N_in = 32*112*112.
    assert conv_regimes({"m": 32, "n": 9, "n_mvm": 56 * 56 * 32, "k": 3, "n_in": 32 * 112 * 112, "n_out": 32 * 56 * 56})[1] == 1.0


def test_relative_regimes_recovers_a_cost_per_kernel_path() -> None:
    features = _conv_features(300)
    assert {tuple(conv_regimes(f)[:3]) for f in features} >= {(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 0.0), (0.0, 1.0, 1.0)}
    base = np.array([5000.0, 0.2, 1.5, 0.5, 0.1])  # ns, ns/MAC, ns/input, ns/output, ns/weight
    pointwise = np.array([-1000.0, 0.1, 0.0, 0.0, 0.0])  # a 1x1 conv: 1000 ns less overhead, 0.3 ns/MAC
    strided = np.array([0.0, 0.0, 1.0, 0.0, 0.0])
    image = np.array([2000.0, 0.05, 0.0, 0.0, 0.0])
    truth = np.concatenate([base, pointwise, strided, image])

    def cost(f: dict[str, float]) -> float:
        row = np.array([1, f["m"] * f["n"] * f["n_mvm"], f["n_in"], f["n_out"], f["m"] * f["n"]])
        k1, s2, img = conv_regimes(f)[:3]
        return float(row @ (base + k1 * pointwise + s2 * strided + img * image))

    np.testing.assert_allclose(solve("relative-regimes", features, [cost(f) for f in features]), truth, rtol=1e-6, atol=1e-9)


def test_held_out_folds_keep_a_shape_together_and_leave_channel_counts_out() -> None:
    a = {"m": 64.0, "n": 360.0, "n_mvm": 100.0, "k": 3.0, "n_in": 16000.0, "n_out": 6400.0}
    image = {"m": 64.0, "n": 27.0, "n_mvm": 100.0, "k": 3.0, "n_in": 1200.0, "n_out": 6400.0}
    depthwise = {"m": 32.0, "n": 9.0, "n_mvm": 3200.0, "k": 3.0, "n_in": 12800.0, "n_out": 3200.0}
    gemm = {"m": 10.0, "n": 700.0, "n_mvm": 3.0, "k": 1.0, "n_in": 2100.0, "n_out": 30.0}
    folds = shape_folds([a, image, a, depthwise])
    assert folds[0] == folds[2] and len(set(folds)) == 3
    # C_in = N_v / k^2 = 40; the image (C_in 3) is never held out; depthwise by its channels; Gemm by N_v.
    assert channel_folds([a, image, depthwise, gemm, {"n_in": 5.0, "n_out": 5.0}]) == [40, None, 32, 700, None]


def test_pipeit_linear_recovers_its_coefficients() -> None:
    features = _conv_features()
    truth = np.array([3000.0, 2.0, 5.0, 7.0, 0.01, 0.02, 0.03])  # 1, N, K, M, NK, KM, NM
    t = [truth @ [1, f["n_mvm"], f["n"], f["m"], f["n_mvm"] * f["n"], f["n"] * f["m"], f["n_mvm"] * f["m"]]
         for f in features]
    np.testing.assert_allclose(solve("pipeit", features, t), truth, rtol=1e-6)


def test_log_linear_recovers_a_power_law() -> None:
    features = [{"n_in": float(c * h * h), "n_out": float(c * h * h // s)} for c in (16, 40, 88) for h in (10, 18, 36)
                for s in (1, 4)]
    t = [math.exp(2.0) * f["n_in"] ** 0.9 * f["n_out"] ** 0.1 for f in features]
    np.testing.assert_allclose(solve("log-linear", features, t), [2.0, 0.9, 0.1], rtol=1e-9, atol=1e-9)


def test_cross_validation_picks_the_method_that_generated_the_timings() -> None:
    features = _conv_features()
    # A power law with unequal exponents: exact in log space, not linear in any product of N, K, M.
    t = [3.0 * f["m"] ** 0.9 * f["n"] ** 1.1 * f["n_mvm"] ** 0.95 for f in features]
    fit = fit_kind("Conv", [Sample("Conv", f, v) for f, v in zip(features, t)])
    assert fit is not None and fit.method == "log-quadratic"
    assert fit.cv_mape["log-quadratic"] < 1e-9 < fit.cv_mape["pipeit"]
    assert fit.predict_ns({"m": 64, "n": 576, "n_mvm": 3136, "k": 3, "n_in": 200704, "n_out": 200704}) == pytest.approx(
        3.0 * 64 ** 0.9 * 576 ** 1.1 * 3136 ** 0.95, rel=1e-9)


def test_a_kind_that_slows_down_past_the_hinge_gets_a_second_slope() -> None:
    """t = 2000 ns + 0.1 ns per element read and written, and 0.15 more per element past HINGE_ELEMENTS (a copy kind
    whose tensors outgrow the caches): the hinge fit is chosen and predicts a size it did not see; one slope is not."""
    sizes = (4000, 20000, 60000, 150000, 300000, 700000, 1200000, 2000000, 3000000, 4500000)
    features = [{"n_in": float(n), "n_out": float(n)} for n in sizes]
    t = [2000 + 0.1 * 2 * n + 0.15 * max(0.0, 2 * n - HINGE_ELEMENTS) for n in sizes]
    fit = fit_kind("Concat", [Sample("Concat", f, v) for f, v in zip(features, t)])
    assert fit is not None and fit.method == "relative-elements-hinge"
    assert fit.cv_mape["relative-elements-hinge"] < 1e-9 < fit.cv_mape["relative-elements"]
    assert fit.predict_ns({"n_in": 1e6, "n_out": 1e6}) == pytest.approx(2000 + 0.2e6 + 0.15 * (2e6 - 512e3), rel=1e-9)


def test_too_few_samples_fall_back_to_the_smallest_fit() -> None:
    samples = [Sample("Relu", {"n_in": n, "n_out": n}, 100 + 2 * n) for n in (1000.0, 4000.0, 9000.0)]
    fit = fit_kind("Relu", samples)
    assert fit is not None and fit.method in ("log-linear", "relative-elements")
    assert all(v is None for v in fit.cv_mape.values())


def test_an_element_kind_whose_work_is_all_glue_predicts_nothing() -> None:
    """An int8 Relu onnxruntime folds away leaves only its output's glue, which calibration charges to no node: all
    its samples are 0, so it predicts the 1 ns floor at any size; with positive samples, those are fitted."""
    zeros = [Sample("int8:Relu-s8in", {"n_in": n, "n_out": n}, 0.0) for n in (1000.0, 4000.0, 9000.0)]
    fit = fit_kind("int8:Relu-s8in", zeros)
    assert fit is not None and (fit.method, fit.coefficients, fit.samples) == ("relative-elements", (0.0, 0.0, 0.0), 3)
    assert fit.predict_ns({"n_in": 1e6, "n_out": 1e6}) == 1.0 and fit.ranges["n_out"] == (1000.0, 9000.0)
    positive = [Sample("int8:Relu-s8in", {"n_in": n, "n_out": n}, 100 + n) for n in (50.0, 500.0, 5000.0)]
    mixed = fit_kind("int8:Relu-s8in", [*zeros, *positive])
    assert mixed is not None and mixed.samples == 3
    assert fit_kind("Conv", [Sample("Conv", {"m": 8.0, "n": 9.0, "n_mvm": 4.0}, 0.0)]) is None


def _op(m: int | None, n: int | None, n_mvm: int | None, weight: tuple[int, ...] | None, n_out: int,
        nodes: tuple[str, ...] = ("a",), op_type: str = "Conv") -> Operator:
    return Operator("a", op_type, nodes, m is not None, None, m, n, n_mvm, 1, 100, n_out, weight_shape=weight)


def test_s8_kinds_are_gemm_kinds() -> None:
    from cimsplit.compiler.host_model import is_gemm_kind

    assert is_gemm_kind("int8:Conv-s8") and is_gemm_kind("int8:Gemm-s8out") and not is_gemm_kind("int8:Add")


def test_operator_kinds() -> None:
    types = {"a": "Conv", "q": "QuantizeLinear", "r": "Relu"}
    assert operator_kind(_op(64, 576, 3136, (64, 64, 3, 3), 64 * 3136), types) == "Conv"
    # depthwise: C = 32 groups of one channel, N_mvm = H W g = 14*14*32, N_out = 32*14*14
    assert operator_kind(_op(32, 9, 14 * 14 * 32, (32, 1, 3, 3), 32 * 196), types) == "Conv-depthwise"
    assert operator_kind(_op(32, 9, 14 * 14 * 32, (32, 1, 3, 3), 32 * 196, ("a", "q", "r")), types) == "int8:Conv-depthwise"
    assert operator_kind(_op(32, 9, 14 * 14 * 32, (32, 1, 3, 3), 32 * 196, ("a", "q", "r")), types, "-s8in") == "int8:Conv-depthwise-s8in"
    assert operator_kind(_op(32, 9, 14 * 14 * 32, (32, 1, 3, 3), 32 * 196), types, "-s8in") == "Conv-depthwise"  # float: no kernel choice
    assert operator_kind(_op(1000, 512, 1, (512, 1000), 1000, op_type="Gemm"), {"a": "Gemm"}) == "Gemm"
    assert operator_kind(_op(None, None, None, None, 100, op_type="MaxPool"), {"a": "MaxPool"}) == "MaxPool"


def test_save_load_round_trip(tmp_path) -> None:
    samples = [Sample("Relu", {"n_in": n, "n_out": n}, 100 + 2 * n) for n in (1e3, 4e3, 9e3, 2e4, 5e4, 1e5, 3e5, 7e5)]
    model = fitted_model(samples, threads=1, int8=False, campaign={"budget_s": 1.0}, level="off")
    path = tmp_path / "board.json"
    model.save(path)
    loaded = HostModel.load(path)
    assert loaded.fits == model.fits and loaded.samples == model.samples and loaded.source == str(path)
    assert loaded.fits["Relu"].predict_ns({"n_in": 1e4, "n_out": 1e4}) == pytest.approx(20100, rel=1e-6)


def test_a_sample_profiled_twice_keeps_both_times_and_a_refit_mixes_them_again(tmp_path) -> None:
    """m n = 640 weights, 160 outputs, 4 pixels, 1000 ns as it is and 1800 flushed -> 1000 + 640 / 1.25 = 1512
    (in_network_ns); a stale mixed time (999) is what an older cimsplit's mix left: fitting a campaign's samples, or
    refitting a board, recomputes it from the two times."""
    features = {"m": 40.0, "n": 16.0, "n_mvm": 4.0, "k": 1.0, "n_in": 64.0, "n_out": 160.0}
    assert Sample.profiled("Conv", features, 1000.0, 1800.0) == Sample("Conv", features, 1512.0, (1000.0, 1800.0))
    stale, fresh = Sample("Conv", features, 999.0, (1000.0, 1800.0)), Sample("Conv", features, 1512.0, (1000.0, 1800.0))
    assert fitted_model([stale], threads=1, int8=False, campaign={}, level="off").samples == (fresh,)
    HostModel("1.0", "cpu", {}, 1, "off", False, {}, (stale,)).save(tmp_path / "board.json")
    loaded = HostModel.load(tmp_path / "board.json")
    assert loaded.samples == (stale,)
    assert loaded.refit().samples == (fresh,)


@pytest.mark.parametrize("text, message", [
    ("{", "is not JSON"),
    ('{"format": "something else"}', "is not a cimsplit calibration"),
    ('{"format": "cimsplit-host-model", "format_version": 99}', "format version 99"),
    ('{"format": "cimsplit-host-model", "format_version": 1, "kinds": {}}', "is malformed"),
])
def test_bad_files_are_one_clear_error(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "board.json"
    path.write_text(text)
    with pytest.raises(CimsplitError, match=message):
        HostModel.load(path)


def test_kind_fit_dict_round_trip() -> None:
    fit = KindFit("Relu", "relative-elements", (100.0, 0.0, 1.0), 3, 0.0, {"log-linear": None}, {"n_in": (1.0, 2.0)})
    assert KindFit.from_dict("Relu", json.loads(json.dumps(fit.to_dict()))) == fit
    assert GridPoint("Relu", (("c", 16), ("h", 10))).get("h") == 10


def test_a_regime_the_samples_never_leave_gets_no_coefficient_of_its_own() -> None:
    # The grid's Gemm points all have channel counts off the 16-channel block, so on them that indicator is the
    # intercept.  Timings from a power law (exactly log-cubic): a Gemm on whole blocks, as ResNet's 1000 x 512, must
    # get the power law too, not the intercept's share the indicator took (3 us predicted for 140 on one board).
    features = []
    for point in [p for p in grid() if p.kind == "Gemm"]:
        m, n, b = gemm_descriptors(point)
        features.append({"m": m, "n": n, "n_mvm": b, "k": 1.0, "n_in": n * b, "n_out": m * b})
    assert all(conv_regimes(f)[3:] == [1.0, 1.0] for f in features)

    def cost(f: dict[str, float]) -> float:
        return 30.0 * f["m"] ** 0.9 * f["n"] ** 0.8 * f["n_mvm"] ** 0.7

    coefficients = solve("log-cubic-regimes", features, [cost(f) for f in features])
    on_blocks = {"m": 1024.0, "n": 512.0, "n_mvm": 1.0, "k": 1.0, "n_in": 512.0, "n_out": 1024.0}
    assert conv_regimes(on_blocks)[3:] == [0.0, 0.0]
    assert evaluate("log-cubic-regimes", coefficients, on_blocks) == pytest.approx(cost(on_blocks), rel=1e-6)


def test_blocked_macs_pad_channels_to_whole_nchwc_blocks() -> None:
    # 3x3 conv 40 -> 88 channels, 10x10 out: on 16-channel blocks it runs 48 -> 96: 96*48*9*100 MACs; on 8, as is.
    f = {"m": 88.0, "n": 360.0, "n_mvm": 100.0, "k": 3.0, "n_in": 4000.0, "n_out": 8800.0}
    assert blocked_macs(f, 16) == 96 * 48 * 9 * 100
    assert blocked_macs(f, 8) == 88 * 40 * 9 * 100
    # The image (3 channels) is not blocked; depthwise 3x3 on 40 channels, 10x10 out: 48 * 9 * 100.
    assert blocked_macs({"m": 40.0, "n": 27.0, "n_mvm": 100.0, "k": 3.0, "n_in": 300.0, "n_out": 4000.0}, 16) == 48 * 27 * 100
    assert blocked_macs({"m": 40.0, "n": 9.0, "n_mvm": 4000.0, "k": 3.0, "n_in": 4000.0, "n_out": 4000.0}, 16) == 48 * 9 * 100


def test_the_held_out_error_picks_the_block_the_timings_were_made_with() -> None:
    features = _conv_features(300)

    def cost(f: dict[str, float]) -> float:  # 5 us + 0.2 ns per MAC on 16-channel blocks
        return 5000.0 + 0.2 * blocked_macs(f, 16)

    fit = fit_kind("Conv", [Sample("Conv", f, cost(f)) for f in features],
                   methods=["relative-linear", "relative-nchwc8", "relative-nchwc16"])
    assert fit is not None and fit.method == "relative-nchwc16"
    assert fit.cv_mape["relative-nchwc16"] < 1e-9 < fit.cv_mape["relative-nchwc8"]


def _wavy(f: dict[str, float]) -> float:
    """5 us + 0.2 ns per blocked MAC, times an efficiency that moves smoothly with the output size (+-15 %)."""
    return (5000.0 + 0.2 * blocked_macs(f, 16)) * (1.0 + 0.15 * math.sin(math.log(f["n_mvm"])))


def test_a_smooth_error_of_the_linear_fit_is_corrected_and_kept_by_the_held_out_error() -> None:
    features = _conv_features(MIN_SAMPLES)
    fit = fit_kind("Conv", [Sample("Conv", f, _wavy(f)) for f in features], methods=["relative-nchwc16"])
    assert fit is not None and fit.method == "relative-nchwc16" and fit.correction is not None
    linear_cv = fit.cv_mape["relative-nchwc16"]
    assert linear_cv > 0.05  # the sine is nothing a linear cost can follow
    assert fit.correction.cv_mape <= linear_cv - MIN_GAIN
    assert (fit.correction.alpha, fit.correction.gamma) in HYPERPARAMETERS
    # The fit error is the corrected one.
    errors = [abs(fit.predict_ns(f) / _wavy(f) - 1) for f in features]
    assert fit.fit_mape == pytest.approx(float(np.mean(errors)), rel=1e-9) and fit.fit_mape < linear_cv


def test_no_correction_when_the_linear_fit_is_exact() -> None:
    features = _conv_features(300)
    fit = fit_kind("Conv", [Sample("Conv", f, 5000.0 + 0.2 * blocked_macs(f, 16)) for f in features],
                   methods=["relative-nchwc16"])
    assert fit is not None and fit.correction is None


def test_too_few_samples_keep_the_linear_fit() -> None:
    features = _conv_features(MIN_SAMPLES - 1)
    fit = fit_kind("Conv", [Sample("Conv", f, _wavy(f)) for f in features], methods=["relative-nchwc16"])
    assert fit is not None and fit.correction is None and fit.cv_mape["relative-nchwc16"] > 0.05
    assert fit_correction("relative-nchwc16", features, [_wavy(f) for f in features], 0.5) is None


def test_far_from_every_calibration_point_the_prediction_is_the_linear_fits() -> None:
    features = _conv_features(300)
    fit = fit_kind("Conv", [Sample("Conv", f, _wavy(f)) for f in features], methods=["relative-nchwc16"])
    assert fit is not None and fit.correction is not None
    far = {"m": 1e12, "n": 1e12, "n_mvm": 1e12, "k": 1.0, "n_in": 1e12, "n_out": 1e12}
    assert fit.correction.factor(far) == 1.0
    assert fit.predict_ns(far) == evaluate(fit.method, fit.coefficients, far)


def test_a_corrected_fit_survives_the_calibration_file(tmp_path) -> None:
    features = _conv_features(MIN_SAMPLES)
    samples = [Sample("Conv", f, _wavy(f)) for f in features]
    model = fitted_model(samples, threads=1, int8=False, campaign={"budget_s": 1.0}, level="off")
    assert model.fits["Conv"].correction is not None
    model.save(tmp_path / "board.json")
    loaded = HostModel.load(tmp_path / "board.json")
    assert loaded.fits == model.fits
    assert [loaded.predict_kind_ns("Conv", f) for f in features] == [model.predict_kind_ns("Conv", f) for f in features]


def test_a_calibration_whose_correction_does_not_fit_together_is_one_clear_error(tmp_path) -> None:
    samples = [Sample("Conv", f, _wavy(f)) for f in _conv_features(MIN_SAMPLES)]
    data = fitted_model(samples, threads=1, int8=False, campaign={"budget_s": 1.0}, level="off").to_dict()
    data["kinds"]["Conv"]["correction"]["dual"].pop()
    (tmp_path / "board.json").write_text(json.dumps(data))
    with pytest.raises(CimsplitError, match="is malformed"):
        HostModel.load(tmp_path / "board.json")


@pytest.mark.parametrize(("axis", "opset", "variant"), [
    (None, 17, "-last"),  # opset 13's default: the last axis
    (-1, 17, "-last"), (3, 17, "-last"),
    (1, 17, None),  # over channels: onnxruntime transposes them last and back
    (2, 17, "-second-last"), (-2, 17, "-second-last"),  # a swap of the last two axes
    (1, 11, "-last"), (None, 11, "-last"),  # opset 11 flattens the axes from ``axis`` on: contiguous rows
])
def test_a_softmax_over_contiguous_rows_or_the_second_last_axis_is_its_own_variant(axis: int | None, opset: int, variant: str | None) -> None:
    attributes = {} if axis is None else {"axis": axis}
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], name="softmax", **attributes)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 5, 7])])
    variants = op_variants(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    assert variants.get("softmax") == variant


@pytest.mark.skipif(not onnxruntime_converts_int8_pairs(), reason="onnxruntime keeps int8 pairs on this machine (not x86)")
def test_a_softmax_axis_is_read_where_onnxruntime_runs_it() -> None:
    """An int8 DFL (YOLOv8's: Transpose, Softmax over axis 1 of [1, 16, 4, n], a 1x1 conv): onnxruntime moves the
    Transpose past the Softmax, towards the QLinearConv's NHWC one, and runs a QLinearSoftmax over axis 2 of
    [1, 4, 16, n], a swap of the last two axes."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Softmax", ["t"], ["p"], name="softmax", axis=1),
             helper.make_node("Conv", ["p", "w"], ["y"], kernel_shape=[1, 1])]
    graph = helper.make_graph(nodes, "dfl", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 64])],
                              [numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = onnx.shape_inference.infer_shapes(quantize_qdq(onnx.shape_inference.infer_shapes(model)))
    optimized = optimized_model(model)
    assert [n.op_type for n in optimized.graph.node if n.name == "softmax"] == ["QLinearSoftmax"]
    assert op_variants(model) == {}  # as the model states it: axis 1 of 4, moved past two axes
    assert op_variants(model, optimized) == {"softmax": "-second-last"}


def test_a_quantized_hardswish_is_predicted_as_its_function_body_between_its_pair(tmp_path) -> None:
    """onnxruntime runs an int8 HardSwish (one the quantizer did not inline) as its DequantizeLinear, the function body
    (HardSigmoid, Mul) in float and its QuantizeLinear: the int8 HardSigmoid kind of its kernel variant (which holds the
    pair: 100 + 1 ns per output element) and a float Mul of two tensors (100 + 1 ns per element read).  16 x 10 x 10 =
    1600 elements: 1700 + 3300 ns."""
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 16, 10, 10] x) => (float[1, 16, 10, 10] y) {
            s = Constant <value = float {0.05}> ()
            z = Constant <value = int8 {0}> ()
            cq = QuantizeLinear(x, s, z)
            cd = DequantizeLinear(cq, s, z)
            h = HardSwish(cd)
            hq = QuantizeLinear(h, s, z)
            hd = DequantizeLinear(hq, s, z)
            y = Conv <kernel_shape = [1, 1]> (hd, w2)
        }""", weights(w2=(16, 16, 1, 1)))
    loaded = load(save(model, tmp_path))
    fits = {kind: KindFit(kind, "relative-elements", (100.0, 0.0, 1.0), 3, 0.0, {}, {})
            for kind in ("int8:HardSigmoid", "int8:HardSigmoid-s8in", "int8:HardSigmoid-s8out", "int8:HardSigmoid-s8")}
    fits["Mul"] = KindFit("Mul", "relative-elements", (100.0, 1.0, 0.0), 3, 0.0, {}, {})
    board = HostModel(ort_version="test", cpu="test", machine={"machine": "x86_64"}, threads=1, level="all", int8=True, fits=fits)
    latencies, missing = predict_latencies(loaded.workload, loaded.model, board)
    (swish,) = [op for op in loaded.workload.operators if op.op_type == "HardSwish"]
    assert swish.n_out == 1600 and latencies[swish.name] == 1700.0 + 3300.0 and swish.name not in missing


def test_a_quantized_transposed_conv_is_predicted_as_the_float_kernel_its_weights_dequantize_and_its_glue(tmp_path) -> None:
    """onnxruntime has no int8 ConvTranspose kernel: it runs the float one, the DequantizeLinear of its weight and, as
    layout glue (host_glue), the op's Q and DQ kernels.  x[1,4,5,5] by a 4 x 3 x 2 x 2 int8 weight, stride 2 ->
    3 x 10 x 10: its GEMM is 25 rows x K 4 x 12 columns (1200 MACs, 48 weights); ConvTranspose 1000 ns + 1 ns per
    MAC = 2200, the weight's DQ 100 + 48 (glue kinds: 100 + 1 ns per element), the graph input's Q and DQ (the op's:
    no other op reads them) 100 + 100 each, the output's 100 + 300 each: 3548 ns."""
    weight = numpy_helper.from_array(np.arange(48, dtype=np.int8).reshape(4, 3, 2, 2) - 24, "wq")
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 4, 5, 5] x) => (float[1, 3, 10, 10] y) {
            s = Constant <value = float {0.05}> ()
            z = Constant <value = int8 {0}> ()
            w = DequantizeLinear(wq, s, z)
            xq = QuantizeLinear(x, s, z)
            xd = DequantizeLinear(xq, s, z)
            u = ConvTranspose <kernel_shape = [2, 2], strides = [2, 2]> (xd, w)
            uq = QuantizeLinear(u, s, z)
            y = DequantizeLinear(uq, s, z)
        }""", [weight])
    loaded = load(save(model, tmp_path))
    fits = {"ConvTranspose": KindFit("ConvTranspose", "relative-linear", (1000.0, 1.0, 0.0, 0.0, 0.0), 3, 0.0, {}, {})}
    for kind in GLUE_KINDS:
        fits[kind] = KindFit(kind, "relative-elements", (100.0, 0.0, 1.0), 3, 0.0, {}, {})
    board = HostModel(ort_version="test", cpu="test", machine={"machine": "x86_64"}, threads=1, level="all", int8=True, fits=fits,
                      campaign={"points": POINTS_VERSION})
    latencies, missing = predict_latencies(loaded.workload, loaded.model, board)
    (transposed,) = [op for op in loaded.workload.operators if op.op_type == "ConvTranspose"]
    assert transposed.product_shape == (25, 4, 12) and transposed.name not in missing
    assert latencies[transposed.name] == 2200.0 + 148.0 + 2 * 200.0 + 2 * 400.0


def test_a_gemm_kind_without_its_products_shape_is_not_covered(tmp_path) -> None:
    """A ConvTranspose whose shapes were not known has no GEMM descriptors: the calibration does not cover it (an error
    naming it, or profiled with --allow-unpredicted), instead of a fit reading descriptors it does not have."""
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 4, 5, 5] x) => (float[1, 3, 10, 10] y) {
            y = ConvTranspose <kernel_shape = [2, 2], strides = [2, 2]> (x, w)
        }""", weights(w=(4, 3, 2, 2)))
    loaded = load(save(model, tmp_path))
    fits = {"ConvTranspose": KindFit("ConvTranspose", "relative-linear", (1000.0, 1.0, 0.0, 0.0, 0.0), 3, 0.0, {}, {})}
    board = HostModel(ort_version="test", cpu="test", machine={"machine": "x86_64"}, threads=1, level="all", int8=False, fits=fits)
    (op,) = loaded.workload.operators
    assert predict_latencies(loaded.workload, loaded.model, board) == ({op.name: 2200.0}, {})  # 1000 + 25 x 4 x 12 MACs
    unknown = dataclasses.replace(loaded.workload, operators=(dataclasses.replace(op, product_shape=None),))
    assert predict_latencies(unknown, loaded.model, board) == ({}, {op.name: "ConvTranspose"})
