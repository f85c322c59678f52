"""`cimsplit explain` and compile's explain.json on the tiny model of test_partition_cli, numbers by hand."""

from __future__ import annotations

import json

import onnx
import pytest
import test_partition_cli as tiny
from test_partition_cli import T_CONV, T_EDGE, T_IN, T_MATMUL, T_OUT

from cimsplit.cli import main

model, profile, private_cache = tiny.model, tiny.profile, tiny.private_cache  # the tiny model's fixtures

# x86, 100 crossbars, 50 ns MVM.  Plan: conv and matmul on the CIM (1 crossbar each).
PLAN_NS = T_IN + T_CONV + T_EDGE + 500 + T_EDGE + T_MATMUL + T_OUT  # 3819.7265625
CONV_ON_HOST_NS = 11000 + 500 + T_EDGE + T_MATMUL + T_OUT  # conv+relu 11000 on the host, matmul stays on the CIM
MATMUL_ON_HOST_NS = T_IN + T_CONV + T_EDGE + 500 + 2000  # conv on the CIM, flatten and matmul on the host
CPU_ONLY_NS = 13500.0


def _explain_json(capsys, *argv: str) -> dict:
    assert main(["explain", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_by_hand(model, profile, capsys):
    doc = _explain_json(capsys, model, "--host-profile", profile, "--solver", "highs")
    assert doc["makespan_ns"] == pytest.approx(PLAN_NS)
    ops = {op["name"]: op for op in doc["operators"]}
    assert [op["name"] for op in doc["operators"]] == ["conv", "flatten", "matmul"]
    conv, flatten, matmul = ops["conv"], ops["flatten"], ops["matmul"]
    assert conv["reason"] == "on_cim" and conv["forced_device"] == "host"
    assert conv["forced_makespan_ns"] == pytest.approx(CONV_ON_HOST_NS)
    assert conv["saving_ns"] == pytest.approx(CONV_ON_HOST_NS - PLAN_NS)
    assert matmul["reason"] == "on_cim" and matmul["forced_makespan_ns"] == pytest.approx(MATMUL_ON_HOST_NS)
    assert flatten["reason"] == "not_cim_capable" and flatten["forced_makespan_ns"] is None
    assert "Flatten" in flatten["detail"]
    assert all(op["critical"] for op in doc["operators"])  # a chain
    # 0 crossbars: CPU-only; 1: the conv (saves more than the matmul); 2: both.
    curve = doc["budget_curve"]
    assert [p["crossbars"] for p in curve] == [0, 1, 2] and doc["saturation_crossbars"] == 2
    assert [p["makespan_ns"] for p in curve] == pytest.approx([CPU_ONLY_NS, MATMUL_ON_HOST_NS, PLAN_NS])
    assert curve[0]["marginal_ns"] == pytest.approx(CPU_ONLY_NS - MATMUL_ON_HOST_NS)
    assert curve[1]["marginal_ns"] == pytest.approx(MATMUL_ON_HOST_NS - PLAN_NS)
    assert curve[2]["marginal_ns"] is None
    assert doc["placement_changes"] == [1, 2]


def test_text_table_and_budget_curve_plot(model, profile, capsys, tmp_path):
    plot = tmp_path / "curve.png"
    assert main(["explain", model, "--host-profile", profile, "--solver", "highs", "--budget-curve",
                 "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    for text in ("reasons: not_cim_capable 1, on_cim 2", "forced makespan", "budget curve: saturation at 2 crossbars",
                 "next crossbar saves", f"plot: {plot}", "solves besides the plan"):
        assert text in out, text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compile_writes_explain_json_and_stamps_the_reasons(model, profile, capsys, tmp_path):
    out = tmp_path / "out"
    assert main(["compile", model, "-o", str(out), "--host-profile", profile, "--solver", "highs", "--explain"]) == 0
    assert "explain.json" in capsys.readouterr().out
    written = json.loads((out / "explain.json").read_text())
    assert written == _explain_json(capsys, str(out))
    assert written == _explain_json(capsys, model, "--host-profile", profile, "--solver", "highs")
    only = _explain_json(capsys, str(out), "--operator", "matmul")
    assert [op["name"] for op in only["operators"]] == ["matmul"]

    annotated = onnx.load(str(out / "annotated.onnx"))
    props = {n.name: {p.key: p.value for p in n.metadata_props} for n in annotated.graph.node}
    for node in ("conv", "relu"):  # relu is fused into the conv operator
        assert props[node]["cimsplit.reason"].startswith("on_cim: saves")
        assert float(props[node]["cimsplit.forced_makespan_ns"]) == pytest.approx(CONV_ON_HOST_NS)
    assert props["flatten"]["cimsplit.forced_makespan_ns"] == "none"
    assert props["flatten"]["cimsplit.reason"].startswith("not_cim_capable: ")

    trace = json.loads((out / "trace.json").read_text())["traceEvents"]
    nodes = [e for e in trace if e.get("cat") == "Node"]
    assert all(e["args"].get("critical_path") for e in nodes)
    tracks = {e["args"]["name"]: e["tid"] for e in trace if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(e["name"] for e in trace if e.get("tid") == tracks["critical path"] and e["ph"] == "X") == [
        "conv", "flatten", "matmul"]


def test_refusals_are_one_line(model, profile, capsys, tmp_path):
    out = tmp_path / "out"
    assert main(["compile", model, "-o", str(out), "--host-profile", profile, "--solver", "highs"]) == 0
    assert not (out / "explain.json").exists()
    capsys.readouterr()
    assert main(["explain", str(out)]) == 2  # compiled without --explain
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "has no explain.json" in err and err.count("\n") == 1
    assert main(["explain", model, "--host-profile", profile, "--operator", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no operator 'nope'" in err and err.count("\n") == 1
