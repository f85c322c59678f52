"""Split inference: outputs equal the original, transfers counted and pooled, devices concurrent, manifest checked."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.hardware import Hardware
from cimsplit.errors import CimsplitError
from cimsplit.passes.emit.artifacts import write_artifacts
from cimsplit.passes.fixed_placement import fixed_placement
from cimsplit.passes.pipeline import build_artifacts
from cimsplit.runtime import OrtCpuDevice, Session
from cimsplit.runtime.transfers import TransferCounter

HW = Hardware("x86", element_bytes=1, bus_bandwidth_bytes_per_s=1e9)  # 1 ns per byte


def save(tmp_path: Path, nodes, outputs, weights) -> Path:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), w) for w in weights]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [2, 4]) for y in outputs],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "model.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(model), path)
    return path


def cycle_model(tmp_path: Path) -> Path:
    """x -> a: MatMul W1 [cim] -+-> b: Relu [host] -> c: MatMul W2 [cim] -> add: Add [cim] -> y
                               '-> d: MatMul W3 [cim] -----------------------^
    """
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["t1"], name="a"),
        helper.make_node("Relu", ["t1"], ["t2"], name="b"),
        helper.make_node("MatMul", ["t1", "W3"], ["t4"], name="d"),
        helper.make_node("MatMul", ["t2", "W2"], ["t3"], name="c"),
        helper.make_node("Add", ["t3", "t4"], ["y"], name="add"),
    ]
    return save(tmp_path, nodes, ["y"], ["W1", "W2", "W3"])


CYCLE = {"a": "cim", "b": "host", "c": "cim", "d": "cim", "add": "cim"}


def compile_dir(path: Path, devices: dict[str, str], out: Path) -> tuple[Path, float]:
    model = onnx.load(path)
    workload, result = fixed_placement(model, devices, HW, t_host_ns=1000.0, t_cim_ns=100.0)
    built = build_artifacts(model, workload, result, HW, model_path=str(path), fingerprint="f")
    return write_artifacts(out, built), result.schedule.makespan_ns


def original(path: Path, x: np.ndarray) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})


@pytest.mark.parametrize("devices", [CYCLE, {n: "host" for n in CYCLE}, {n: "cim" for n in CYCLE}])
def test_split_run_equals_the_original_model(tmp_path, devices) -> None:
    path = cycle_model(tmp_path)
    out, _ = compile_dir(path, devices, tmp_path / "out")
    x = np.random.default_rng(5).standard_normal((2, 4)).astype(np.float32)
    with Session(out) as session:
        got = session.run({"x": x})
    assert list(got) == ["y"]
    np.testing.assert_allclose(got["y"], original(path, x)[0], rtol=1e-6, atol=1e-6)


def test_transfers_are_counted_and_the_modeled_makespan_is_the_plans(tmp_path) -> None:
    path = cycle_model(tmp_path)
    out, makespan_ns = compile_dir(path, CYCLE, tmp_path / "out")
    x = np.ones((2, 4), np.float32)
    with Session(out) as session:
        session.run({"x": x})
        stats = session.transfer_stats
        # x -> cim, t1 -> host, t2 -> cim, y -> host: 4 copies of float32[2,4] = 32 bytes each;
        # the plan charges 8 elements * 1 byte = 8 bytes and 8 ns each.
        assert (stats.count, stats.bytes, stats.modeled_bytes, stats.modeled_latency_ns) == (4, 128, 32, 32.0)
        session.run({"x": x})
        assert session.transfer_stats.count == 8
        timeline = session.timeline
    plan = json.loads((out / "plan.json").read_text())
    assert timeline.makespan_ns == plan["makespan_ns"] == plan["timeline"]["makespan_ns"] == makespan_ns
    # a: 8..108 (x in); d: 108..208; b: 116..1116; c: 1124..1224; add: 1224..1324; y out: +8.
    assert makespan_ns == 1332.0
    assert timeline.busy_ns == {"host": 1000.0, "cim": 400.0}
    # Modeled bus: x in (8), a->b (8), b->c (8), y out (8).
    assert (timeline.bus_ns, timeline.crossings) == (32.0, 4)


class _Gate:
    """Host kernels open the gate before running; CIM kernels wait for it (at most 10 s)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.cim_saw_open = False


class _GateDevice:
    def __init__(self, gate: _Gate, name: str) -> None:
        self.name, self.gate, self.inner = name, gate, OrtCpuDevice(name=name)

    def load(self, model):
        kernel, gate, name = self.inner.load(model), self.gate, self.name

        class Kernel:
            def run(self, feeds):
                if name == "host":
                    gate.event.set()
                else:
                    gate.cim_saw_open = gate.event.wait(timeout=10.0)
                return kernel.run(feeds)

        return Kernel()


def test_independent_partitions_on_different_devices_run_concurrently(tmp_path) -> None:
    """x -> a: MatMul W1 [cim] -> ya ;  x -> b: Relu [host] -> yb: no dependency between the two partitions.

    cim_0 comes first in the plan and blocks until host_0 has started: that only
    finishes in time if both run at once.
    """
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["ya"], name="a"), helper.make_node("Relu", ["x"], ["yb"], name="b")]
    path = save(tmp_path, nodes, ["ya", "yb"], ["W1"])
    out, _ = compile_dir(path, {"a": "cim", "b": "host"}, tmp_path / "out")
    assert [p["name"] for p in json.loads((out / "plan.json").read_text())["partitions"]] == ["cim_0", "host_0"]
    gate = _Gate()
    x = np.ones((2, 4), np.float32)
    with Session(out, cim_device=_GateDevice(gate, "cim"), host_device=_GateDevice(gate, "host")) as session:
        got = session.run({"x": x})
    assert gate.cim_saw_open
    for value, ref in zip(got.values(), original(path, x)):
        np.testing.assert_allclose(value, ref, rtol=1e-6)


def test_bad_feeds_and_bad_directories_are_user_errors(tmp_path) -> None:
    path = cycle_model(tmp_path)
    out, _ = compile_dir(path, CYCLE, tmp_path / "out")
    with Session(out) as session:
        with pytest.raises(CimsplitError, match="missing"):
            session.run({})
        with pytest.raises(CimsplitError, match="dtype float64"):
            session.run({"x": np.ones((2, 4))})
        with pytest.raises(CimsplitError, match=r"shape \[4, 2\]"):
            session.run({"x": np.ones((4, 2), np.float32)})
    with pytest.raises(CimsplitError, match="no such directory"):
        Session(tmp_path / "absent")
    with pytest.raises(CimsplitError, match="not a cimsplit compile directory"):
        Session(tmp_path)
    (out / "cim_1.onnx").unlink()
    with pytest.raises(CimsplitError, match="cim_1.onnx is missing"):
        Session(out)


def test_the_runtime_follows_the_manifest_not_file_names(tmp_path) -> None:
    path = cycle_model(tmp_path)
    out, _ = compile_dir(path, CYCLE, tmp_path / "out")
    plan = json.loads((out / "plan.json").read_text())
    for entry in plan["partitions"]:  # rename every partition file; only plan.json says where they are
        new = f"part_{entry['name'][::-1]}.onnx"
        (out / entry["file"]).rename(out / new)
        entry["file"] = new
    (out / "plan.json").write_text(json.dumps(plan))
    x = np.ones((2, 4), np.float32)
    with Session(out) as session:
        np.testing.assert_allclose(session.run({"x": x})["y"], original(path, x)[0], rtol=1e-6)


def test_outputs_handed_out_are_not_refilled_by_the_next_run(tmp_path) -> None:
    """Kernels reuse their output buffers between runs; what ``run`` returned must not change."""
    path = cycle_model(tmp_path)
    for devices in (CYCLE, {n: "host" for n in CYCLE}):
        out, _ = compile_dir(path, devices, tmp_path / f"out_{len(set(devices.values()))}")
        with Session(out) as session:
            first = session.run({"x": np.ones((2, 4), np.float32)})["y"]
            kept = first.copy()
            second = session.run({"x": np.full((2, 4), -3.0, np.float32)})["y"]
        np.testing.assert_array_equal(first, kept)
        assert not np.array_equal(first, second)


def test_a_pipelined_stream_gives_each_input_its_own_outputs(tmp_path) -> None:
    """In the cycle model cim_1 reads t4 straight from cim_0's output buffer while it waits for
    host_0; cim_0 of the next input must not refill that buffer before cim_1 has run."""
    path = cycle_model(tmp_path)
    out, _ = compile_dir(path, CYCLE, tmp_path / "out")
    rng = np.random.default_rng(9)
    stream = [{"x": rng.standard_normal((2, 4)).astype(np.float32)} for _ in range(6)]
    with Session(out) as session:
        results = session.run_stream(stream, window=3)
        assert session.transfer_stats.count == 6 * 4
    for feeds, got in zip(stream, results):
        np.testing.assert_allclose(got["y"], original(path, feeds["x"])[0], rtol=1e-6, atol=1e-6)


class _CallGate:
    """The CIM kernel's second call (input 1) opens the gate; the host kernel's first call
    (input 0) waits for it: that only happens in time if the two inputs overlap."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.cim_calls = 0
        self.host_saw_open: bool | None = None


class _PipelineDevice:
    def __init__(self, gate: _CallGate, name: str) -> None:
        self.name, self.gate, self.inner = name, gate, OrtCpuDevice(name=name)

    def load(self, model):
        kernel, gate, name = self.inner.load(model), self.gate, self.name

        class Kernel:
            def run(self, feeds):
                if name == "cim":
                    gate.cim_calls += 1
                    if gate.cim_calls == 2:
                        gate.event.set()
                elif gate.host_saw_open is None:
                    gate.host_saw_open = gate.event.wait(timeout=10.0)
                return kernel.run(feeds)

        return Kernel()


def test_a_stream_overlaps_inputs_across_devices(tmp_path) -> None:
    """x -> a: MatMul W1 [cim] -> b: Relu [host] -> y: the CIM starts input 1 while the host runs input 0."""
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["t"], name="a"), helper.make_node("Relu", ["t"], ["y"], name="b")]
    path = save(tmp_path, nodes, ["y"], ["W1"])
    out, _ = compile_dir(path, {"a": "cim", "b": "host"}, tmp_path / "out")
    gate = _CallGate()
    stream = [{"x": np.full((2, 4), float(v), np.float32)} for v in (1, -1, 2)]
    with Session(out, cim_device=_PipelineDevice(gate, "cim"), host_device=_PipelineDevice(gate, "host")) as session:
        results = session.run_stream(stream, window=2)
    assert gate.host_saw_open
    for feeds, got in zip(stream, results):
        np.testing.assert_allclose(got["y"], original(path, feeds["x"])[0], rtol=1e-6)


def test_a_released_buffer_is_refilled_and_a_held_one_never() -> None:
    counter = TransferCounter()
    host: dict[str, np.ndarray] = {}
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    first = counter.copy(a, host, "t", modeled_bytes=6, modeled_latency_ns=6.0, stage="host")
    held = counter.copy(a + 1, host, "u", stage="host")  # nothing released yet: a buffer of its own
    assert first is not held and host["u"] is held
    counter.release(first, "host")
    again = counter.copy(a * 2, host, "v", stage="host")
    assert again is first  # the released buffer, refilled
    np.testing.assert_array_equal(again, a * 2)
    np.testing.assert_array_equal(held, a + 1)  # untouched
    assert counter.copy(a, host, "w", stage="cim") is not first  # another device's pool
    counter.release(held, "host")
    assert counter.copy(a.ravel(), host, "x", stage="host") is not held  # another shape
    assert counter.copy(a, host, "y") is not held  # unstaged (a graph output): always fresh
    s = counter.stats
    # six copies of 6 float32 each = 6 * 24 bytes; modeled totals only from the first call
    assert (s.count, s.bytes, s.modeled_bytes, s.modeled_latency_ns) == (6, 6 * 24, 6, 6.0)


def test_the_transfer_pool_does_not_grow_over_runs(tmp_path) -> None:
    """Cycle model on CYCLE: t1 goes cim -> host and t2 host -> cim (pooled); y goes cim -> host as
    the graph output (fresh each run).  After every run exactly those two buffers are back in the pool."""
    out, _ = compile_dir(cycle_model(tmp_path), CYCLE, tmp_path / "out")
    x = np.ones((2, 4), np.float32)
    with Session(out) as session:
        sizes = []
        for _ in range(3):
            session.run({"x": x})
            sizes.append(sorted((stage, len(free)) for (stage, _, _), free in session.counter._pool.items()))
    assert sizes == [[("cim", 1), ("host", 1)]] * 3
