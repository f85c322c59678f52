"""Host pieces measured where the runtime runs them, and the timing predicted with them (``--measure-pieces``).

Exact numbers come from dry runs (the executor's rules on given host costs);
measured CPU times are only checked for consistency with what the plan records.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _profiles import table_profile
from graphs import save
from test_timed import add_stream, compile_fixed, fork_net, frames

from cimsplit.cli import main
from cimsplit.compiler.frontend import load
from cimsplit.runtime import Session
from cimsplit.runtime.emulation import EmulatedTask
from cimsplit.runtime.piece_costs import (
    HostPieces,
    gap_medians,
    host_gaps,
    host_pieces_of,
    measure_host_pieces,
    stream_costs,
    stream_gaps,
    write_host_pieces,
)
from cimsplit.runtime.plan import read_plan
from cimsplit.runtime.timed import TimedRun


@pytest.fixture(scope="module")
def stream_dir(tmp_path_factory) -> Path:
    """The fork of test_timed (c1, c2 on the CIM; host pieces [n] and [m, g]) with a stream schedule."""
    folder = tmp_path_factory.mktemp("fork-stream")
    out = compile_fixed(save(fork_net(), folder), folder / "out", {"c1", "c2"})
    add_stream(out)
    return out


def test_a_dry_run_with_the_per_operator_costs_is_the_plan(stream_dir) -> None:
    with Session(stream_dir, cim_timing="modeled") as session:
        feeds = session.check_feeds(frames(1)[0])
        one = session._executor("latency")
        assert [(p.name, p.operators, p.duration_ns) for p in one.pieces] == [
            ("host_0.0", ("n",), 348.0), ("host_0.1", ("m", "g"), 664.0)]
        run = one.run([feeds], host_ns={p.name: p.duration_ns for p in one.pieces})
        assert run.latencies_ns == [session.timeline.makespan_ns] == [4039.0]
        assert run.outputs == [{}]
        assert session.predict("latency", 1).latencies_ns == [4039.0]  # per-operator costs by default
        stream = session._executor("stream")
        run = stream.run([feeds] * 10, host_ns={p.name: p.duration_ns for p in stream.pieces})
        assert run.period_ns == session.manifest.plan.period_ns == 3287.5  # c1 and c2, 3287.5 ns each, bound it


def test_a_dry_run_times_the_host_pieces_it_is_given(stream_dir) -> None:
    with Session(stream_dir, cim_timing="modeled") as session:
        feeds = session.check_feeds(frames(1)[0])
        run = session._executor("latency").run([feeds], host_ns={"host_0.0": 1000.0, "host_0.1": 2000.0})
        # x -> CIM 37.5; c1 37.5..3325; t1 -> host 3325..3375; [n] 0..1000; tn 1000..1037.5; c2 1037.5..4325;
        # y2 -> host 4325..4375; [m, g] 3375..5375: the frame ends at 5375.
        assert run.latencies_ns == [5375.0]
        host = {t.name: (t.start_ns, t.finish_ns, t.cpu_ns) for t in run.tasks if t.resource == "host"}
        assert host == {"host_0.0": (0.0, 1000.0, 1000.0), "host_0.1": (3375.0, 5375.0, 2000.0)}
        # A host that needs 5000 ns per frame is the bottleneck of the stream (the CIM needs 3287.5).
        stream = session._executor("stream").run([feeds] * 20, host_ns={"host_0.0": 2000.0, "host_0.1": 3000.0})
        assert stream.period_ns == pytest.approx(5000.0)


def test_a_dry_run_charges_the_executors_gap_only_where_the_host_does_not_wait(stream_dir) -> None:
    with Session(stream_dir, cim_timing="modeled") as session:
        costs = {"host_0.0": 1000.0, "host_0.1": 2000.0}
        # [n] starts after its gap of 100: 100..1100; tn 1100..1137.5; c2 1137.5..4425; y2 -> host 4425..4475.
        # [m, g] is ready at 3325 + 50 = 3375 (t1), after [n]'s end + its gap 500 = 1600: still 3375..5375.
        hidden = session.predict("latency", 1, costs, {"host_0.0": 100.0, "host_0.1": 500.0})
        assert hidden.latencies_ns == [5375.0]
        # A gap of 3000 after [n]'s end at 1100 ends at 4100, after the input came: [m, g] 4100..6100.
        shown = session.predict("latency", 1, costs, {"host_0.0": 100.0, "host_0.1": 3000.0})
        assert shown.latencies_ns == [6100.0]
        # A stream whose host is the bottleneck: each frame's host work is 2000 + 3000 plus the gaps 100 + 400.
        stream = session.predict("stream", 20, {"host_0.0": 2000.0, "host_0.1": 3000.0},
                                 {"host_0.0": 100.0, "host_0.1": 400.0})
        assert stream.period_ns == pytest.approx(5500.0)


def test_host_gaps_leave_out_the_calls_that_waited_for_an_input() -> None:
    def host(name: str, ready: float, start: float, finish: float) -> EmulatedTask:
        return EmulatedTask("host", name, 0, ready, start, finish, 0.0, finish - start)

    # a 0..100; b ready at 50, starts 130 (gap 30); a ready at 400 > 200: it waited, left out;
    # b ready at 450 < 500, starts 520 (gap 20).  The CIM task is not the host's.
    run = TimedRun([], [], [], (host("a", 0, 0, 100), host("b", 50, 130, 200), host("a", 400, 402, 500),
                                EmulatedTask("cim", "c", 0, 0.0, 100.0, 300.0, 200.0), host("b", 450, 520, 600)))
    assert host_gaps(run) == {"b": [30.0, 20.0]}
    assert gap_medians([run]) == {"b": 25.0}
    later = TimedRun([], [], [], (host("a", 0, 0, 100), host("b", 0, 190, 200), host("a", 0, 210, 300)))
    # b: means 25 and 90 -> median 57.5; a waited nowhere in the second: 10, its only stream with a gap.
    assert stream_gaps([run, later]) == {"b": 57.5, "a": 10.0}


def test_measured_pieces_are_recorded_and_predicted_with(stream_dir, tmp_path, capsys) -> None:
    with Session(stream_dir, cim_timing="modeled") as session:
        measured = measure_host_pieces(session, repeat=2, frames=4, rounds=2)
        assert [p.name for p in measured.latency.pieces] == [p.name for p in session._executor("latency").pieces]
        assert measured.stream is not None
        assert (measured.frames, measured.streams, measured.repeat, measured.rounds) == (4, 2, 2, 2)
        assert all(p.measured_ns > 0 for p in measured.latency.pieces + measured.stream.pieces)
        assert (measured.latency.ops_predicted_ns, measured.latency.plan_ns) == (4039.0, 4039.0)
        assert measured.stream.plan_ns == 3287.5 and measured.stream.ops_predicted_ns == pytest.approx(3287.5)
        again = session.predict("latency", 1, {p.name: p.measured_ns for p in measured.latency.pieces},
                                {p.name: p.gap_ns for p in measured.latency.pieces})
        assert again.latencies_ns == [measured.latency.predicted_ns]
        # The stream's figure is the steady state: a dry run of 200 frames (2 in flight) with the stream's costs.
        gaps = {p.name: p.gap_ns for p in measured.stream.pieces}
        steady = session.predict("stream", 200, {p.name: p.measured_ns for p in measured.stream.pieces}, gaps)
        assert steady.period_ns == measured.stream.predicted_ns
        three = session.predict("stream", 3, {p.name: p.measured_ns for p in measured.stream.pieces}, gaps).period_ns
    before = read_plan(stream_dir / "plan.json")
    write_host_pieces(stream_dir, measured)
    after = read_plan(stream_dir / "plan.json")
    assert host_pieces_of(after.report) == measured == HostPieces.from_json(json.loads(json.dumps(measured.to_json())))
    assert (after.timeline, after.period_ns, after.stream) == (before.timeline, before.period_ns, before.stream)

    report = tmp_path / "timing.json"
    assert main(["run", str(stream_dir), "--cim-timing", "modeled", "--repeat", "1", "--stream", "3",
                 "--report", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["latency_ns"]["modeled"] == measured.latency.predicted_ns
    assert data["latency_ns"]["modeled_per_operator"] == 4039.0
    assert data["period_ns"]["modeled"] == three  # predicted for a stream of the measured length
    assert "host pieces measured on" in capsys.readouterr().out


def test_compile_measures_the_pieces_when_asked(tmp_path, capsys) -> None:
    path = save(fork_net(), tmp_path)
    profile = tmp_path / "profile.json"
    table_profile(load(path)).save(profile)
    out = tmp_path / "out"
    assert main(["compile", str(path), "-o", str(out), "--host-profile", str(profile), "--crossbars", "1000",
                 "--mvm-latency", "1ns", "--objective", "throughput", "--measure-pieces", "--measure-frames", "3"]) == 0
    assert "host pieces measured here" in capsys.readouterr().out
    plan = read_plan(out / "plan.json")
    pieces = host_pieces_of(plan.report)
    assert pieces is not None and pieces.stream is not None and pieces.frames == 3
    assert pieces.latency.plan_ns == plan.timeline.makespan_ns and pieces.stream.plan_ns == plan.period_ns
    ops = {op.name for op in plan.timeline.operators if op.device == "host"}
    assert {o for p in pieces.stream.pieces for o in p.operators} == ops


def test_too_few_measuring_frames_exit_2(tmp_path, capsys) -> None:
    path = save(fork_net(), tmp_path)
    assert main(["compile", str(path), "-o", str(tmp_path / "out"), "--measure-pieces", "--measure-frames", "1"]) == 2
    assert capsys.readouterr().err.startswith("error: --measure-frames")
    assert not (tmp_path / "out").exists()


def test_stream_costs_are_the_median_over_streams_of_each_streams_mean() -> None:
    def stream(*cpu: tuple[str, str, float]) -> TimedRun:
        return TimedRun([], [], [], tuple(EmulatedTask(resource, name, 0, 0.0, 0.0, t, t, t) for resource, name, t in cpu))

    # Piece a: means 2, 3 and 30 (a stream in a burst) -> median 3 (the mean over all its calls: 9.25);
    # piece b: 5, 7, 6 -> 6.  A bus task is not a host piece.
    streams = [stream(("host", "a", 1.0), ("host", "a", 3.0), ("host", "b", 5.0), ("bus", "t", 9.0)),
               stream(("host", "a", 3.0), ("host", "b", 7.0)), stream(("host", "a", 30.0), ("host", "b", 6.0))]
    assert stream_costs(streams) == {"a": 3.0, "b": 6.0}
