"""`--host-model`: compile with host latencies predicted from a small hand-written calibration.

The calibration is written by hand with exact coefficients, so every predicted
T_host is a hand-computed number:

  x[1,3,8,8] -> Conv 3x3 pad 1 (4 out) -> Relu -> Flatten -> Gemm transB=1 (10 x 256) -> y[1,10]

  Conv (relative-linear 1000 + 1 ns/MAC): M_v 4, N_v 27, N_mvm 64 -> 1000 + 6912 = 7912 ns,
       plus its fused Relu (100 + 1 ns/output element, 256 elements) = 356 ns -> 8268 ns
  Flatten (100 + 1 ns per output element, 256)                          -> 356 ns
  Gemm (relative-linear 1000 + 1 ns/MAC): 10 x 256 x 1                  -> 3560 ns

A calibration that measured Conv with its Relu (the fused kind ``Conv+Relu``, 500 + 1 ns/MAC) predicts the pair
alone: 500 + 6912 = 7412 ns.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from graphs import OPSET, clean_cnn, parse, save, weights
from onnx import numpy_helper

from cimsplit.cli import main
from cimsplit.compiler.host_model import HostModel, KindFit, Sample
from cimsplit.compiler.kernel_attribution import ATTRIBUTION_VERSION
from cimsplit.passes.sweep.store import read_results

EXPECTED_NS = {"Conv": 8268.0, "Flatten": 356.0, "Gemm": 3560.0}


def _fit(kind: str, method: str, coefficients: tuple[float, ...]) -> KindFit:
    return KindFit(kind, method, coefficients, 10, 0.0, {method: 0.0}, {})


def write_calibration(path: Path, *, ort_version: str = ort.__version__, kinds: tuple[str, ...] = ("Conv", "Relu", "Flatten", "Gemm"),
                      level: str = "off", campaign: dict | None = None) -> Path:
    fits = {
        "Conv": _fit("Conv", "relative-linear", (1000.0, 1.0, 0.0, 0.0, 0.0)),
        "Gemm": _fit("Gemm", "relative-linear", (1000.0, 1.0, 0.0, 0.0, 0.0)),
        "Relu": _fit("Relu", "relative-elements", (100.0, 0.0, 1.0)),
        "Flatten": _fit("Flatten", "relative-elements", (100.0, 0.0, 1.0)),
        "Conv+Relu": _fit("Conv+Relu", "relative-linear", (500.0, 1.0, 0.0, 0.0, 0.0)),
        "HardSigmoid": _fit("HardSigmoid", "relative-elements", (100.0, 0.0, 1.0)),
        "Mul": _fit("Mul", "relative-elements", (100.0, 1.0, 0.0)),
        **{kind: _fit(kind, "relative-elements", (100.0, 0.0, 1.0)) for kind in ("Div", "Erf", "Add")},
        "Gelu": _fit("Gelu", "relative-elements", (634.0, 0.0, 1.0)),
        "Softmax": _fit("Softmax", "relative-elements", (100.0, 0.0, 1.0)),
        "Softmax-second-last": _fit("Softmax-second-last", "relative-elements", (100.0, 0.0, 0.25)),
    }
    model = HostModel(ort_version=ort_version, cpu="test board", machine={"machine": "test"}, threads=1, level=level,
                      int8=False, fits={k: fits[k] for k in kinds}, campaign=campaign or {"created": "2026-01-01T00:00:00Z"})
    model.save(path)
    return path


def _costs(capsys, *argv: str) -> dict:
    assert main(["costs", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_costs_are_the_hand_computed_predictions(tmp_path: Path, capsys) -> None:
    model = save(clean_cnn(), tmp_path)
    board = write_calibration(tmp_path / "board.json")
    costs = _costs(capsys, str(model), "--host-model", str(board))
    assert {op["op_type"]: op["t_host_ns"] for op in costs["operators"]} == EXPECTED_NS
    assert costs["host_profile"]["predicted"] is True
    assert costs["host_profile"]["calibration"]["calibration"] == str(board)


def test_a_fused_kind_predicts_the_conv_with_its_activation(tmp_path: Path, capsys) -> None:
    model = save(clean_cnn(), tmp_path)
    board = write_calibration(tmp_path / "board.json", kinds=("Conv", "Relu", "Flatten", "Gemm", "Conv+Relu"))
    costs = _costs(capsys, str(model), "--host-model", str(board))
    assert {op["op_type"]: op["t_host_ns"] for op in costs["operators"]} == {**EXPECTED_NS, "Conv": 7412.0}


def test_a_fused_hardswish_is_predicted_as_what_onnxruntime_runs(tmp_path: Path, capsys) -> None:
    """onnxruntime runs HardSwish as its function body: HardSigmoid (100 + 1 ns per output element: 356 ns) and Mul
    (100 + 1 ns per element read, two tensors of 256: 612 ns), added to the conv's 7912 ns."""
    model = parse(f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        hs (float[1,3,8,8] x) => (float[1,10] y) {{
          c = Conv <pads = [1,1,1,1]> (x, w)
          r = HardSwish(c)
          f = Flatten <axis = 1> (r)
          y = Gemm <transB = 1> (f, fw, fb)
        }}""", weights(w=(4, 3, 3, 3), fw=(10, 256), fb=(10,)))
    board = write_calibration(tmp_path / "board.json", kinds=("Conv", "HardSigmoid", "Mul", "Flatten", "Gemm"), level="all",
                              campaign={"attribution": ATTRIBUTION_VERSION})
    costs = _costs(capsys, str(save(model, tmp_path)), "--host-model", str(board))
    assert {op["op_type"]: op["t_host_ns"] for op in costs["operators"]} == {**EXPECTED_NS, "Conv": 7912.0 + 356.0 + 612.0}


def test_a_hardswish_of_its_own_is_predicted_as_its_function_body(tmp_path: Path, capsys) -> None:
    """HardSwish on the 3 x 8 x 8 input: HardSigmoid (100 + 192 ns) and Mul (100 + 2 x 192 ns) = 776 ns."""
    model = parse(f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        hs (float[1,3,8,8] x) => (float[1,10] y) {{
          h = HardSwish(x)
          c = Conv <pads = [1,1,1,1]> (h, w)
          f = Flatten <axis = 1> (c)
          y = Gemm <transB = 1> (f, fw, fb)
        }}""", weights(w=(4, 3, 3, 3), fw=(10, 256), fb=(10,)))
    board = write_calibration(tmp_path / "board.json", kinds=("Conv", "HardSigmoid", "Mul", "Flatten", "Gemm"))
    costs = _costs(capsys, str(save(model, tmp_path)), "--host-model", str(board))
    assert {op["op_type"]: op["t_host_ns"] for op in costs["operators"]} == {**EXPECTED_NS, "Conv": 7912.0, "HardSwish": 776.0}


@pytest.mark.parametrize("chain", [False, True])
def test_a_gelu_onnxruntime_fuses_is_predicted_as_its_one_kernel(tmp_path: Path, capsys, chain: bool) -> None:
    """GELU as PyTorch exports it on the 3 x 8 x 8 input (192 elements), which onnxruntime runs as one Gelu kernel.
    Alone (100 + 1 ns per output element; the Mul of two tensors 100 + 1 ns per element read): Div, Erf, Add 292 ns,
    Mul 484, Mul by 0.5 292, 1652 ns in all.  With the Gelu kind (634 + 1 ns per element: 826 ns) the kernel is
    split as they split: each half its own."""
    model = parse(f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        gelu (float[1,3,8,8] x) => (float[1,10] y) {{
          d = Div(x, sqrt2)
          e = Erf(d)
          a = Add(e, one)
          m = Mul(x, a)
          g = Mul(m, half)
          f = Flatten <axis = 1> (g)
          y = Gemm <transB = 1> (f, fw, fb)
        }}""", [*weights(fw=(10, 192), fb=(10,)), *(numpy_helper.from_array(np.array(v, np.float32), name)
                                                    for name, v in (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5)))])
    kinds = ("Div", "Erf", "Add", "Mul", "Flatten", "Gemm", *(("Gelu",) if chain else ()))
    board = write_calibration(tmp_path / "board.json", kinds=kinds, level="all", campaign={"attribution": ATTRIBUTION_VERSION})
    costs = _costs(capsys, str(save(model, tmp_path)), "--host-model", str(board))
    alone = [292.0, 292.0, 292.0, 484.0, 292.0]
    assert [op["t_host_ns"] for op in costs["operators"]] == [t / 2 if chain else t for t in alone] + [292.0, 2920.0]


@pytest.mark.parametrize("variant", [False, True])
def test_a_softmax_over_the_second_last_axis_is_predicted_as_its_variant(tmp_path: Path, capsys, variant: bool) -> None:
    """A Softmax over axis 2 of the 3 x 8 x 8 input (192 elements): 100 + 192 / 4 = 148 ns as its variant, and as a
    Softmax (100 + 192 ns) by a calibration from before the variant."""
    model = parse(f"""
        <ir_version: 8, opset_import: ["" : {OPSET}]>
        softmax (float[1,3,8,8] x) => (float[1,10] y) {{
          s = Softmax <axis = 2> (x)
          f = Flatten <axis = 1> (s)
          y = Gemm <transB = 1> (f, fw, fb)
        }}""", weights(fw=(10, 192), fb=(10,)))
    kinds = ("Softmax", "Flatten", "Gemm", *(("Softmax-second-last",) if variant else ()))
    board = write_calibration(tmp_path / "board.json", kinds=kinds, level="all", campaign={"attribution": ATTRIBUTION_VERSION})
    costs = _costs(capsys, str(save(model, tmp_path)), "--host-model", str(board))
    assert [op["t_host_ns"] for op in costs["operators"]] == [148.0 if variant else 292.0, 292.0, 2920.0]


def test_compile_records_predicted_costs_in_the_plan(tmp_path: Path, capsys) -> None:
    model = save(clean_cnn(), tmp_path)
    board = write_calibration(tmp_path / "board.json")
    out = tmp_path / "out"
    assert main(["compile", str(model), "-o", str(out), "--host-model", str(board), "--crossbars", "4"]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["host_costs"]["predicted"] is True
    assert plan["host_costs"]["calibration"]["cpu"] == "test board"
    assert plan["cpu_only_ns"] == sum(EXPECTED_NS.values())
    assert plan["model_latency_ort_all_ns"] is None  # predicted, not measured


def test_the_hardware_toml_names_the_host_model(tmp_path: Path, capsys) -> None:
    model = save(clean_cnn(), tmp_path)
    write_calibration(tmp_path / "board.json")
    toml = tmp_path / "board.toml"
    toml.write_text('host_model = "board.json"\n')
    costs = _costs(capsys, str(model), "--hw", str(toml))
    assert {op["op_type"]: op["t_host_ns"] for op in costs["operators"]} == EXPECTED_NS


def _error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    return err


def test_host_model_and_host_profile_together_are_an_error(tmp_path: Path, capsys) -> None:
    model = save(clean_cnn(), tmp_path)
    board = write_calibration(tmp_path / "board.json")
    err = _error(capsys, ["costs", str(model), "--host-model", str(board), "--host-profile", str(tmp_path / "p.json")])
    assert "--host-model and --host-profile" in err
    toml = tmp_path / "both.toml"
    toml.write_text('host_model = "board.json"\nhost_profile = "p.json"\n')
    assert "both host_profile and host_model" in _error(capsys, ["costs", str(model), "--hw", str(toml)])


def test_a_calibration_of_another_onnxruntime_is_an_error(tmp_path: Path, capsys) -> None:
    model = save(clean_cnn(), tmp_path)
    board = write_calibration(tmp_path / "board.json", ort_version="0.0.1")
    err = _error(capsys, ["costs", str(model), "--host-model", str(board)])
    assert "onnxruntime 0.0.1" in err and ort.__version__ in err


def test_an_uncovered_kind_is_named(tmp_path: Path, capsys) -> None:
    model = save(clean_cnn(), tmp_path)
    board = write_calibration(tmp_path / "board.json", kinds=("Conv", "Relu", "Gemm"))
    err = _error(capsys, ["costs", str(model), "--host-model", str(board)])
    assert "'Flatten'" in err and "--allow-unpredicted" in err


def test_allow_unpredicted_profiles_the_rest_here(tmp_path: Path, capsys) -> None:
    model = save(clean_cnn(), tmp_path)
    board = write_calibration(tmp_path / "board.json", kinds=("Conv", "Relu", "Gemm"))
    assert main(["costs", str(model), "--host-model", str(board), "--allow-unpredicted", "--json"]) == 0
    captured = capsys.readouterr()
    costs = json.loads(captured.out)
    by_type = {op["op_type"]: op["t_host_ns"] for op in costs["operators"]}
    assert by_type["Conv"] == EXPECTED_NS["Conv"] and by_type["Gemm"] == EXPECTED_NS["Gemm"]
    assert costs["host_profile"]["unpredicted"] == [op["name"] for op in costs["operators"] if op["op_type"] == "Flatten"]
    assert "warning:" in captured.err and "Flatten" in captured.err


def test_a_calibration_charged_by_another_kernel_attribution_warns(tmp_path: Path, capsys) -> None:
    """Its samples were the kernels' times split another way (before attribution 2, by level-off weights)."""
    model = save(clean_cnn(), tmp_path)
    stale = write_calibration(tmp_path / "stale.json", level="all")
    assert main(["costs", str(model), "--host-model", str(stale), "--json"]) == 0
    assert "calibrate the board again" in capsys.readouterr().err
    current = write_calibration(tmp_path / "current.json", level="all", campaign={"attribution": ATTRIBUTION_VERSION})
    assert main(["costs", str(model), "--host-model", str(current), "--json"]) == 0
    assert "calibrate the board again" not in capsys.readouterr().err


def test_calibrate_refuses_an_existing_file(tmp_path: Path, capsys) -> None:
    board = tmp_path / "board.json"
    board.write_text("{}")
    assert "already exists" in _error(capsys, ["calibrate", "-o", str(board)])
    assert board.read_text() == "{}"


def test_refit_fits_the_recorded_samples_again_and_leaves_the_input_alone(tmp_path: Path, capsys) -> None:
    # Relu samples timed at exactly 100 ns + 2 ns per element; the saved fit is deliberately wrong (0 ns).
    samples = tuple(Sample("Relu", {"n_in": float(n), "n_out": float(n)}, 100.0 + 2.0 * n)
                    for n in (1000, 2000, 5000, 9000, 20000, 40000, 70000, 100000, 200000, 400000))
    wrong = KindFit("Relu", "relative-elements", (0.0, 0.0, 0.0), len(samples), 1.0, {"relative-elements": 1.0}, {})
    old = tmp_path / "old.json"
    HostModel(ort_version=ort.__version__, cpu="test board", machine={"machine": "test"}, threads=1, level="all", int8=False,
              fits={"Relu": wrong}, samples=samples, campaign={"created": "2026-01-01T00:00:00Z", "measured": 10,
                                                                "grid_points": 10, "elapsed_s": 1.0}).save(old)
    before = old.read_bytes()
    assert main(["calibrate", "-o", str(tmp_path / "new.json"), "--refit", str(old)]) == 0
    assert "refitted the 10 samples" in capsys.readouterr().out
    assert old.read_bytes() == before
    new = HostModel.load(tmp_path / "new.json")
    assert new.fits["Relu"].predict_ns({"n_in": 3000.0, "n_out": 3000.0}) == pytest.approx(6100.0, rel=1e-6)
    assert new.campaign["refitted_from"] == str(old) and new.cpu == "test board" and new.samples == samples


def test_refit_and_extend_together_are_an_error(tmp_path: Path, capsys) -> None:
    board = write_calibration(tmp_path / "board.json")
    message = _error(capsys, ["calibrate", "-o", str(tmp_path / "new.json"), "--refit", str(board), "--extend", str(board)])
    assert "--refit and --extend" in message and not (tmp_path / "new.json").exists()


def test_refit_of_a_calibration_without_samples_is_an_error(tmp_path: Path, capsys) -> None:
    board = write_calibration(tmp_path / "board.json")
    assert "recorded no samples" in _error(capsys, ["calibrate", "-o", str(tmp_path / "new.json"), "--refit", str(board)])


def test_a_sweep_predicts_host_latencies_from_a_calibration(tmp_path: Path, capsys) -> None:
    """`sweep --host-model x86=board.json`: the CPU-only sum is the hand-computed prediction."""
    model = save(clean_cnn(), tmp_path)
    board = write_calibration(tmp_path / "board.json")
    out = tmp_path / "sweep"
    assert main(["sweep", str(model), "--host-model", f"x86={board}", "--crossbars", "4", "--mvm-latency", "50ns",
                 "-o", str(out), "--workers", "1", "--no-plots"]) == 0
    capsys.readouterr()
    (row,) = read_results(out)
    assert row["cpu_only_ns"] == sum(EXPECTED_NS.values())
    assert _error(capsys, ["sweep", str(model), "--host-model", f"x86={board}", "--host-profile", f"x86={board}",
                           "-o", str(tmp_path / "s2"), "--workers", "1", "--no-plots"]).count("--host-model") == 1


@pytest.mark.slow
def test_a_tiny_calibration_runs(tmp_path: Path, capsys) -> None:
    board = tmp_path / "board.json"
    assert main(["calibrate", "-o", str(board), "--budget-s", "10", "--runs", "1", "--warmup", "0", "--no-progress"]) == 0
    assert HostModel.load(board).fits and HostModel.load(board).context == ()  # (under two minutes: no context networks)
    assert HostModel.load(board).campaign["speed_after"] is None  # (one run a point: too noisy to check its speed)


def test_a_campaign_logged_to_a_file_says_where_it_is_once_a_minute(capsys) -> None:
    from cimsplit.cli.calibrate_cmd import CampaignProgress

    with CampaignProgress(300.0) as progress:  # capsys's stderr is not a terminal
        for done, elapsed_s in ((1, 0.5), (2, 59.0), (3, 61.0), (4, 100.0), (5, 121.5), (6, 130.0)):
            progress(done, 6, elapsed_s)
    assert capsys.readouterr().err.splitlines() == [
        "calibrating: point 1/6, 0 s of the 300 s budget", "calibrating: point 3/6, 61 s of the 300 s budget",
        "calibrating: point 5/6, 122 s of the 300 s budget", "calibrating: point 6/6, 130 s of the 300 s budget"]
    with CampaignProgress(300.0, quiet=True) as progress:
        progress(1, 1, 0.5)
    assert capsys.readouterr().err == ""
