"""Timed CIM emulation and the pipelined runtime: emulated tasks never finish earlier than modeled,
host partitions are cut where the schedule runs them apart, and every frame of a stream gets the
outputs of its own feeds (floats within DESIGN §6's tolerance, int8 bit for bit).

No wall-clock assertion: the properties are checked on the emulator's recorded timestamps.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from _profiles import table_profile
from graphs import quantize_qdq, save, weights
from onnx import TensorProto, helper

from cimsplit.cli import main
from cimsplit.compiler.costs import build_costs
from cimsplit.compiler.frontend import load
from cimsplit.compiler.hardware import load_hardware
from cimsplit.errors import CimsplitError
from cimsplit.passes.emit.artifacts import write_artifacts
from cimsplit.passes.fixed_placement import fixed_assignment
from cimsplit.passes.pipeline import build_artifacts
from cimsplit.passes.placement.driver import problem_from_costs
from cimsplit.passes.rewrite.unsigned_cuts import KEY_UNSIGNED
from cimsplit.runtime import Session
from cimsplit.runtime.plan import StreamRecord, StreamTaskRecord, read_plan
from cimsplit.runtime.steps import UNSIGNED_KEY, host_pieces


def fork_net() -> onnx.ModelProto:
    """
      x[1,3,8,8] -> c1: Conv 3->4 3x3 pad 1 [cim] -> m: Neg [host] -> g: GlobalAveragePool [host] -> y1[1,4,1,1]
      x ----------> n: Neg [host] -> c2: Conv 3->4 1x1 [cim] -> y2[1,4,8,8]
    n, m and g form one host partition (no path of length two joins them), but m must wait for c1
    while n runs at once: a timed run cuts that partition into [n] and [m, g].
    """
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["t1"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("Neg", ["x"], ["tn"], name="n"),
        helper.make_node("Conv", ["tn", "w2"], ["y2"], name="c2"),
        helper.make_node("Neg", ["t1"], ["tm"], name="m"),
        helper.make_node("GlobalAveragePool", ["tm"], ["y1"], name="g"),
    ]
    graph = helper.make_graph(nodes, "fork", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 4, 1, 1]),
                               helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 4, 8, 8])],
                              initializer=weights(w1=(4, 3, 3, 3), w2=(4, 3, 1, 1)))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def compile_fixed(path: Path, out: Path, on_cim: set[str]) -> Path:
    """Compile ``path`` with the convolutions named in ``on_cim`` on the CIM, costs from a fixed table."""
    loaded = load(path)
    hardware = load_hardware("x86", crossbars=1000)
    costs = build_costs(loaded.workload, hardware, table_profile(loaded))
    on_host = [not (op.cim_capable and op.name in on_cim) for op in loaded.workload.operators]
    result = fixed_assignment(problem_from_costs(loaded.workload, costs), on_host)
    built = build_artifacts(loaded.model, loaded.workload, result, hardware, model_path=str(path),
                            fingerprint=loaded.fingerprint)
    return write_artifacts(out, built)


def add_stream(directory: Path, frames_in_flight: int = 2) -> None:
    """Give a plan the stream fields, S = its latency timeline (transfers right after their producers)."""
    plan = read_plan(directory / "plan.json")
    ops = {op.name: op for op in plan.timeline.operators}
    tasks = [StreamTaskRecord(op.name, "operator", op.device, op.start_ns, op.duration_ns) for op in ops.values()]
    made = {}  # tensor -> finish of the operator that makes it
    for op in plan.timeline.operators:
        for part in plan.partitions:
            if op.name in part.nodes:
                for t in part.outputs:
                    made.setdefault(t, op.finish_ns)
    for tr in plan.transfers:
        tasks.append(StreamTaskRecord(f"{tr.tensor}->{tr.dst_device}", "transfer", "bus", made.get(tr.tensor, 0.0), tr.latency_ns))
    busy = [sum(op.duration_ns for op in ops.values() if op.device == "host"), sum(tr.latency_ns for tr in plan.transfers)]
    period = max(busy + [op.duration_ns for op in ops.values() if op.device == "cim"])
    document = json.loads((directory / "plan.json").read_text())
    document.update(objective="throughput", period_ns=period, frames_in_flight=frames_in_flight,
                    stream=StreamRecord(plan.makespan_ns, tuple(tasks)).to_json())
    (directory / "plan.json").write_text(json.dumps(document))


@pytest.fixture(scope="module")
def fork_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fork")
    return compile_fixed(save(fork_net(), folder), folder / "out", {"c1", "c2"})


@pytest.fixture(scope="module")
def fork_int8_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fork8")
    path = quantize_qdq(fork_net(), folder)
    on_cim = {op.name for op in load(path).workload.operators if op.cim_capable}
    return compile_fixed(path, folder / "out", on_cim)


def frames(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(n)]


def test_the_host_partition_is_cut_where_the_schedule_waits(fork_dir) -> None:
    plan = read_plan(fork_dir / "plan.json")
    (part,) = [p for p in plan.partitions if p.device == "host"]
    assert set(part.nodes) == {"n", "m", "g"}
    times = {op.name: (op.start_ns, op.duration_ns) for op in plan.timeline.operators if op.device == "host"}
    finish = {op.name: op.finish_ns for op in plan.timeline.operators}
    (t1,) = [tr for tr in plan.transfers if tr.tensor == "t1"]
    pieces = host_pieces(part.name, onnx.load(fork_dir / part.file), part.outputs, times, {"t1": finish["c1"] + t1.latency_ns})
    # n runs at once; m waits for t1 from the CIM, then g follows it back to back.
    assert [p.operators for p in pieces] == [("n",), ("m", "g")]
    assert [p.inputs for p in pieces] == [("x",), ("t1",)]
    assert [p.outputs for p in pieces] == [("tn",), ("y1",)]
    assert pieces[1].start_ns == times["m"][0] and pieces[1].duration_ns == times["m"][1] + times["g"][1]
    for piece in pieces:
        onnx.checker.check_model(piece.model, full_check=True)


def assert_never_early(run, plan) -> None:
    """Every emulated task takes at least its modeled time, after its inputs; units and a serial bus never overlap."""
    durations = {op.name: op.duration_ns for op in plan.timeline.operators}
    by_unit: dict[tuple[str, str], list] = {}
    for task in run.tasks:
        assert task.start_ns >= task.ready_ns
        if task.resource != "host":
            assert task.finish_ns - task.start_ns >= task.modeled_ns
            by_unit.setdefault((task.resource, task.name if task.resource == "cim" else ""), []).append(task)
        if task.resource == "cim":
            assert task.modeled_ns == durations[task.name]
    for tasks in by_unit.values():
        tasks.sort(key=lambda t: t.start_ns)
        if tasks[0].resource == "cim" or plan.stream is not None:
            assert all(a.finish_ns <= b.start_ns for a, b in zip(tasks, tasks[1:]))
    latest = {}
    for task in run.tasks:
        latest[task.frame] = max(latest.get(task.frame, 0.0), task.finish_ns)
    assert all(run.finished_ns[f] >= latest[f] for f in latest)


def test_emulated_completion_is_never_earlier_than_modeled(fork_dir) -> None:
    with Session(fork_dir, cim_timing="modeled") as session:
        plan = session.manifest.plan
        feeds = frames(1)[0]
        run = session.measure_latency(feeds)
        assert_never_early(run, plan)
        cim = {t.name: t for t in run.tasks if t.resource == "cim"}
        bus = {t.name: t for t in run.tasks if t.resource == "bus"}
        assert set(cim) == {"c1", "c2"} and len(bus) == len(plan.transfers)
        # c1 reads x after its transfer: it starts when the transfer of x to the CIM has finished.
        (x_move,) = [tr for tr in plan.transfers if tr.tensor == "x"]
        assert cim["c1"].ready_ns == bus[x_move.name].finish_ns == run.admitted_ns[0] + x_move.latency_ns
        stream = session.measure_stream(frames(4))
        assert_never_early(stream, plan)
        assert len(stream.finished_ns) == 4 and stream.period_ns is not None


@pytest.mark.parametrize("timed_plan", [False, True], ids=["plan-without-stream", "stream-schedule"])
def test_stream_outputs_equal_the_single_frame_outputs_frame_by_frame(fork_dir, tmp_path, timed_plan) -> None:
    directory = fork_dir
    if timed_plan:
        directory = tmp_path / "out"
        directory.mkdir()
        for f in fork_dir.iterdir():
            (directory / f.name).write_bytes(f.read_bytes())
        add_stream(directory, frames_in_flight=3)
    stream = frames(6, seed=3)
    with Session(directory, cim_timing="modeled") as session:
        plan = session.manifest.plan
        assert session.frames_in_flight == (3 if timed_plan else plan.frames_in_flight if plan.stream else 2)
        single = [session.run(feeds) for feeds in stream]
        timed = session.measure_stream(stream)
        untimed = session.run_stream(stream, window=session.frames_in_flight)
        assert_never_early(timed, session.manifest.plan)
    for one, got, also in zip(single, timed.outputs, untimed):
        for name in ("y1", "y2"):
            np.testing.assert_allclose(got[name], one[name], atol=1e-4, rtol=1e-3)
            np.testing.assert_allclose(also[name], one[name], atol=1e-4, rtol=1e-3)
    assert not np.allclose(single[0]["y2"], single[1]["y2"])  # the frames really differ


def test_an_int8_stream_is_bit_identical_frame_by_frame(fork_int8_dir) -> None:
    stream = frames(4, seed=7)
    with Session(fork_int8_dir, cim_timing="modeled") as session:
        assert any(p.device == "cim" for p in session.manifest.partitions)
        single = [session.run(feeds) for feeds in stream]
        timed = session.measure_stream(stream)
        latency = session.measure_latency(stream[2])
    for one, got in zip(single, timed.outputs):
        assert all(got[y].tobytes() == one[y].tobytes() for y in ("y1", "y2"))
    assert all(latency.outputs[0][y].tobytes() == single[2][y].tobytes() for y in ("y1", "y2"))


def test_timed_runs_need_the_modeled_timing(fork_dir) -> None:
    with Session(fork_dir) as session, pytest.raises(CimsplitError, match="modeled"):
        session.measure_latency(frames(1)[0])
    with pytest.raises(CimsplitError, match="unknown CIM timing"):
        Session(fork_dir, cim_timing="fast")


def test_the_report_has_the_keys_of_what_was_run(fork_dir, tmp_path, capsys) -> None:
    report = tmp_path / "timing.json"
    assert main(["run", str(fork_dir), "--cim-timing", "modeled", "--repeat", "2", "--stream", "3",
                 "--report", str(report)]) == 0
    data = json.loads(report.read_text())
    assert set(data) == {"latency_ns", "period_ns", "frames"} and data["frames"] == 3
    assert set(data["latency_ns"]) == set(data["period_ns"]) == {"measured", "modeled"}
    assert data["latency_ns"]["modeled"] == read_plan(fork_dir / "plan.json").makespan_ns
    assert data["period_ns"]["modeled"] == read_plan(fork_dir / "plan.json").period_ns
    assert all(math.isfinite(data[k]["measured"]) and data[k]["measured"] > 0 for k in ("latency_ns", "period_ns"))
    assert "stream outputs equal the single-frame outputs frame by frame: yes" in capsys.readouterr().out
    assert main(["run", str(fork_dir), "--cim-timing", "modeled", "--repeat", "1", "--report", str(report)]) == 0
    assert set(json.loads(report.read_text())) == {"latency_ns", "frames"}


@pytest.mark.parametrize("flags", [
    ["--cim-timing", "fast"],
    ["--report", "{tmp}/r.json"],
    ["--repeat", "1", "--report", "{dir}/plan.json"],
    ["--repeat", "1", "--report", "{tmp}/r.txt"],
    ["--repeat", "1", "--report", "{tmp}/missing/r.json"],
    ["--stream", "-1"],
])
def test_bad_timing_flags_exit_2_and_leave_the_plan_alone(fork_dir, tmp_path, capsys, flags) -> None:
    before = (fork_dir / "plan.json").read_bytes()
    args = [f.format(tmp=tmp_path, dir=fork_dir) for f in flags]
    try:
        status = main(["run", str(fork_dir), *args])
    except SystemExit as exc:  # argparse's usage errors
        status = exc.code
    assert status == 2
    assert "error:" in capsys.readouterr().err
    assert (fork_dir / "plan.json").read_bytes() == before


@pytest.mark.parametrize("int8", [False, True], ids=["float", "int8"])
def test_a_throughput_plan_streams_on_its_schedule_frame_by_frame(tmp_path, int8) -> None:
    from cimsplit.compiler.frontend import ModelSpec
    from cimsplit.passes.pipeline import CompileOptions, compile_model
    from cimsplit.passes.placement.options import SolveOptions

    path = quantize_qdq(fork_net(), tmp_path) if int8 else save(fork_net(), tmp_path)
    options = CompileOptions(solve=SolveOptions(objective="throughput"), host_profile=table_profile(load(path)))
    hardware = load_hardware("x86", crossbars=1000, mvm_latency_ns=1.0)  # CIM convolutions pay off
    compiled = compile_model(ModelSpec(str(path)), hardware, options)
    out = write_artifacts(tmp_path / "out", compiled.artifacts)
    stream = frames(8, seed=11)
    with Session(out, cim_timing="modeled") as session:
        plan = session.manifest.plan
        assert plan.objective == "throughput" and plan.stream is not None
        assert {p.device for p in plan.partitions} == {"host", "cim"}
        single = [session.run(feeds) for feeds in stream]
        timed = session.measure_stream(stream)
        assert_never_early(timed, plan)
    for one, got in zip(single, timed.outputs):
        for name, value in one.items():
            if int8:
                assert got[name].tobytes() == value.tobytes()
            else:
                np.testing.assert_allclose(got[name], value, atol=1e-4, rtol=1e-3)


def conv_chain() -> onnx.ModelProto:
    """x[1,8,8,8] -> a: Conv 8->8 3x3 -> Relu -> b: Conv 8->8 3x3 -> Relu -> y (each Conv + Relu one operator)."""
    nodes = [helper.make_node("Conv", ["x", "wa"], ["ta"], name="a", pads=[1] * 4), helper.make_node("Relu", ["ta"], ["ra"], name="ra"),
             helper.make_node("Conv", ["ra", "wb"], ["tb"], name="b", pads=[1] * 4), helper.make_node("Relu", ["tb"], ["y"], name="rb")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                              initializer=weights(wa=(8, 8, 3, 3), wb=(8, 8, 3, 3)))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_pieces_cut_between_int8_operators_pass_the_pair_as_the_partition_runs_it(tmp_path) -> None:
    """A stream schedule that puts other host work between a and b cuts the host partition there.  The int8
    tensor crosses (b's piece gets a copy of the DequantizeLinear, so b still runs as a QLinearConv), and the
    pair onnxruntime converts to uint8 in the whole partition, marked by the split, is converted in the pieces
    too: they compute the partition's output bit for bit (with the float tensor crossing, b's piece ran a
    float Conv; with the int8 pair unconverted, an S8S8 kernel: a stream's outputs differed from one frame's)."""
    import onnxruntime as ort

    path = quantize_qdq(conv_chain(), tmp_path)
    out = compile_fixed(path, tmp_path / "out", set())
    plan = read_plan(out / "plan.json")
    (part,) = plan.partitions
    model = onnx.load(out / part.file)
    assert UNSIGNED_KEY == KEY_UNSIGNED  # (the split writes what the runtime reads; neither imports the other)
    marked = [n.output[0] for n in model.graph.node if any(p.key == UNSIGNED_KEY for p in n.metadata_props)]
    times = {op.name: (op.start_ns, op.duration_ns) for op in plan.timeline.operators}
    a, b = sorted(times, key=lambda name: times[name][0])[:2]  # (the ops are named after their anchor nodes)
    gap = {name: (start + (0.0 if name == a else 1e3), duration) for name, (start, duration) in times.items()}  # 1 us after a
    gap["elsewhere"] = (times[a][0] + times[a][1] + 1.0, 10.0)  # another partition's host work in it
    pieces = host_pieces(part.name, model, part.outputs, gap, {})
    assert [p.operators for p in pieces][:2] == [(a,), (b,)]
    crossing = pieces[0].outputs
    assert len(crossing) == 1 and crossing[0] in marked  # the pair's tensor, not the DequantizeLinear's float output
    types = {vi.name: vi.type.tensor_type.elem_type for vi in pieces[1].model.graph.input}
    assert types[crossing[0]] == TensorProto.UINT8
    feeds = {"x": np.random.default_rng(3).standard_normal((1, 8, 8, 8)).astype(np.float32)}
    whole = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    values = dict(feeds)
    for piece in pieces:
        session = ort.InferenceSession(piece.model.SerializeToString(), providers=["CPUExecutionProvider"])
        values.update(zip(piece.outputs, session.run(list(piece.outputs), {t: values[t] for t in piece.inputs})))
    assert values[part.outputs[0]].tobytes() == whole[0].tobytes()


def test_a_stream_shorter_than_twice_its_frames_in_flight_says_it_never_reaches_the_steady_state(fork_dir, capsys) -> None:
    with Session(fork_dir, cim_timing="modeled") as session:
        k = session.frames_in_flight
    assert main(["run", str(fork_dir), "--cim-timing", "modeled", "--stream", str(2 * k - 1)]) == 0
    assert f"never reach the steady state; the measured period is the fill's and the drain's (pass --stream {2 * k}" in capsys.readouterr().out
    assert main(["run", str(fork_dir), "--cim-timing", "modeled", "--stream", str(2 * k)]) == 0
    assert "steady state;" not in capsys.readouterr().out
