"""The compile directory: files written, plan.json and trace.json contents, atomic writing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import cimsplit.passes.emit.artifacts as emit
from cimsplit.compiler.hardware import Hardware
from cimsplit.errors import CimsplitError
from cimsplit.passes.emit.artifacts import write_artifacts
from cimsplit.passes.fixed_placement import fixed_placement
from cimsplit.passes.pipeline import build_artifacts

HW = Hardware("x86", element_bytes=1, bus_bandwidth_bytes_per_s=1e9)  # 1 byte per ns: transfers in ns = bytes


def diamond(tmp_path: Path) -> Path:
    """x -> a: MatMul W1 [cim] -> b: Relu [host] -> c: MatMul W2 [cim] -> y   (x, y: float[2,4])"""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), w) for w in ("W1", "W2")]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["t1"], name="a"),
        helper.make_node("Relu", ["t1"], ["t2"], name="b"),
        helper.make_node("MatMul", ["t2", "W2"], ["y"], name="c"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "model.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(model), path)
    return path


DEVICES = {"a": "cim", "b": "host", "c": "cim"}


def artifacts(path: Path):
    model = onnx.load(path)
    workload, result = fixed_placement(model, DEVICES, HW, t_host_ns=1000.0, t_cim_ns=100.0)
    return build_artifacts(model, workload, result, HW, model_path=str(path), fingerprint="f00d")


def test_writes_every_file_and_each_passes_the_full_check(tmp_path) -> None:
    path = diamond(tmp_path)
    before = path.read_bytes()
    out = write_artifacts(tmp_path / "out", artifacts(path))
    assert sorted(p.name for p in out.iterdir()) == [
        "annotated.onnx", "cim_0.onnx", "cim_1.onnx", "host_0.onnx", "partitioned.onnx", "plan.json", "trace.json",
    ]
    for name in ("annotated.onnx", "cim_0.onnx", "cim_1.onnx", "host_0.onnx", "partitioned.onnx"):
        onnx.checker.check_model(onnx.load(out / name), full_check=True)
    assert path.read_bytes() == before  # the input model is never touched
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    ref = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out / "partitioned.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_plan_json_sections_and_hand_computed_timeline(tmp_path) -> None:
    path = diamond(tmp_path)
    plan = json.loads((write_artifacts(tmp_path / "out", artifacts(path)) / "plan.json").read_text())
    assert plan["version"] == 1
    assert plan["model"] == {
        "path": str(path), "fingerprint": "f00d",
        "inputs": [{"name": "x", "dtype": "float32", "shape": [2, 4]}],
        "outputs": [{"name": "y", "dtype": "float32", "shape": [2, 4]}],
    }
    assert [(p["name"], p["device"], p["file"], p["nodes"], p["inputs"], p["outputs"]) for p in plan["partitions"]] == [
        ("cim_0", "cim", "cim_0.onnx", ["a"], ["x"], ["t1"]),
        ("host_0", "host", "host_0.onnx", ["b"], ["t1"], ["t2"]),
        ("cim_1", "cim", "cim_1.onnx", ["c"], ["t2"], ["y"]),
    ]
    # 8 elements * 1 byte at 1e9 B/s = 8 ns per crossing (eq. 4).
    assert [(t["tensor"], t["src_device"], t["dst_device"], t["bytes"], t["latency_ns"]) for t in plan["transfers"]] == [
        ("x", "host", "cim", 8, 8.0), ("t1", "cim", "host", 8, 8.0),
        ("t2", "host", "cim", 8, 8.0), ("y", "cim", "host", 8, 8.0),
    ]
    # a: in 8, runs 8..108; b: 108+8 .. 1116; c: 1116+8 .. 1224; y back to host: +8 -> makespan 1232 ns.
    ops = {op["name"]: op for op in plan["timeline"]["operators"]}
    assert (ops["a"]["start_ns"], ops["b"]["start_ns"], ops["c"]["start_ns"]) == (8.0, 116.0, 1124.0)
    assert plan["timeline"]["makespan_ns"] == plan["makespan_ns"] == 8 + 100 + 8 + 1000 + 8 + 100 + 8


def test_trace_json_is_a_chrome_trace_with_device_and_bus_tracks(tmp_path) -> None:
    path = diamond(tmp_path)
    trace = json.loads((write_artifacts(tmp_path / "out", artifacts(path)) / "trace.json").read_text())
    threads = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {1: "host", 2: "cim", 3: "bus", 100: "critical path"}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    # a chain: a, b and c are each on the critical path (coloured, and repeated on its track)
    assert [e["name"] for e in spans if e["tid"] == 100] == ["a", "b", "c"]
    assert all(e["args"]["critical_path"] and e["cname"] == "terrible" for e in spans if e.get("cat") == "Node")
    assert all({"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e) for e in spans)
    b = next(e for e in spans if e["name"] == "b")
    assert (b["tid"], b["ts"], b["dur"]) == (1, 0.116, 1.0)  # microseconds
    bus = sorted((e["ts"], e["dur"]) for e in spans if e["tid"] == 3)
    assert bus == [(0.0, 0.008), (0.108, 0.008), (1.116, 0.008), (1.224, 0.008)]


def test_output_is_deterministic(tmp_path) -> None:
    path = diamond(tmp_path)
    one = write_artifacts(tmp_path / "one", artifacts(path))
    two = write_artifacts(tmp_path / "two", artifacts(path))
    for file in one.iterdir():
        assert file.read_bytes() == (two / file.name).read_bytes(), file.name


def test_failure_in_the_last_write_leaves_no_directory(tmp_path, monkeypatch) -> None:
    path = diamond(tmp_path)
    built = artifacts(path)

    def broken(trace_path, trace):
        raise OSError("disk full")

    monkeypatch.setattr(emit, "write_trace", broken)
    with pytest.raises(CimsplitError, match="disk full"):
        write_artifacts(tmp_path / "out", built)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def test_refuses_a_non_empty_directory_without_force_and_replaces_it_with_force(tmp_path, monkeypatch) -> None:
    path = diamond(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(CimsplitError, match="not empty"):
        write_artifacts(out, artifacts(path))
    assert (out / "keep.txt").read_text() == "mine"
    # --force, but the write fails: the old directory stays as it was.
    monkeypatch.setattr(emit, "write_trace", lambda *_: (_ for _ in ()).throw(OSError("boom")))
    with pytest.raises(CimsplitError, match="boom"):
        write_artifacts(out, artifacts(path), force=True)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    monkeypatch.undo()
    write_artifacts(out, artifacts(path), force=True)
    assert not (out / "keep.txt").exists() and (out / "plan.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "out"]


def test_refuses_a_directory_that_holds_the_input_model(tmp_path) -> None:
    path = diamond(tmp_path)
    with pytest.raises(CimsplitError, match="contains the input"):
        write_artifacts(tmp_path, artifacts(path), force=True, protect=(path,))
    assert path.is_file()


def test_overlapping_bus_transfers_get_their_own_lanes() -> None:
    """c1 and c2 [cim] both finish at 10 ns and send to h [host]: their two transfers overlap in time."""
    from cimsplit.passes.emit.plan import build_trace

    def op(name, device, start, duration):
        return {"name": name, "device": device, "start_ns": start, "finish_ns": start + duration,
                "duration_ns": duration, "input_transfer_ns": 0.0, "output_transfer_ns": 0.0}

    timeline = {
        "operators": [op("c1", "cim", 0.0, 10.0), op("c2", "cim", 0.0, 10.0), op("h", "host", 15.0, 5.0)],
        "edges": [{"src": "c1", "dst": "h", "latency_ns": 5.0}, {"src": "c2", "dst": "h", "latency_ns": 4.0}],
        "makespan_ns": 20.0,
    }
    trace = build_trace(timeline)
    bus = [(e["name"], e["tid"], e["ts"], e["dur"]) for e in trace["traceEvents"] if e.get("cat") == "Transfer"]
    # Lanes are filled by start then end: c2 (ends first) takes the first lane.
    assert bus == [("c1 -> h", 4, 0.01, 0.005), ("c2 -> h", 3, 0.01, 0.004)]
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names[3] == "bus" and names[4] == "bus (overlap 1)"
