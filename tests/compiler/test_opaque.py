"""Operators onnxruntime cannot load: the rest is profiled, their latency comes from elsewhere (compiler/opaque.py)."""

from __future__ import annotations

import json

import onnx
import pytest
from graphs import custom_op_chain, save

from cimsplit.cli import main
from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_profile import FORMAT_VERSION, HostProfile, profile_model
from cimsplit.compiler.opaque import opaque_latencies, opaque_nodes, parse_op_latencies, profilable_part
from cimsplit.errors import CimsplitError

FAST_CIM = ["--crossbars", "100", "--mvm-latency", "1ns", "--bus-bandwidth", "1000GB/s"]


def test_profilable_part_cuts_at_the_opaque_node(tmp_path) -> None:
    """conv1 -> [op] -> sub -> conv2: op's outputs b, a become inputs; c1, read only by op, an output."""
    model = load(save(custom_op_chain(), tmp_path)).model
    assert opaque_nodes(model) == {"op": "com.example:MyOp"}
    part, dropped = profilable_part(model)
    assert dropped == {"op"}
    assert [n.name for n in part.graph.node] == ["conv1", "sub", "conv2"]
    assert [vi.name for vi in part.graph.input] == ["x", "b", "a"]  # in the order sub reads them
    assert [vi.name for vi in part.graph.output] == ["y", "c1"]
    onnx.checker.check_model(part, full_check=True)


def test_profile_measures_everything_but_the_opaque_node(tmp_path) -> None:
    loaded = load(save(custom_op_chain(), tmp_path))
    profile = profile_model(loaded, runs=2, warmup=0)
    assert sorted(profile.nodes) == ["conv1", "conv2", "op", "sub"]
    assert profile.nodes["op"]["opaque"] is True and profile.nodes["op"]["median_ns"] == 0.0
    assert all(not profile.nodes[n].get("opaque") for n in ("conv1", "conv2", "sub"))


def _table(loaded, **nodes_ns: float) -> HostProfile:
    nodes = {name: {"op_type": "x", "median_ns": ns, "p10_ns": ns, "p90_ns": ns, "samples": 1} for name, ns in nodes_ns.items()}
    return HostProfile(FORMAT_VERSION, loaded.fingerprint, "ort", "cpu", 1, 1, 0, nodes,
                       {"optimizations_off": 1.0, "optimizations_all": 1.0}, source="board.json")


def test_latency_from_op_latency_then_profile_file_else_zero_with_a_warning(tmp_path) -> None:
    loaded = load(save(custom_op_chain(), tmp_path))
    board = _table(loaded, conv1=100.0, sub=10.0, conv2=100.0)  # measured on a board without the op
    profile, warnings = opaque_latencies(board, loaded.model, {})
    assert profile.nodes["op"]["median_ns"] == 0.0
    assert warnings == ("operator op (com.example:MyOp) could not be profiled (onnxruntime cannot load it) and the host "
                        "profile has no latency for it: it counts 0 ns on the host; give it with --op-latency MyOp=DURATION",)
    with_op = _table(loaded, conv1=100.0, op=700.0, sub=10.0, conv2=100.0)  # measured where the library was loaded
    assert opaque_latencies(with_op, loaded.model, {})[0].nodes["op"]["median_ns"] == 700.0
    assert opaque_latencies(with_op, loaded.model, {})[1] == ()
    for key in ("MyOp", "com.example:MyOp", "op"):
        profile, warnings = opaque_latencies(board, loaded.model, parse_op_latencies([f"{key}=2us"]))
        assert (profile.nodes["op"]["median_ns"], warnings) == (2000.0, ())
    with pytest.raises(CimsplitError, match="neither a node nor an op type"):
        opaque_latencies(board, loaded.model, {"Nope": 1.0})
    with pytest.raises(CimsplitError, match="is not NAME=DURATION"):
        parse_op_latencies(["MyOp"])


def test_compile_succeeds_and_run_names_the_missing_operator(tmp_path, capsys) -> None:
    path = save(custom_op_chain(), tmp_path)
    out = tmp_path / "out"
    assert main(["compile", str(path), "-o", str(out), *FAST_CIM]) == 0
    assert "warning: operator op (com.example:MyOp) could not be profiled" in capsys.readouterr().err
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan["warnings"]) == 1 and plan["warnings"][0].startswith("operator op (com.example:MyOp)")
    assert [(p["device"], p["nodes"]) for p in plan["partitions"]] == [
        ("cim", ["conv1"]), ("host", ["op", "sub"]), ("cim", ["conv2"])]
    ops = {op["name"]: op for op in plan["operators"]}
    assert ops["op"]["t_host_ns"] == 0.0
    assert main(["run", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "com.example:MyOp" in err[0] and "--custom-op-library" in err[0]


def test_op_latency_flag_sets_the_host_latency(tmp_path) -> None:
    path = save(custom_op_chain(), tmp_path)
    out = tmp_path / "out"
    assert main(["compile", str(path), "-o", str(out), *FAST_CIM, "--op-latency", "MyOp=3us"]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert {op["name"]: op["t_host_ns"] for op in plan["operators"]}["op"] == 3000.0
    assert plan["warnings"] == []


def test_run_with_a_custom_op_library(tmp_path, capsys) -> None:
    """onnxruntime-extensions' NegPos (a = min(c1, 0), b = max(c1, 0)) registered with --custom-op-library."""
    extensions = pytest.importorskip("onnxruntime_extensions")
    path = save(custom_op_chain("ai.onnx.contrib", "NegPos"), tmp_path)
    out = tmp_path / "out"
    assert main(["compile", str(path), "-o", str(out), *FAST_CIM, "--op-latency", "NegPos=1us"]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--check", "--custom-op-library", extensions.get_library_path()]) == 0
    assert "check passed" in capsys.readouterr().out
    assert main(["run", str(out), "--custom-op-library", str(tmp_path / "missing.so")]) == 2
    assert "cannot load the custom-op library" in capsys.readouterr().err
