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
A frame is finished when its last output is on the host; the run returns
only after that time has passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from cimsplit.runtime.clock import now_ns, sleep_until_ns
from cimsplit.runtime.emulation import EmulatedTask, ModeledBus, ModeledCimKernel, ModeledCimSimulator
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


class _Events:
    """Times of events, and items that fire once all the events they wait for have a time."""

    def __init__(self) -> None:
        self.time: dict[Hashable, float] = {}
        self._waiting: dict[Hashable, list[list]] = {}
        self._ready: list[Callable[[], None]] = []

    def set(self, key: Hashable, t: float) -> None:
        if key in self.time:  # a copied node (a cut DequantizeLinear) makes its tensor twice
            return
        self.time[key] = t
        for item in self._waiting.pop(key, ()):
            item[0] -= 1
            if item[0] == 0:
                self._ready.append(item[1])

    def add(self, deps: Sequence[Hashable], fire: Callable[[], None]) -> None:
        missing = [d for d in dict.fromkeys(deps) if d not in self.time]
        item = [len(missing), fire]
        for d in missing:
            self._waiting.setdefault(d, []).append(item)
        if not missing:
            self._ready.append(fire)

    def latest(self, deps: Sequence[Hashable]) -> float:
        return max(self.time[d] for d in deps)

    def settle(self) -> None:
        while self._ready:
            self._ready.pop()()


@dataclass(frozen=True)
class _HostPiece:
    piece: Piece
    kernel: object


class TimedExecutor:
    """Runs frames of a plan with the host for real and the CIM and bus emulated (module docstring)."""

    def __init__(self, pieces: Sequence[tuple[Piece, object]], cim: ModeledCimSimulator,
                 cim_partitions: Sequence[tuple[ModeledCimKernel, Sequence[str], Sequence[str]]],
                 transfers: Sequence[TransferRecord], inputs: Sequence[str], outputs: Sequence[str],
                 schedule: ExecSchedule) -> None:
        self._pieces = [_HostPiece(p, k) for p, k in sorted(pieces, key=lambda pk: pk[0].start_ns)]
        self._cim = cim
        self._cim_partitions = list(cim_partitions)
        self._steps: list[Step] = [s for kernel, _, _ in cim_partitions for s in kernel.steps]
        self._transfers = sorted(transfers, key=lambda tr: schedule.transfer_start_ns.get((tr.tensor, tr.dst_device), 0.0))
        self._inputs = list(inputs)
        self._outputs = list(outputs)
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

    def run(self, stream: Sequence[Mapping[str, np.ndarray]], host_ns: Mapping[str, float] | None = None) -> TimedRun:
        """Run ``stream`` (checked feeds, one mapping per frame); outputs in frame order.

        ``host_ns`` (piece name -> ns) makes it a dry run: nothing is computed
        and nobody waits; each host piece takes the time given on a virtual
        clock starting at 0, so the run is the executor's own timing rules
        applied to those host costs (a prediction; outputs are empty).
        """
        n = len(stream)
        dry = host_ns is not None
        ahead_of: dict[int, dict[str, np.ndarray]] = {}
        for feeds in stream:
            if id(feeds) not in ahead_of:
                ahead_of[id(feeds)] = self._nothing() if dry else self._ahead(feeds)
        ahead = [ahead_of[id(feeds)] for feeds in stream]
        sched = self.schedule
        k_frames = max(1, sched.frames_in_flight)
        self._cim.reset()
        bus = ModeledBus(sched.serial_bus)
        ev = _Events()
        values: list[dict[str, np.ndarray]] = [dict.fromkeys(self._inputs, _NOTHING) if dry else dict(feeds)
                                               for feeds in stream]
        received: list[tuple[int, str, np.ndarray]] = []
        host_tasks: list[EmulatedTask] = []
        t0 = 0.0 if dry else float(now_ns())
        host_free = t0
        readers = [dict(self._host_readers) for _ in range(n)]

        def release(f: int, t: str) -> None:
            """One reader of host tensor t of frame f is done; after the last, let it go."""
            readers[f][t] = readers[f].get(t, 0) - 1
            if readers[f][t] <= 0 and t not in self._outputs:
                values[f].pop(t, None)

        for f in range(n):
            self._frame_items(ev, f, k_frames, t0)
        self._bus_items(ev, bus, n, ahead, values, received, release)

        for f, hp in self._host_order(ev, n):
            ready = ev.latest(self._deps(f, hp))
            if dry:
                start = max(ready, host_free)
                cpu = host_ns[hp.piece.name]  # type: ignore[index]
                host_free = finish = start + cpu
                out = dict.fromkeys(hp.piece.outputs, _NOTHING)
            else:
                start = sleep_until_ns(ready)
                cpu = time.thread_time_ns()
                out = hp.kernel.run({t: values[f][t] for t in hp.piece.inputs})  # type: ignore[attr-defined]
                finish = float(now_ns())
                cpu = time.thread_time_ns() - cpu
            values[f].update((t, out[t]) for t in hp.piece.outputs)
            host_tasks.append(EmulatedTask("host", hp.piece.name, f, ready, float(start), finish, hp.piece.duration_ns, cpu))
            for t in hp.piece.inputs:
                release(f, t)
            for t in hp.piece.outputs:
                readers[f][t] = readers[f].get(t, 0) + 1  # held until set: the transfers fire in settle
                ev.set(("t", f, t, "host"), finish)
            ev.settle()
            for t in hp.piece.outputs:
                release(f, t)
        ev.settle()
        missing = [f for f in range(n) if ("done", f) not in ev.time]
        if missing:
            raise RuntimeError(f"frames {missing[:5]} never finish: the plan's schedule does not bring all outputs to the host")
        finished = [ev.time[("done", f)] for f in range(n)]
        if dry:
            outputs: list[dict[str, np.ndarray]] = [{} for _ in range(n)]
        else:
            sleep_until_ns(max(finished))
            outputs = [{o: np.array(values[f][o], copy=True) for o in self._outputs} for f in range(n)]
            self._verify(received, ahead)
        tasks = tuple(sorted(host_tasks + self._cim.records + bus.records, key=lambda t: (t.start_ns, t.frame)))
        return TimedRun(outputs, [ev.time[("admit", f)] for f in range(n)], finished, tasks)

    def _frame_items(self, ev: _Events, f: int, k_frames: int, t0: float) -> None:
        """Admission, inputs, finish and CIM steps of frame f."""
        if f < k_frames:
            ev.set(("admit", f), t0)
        else:
            ev.add([("done", f - k_frames)], lambda: ev.set(("admit", f), ev.time[("done", f - k_frames)]))

        def arrive() -> None:
            for x in self._inputs:
                ev.set(("t", f, x, "host"), ev.time[("admit", f)])

        ev.add([("admit", f)], arrive)
        done_deps = [("t", f, o, "host") for o in self._outputs] or [("admit", f)]
        ev.add(done_deps, lambda: ev.set(("done", f), ev.latest(done_deps)))
        for step in self._steps:
            deps = [("t", f, x, "cim") for x in step.inputs] + [("admit", f)]
            order = [("unit", step.operator, f - 1)] if f and step.operator is not None else []

            def fire(step: Step = step, deps: list = deps) -> None:
                finish = self._cim.issue(f, step, ev.latest(deps))
                for y in step.outputs:
                    ev.set(("t", f, y, "cim"), finish)
                if step.operator is not None:
                    ev.set(("unit", step.operator, f), finish)

            ev.add(deps + order, fire)

    def _bus_items(self, ev: _Events, bus: ModeledBus, n: int, ahead: list[dict[str, np.ndarray]],
                   values: list[dict[str, np.ndarray]], received: list[tuple[int, str, np.ndarray]],
                   release: Callable[[int, str], None]) -> None:
        """The transfers of every frame; on a serial bus in the stream's order (each waits for the one before)."""
        sched = self.schedule
        period = sched.period_ns or 0.0
        held = [0]  # bytes of received tensors kept for the check after the run
        items = [(f * period + sched.transfer_start_ns.get((tr.tensor, tr.dst_device), 0.0), f, i, tr)
                 for f in range(n) for i, tr in enumerate(self._transfers)]
        items.sort(key=lambda item: item[:3])
        for k, (_, f, _, tr) in enumerate(items):
            deps = [("t", f, tr.tensor, tr.src_device), ("admit", f)]
            turn = [("bus", k - 1)] if sched.serial_bus and k else []

            def fire(f: int = f, tr: TransferRecord = tr, deps: list = deps, k: int = k) -> None:
                if tr.dst_device == "host":
                    values[f][tr.tensor] = ahead[f][tr.tensor]
                elif tr.src_device == "host":
                    if held[0] < _VERIFY_BYTES:
                        received.append((f, tr.tensor, values[f][tr.tensor]))
                        held[0] += values[f][tr.tensor].nbytes
                    release(f, tr.tensor)
                finish = bus.issue(f, tr.name, ev.latest(deps), tr.latency_ns)
                ev.set(("t", f, tr.tensor, tr.dst_device), finish)
                ev.set(("bus", k), finish)

            ev.add(deps + turn, fire)

    def _host_order(self, ev: _Events, n: int):
        """(frame, piece) in the order the host takes them; each with every input's time known."""
        ev.settle()
        sched = self.schedule
        if sched.period_ns is not None:
            # The schedule's order; should its next item wait on work after it (a frame admitted
            # later than the schedule assumed), the first item in order that can run goes first.
            pending = sorted(((f * sched.period_ns + hp.piece.start_ns, f, i) for f in range(n)
                              for i, hp in enumerate(self._pieces)))
            while pending:
                k = next((k for k, (_, f, i) in enumerate(pending) if self._known(ev, f, self._pieces[i])), None)
                if k is None:
                    raise RuntimeError("the host has no piece it can run: the plan's partitions wait on each other")
                _, f, i = pending.pop(k)
                yield f, self._pieces[i]
            return
        cursor = [0] * n
        first_open = 0  # frames before it have had all their pieces; frames are admitted in order
        for _ in range(n * len(self._pieces)):
            while first_open < n and cursor[first_open] == len(self._pieces):
                first_open += 1
            best = None
            for f in range(first_open, n):
                if ("admit", f) not in ev.time:
                    break
                if cursor[f] == len(self._pieces):
                    continue
                hp = self._pieces[cursor[f]]
                if not self._known(ev, f, hp):
                    continue
                ready = ev.latest(self._deps(f, hp))
                if best is None or ready < best[0]:
                    best = (ready, f)
            if best is None:
                raise RuntimeError("the host has no piece it can run: the plan's partitions wait on each other")
            f = best[1]
            cursor[f] += 1
            yield f, self._pieces[cursor[f] - 1]

    @staticmethod
    def _deps(f: int, hp: _HostPiece) -> list[tuple]:
        return [("t", f, t, "host") for t in hp.piece.inputs] + [("admit", f)]

    @staticmethod
    def _known(ev: _Events, f: int, hp: _HostPiece) -> bool:
        time_of = ev.time
        return ("admit", f) in time_of and all(("t", f, t, "host") in time_of for t in hp.piece.inputs)

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
