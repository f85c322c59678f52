"""`cimsplit inspect`: the table, the exact --json document, and its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from graphs import clean_cnn, control_flow_and_custom, conv_weight_input, pytorch_style, save

from cimsplit.cli import main

CIMSPLIT = Path(sys.executable).with_name("cimsplit")


def test_table_lists_operators_and_totals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(clean_cnn(), tmp_path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["name", "op", "fused", "cim"]
    conv_row = next(line for line in lines if line.startswith("Conv_0"))
    # Conv 3->4 3x3 on 8x8: M 4, N 27, N_mvm 64, 1 crossbar, N_in 192, N_out 256
    assert conv_row.split()[-6:] == ["4", "27", "64", "1", "192", "256"]
    assert "Relu_1" in conv_row and " yes " in conv_row
    assert "operators: 3   CIM-capable: 2   crossbars to offload every capable operator: 2 (256x256)" in out


def test_json_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(pytorch_style(), tmp_path)
    assert main(["inspect", str(path), "--input-shape", "x=2,3,8,8", "--json", "--crossbar-size", "16x128"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"operators", "edges", "totals"}
    keys = {"name", "op_type", "nodes", "cim_capable", "reason", "m", "n", "n_mvm", "crossbars", "n_in", "n_out"}
    assert all(set(op) == keys for op in doc["operators"])
    conv, reshape, gemm = doc["operators"]
    # 16x128 crossbars: conv M 4, N 27 -> 1*1; gemm M 10, N 256 -> ceil(10/16)*ceil(256/128) = 2
    assert (conv["m"], conv["n"], conv["n_mvm"], conv["crossbars"]) == (4, 27, 2 * 64, 1)
    assert (gemm["m"], gemm["n"], gemm["n_mvm"], gemm["crossbars"]) == (10, 256, 2, 2)
    assert reshape["cim_capable"] is False and reshape["m"] is None and reshape["crossbars"] is None
    assert reshape["reason"]
    assert doc["edges"] == [
        {"src": conv["name"], "dst": reshape["name"], "elements": 2 * 256},
        {"src": reshape["name"], "dst": gemm["name"], "elements": 2 * 256},
    ]
    assert doc["totals"] == {"operators": 3, "cim_capable": 2, "crossbars": 3}


def test_json_is_deterministic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(control_flow_and_custom(), tmp_path)
    outputs = []
    for _ in range(2):
        assert main(["inspect", str(path), "--json"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    doc = json.loads(outputs[0])
    host = {op["op_type"]: op["reason"] for op in doc["operators"] if not op["cim_capable"]}
    assert "opaque" in host["If"] and "opaque" in host["Loop"] and "opaque" in host["Scan"]
    assert "custom-domain" in host["MyOp"]


def test_weight_as_input_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(save(conv_weight_input(), tmp_path)), "--json"]) == 0
    (op,) = json.loads(capsys.readouterr().out)["operators"]
    assert op["cim_capable"] is False and op["reason"].startswith("weight is not constant")


@pytest.mark.parametrize("size", ["256", "0x256", "axb", "256x-1"])
def test_bad_crossbar_size(tmp_path: Path, capsys: pytest.CaptureFixture[str], size: str) -> None:
    path = save(clean_cnn(), tmp_path)
    assert main(["inspect", str(path), "--crossbar-size", size]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--crossbar-size" in err and "Traceback" not in err


def test_subprocess_run(tmp_path: Path) -> None:
    path = save(pytorch_style(), tmp_path)
    ok = subprocess.run([str(CIMSPLIT), "inspect", str(path), "--input-shape", "x=1,3,8,8", "--json"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["totals"] == {"operators": 3, "cim_capable": 2, "crossbars": 2}
    bad = subprocess.run([str(CIMSPLIT), "inspect", str(path)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "--input-shape" in bad.stderr and "Traceback" not in bad.stderr
