"""Timed execution of a plan: the host for real, the CIM and the bus emulated (``--cim-timing modeled``).

One frame (``run --repeat``) or a pipelined stream (``run --stream``) runs
on three kinds of resources, each taking its work in the order of the
schedule it executes (:class:`ExecSchedule`) and starting an item as soon as
its inputs are there and it is its turn (self-timed):

* **host**: one worker, serial.  Host partitions run for real on
  onnxruntime, cut into the pieces the schedule runs back to back
  (:func:`cimsplit.runtime.steps.host_pieces`).  A piece waits, with a precise
  sleep, until the emulated arrival of its inputs.
* **cim**: every CIM operator is a unit of its own
  (:class:`~cimsplit.runtime.emulation.ModeledCimSimulator`), frames in order.
* **bus**: one transfer at a time in the stream (the throughput model's
  serial bus), each on its own for one frame (the latency model has no bus
  contention).

The stream's order is the shifted-copies schedule: frame f's item t comes at
``f * period_ns + start_ns(t)``; at most ``frames_in_flight`` frames are
admitted (frame f once frame f - K has finished).  A plan without a stream
schedule streams two frames in flight, the host taking whichever frame's
next piece is ready first (what the untimed runtime does).

Honest emulation on the machine that runs the host: the CIM's values are
computed by onnxruntime *before* the clock starts (each distinct frame once,
all partitions in order, host pieces included), because computing a CIM
partition on this CPU takes far longer than the modeled accelerator and
would steal the host's core; the timed run then hands the CIM's outputs over
at their emulated finish times.  After the run every tensor the host sent
to the CIM is compared with the one the values were computed from (a
mismatch is an error; a long stream of large frames is checked for its first
256 MiB of such tensors), so the CIM's outputs are onnxruntime's on exactly
the inputs it received.  CIM and bus items are pure time arithmetic (no thread
of their own: they are done the moment their finish time is known), so the
whole executor is one thread and the only wall-clock waits are the host's.
That arithmetic runs on the host's core, so it is kept off the host's path:
every item is laid out before the clock starts (:mod:`cimsplit.runtime.events`),
and items are timed only when the host's next piece needs them or while the
host waits anyway (emulated times do not depend on when they are computed).
On YOLOv5n's throughput stream this cut the executor's gaps between host
pieces from about 40 us to about 9 us per piece.
A frame is finished when its last output is on the host; the run returns
only after that time has passed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from cimsplit.runtime.clock import now_ns, sleep_until_ns
from cimsplit.runtime.emulation import EmulatedTask, ModeledBus, ModeledCimKernel, ModeledCimSimulator
from cimsplit.runtime.events import Events, FrameLayout
from cimsplit.runtime.plan import TransferRecord
from cimsplit.runtime.steps import Piece, Step

__all__ = ["ExecSchedule", "TimedRun", "TimedExecutor"]

_ATOL, _RTOL = 1e-4, 1e-3
_VERIFY_BYTES = 256 * 2**20
"""Tensors sent to the CIM are kept for the check after the run up to this many bytes (the first frames')."""
_NOTHING = np.zeros(0, dtype=np.float32)
"""Every tensor of a dry run (nothing is computed)."""


@dataclass(frozen=True)
class ExecSchedule:
    """What a timed run executes: one frame's schedule S and how frames overlap."""

    host_ns: Mapping[str, tuple[float, float]]
    """Host operator -> (start, duration) in S."""
    transfer_start_ns: Mapping[tuple[str, str], float]
    """(tensor, destination device) -> start in S (orders the serial bus)."""
    period_ns: float | None
    """Shift between frames; None: the host takes the first ready frame (no stream schedule)."""
    frames_in_flight: int
    serial_bus: bool
    modeled_latency_ns: float
    """One frame's modeled latency under S."""
    finish_ns: Mapping[str, float]
    """Operator -> finish in S, where transfers are not scheduled (they follow their producer at once)."""


@dataclass(frozen=True)
class TimedRun:
    """Outputs and times (ns of :func:`cimsplit.runtime.clock.now_ns`) of a timed run, frame by frame."""

    outputs: list[dict[str, np.ndarray]]
    admitted_ns: list[float]
    finished_ns: list[float]
    tasks: tuple[EmulatedTask, ...] = field(repr=False)
    """Every host piece run and every CIM and bus task emulated."""

    @property
    def latencies_ns(self) -> list[float]:
        return [f - a for a, f in zip(self.admitted_ns, self.finished_ns)]

    @property
    def period_ns(self) -> float | None:
        """Steady-state period: the spacing of finishes with the first and last tenth of the frames left out.

        (T[n-1-m] - T[m]) / (n - 1 - 2m), m = n // 10: a self-timed stream
        fills faster than the periodic schedule (no earlier frames compete for
        the resources) and drains faster (no later ones), so its first and
        last finishes crowd together; :attr:`period_end_to_end_ns` keeps them.
        """
        n = len(self.finished_ns)
        m = n // 10
        return (self.finished_ns[n - 1 - m] - self.finished_ns[m]) / (n - 1 - 2 * m) if n > 1 else None

    @property
    def period_end_to_end_ns(self) -> float | None:
        """(last finish - first finish) / (frames - 1)."""
        n = len(self.finished_ns)
        return (self.finished_ns[-1] - self.finished_ns[0]) / (n - 1) if n > 1 else None

    @property
    def wall_ns(self) -> float:
        return self.finished_ns[-1] - self.admitted_ns[0]


@dataclass(frozen=True)
class _HostPiece:
    piece: Piece
    kernel: object
    deps: tuple[int, ...]
    """Events it waits for (frame 0's ids): its inputs on the host and its frame's admission."""
    made: tuple[int, ...]
    """Events it makes: its outputs on the host."""


@dataclass(frozen=True)
class _CimItem:
    step: Step
    deps: tuple[int, ...]
    made: tuple[int, ...]
    unit: int | None
    """Event of its operator's unit being done with the frame (None: a step of no operator)."""


class TimedExecutor:
    """Runs frames of a plan with the host for real and the CIM and bus emulated (module docstring)."""

    def __init__(self, pieces: Sequence[tuple[Piece, object]], cim: ModeledCimSimulator,
                 cim_partitions: Sequence[tuple[ModeledCimKernel, Sequence[str], Sequence[str]]],
                 transfers: Sequence[TransferRecord], inputs: Sequence[str], outputs: Sequence[str],
                 schedule: ExecSchedule) -> None:
        at = FrameLayout()
        admit = FrameLayout.ADMIT
        self._pieces = [_HostPiece(p, k, tuple(at((t, "host")) for t in p.inputs) + (admit,),
                                   tuple(at((t, "host")) for t in p.outputs))
                        for p, k in sorted(pieces, key=lambda pk: pk[0].start_ns)]
        self._cim = cim
        self._cim_partitions = list(cim_partitions)
        self._steps = [_CimItem(s, tuple(at((x, "cim")) for x in s.inputs) + (admit,),
                                tuple(at((y, "cim")) for y in s.outputs),
                                None if s.operator is None else at(("unit", s.operator)))
                       for kernel, _, _ in cim_partitions for s in kernel.steps]
        self._transfers = sorted(transfers, key=lambda tr: schedule.transfer_start_ns.get((tr.tensor, tr.dst_device), 0.0))
        self._moves = [(at((tr.tensor, tr.src_device)), at((tr.tensor, tr.dst_device))) for tr in self._transfers]
        self._inputs = list(inputs)
        self._arrivals = [at((x, "host")) for x in inputs]
        self._outputs = list(outputs)
        self._done_deps = [at((o, "host")) for o in outputs] or [admit]
        self._frame_events = at.size
        self.schedule = schedule
        self._host_readers: dict[str, int] = {}
        """Tensor -> how many host pieces and transfers from the host read it (per frame)."""
        for hp in self._pieces:
            for t in hp.piece.inputs:
                self._host_readers[t] = self._host_readers.get(t, 0) + 1
        for tr in self._transfers:
            if tr.src_device == "host":
                self._host_readers[tr.tensor] = self._host_readers.get(tr.tensor, 0) + 1

    # ----------------------------------------------------------- values first
    def _ahead(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every transferred tensor of one frame, computed in dependency order before any timing."""
        values = dict(feeds)
        units = [(hp.kernel, hp.piece.inputs, hp.piece.outputs) for hp in self._pieces]
        units += [(kernel, tuple(ins), tuple(outs)) for kernel, ins, outs in self._cim_partitions]
        while units:
            runnable = [u for u in units if all(t in values for t in u[1])]
            if not runnable:
                raise RuntimeError(f"the plan never provides {sorted({t for u in units for t in u[1]} - set(values))[:5]}")
            for unit in runnable:
                out = unit[0].run({t: values[t] for t in unit[1]})  # type: ignore[attr-defined]
                values.update((t, out[t]) for t in unit[2])
            units = [u for u in units if u not in runnable]
        moved = {tr.tensor for tr in self._transfers}
        return {t: v for t, v in values.items() if t in moved}

    def _nothing(self) -> dict[str, np.ndarray]:
        """A dry run's stand-in for one frame's transferred tensors."""
        return dict.fromkeys((tr.tensor for tr in self._transfers), _NOTHING)

    # --------------------------------------------------------------- timing
    @property
    def pieces(self) -> tuple[Piece, ...]:
        """The host pieces, in schedule order."""
        return tuple(hp.piece for hp in self._pieces)

    def run(self, stream: Sequence[Mapping[str, np.ndarray]], host_ns: Mapping[str, float] | None = None,
            gap_ns: Mapping[str, float] | None = None) -> TimedRun:
        """Run ``stream`` (checked feeds, one mapping per frame); outputs in frame order.

        ``host_ns`` (piece name -> ns) makes it a dry run: nothing is computed
        and nobody waits; each host piece takes the time given on a virtual
        clock starting at 0, so the run is the executor's own timing rules
        applied to those host costs (a prediction; outputs are empty).
        ``gap_ns`` (piece name -> ns) adds the executor's own time before a
        piece whose inputs are already there
        (:func:`~cimsplit.runtime.piece_costs.host_gaps`): the piece
        starts at max(ready, previous piece's end + gap); a host that waits
        for an input does that bookkeeping while it waits.
        Everything but the host's work is laid out before the clock starts.
        """
        n = len(stream)
        dry = host_ns is not None
        ahead_of: dict[int, dict[str, np.ndarray]] = {}
        for feeds in stream:
            if id(feeds) not in ahead_of:
                ahead_of[id(feeds)] = self._nothing() if dry else self._ahead(feeds)
        run = _Run(self, n, [ahead_of[id(feeds)] for feeds in stream],
                   [dict.fromkeys(self._inputs, _NOTHING) if dry else dict(feeds) for feeds in stream])
        order = self._host_order(run.ev, n)
        ev, values, size, host_log = run.ev, run.values, self._frame_events, run.host_log
        t0 = 0.0 if dry else float(now_ns())
        for f in range(min(n, max(1, self.schedule.frames_in_flight))):
            ev.set(f * size + FrameLayout.ADMIT, t0)
        host_free = t0
        for f, hp, deps in order:
            base = f * size
            ready = ev.latest(deps)
            if dry:
                start = max(ready, host_free + (gap_ns.get(hp.piece.name, 0.0) if gap_ns else 0.0))
                cpu = host_ns[hp.piece.name]  # type: ignore[index]
                host_free = finish = start + cpu
                out = dict.fromkeys(hp.piece.outputs, _NOTHING)
            else:
                if ready > now_ns():
                    ev.settle()  # the emulation's bookkeeping while the host would wait anyway
                start = sleep_until_ns(ready)
                cpu = time.thread_time_ns()
                out = hp.kernel.run({t: values[f][t] for t in hp.piece.inputs})  # type: ignore[attr-defined]
                finish = float(now_ns())
                cpu = time.thread_time_ns() - cpu
            values[f].update((t, out[t]) for t in hp.piece.outputs)
            host_log.append(("host", hp.piece.name, f, ready, float(start), finish, hp.piece.duration_ns, cpu))
            for t in hp.piece.inputs:
                run.release(f, t)
            run.hold(f, hp.piece.outputs)  # until set: the transfers that read them fire in settle
            for e in hp.made:
                ev.set(base + e, finish)
            for t in hp.piece.outputs:
                run.release(f, t)
        ev.settle()
        missing = [f for f in range(n) if ev.time[f * size + FrameLayout.DONE] is None]
        if missing:
            raise RuntimeError(f"frames {missing[:5]} never finish: the plan's schedule does not bring all outputs to the host")
        finished: list[float] = [ev.time[f * size + FrameLayout.DONE] for f in range(n)]  # type: ignore[misc]
        if dry:
            outputs: list[dict[str, np.ndarray]] = [{} for _ in range(n)]
        else:
            sleep_until_ns(max(finished))
            outputs = [{o: np.array(values[f][o], copy=True) for o in self._outputs} for f in range(n)]
            self._verify(run.received, run.ahead)
        tasks = [EmulatedTask(*record) for record in host_log] + self._cim.records + run.bus.records
        tasks.sort(key=lambda t: (t.start_ns, t.frame))
        admitted: list[float] = [ev.time[f * size + FrameLayout.ADMIT] for f in range(n)]  # type: ignore[misc]
        return TimedRun(outputs, admitted, finished, tuple(tasks))

    def _host_order(self, ev: Events, n: int) -> Iterator[tuple[int, _HostPiece, list[int]]]:
        """(frame, piece, its events) in the order the host takes them; each with every input's time known."""
        sched, size = self.schedule, self._frame_events

        def events(f: int, i: int) -> list[int]:
            return [f * size + d for d in self._pieces[i].deps]

        if sched.period_ns is not None:
            # The schedule's order; should its next item wait on work after it (a frame admitted
            # later than the schedule assumed), the first item in order that can run goes first.
            # The emulated items settle only when the next piece in order is not known without them
            # (known-ness only grows as they fire, so the choice is the same), or while the host waits.
            pending = sorted(((f * sched.period_ns + hp.piece.start_ns, f, i) for f in range(n)
                              for i, hp in enumerate(self._pieces)))
            while pending:
                k: int | None = 0
                deps = events(*pending[0][1:])
                if not ev.known(deps):
                    ev.settle()
                    k = next((k for k, (_, f, i) in enumerate(pending) if ev.known(events(f, i))), None)
                    if k is None:
                        raise RuntimeError("the host has no piece it can run: the plan's partitions wait on each other")
                    deps = events(*pending[k][1:])
                _, f, i = pending.pop(k)
                yield f, self._pieces[i], deps
            return
        cursor = [0] * n
        first_open = 0  # frames before it have had all their pieces; frames are admitted in order
        for _ in range(n * len(self._pieces)):
            ev.settle()
            while first_open < n and cursor[first_open] == len(self._pieces):
                first_open += 1
            best = None
            for f in range(first_open, n):
                if ev.time[f * size + FrameLayout.ADMIT] is None:
                    break
                if cursor[f] == len(self._pieces):
                    continue
                deps = events(f, cursor[f])
                if not ev.known(deps):
                    continue
                ready = ev.latest(deps)
                if best is None or ready < best[0]:
                    best = (ready, f, deps)
            if best is None:
                raise RuntimeError("the host has no piece it can run: the plan's partitions wait on each other")
            _, f, deps = best
            cursor[f] += 1
            yield f, self._pieces[cursor[f] - 1], deps

    @staticmethod
    def _verify(received: list[tuple[int, str, np.ndarray]], ahead: list[dict[str, np.ndarray]]) -> None:
        """The CIM got exactly the tensors its outputs were computed from (floats: within DESIGN §6's tolerance)."""
        for f, tensor, value in received:
            expected = ahead[f][tensor]
            if value.dtype == expected.dtype and value.shape == expected.shape and np.array_equal(value, expected):
                continue
            if value.dtype.kind == "f" and value.shape == expected.shape and np.allclose(value, expected, atol=_ATOL, rtol=_RTOL):
                continue
            raise RuntimeError(f"frame {f}: the CIM received {tensor} different from the values its outputs were computed from")


class _Run:
    """One run's state: events, every frame's host tensors, and the emulated CIM and bus items laid out."""

    def __init__(self, executor: TimedExecutor, n: int, ahead: list[dict[str, np.ndarray]],
                 values: list[dict[str, np.ndarray]]) -> None:
        self.executor = executor
        sched = executor.schedule
        size = executor._frame_events
        self.ev = ev = Events(n * size + n * len(executor._transfers))
        self.ahead = ahead
        self.values = values
        self.readers = [dict(executor._host_readers) for _ in range(n)]
        self.received: list[tuple[int, str, np.ndarray]] = []
        self.held_bytes = 0
        self.host_log: list[tuple] = []
        executor._cim.reset()
        self.bus = ModeledBus(sched.serial_bus)
        k_frames = max(1, sched.frames_in_flight)
        for f in range(n):
            base = f * size
            admit = base + FrameLayout.ADMIT
            if f >= k_frames:
                before = (f - k_frames) * size + FrameLayout.DONE
                ev.add((before,), self._copy, admit, before)
            for x in executor._arrivals:
                ev.add((admit,), self._copy, base + x, admit)
            done = [base + d for d in executor._done_deps]
            ev.add(done, self._latest, base + FrameLayout.DONE, done)
            for item in executor._steps:
                deps = [base + d for d in item.deps]
                order = [base - size + item.unit] if f and item.unit is not None else []
                unit = None if item.unit is None else base + item.unit
                ev.add(deps + order, self._cim_step, f, item.step, deps, [base + y for y in item.made], unit)
        period = sched.period_ns or 0.0
        moves = sorted((f * period + sched.transfer_start_ns.get((tr.tensor, tr.dst_device), 0.0), f, i)
                       for f in range(n) for i, tr in enumerate(executor._transfers))
        turns = n * size  # the serial bus's k-th transfer is done: event turns + k
        for k, (_, f, i) in enumerate(moves):
            src, dst = executor._moves[i]
            deps = [f * size + src, f * size + FrameLayout.ADMIT]
            turn = [turns + k - 1] if sched.serial_bus and k else []
            ev.add(deps + turn, self._transfer, f, executor._transfers[i], deps, f * size + dst, turns + k)

    def _copy(self, event: int, source: int) -> None:
        self.ev.set(event, self.ev.time[source])  # type: ignore[arg-type]

    def _latest(self, event: int, deps: list[int]) -> None:
        self.ev.set(event, self.ev.latest(deps))

    def _cim_step(self, f: int, step: Step, deps: list[int], made: list[int], unit: int | None) -> None:
        finish = self.executor._cim.issue(f, step, self.ev.latest(deps))
        for y in made:
            self.ev.set(y, finish)
        if unit is not None:
            self.ev.set(unit, finish)

    def _transfer(self, f: int, tr: TransferRecord, deps: list[int], made: int, turn: int) -> None:
        if tr.dst_device == "host":
            self.values[f][tr.tensor] = self.ahead[f][tr.tensor]
        elif tr.src_device == "host":
            value = self.values[f][tr.tensor]
            if self.held_bytes < _VERIFY_BYTES:
                self.received.append((f, tr.tensor, value))
                self.held_bytes += value.nbytes
            self.release(f, tr.tensor)
        finish = self.bus.issue(f, tr.name, self.ev.latest(deps), tr.latency_ns)
        self.ev.set(made, finish)
        self.ev.set(turn, finish)

    def hold(self, f: int, tensors: Sequence[str]) -> None:
        """Host tensors of frame f just made: held by one more reader until their transfers have fired."""
        readers = self.readers[f]
        for t in tensors:
            readers[t] = readers.get(t, 0) + 1

    def release(self, f: int, t: str) -> None:
        """One reader of host tensor t of frame f is done; after the last, let it go."""
        readers = self.readers[f]
        readers[t] = readers.get(t, 0) - 1
        if readers[t] <= 0 and t not in self.executor._outputs:
            self.values[f].pop(t, None)
