"""`cimsplit profile` and `cimsplit costs` end to end on a tiny model, through the real front end."""

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
from cimsplit.compiler.host_profile import HostProfile

CIMSPLIT = str(Path(sys.executable).with_name("cimsplit"))
FAST = ["--runs", "3", "--warmup", "1", "--no-progress"]


def conv_gemm_model(path: Path, out_channels: int = 4) -> str:
    """
      x[1,3,8,8] -> conv (C_out ch, 3x3, pad 1) -> relu -> flatten -> matmul (C_out*64 -> 10) -> y[1,10]
    """
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((out_channels, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((out_channels * 64, 10)).astype(np.float32), "fc")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
            helper.make_node("MatMul", ["f", "fc"], ["y"], name="matmul"),
        ],
        "conv_gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [w, fc],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


@pytest.fixture
def model(tmp_path) -> str:
    return conv_gemm_model(tmp_path / "tiny.onnx")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CIMSPLIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def host_json(model, tmp_path) -> str:
    path = tmp_path / "host.json"
    assert main(["profile", model, *FAST, "-o", str(path)]) == 0
    return str(path)


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_profile_writes_a_loadable_profile_and_prints_the_summary(model, tmp_path, capsys):
    out = tmp_path / "host.json"
    assert main(["profile", model, *FAST, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "top 4 nodes by median" in text and "sum of per-node medians" in text
    assert "optimizations off" in text and "all optimizations" in text and f"wrote {out}" in text
    profile = HostProfile.load(out)
    assert set(profile.nodes) == {"conv", "relu", "flatten", "matmul"} and profile.runs == 3


def test_profile_refuses_to_overwrite_without_force(host_json, model, capsys):
    before = Path(host_json).read_bytes()
    assert main(["profile", model, *FAST, "-o", host_json]) == 2
    assert "already exists" in _one_line_error(capsys)
    assert Path(host_json).read_bytes() == before
    assert main(["profile", model, *FAST, "-o", host_json, "--force"]) == 0


@pytest.mark.parametrize("runs", ["0", "-2"])
def test_profile_refuses_bad_run_counts(model, tmp_path, capsys, runs):
    assert main(["profile", model, "--runs", runs, "-o", str(tmp_path / "h.json")]) == 2
    assert "--runs must be at least 1" in _one_line_error(capsys)
    assert not (tmp_path / "h.json").exists()


def test_costs_by_hand_through_the_front_end(model, host_json, capsys):
    assert main(["costs", model, "--host-profile", host_json, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ops = {op["name"]: op for op in data["operators"]}
    conv = next(op for op in data["operators"] if op["op_type"] == "Conv")
    matmul = next(op for op in data["operators"] if op["op_type"] == "MatMul")
    # float32 tensors, b = 4 bytes; B = 20.48 bytes/ns, T_mvm = 50 ns.
    # conv: N_in = 3*8*8 = 192, N_out = 4*8*8 = 256, N_mvm = 8*8 = 64:
    # T_acc = 4*192/20.48 + 64*50 + 4*256/20.48 = 37.5 + 3200 + 50 = 3287.5 ns
    assert conv["t_cim_ns"] == pytest.approx(3287.5) and conv["crossbars"] == 1
    # matmul: N_in = 256, N_mvm = 1, N_out = 10: T_acc = 4*256/20.48 + 50 + 4*10/20.48 = 101.953125 ns
    assert matmul["t_cim_ns"] == pytest.approx(101.953125) and matmul["crossbars"] == 1  # ceil(10/256)*ceil(256/256)
    # T_host: the profile's medians of the operator's nodes, the fused relu added to conv.
    profile = HostProfile.load(host_json)
    assert sum(op["t_host_ns"] for op in ops.values()) == pytest.approx(profile.sum_of_medians_ns)
    assert data["cpu_only_ns"] == pytest.approx(profile.sum_of_medians_ns)
    # Every edge carries the 256 float32 activations the consumer reads: 4*256/20.48 = 50 ns.
    assert data["edges"] and all(e["bytes"] == 1024 and e["t_transfer_ns"] == pytest.approx(50.0) for e in data["edges"])
    assert {(io["direction"], io["bytes"]) for io in data["io_transfers"]} == {("in", 768), ("out", 40)}
    assert data["host_profile"]["source"] == host_json and data["host_profile"]["fingerprint"] == profile.fingerprint


def test_element_bytes_flag_overrides_the_tensors_size(model, host_json, capsys):
    assert main(["costs", model, "--host-profile", host_json, "--json", "--element-bytes", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    conv = next(op for op in data["operators"] if op["op_type"] == "Conv")
    # b = 1 byte: T_acc = 192/20.48 + 64*50 + 256/20.48 = 9.375 + 3200 + 12.5 = 3221.875 ns
    assert conv["t_cim_ns"] == pytest.approx(3221.875)
    assert all(e["bytes"] == 256 and e["t_transfer_ns"] == pytest.approx(12.5) for e in data["edges"])
    assert data["hardware"]["element_bytes"] == 1


def test_costs_json_is_byte_identical_twice(model, host_json, capsys):
    argv = ["costs", model, "--host-profile", host_json, "--json", "--hw", "arm", "--crossbars", "25"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first
    assert first == json.dumps(json.loads(first), sort_keys=True, indent=2) + "\n"


def test_costs_paper_exact_has_no_io_transfers(model, host_json, capsys):
    assert main(["costs", model, "--host-profile", host_json, "--json", "--paper-exact"]) == 0
    assert json.loads(capsys.readouterr().out)["io_transfers"] == []


def test_costs_table_says_which_profile(model, host_json, capsys):
    assert main(["costs", model, "--host-profile", host_json]) == 0
    out = capsys.readouterr().out
    assert f"host profile: {host_json}" in out and "T_transfer" in out and "CPU-only (sum of T_host)" in out
    # Without --host-profile: this machine, profiled once and cached.
    assert main(["costs", model]) == 0
    assert "host profile: profiled on this machine (cached in" in capsys.readouterr().out


def test_profile_of_another_model_names_both_fingerprints(tmp_path, host_json, capsys):
    other = conv_gemm_model(tmp_path / "other.onnx", out_channels=8)
    assert main(["costs", other, "--host-profile", host_json]) == 2
    err = _one_line_error(capsys)
    assert HostProfile.load(host_json).fingerprint in err and "this model's fingerprint is" in err


def test_bad_profile_files(model, host_json, tmp_path, capsys):
    not_json = tmp_path / "notjson.json"
    not_json.write_text("conv: 5us\n")
    assert main(["costs", model, "--host-profile", str(not_json)]) == 2
    assert "is not JSON" in _one_line_error(capsys)
    data = json.loads(Path(host_json).read_text())
    del data["nodes"]
    no_nodes = tmp_path / "nonodes.json"
    no_nodes.write_text(json.dumps(data))
    assert main(["costs", model, "--host-profile", str(no_nodes)]) == 2
    assert "lacks nodes" in _one_line_error(capsys)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--crossbars", "-1"], "crossbar count -1 is out of range"),
        (["--bus-bandwidth", "0GB/s"], "must be positive"),
        (["--bus-bandwidth", "fast"], "cannot read bandwidth 'fast'"),
        (["--mvm-latency", "0ns"], "MVM latency 0 ns must be positive"),
        (["--mvm-latency", "50 parsecs"], "cannot read time '50 parsecs'"),
        (["--crossbar-size", "0x256"], "crossbar rows 0 is out of range"),
    ],
)
def test_bad_hardware_flags_exit_2(model, host_json, capsys, flags, expected):
    assert main(["costs", model, "--host-profile", host_json, *flags]) == 2
    assert expected in _one_line_error(capsys)


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("crossbars = 10\nflux_capacitor = 1\n", "unknown key 'flux_capacitor'"),
        ("element_bytes = 0\n", "element size 0 is out of range"),
        ('bus_bandwidth = "-2GB/s"\n', "must be positive"),
    ],
)
def test_bad_hardware_files_exit_2(model, host_json, tmp_path, capsys, toml, expected):
    path = tmp_path / "board.toml"
    path.write_text(toml)
    assert main(["costs", model, "--host-profile", host_json, "--hw", str(path)]) == 2
    assert expected in _one_line_error(capsys)


def test_console_script_runs_profile_and_costs(model, tmp_path):
    env = {**os.environ, "CIMSPLIT_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "sub.json"
    done = subprocess.run([CIMSPLIT, "profile", model, *FAST, "-o", str(out)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "sum of per-node medians" in done.stdout and out.exists()
    done = subprocess.run([CIMSPLIT, "costs", model, "--host-profile", str(out), "--json"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["host_profile"]["source"] == str(out)
    done = subprocess.run([CIMSPLIT, "costs", model, "--crossbars", "-1"], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_costs_for_another_crossbar_size_keep_the_profile(model, host_json, capsys):
    """The fingerprint does not depend on the crossbar size, so the same profile serves 128x128."""
    assert main(["costs", model, "--host-profile", host_json, "--json", "--crossbar-size", "128x128"]) == 0
    data = json.loads(capsys.readouterr().out)
    matmul = next(op for op in data["operators"] if op["op_type"] == "MatMul")
    assert matmul["crossbars"] == 2  # ceil(10/128) * ceil(256/128) = 1 * 2 (eq. 1)
    assert (data["hardware"]["crossbar_rows"], data["hardware"]["crossbar_cols"]) == (128, 128)
