"""`calibrate --check`: which of a board's points are measured again, and what the ratio of the times says.

The boards are written by hand from the grid's own points, with times chosen so that every choice is known:
Conv samples at 20 us (too short), 100, 200 and 300 us and 3 ms (too long); Gemm samples at 150, 250 and 400 us;
one Relu sample (an element point, matched by its element count) at 120 us.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import onnxruntime as ort
import pytest

from cimsplit.cli import main
from cimsplit.compiler.calibration_check import Reference, SpeedCheck, drift_class, hot_ns, reference_points, rescaled, speed_check
from cimsplit.compiler.calibration_grid import gemm_descriptors, grid
from cimsplit.compiler.host_model import HostModel, KindFit, Sample

CONV_US = (20, 100, 200, 300, 3000)
GEMM_US = (150, 250, 400)


def _unique_points(kind: str, count: int):
    """``count`` grid points of ``kind`` whose GEMM descriptors no other point of the kind has."""
    points = [p for p in grid() if p.kind == kind and gemm_descriptors(p) is not None]
    named = Counter(gemm_descriptors(p) for p in points)
    return [p for p in points if named[gemm_descriptors(p)] == 1][:count]


def _sample(point, t_us: float) -> Sample:
    m, n, n_mvm = gemm_descriptors(point)
    # flushed samples fit a mix of their two times: the check compares the time as it is (the first)
    return Sample(point.kind, {"m": m, "n": n, "n_mvm": n_mvm}, 9e9, (1000.0 * t_us, 5e9))


def _board(path: Path | None = None) -> HostModel:
    samples = [_sample(p, t) for p, t in zip(_unique_points("Conv", 5), CONV_US, strict=True)]
    samples += [_sample(p, t) for p, t in zip(_unique_points("Gemm", 3), GEMM_US, strict=True)]
    shared = Counter(gemm_descriptors(p) for p in grid() if p.kind == "Conv" and gemm_descriptors(p) is not None)
    twice = next(p for p in grid() if p.kind == "Conv" and gemm_descriptors(p) is not None and shared[gemm_descriptors(p)] > 1)
    samples.append(_sample(twice, 200))  # two convs of one GEMM shape: which one it measured is unknown
    relu = next(p for p in grid() if p.kind == "Relu")
    samples.append(Sample("Relu", {"n_in": relu.elements(), "n_out": relu.elements()}, 120_000.0))
    board = HostModel(ort_version=ort.__version__, cpu="test board", machine={"machine": "test"}, threads=1, level="all",
                      int8=False, fits={}, samples=tuple(samples), campaign={"created": "2026-01-01T00:00:00Z", "runs": 1, "warmup": 0})
    if path is not None:
        board.save(path)
    return board


def _times_us(references) -> list[float]:
    return [hot_ns(sample) / 1000 for _, sample in references]


def test_references_take_kinds_in_turn_at_evenly_spaced_quantiles_within_the_bounds() -> None:
    board = _board()
    assert _times_us(reference_points(board, count=4)) == [100, 120, 150, 300]  # Conv 100/200/300: quantiles 1/4, 3/4
    assert _times_us(reference_points(board, count=3)) == [200, 120, 250]  # one each: the medians
    assert _times_us(reference_points(board, {"Gemm"}, count=3)) == [150, 250, 400]
    assert _times_us(reference_points(board, {"Sigmoid"}, count=3)) == [200, 120, 250]  # no samples of the kinds: all
    assert _times_us(reference_points(board, count=99)) == [100, 120, 150, 200, 250, 300, 400]
    assert all(point.kind == sample.kind for point, sample in reference_points(board, count=99))


def test_the_check_is_the_median_ratio_of_the_times_now_to_the_board_s() -> None:
    board = _board()
    references = reference_points(board, count=99)
    now_us = dict(zip((point for point, _ in references), (110, 150, 180, 260, 250, 390, 360), strict=True))
    check = speed_check(board, references, measure=lambda point: 1000.0 * now_us[point])
    assert [round(r.ratio, 4) for r in check.references] == [1.1, 1.25, 1.2, 1.3, 1.0, 1.3, 0.9]
    assert check.ratio == pytest.approx(1.2)
    assert check.quartiles() == pytest.approx((1.05, 1.275))
    # GEMM kinds: 1.1, 1.3, 1.3 (Conv), 1.2, 1.0, 0.9 (Gemm); the others: 1.25 (Relu)
    assert check.ratio_for("int8:Conv-s8in") == pytest.approx(1.15) and check.ratio_for("Add") == 1.25
    assert SpeedCheck(check.references[:1]).ratio_for("Add") == pytest.approx(1.1)  # no element reference: all


def test_kernel_classes_drift_apart() -> None:
    assert [drift_class(k) for k in ("Conv", "int8:Conv-s8in", "Gemm", "int8:MatMul-s8", "Conv-depthwise+Clip",
                                     "int8:Conv-depthwise-s8out", "Relu", "glue:DequantizeLinear")] == [
        "gemm", "gemm", "gemm", "gemm", "depthwise", "depthwise", "element", "element"]
    references = tuple(Reference(kind, (1,), 100.0, 100.0 * ratio) for kind, ratio in
                       (("Conv", 1.1), ("int8:Gemm", 1.3), ("Conv-depthwise", 1.5), ("Relu", 1.25)))
    assert SpeedCheck(references).ratios() == pytest.approx({"gemm": 1.2, "depthwise": 1.5, "element": 1.25})
    assert SpeedCheck(references[:2]).ratios()["depthwise"] == pytest.approx(1.2)  # none of the class: all of them
    depthwise = _unique_points("Conv-depthwise", 1)[0]
    board = dataclasses.replace(_board(), samples=(*_board().samples, _sample(depthwise, 180)))
    # the classes in turn (Conv, Conv-depthwise, Relu, then Gemm), one point each: the medians
    assert _times_us(reference_points(board, count=4)) == [200, 180, 120, 250]


def test_a_rescaled_board_predicts_each_class_at_its_ratio(tmp_path: Path) -> None:
    def fit(kind: str, method: str, coefficients: tuple[float, ...]) -> KindFit:
        return KindFit(kind, method, coefficients, 3, 0.0, {}, {})

    board = dataclasses.replace(_board(), fits={"Conv": fit("Conv", "relative-linear", (1000.0, 0.5, 0.0, 0.0, 0.0)),
                                                "Relu": fit("Relu", "relative-elements", (500.0, 1.0, 0.0))})
    conv, relu = {"m": 10.0, "n": 20.0, "n_mvm": 30.0, "n_in": 1.0, "n_out": 1.0}, {"n_in": 4000.0, "n_out": 4000.0}
    assert board.predict_kind_ns("Conv", conv) == 1000 + 0.5 * 6000 and board.predict_kind_ns("Relu", relu) == 4500
    references = (Reference("Conv", (1,), 100.0, 120.0), Reference("Relu", (1,), 100.0, 125.0))
    rescaled(board, SpeedCheck(references)).save(tmp_path / "now.json")
    now = HostModel.load(tmp_path / "now.json")
    assert now.predict_kind_ns("Conv", conv) == pytest.approx(1.2 * 4000) and now.predict_kind_ns("Relu", relu) == pytest.approx(1.25 * 4500)
    assert [s.t_ns for s in now.samples] == pytest.approx([1.2 * 9e9] * 9 + [1.25 * 120_000.0])
    assert now.campaign["rescaled"][0]["ratios"] == pytest.approx({"gemm": 1.2, "depthwise": 1.225, "element": 1.25})  # no depthwise reference: all
    assert now.summary()["rescaled"] == now.campaign["rescaled"]


def test_a_point_that_cannot_be_measured_as_its_kind_is_left_out() -> None:
    board = _board()
    references = reference_points(board, count=3)

    def measure(point) -> float:
        if point.kind == "Gemm":
            raise RuntimeError("calibration point yields operators MatMul, not Gemm")
        return 2.0 * 1000 * (200 if point.kind == "Conv" else 120)

    check = speed_check(board, references, measure=measure)
    assert [r.kind for r in check.references] == ["Conv", "Relu"] and check.ratio == 2.0


def test_a_real_measurement_of_a_reference() -> None:
    board = _board()
    references = reference_points(board, {"Conv"}, count=1)
    (reference,) = speed_check(board, references).references  # the median Conv
    assert reference.then_ns == 200_000.0 and reference.now_ns > 0 and reference.ratio == reference.now_ns / 200_000.0


def _error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_calibrate_check_prints_the_speed_and_writes_nothing(tmp_path: Path, capsys) -> None:
    board = tmp_path / "board.json"
    _board(board)
    before = sorted(tmp_path.iterdir())
    assert main(["calibrate", "--check", str(board), "--points", "1"]) == 0
    out = capsys.readouterr().out
    assert "calibrated 2026-01-01T00:00:00Z on test board" in out and "note: this machine's cpu is" in out
    assert "measured 1 of its points again: time now / then, median" in out and "by kernel class (points): gemm " in out
    assert sorted(tmp_path.iterdir()) == before


def test_calibrate_check_with_output_writes_the_board_rescaled(tmp_path: Path, capsys) -> None:
    board, out = tmp_path / "board.json", tmp_path / "now.json"
    _board(board)
    assert main(["calibrate", "--check", str(board), "--points", "1", "-o", str(out)]) == 0
    assert f"wrote {out}: {board} rescaled to this machine's speed now (gemm x" in capsys.readouterr().out
    (record,) = HostModel.load(out).campaign["rescaled"]
    assert record["from"] == str(board) and record["references"] == 1 and set(record["ratios"]) == {"gemm", "depthwise", "element"}
    ratio = record["ratios"]["gemm"]  # the one reference, a Conv: every class takes it
    assert HostModel.load(out).samples[0].profiled_ns == pytest.approx((20_000.0 * ratio, 5e9 * ratio))
    written = out.read_bytes()
    assert "already exists" in _error(capsys, ["calibrate", "--check", str(board), "-o", str(out)])
    assert out.read_bytes() == written


def test_calibrate_check_errors(tmp_path: Path, capsys) -> None:
    board = tmp_path / "board.json"
    _board(board)
    assert "without --refit or --extend" in _error(capsys, ["calibrate", "--check", str(board), "--refit", str(board)])
    assert "needs -o FILE" in _error(capsys, ["calibrate"])
    assert "--points must be at least 1" in _error(capsys, ["calibrate", "--check", str(board), "--points", "0"])
    HostModel(ort_version=ort.__version__, cpu="test board", machine={}, threads=1, level="all", int8=False,
              fits={}).save(tmp_path / "empty.json")
    assert "none of the samples of" in _error(capsys, ["calibrate", "--check", str(tmp_path / "empty.json")])
    assert "does not exist" in _error(capsys, ["calibrate", "--check", str(tmp_path / "missing.json")])


def test_a_campaign_says_when_its_machine_s_speed_moved() -> None:
    from cimsplit.cli.calibrate_cmd import speed_notes

    assert speed_notes(None, None, None) == [] and speed_notes(1.09, 0.91, "old.json") == []  # within 10 %
    (extended,) = speed_notes(1.25, 1.05, "old.json")
    assert extended.startswith("note: before measuring, old.json's points took 1.25x their recorded times here")
    (moved,) = speed_notes(None, 0.85, None)
    assert moved.startswith("note: at the end, 16 of the campaign's points took 0.85x the times it recorded")


def test_the_check_says_which_kernel_classes_moved() -> None:
    from cimsplit.cli.calibrate_cmd import speed_verdict

    counted = Counter({"gemm": 3, "element": 2})
    assert speed_verdict({"gemm": 1.08, "depthwise": 1.5, "element": 0.95}, counted) == (
        "this machine runs as calibrated (within 10 % in each kernel class)")  # (no depthwise point was measured)
    verdict = speed_verdict({"gemm": 1.25, "depthwise": 1.25, "element": 0.8}, counted)
    assert verdict.startswith("this machine does not run as calibrated: gemm kernels 25 % slower (predicted 20 % low), "
                              "element kernels 20 % faster (predicted 25 % high) (")


def test_a_board_without_points_to_measure_again_has_no_speed() -> None:
    from cimsplit.cli.calibrate_cmd import speed_ratio

    board = HostModel(ort_version=ort.__version__, cpu="test board", machine={}, threads=1, level="all", int8=False, fits={})
    assert speed_ratio(board) is None
