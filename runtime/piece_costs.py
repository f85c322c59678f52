"""Host costs measured as the runtime runs them, and the plan's timing re-predicted with them (DESIGN §6).

The plan times host operators with per-operator costs profiled in the whole
model.  The timed runtime runs host partitions cut into pieces
(:func:`cimsplit.runtime.steps.host_pieces`), each its own onnxruntime
session, whose inputs come from the CIM or, in a deep pipeline, were made
many frames earlier: every piece pays a ``session.run`` of its own, its own
graph (NCHWc reorders at its boundaries, no fusion across them) and inputs
that are no longer in the caches.  On YOLOv5n at 640 px that made the host
work of a frame 1.3-1.5x (stream) and up to 1.9x (one frame at a time) what
the per-operator costs say (``bench/results/host_pieces_diagnosis.txt``).

:func:`measure_host_pieces` measures each piece where it runs: the CPU time
of the host thread (``time.thread_time``, which a neighbour's preemption does
not inflate) per call, in ``rounds`` rounds (5 by default) of ``repeat``
single frames each followed by a stream of ``frames`` frames (when the plan
has a stream schedule): the median over all single frames (the latency
schedule's pieces) and the median over the streams of the mean in each (the
stream schedule's pieces, with the plan's frames in flight; a period is a
mean, and the median leaves out a stream caught in a burst), after an
untimed warm-up pass.  Beside each piece's CPU time it records the
executor's own time before it (:func:`host_gaps`: the executor's bookkeeping
between two pieces when the host does not wait for an input), which the
dry-run prediction charges the same way: on YOLOv5n's throughput plan at 100
crossbars, 26 pieces a frame, these gaps were 10-14 us in the median and
29-38 us in the mean (a few long ones: the emulation's items settled when
the next piece is not known without them), about 0.8 ms of an 8-9 ms period
that a prediction from CPU times alone left out.  One round is not enough on
a shared machine: on this 2-core VM the host pieces' CPU time per frame of YOLOv5n's throughput plan at
100 crossbars varied 8.1-11.2 ms between four consecutive 50-frame streams of
one process, with nothing else running (small pieces whose inputs are cold
are the most sensitive to what the machine's neighbours do to the caches),
where the whole model in one session varied 52-58 ms per frame; and its
latency plan's single frames come in bursts: 80 consecutive ones took
27-28 ms of host CPU time for a minute, then 31-44 ms for ten frames, so
blocks of 10 single frames gave medians 18.8-23.3 ms apart.  Rounds spread
the samples over the measurement's time.  The prediction is then the timed executor's
own rules (host in the schedule's order, CIM and bus emulated, frames
admitted ``frames_in_flight`` at a time) in a dry run with those costs
(:meth:`~cimsplit.runtime.session.Session.predict`): one frame's latency, and
the stream's steady-state period (a dry run of
max(200, 10 x frames in flight) frames).  The same dry run with the
per-operator costs is recorded beside it, so the plan says how much of the
difference is the runtime's rules (a piece hands its outputs over when it
ends) and how much the measured costs.

A stream of N frames with K in flight is mostly fill and drain unless N is
several times K (YOLOv5n's plans have K = 26-43: a 50-frame stream never
reaches its steady state, and its spacing of finishes is not the period), so
:func:`stream_prediction` predicts a stream of the length that was measured,
with the same estimator (:attr:`~cimsplit.runtime.timed.TimedRun.period_ns`).

``cimsplit compile --measure-pieces`` writes the result into plan.json's
``host_pieces`` section (:class:`HostPieces`); ``run --cim-timing modeled``
then holds measured times against it.  Measured on the machine that runs
the host, stated in the plan with its CPU, onnxruntime version and load
average.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from cimsplit.files import write_atomic
from cimsplit.machine import cpu_model, load_average
from cimsplit.runtime.plan import dumps
from cimsplit.runtime.timed import TimedRun

__all__ = [
    "PieceCost", "PieceTiming", "HostPieces", "measure_host_pieces", "write_host_pieces", "host_pieces_of",
    "cpu_medians", "cpu_means", "stream_costs", "host_gaps", "gap_medians", "stream_gaps",
    "stream_prediction", "latency_prediction", "STEADY_FRAMES_PER_FLIGHT", "SECTION",
]

SECTION = "host_pieces"
"""plan.json's key for :class:`HostPieces`."""


@dataclass(frozen=True)
class PieceCost:
    """One host piece: its operators' summed per-operator cost and its measured CPU time per call."""

    name: str
    operators: tuple[str, ...]
    modeled_ns: float
    measured_ns: float
    gap_ns: float = 0.0
    """The executor's time before a call whose inputs are there (:func:`host_gaps`); 0 in older plans."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "operators": list(self.operators), "modeled_ns": float(self.modeled_ns),
                "measured_ns": float(self.measured_ns), "gap_ns": float(self.gap_ns)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PieceCost:
        return cls(str(data["name"]), tuple(data["operators"]), float(data["modeled_ns"]), float(data["measured_ns"]),
                   float(data.get("gap_ns", 0.0)))


@dataclass(frozen=True)
class PieceTiming:
    """One schedule's pieces and what the executor's rules predict with each kind of host cost."""

    pieces: tuple[PieceCost, ...]
    predicted_ns: float
    """Latency (one frame) or period (stream) with the measured piece costs."""
    ops_predicted_ns: float
    """The same with the per-operator costs (each piece: the sum of its operators')."""
    plan_ns: float
    """The plan's own prediction (its makespan replayed, or ``period_ns``)."""

    @property
    def measured_over_modeled(self) -> float:
        """Summed measured piece costs over their summed per-operator costs."""
        modeled = sum(p.modeled_ns for p in self.pieces)
        return sum(p.measured_ns for p in self.pieces) / modeled if modeled else 1.0

    def to_json(self) -> dict[str, Any]:
        return {"pieces": [p.to_json() for p in self.pieces], "predicted_ns": float(self.predicted_ns),
                "ops_predicted_ns": float(self.ops_predicted_ns), "plan_ns": float(self.plan_ns)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PieceTiming:
        return cls(tuple(PieceCost.from_json(p) for p in data["pieces"]), float(data["predicted_ns"]),
                   float(data["ops_predicted_ns"]), float(data["plan_ns"]))


@dataclass(frozen=True)
class HostPieces:
    """plan.json's ``host_pieces``: where the host pieces were measured, and the timing predicted with them."""

    latency: PieceTiming
    stream: PieceTiming | None
    repeat: int
    frames: int
    cpu: str
    ort_version: str
    load_average_before: tuple[float, float, float]
    load_average_after: tuple[float, float, float]
    source: str = "host pieces measured in the runtime: CPU time of the host thread per call, median"
    streams: int = 1
    rounds: int = 1
    """Rounds of ``repeat`` single frames (each followed by one of the ``streams`` streams)."""

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "latency": self.latency.to_json(),
                "stream": None if self.stream is None else self.stream.to_json(), "repeat": self.repeat,
                "frames": self.frames, "streams": self.streams, "rounds": self.rounds, "cpu": self.cpu, "ort_version": self.ort_version,
                "load_average_before": list(self.load_average_before), "load_average_after": list(self.load_average_after)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HostPieces:
        stream = data.get("stream")
        return cls(PieceTiming.from_json(data["latency"]), None if stream is None else PieceTiming.from_json(stream),
                   int(data["repeat"]), int(data["frames"]), str(data["cpu"]), str(data["ort_version"]),
                   _triple(data["load_average_before"]), _triple(data["load_average_after"]), str(data["source"]),
                   int(data.get("streams", 1)), int(data.get("rounds", 1)))


def host_pieces_of(report: Mapping[str, Any]) -> HostPieces | None:
    """The ``host_pieces`` section of a plan's report (:attr:`cimsplit.runtime.plan.Plan.report`), if any."""
    data = report.get(SECTION)
    return None if data is None else HostPieces.from_json(data)


STEADY_FRAMES_PER_FLIGHT = 10
"""The recorded period is a dry run's over max(200, 10 x frames in flight) frames: its steady state.  A
stream of few frames (fewer than several times the frames in flight) is mostly fill and drain, and its
spacing of finishes is not the period: :func:`stream_prediction` predicts such a stream for its own length."""


def _cpu_times(runs: Sequence[TimedRun]) -> dict[str, list[float]]:
    """Host piece name -> CPU time of each of its calls in the timed ``runs``."""
    cpu: dict[str, list[float]] = {}
    for run in runs:
        for task in run.tasks:
            if task.resource == "host":
                cpu.setdefault(task.name, []).append(task.cpu_ns)
    return cpu


def host_gaps(run: TimedRun) -> dict[str, list[float]]:
    """Host piece name -> the executor's time before each of its calls in ``run`` whose inputs were there
    when the previous piece ended: start - previous end (its bookkeeping, and the emulation's when the next
    piece is not known without it).  Calls that waited for an input are left out: their gap hides in the wait."""
    host = sorted((t for t in run.tasks if t.resource == "host"), key=lambda t: t.start_ns)
    gaps: dict[str, list[float]] = {}
    for before, task in zip(host, host[1:]):
        if task.ready_ns <= before.finish_ns:
            gaps.setdefault(task.name, []).append(max(0.0, task.start_ns - before.finish_ns))
    return gaps


def cpu_medians(runs: Sequence[TimedRun]) -> dict[str, float]:
    """Host piece name -> median CPU time per call over the timed ``runs``."""
    return {name: statistics.median(values) for name, values in _cpu_times(runs).items()}


def gap_medians(runs: Sequence[TimedRun]) -> dict[str, float]:
    """Host piece name -> median of its :func:`host_gaps` over ``runs`` (pieces that always waited: absent)."""
    gaps: dict[str, list[float]] = {}
    for run in runs:
        for name, values in host_gaps(run).items():
            gaps.setdefault(name, []).extend(values)
    return {name: statistics.median(values) for name, values in gaps.items()}


def stream_gaps(streams: Sequence[TimedRun]) -> dict[str, float]:
    """Host piece name -> the median over ``streams`` of its mean :func:`host_gaps` in each (as :func:`stream_costs`)."""
    return _median_over_streams([{name: math.fsum(v) / len(v) for name, v in host_gaps(run).items()} for run in streams])


def _median_over_streams(means: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Name -> the median of its value over the streams' ``means`` that have it."""
    names = dict.fromkeys(name for m in means for name in m)
    return {name: statistics.median(m[name] for m in means if name in m) for name in names}


def _timing(session: Any, mode: str, runs: Sequence[TimedRun], frames: int, plan_ns: float) -> PieceTiming:
    """Pieces of ``mode``'s executor with their CPU times and gaps in ``runs``, and the latency (one frame; each
    piece's median over the single frames ``runs``) or steady-state period (``frames`` frames; each piece's
    median over the streams ``runs`` of its mean in each) predicted with them."""
    executor = session._executor(mode)
    cpu = cpu_medians(runs) if mode == "latency" else stream_costs(runs)
    gaps = gap_medians(runs) if mode == "latency" else stream_gaps(runs)
    pieces = tuple(PieceCost(p.name, p.operators, p.duration_ns, cpu[p.name], gaps.get(p.name, 0.0))
                   for p in executor.pieces)
    measured = session.predict(mode, frames, *_costs(pieces))
    per_operator = session.predict(mode, frames, {p.name: p.modeled_ns for p in pieces})

    def figure(run: TimedRun) -> float:
        return (run.period_ns or 0.0) if mode == "stream" else run.latencies_ns[0]

    return PieceTiming(pieces, figure(measured), figure(per_operator), plan_ns)


def _costs(pieces: Sequence[PieceCost]) -> tuple[dict[str, float], dict[str, float]]:
    """(CPU time, gap) per piece name: a dry run's ``host_ns`` and ``gap_ns``."""
    return {p.name: p.measured_ns for p in pieces}, {p.name: p.gap_ns for p in pieces}


def cpu_means(runs: Sequence[TimedRun]) -> dict[str, float]:
    """Host piece name -> mean CPU time per call over the timed ``runs`` (a stream's period is a mean)."""
    return {name: math.fsum(values) / len(values) for name, values in _cpu_times(runs).items()}


def stream_costs(streams: Sequence[TimedRun]) -> dict[str, float]:
    """Host piece name -> the median over ``streams`` of its mean CPU time per call in each: a period is a
    mean, and one stream caught in a burst of the machine's (YOLOv5n's throughput plan at 100 crossbars:
    three streams' periods 33 % apart) moves a mean over all of them, not the median."""
    return _median_over_streams([cpu_means([run]) for run in streams])


def stream_prediction(session: Any, frames: int, pieces: HostPieces | None) -> tuple[float | None, float | None]:
    """(with the measured piece costs, with the per-operator costs): the period the executor's rules give a
    stream of ``frames`` frames, measured as :attr:`~cimsplit.runtime.timed.TimedRun.period_ns` is.
    The first is None without measured stream pieces (or when they are not the pieces this runtime cuts)."""
    per_operator = session.predict("stream", frames).period_ns
    if pieces is None or pieces.stream is None:
        return None, per_operator
    costs, gaps = _costs(pieces.stream.pieces)
    if set(costs) != set(session.host_piece_names("stream")):
        return None, per_operator
    return session.predict("stream", frames, costs, gaps).period_ns, per_operator


def latency_prediction(session: Any, pieces: HostPieces | None) -> float | None:
    """One frame's latency with the measured piece costs (None without them, or when the pieces differ)."""
    if pieces is None:
        return None
    costs, gaps = _costs(pieces.latency.pieces)
    if set(costs) != set(session.host_piece_names("latency")):
        return None
    return session.predict("latency", 1, costs, gaps).latencies_ns[0]


def measure_host_pieces(session: Any, repeat: int = 10, frames: int = 20, seed: int = 0,
                        rounds: int = 5) -> HostPieces:
    """Measure the host pieces of ``session`` (a :class:`~cimsplit.runtime.session.Session` with modeled CIM
    timing) in ``rounds`` rounds of ``repeat`` single frames, each followed by a stream of ``frames`` frames
    when the plan has a stream schedule, and predict one frame's latency (the pieces' median CPU time over
    all single frames) and the stream's period (the median over the streams of their mean in each)."""
    rng = np.random.default_rng(seed)
    feeds = session.check_feeds({s.name: _random(rng, s.dtype, s.shape) for s in session.input_specs})
    plan = session.manifest.plan
    streaming = plan.stream is not None and plan.period_ns is not None
    frames, rounds, repeat = max(2, frames), max(1, rounds), max(1, repeat)
    before = load_average()
    session.measure_latency(feeds, warm_up=True)
    singles: list[TimedRun] = []
    streams: list[TimedRun] = []
    for k in range(rounds):
        singles += [session.measure_latency(feeds) for _ in range(repeat)]
        if streaming:
            streams.append(session.measure_stream([feeds] * frames, warm_up=(k == 0)))
    latency = _timing(session, "latency", singles, 1, session.timeline.makespan_ns)
    stream = None
    if streaming:
        steady = max(200, STEADY_FRAMES_PER_FLIGHT * session.frames_in_flight)
        stream = _timing(session, "stream", streams, steady, plan.period_ns)
    return HostPieces(latency, stream, repeat, frames if stream else 0, cpu_model(), ort.__version__,
                      before, load_average(), streams=len(streams), rounds=rounds)


def write_host_pieces(directory: str | Path, pieces: HostPieces) -> None:
    """Put ``pieces`` into ``directory``/plan.json (atomically; the rest of the plan is kept as it is)."""
    path = Path(directory) / "plan.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    document[SECTION] = pieces.to_json()
    write_atomic(path, dumps(document))


def _random(rng: np.random.Generator, dtype: Any, shape: Sequence[Any]) -> np.ndarray:
    dims = [int(d) for d in shape]
    kind = np.dtype(dtype)
    if kind.kind == "f":
        return rng.standard_normal(dims).astype(kind)
    if kind.kind == "b":
        return rng.integers(0, 2, size=dims).astype(bool)
    return rng.integers(0, 3, size=dims).astype(kind)


def _triple(value: Sequence[Any]) -> tuple[float, float, float]:
    a, b, c = (float(x) for x in value)
    return (a, b, c)
