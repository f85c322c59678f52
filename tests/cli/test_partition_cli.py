"""`cimsplit partition` end to end on a tiny model with a hand-written host profile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cimsplit.cli import main
from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_profile import FORMAT_VERSION, HostProfile

CIMSPLIT = str(Path(sys.executable).with_name("cimsplit"))


def tiny_model(path: Path) -> str:
    """
      x[1,3,8,8] -> conv (4 ch, 3x3, pad 1) -> relu -> flatten -> matmul (256 -> 10) -> y[1,10]

    Operators: conv (+ fused relu), flatten (host only), matmul.
    """
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((256, 10)).astype(np.float32), "fc")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
            helper.make_node("MatMul", ["f", "fc"], ["y"], name="matmul"),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [w, fc],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


# Host medians by hand (ns): the conv operator is conv + relu = 11000, flatten 500, matmul 2000: CPU-only 13500.
MEDIANS = {"conv": 10000.0, "relu": 1000.0, "flatten": 500.0, "matmul": 2000.0}
WHOLE_MODEL_NS = 9000.0

# x86 preset, 50 ns MVM, 20.48 GB/s, float32 tensors: b = 4 bytes per element (eq. 2-4):
T_IN = 4 * 192 / 20.48  # graph input of the conv, 37.5 ns
T_CONV = 4 * 192 / 20.48 + 64 * 50 + 4 * 256 / 20.48  # load + N_mvm 64 * T_mvm + store = 3287.5 ns
T_EDGE = 4 * 256 / 20.48  # 50 ns on both edges
T_MATMUL = 4 * 256 / 20.48 + 1 * 50 + 4 * 10 / 20.48  # 101.953125 ns
T_OUT = 4 * 10 / 20.48  # graph output of the matmul, 1.953125 ns


@pytest.fixture
def model(tmp_path) -> str:
    return tiny_model(tmp_path / "tiny.onnx")


@pytest.fixture
def profile(model, tmp_path) -> str:
    path = tmp_path / "host.json"
    nodes = {name: {"median_ns": t, "p10_ns": t, "p90_ns": t, "op_type": "X", "samples": 3} for name, t in MEDIANS.items()}
    HostProfile(format_version=FORMAT_VERSION, fingerprint=load(model).fingerprint, ort_version="x", cpu="hand-written",
                threads=1, runs=3, warmup=1, nodes=nodes, level="off",  # the medians sum to the whole model off
                model_median_ns={"optimizations_off": 13500.0, "optimizations_all": WHOLE_MODEL_NS}).save(path)
    return str(path)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CIMSPLIT_CACHE_DIR", str(tmp_path / "cache"))


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_json_by_hand(model, profile, capsys):
    # Whole operators (with slicing, the default, an OFM split of the conv is shorter: 3608.7 ns).
    assert main(["partition", model, "--host-profile", profile, "--mvm-latency", "50ns", "--solver", "highs", "--json",
                 "--slicing", "off"]) == 0
    doc = _json(capsys)
    # both capable operators on the CIM (budget 100): input, conv, edge, flatten on host, edge, matmul, output
    makespan = T_IN + T_CONV + T_EDGE + 500 + T_EDGE + T_MATMUL + T_OUT
    assert doc["makespan_ns"] == pytest.approx(makespan)
    assert [(o["name"], o["device"]) for o in doc["operators"]] == [("conv", "cim"), ("flatten", "host"), ("matmul", "cim")]
    assert doc["operators"][0]["nodes"] == ["conv", "relu"]
    assert doc["operators"][0]["t_cim_ns"] == pytest.approx(T_CONV)
    assert doc["cpu_only_ns"] == 13500.0
    assert doc["speedup"] == pytest.approx(13500.0 / makespan)
    assert doc["speedup_vs_ort_all"] == pytest.approx(WHOLE_MODEL_NS / makespan)
    assert doc["crossbars_used"] == 2
    assert doc["solver"]["name"] == "highs" and doc["solver"]["status"] == "optimal"
    assert doc["solver"]["n_operators"] == 3
    assert doc["baselines"]["cpu_only"]["makespan_ns"] == 13500.0


def test_one_crossbar_offloads_the_conv_only(model, profile, capsys):
    # Whole operators only: with slicing (the default) the matmul would split.
    assert main(["partition", model, "--host-profile", profile, "--crossbars", "1", "--solver", "highs", "--json",
                 "--slicing", "off"]) == 0
    doc = _json(capsys)
    # conv on CIM, matmul on host: 37.5 + 3287.5 + 50 + 500 + 2000 (matmul 101.95 ns on CIM does not fit)
    assert doc["makespan_ns"] == pytest.approx(T_IN + T_CONV + T_EDGE + 500 + 2000)
    assert [o["device"] for o in doc["operators"]] == ["cim", "host", "host"]


def test_text_report_has_baselines_and_table_one(model, profile, capsys):
    assert main(["partition", model, "--host-profile", profile, "--solver", "highs", "--slicing", "off"]) == 0
    out = capsys.readouterr().out
    for word in ("ILP (highs)", "cpu_only", "greedy", "single_split", "Table I", "variables", "constraints",
                 "MIP gap", "optimal", "requested with --solver highs", "all optimizations"):
        assert word in out, word
    assert f"speedup {13500.0 / (T_IN + T_CONV + T_EDGE + 500 + T_EDGE + T_MATMUL + T_OUT):.2f}x" in out


def test_throughput_by_hand(model, profile, capsys):
    """Period = max(host busy, bus busy, slowest CIM operator) over placements (budget 100).

    conv on the CIM: the conv's 3287.5 ns bounds every placement's period (on the host it would cost
    11000 ns); flatten 500 ns on the host, the bus at most 37.5 + 50 + 50 + 1.95 ns.  So P = T_CONV,
    and one frame takes longer than P (at least the conv plus its input transfer): 2 frames in flight.
    """
    assert main(["partition", model, "--host-profile", profile, "--solver", "highs", "--objective", "throughput",
                 "--json"]) == 0
    doc = _json(capsys)
    assert doc["objective"] == "throughput" and doc["period_ns"] == pytest.approx(T_CONV)
    assert doc["operators"][0]["device"] == "cim" and doc["frames_in_flight"] == 2
    tasks = {t["name"]: t for t in doc["stream"]["tasks"]}
    assert tasks["conv:input->cim"]["start_ns"] == 0.0 and tasks["conv:input->cim"]["resource"] == "bus"
    assert tasks["conv"]["start_ns"] == pytest.approx(T_IN) and tasks["conv"]["resource"] == "cim"
    assert doc["stream"]["latency_ns"] == doc["makespan_ns"]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--crossbars", "-1"], "crossbars"),
        (["--time-limit", "0"], "--time-limit"),
        (["--solver", "cplex"], "unknown solver 'cplex'"),
        (["--mip-gap", "2"], "--mip-gap"),
        (["--objective", "fast"], "unknown objective 'fast'"),
        (["--objective", "throughput", "--frames-in-flight", "0"], "--frames-in-flight"),
        (["--objective", "throughput", "--max-latency", "soon"], "cannot read time 'soon'"),
        (["--max-latency", "3ms"], "add --objective throughput"),
        (["--objective", "throughput", "--max-latency", "1us", "--solver", "highs"], "no stream schedule meets"),
    ],
)
def test_bad_flags_exit_2_with_one_line(model, profile, capsys, flags, expected):
    assert main(["partition", model, "--host-profile", profile, *flags]) == 2
    assert expected in _one_line_error(capsys)


def test_gurobi_without_gurobipy_exits_2_naming_the_extra(model, profile, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "gurobipy", None)  # the one fake: the real package cannot be removed here
    assert main(["partition", model, "--host-profile", profile, "--solver", "gurobi"]) == 2
    assert "pip install 'cimsplit[gurobi]'" in _one_line_error(capsys)


def test_console_script(model, profile, tmp_path):
    env = dict(os.environ, CIMSPLIT_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([CIMSPLIT, "partition", model, "--host-profile", profile, "--solver", "highs", "--json"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["crossbars_used"] == 2
    assert done.stderr == ""
    done = subprocess.run([CIMSPLIT, "partition", model, "--host-profile", profile, "--solver", "cplex"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
