"""Split inference: execute a compile directory's manifest (DESIGN §6).

The session reads plan.json and does exactly what it says: each partition
is loaded once on its device, each transfer is an explicit counted copy from
the source device's buffers to the destination's.  Nothing is re-derived from
the model or from names.  A partition runs when all its inputs are in its
device's buffers; partitions on different devices whose inputs are ready run
at the same time, one worker thread per device (onnxruntime releases the GIL).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from cimsplit.errors import CimsplitError
from cimsplit.runtime.devices import Device, FunctionalCimSimulator, Kernel, OrtCpuDevice
from cimsplit.runtime.emulation import ModeledCimSimulator
from cimsplit.runtime.manifest import Manifest, load_manifest
from cimsplit.runtime.plan import PartitionRecord
from cimsplit.runtime.schedules import (
    UNTIMED_STREAM_FRAMES,
    build_executor,
    cim_durations_ns,
    latency_schedule,
    stream_frames_in_flight,
    stream_schedule,
)
from cimsplit.runtime.timed import TimedExecutor, TimedRun
from cimsplit.runtime.timeline import Timeline, replay
from cimsplit.runtime.transfers import TransferCounter, TransferStats

__all__ = ["Session", "CIM_TIMINGS"]

CIM_TIMINGS = ("functional", "modeled")
"""``functional``: the CIM computes and returns at once; ``modeled``: it completes when the modeled accelerator would."""

log = logging.getLogger(__name__)


class Session:
    """Run a compiled model split over host and CIM.

    ``run`` calls are not re-entrant (transfer buffers are reused between
    inferences); use one session per thread.

    ``cim_device`` replaces the default functional CIM simulator (any object
    with ``name`` and ``load(model) -> kernel``); ``threads`` is the intra-op
    thread count of every onnxruntime session; ``custom_op_libraries`` are
    registered with each (operators of custom domains).  ``cim_timing``
    ``"modeled"`` puts the CIM on the timed emulator
    (:class:`~cimsplit.runtime.emulation.ModeledCimSimulator`), which
    :meth:`measure_latency` and :meth:`measure_stream` need.
    """

    def __init__(self, plan_dir: str | Path, *, cim_device: Device | None = None,
                 host_device: Device | None = None, threads: int = 1, custom_op_libraries: Sequence[str] = (),
                 cim_timing: str = "functional") -> None:
        if cim_timing not in CIM_TIMINGS:
            raise CimsplitError(f"unknown CIM timing {cim_timing!r}", hint=f"use one of {', '.join(CIM_TIMINGS)}")
        self.manifest: Manifest = load_manifest(plan_dir)
        if cim_timing == "modeled" and cim_device is None:
            cim_device = ModeledCimSimulator(cim_durations_ns(self.manifest.plan), threads=threads,
                                             custom_op_libraries=custom_op_libraries)
        self.devices: dict[str, Device] = {
            "host": host_device or OrtCpuDevice(threads=threads, custom_op_libraries=custom_op_libraries),
            "cim": cim_device or FunctionalCimSimulator(threads=threads, custom_op_libraries=custom_op_libraries),
        }
        self._timed: dict[str, TimedExecutor] = {}
        self._kernels: dict[str, Kernel] = {}
        for part in self.manifest.partitions:
            if part.device not in self.devices:
                raise CimsplitError(f"partition {part.name} is for unknown device {part.device!r}", hint="recompile")
            self._kernels[part.name] = _load_partition(self.devices[part.device], self.manifest.path(part))
        self._transfers_by_tensor: dict[str, list] = {}
        for tr in self.manifest.transfers:
            self._transfers_by_tensor.setdefault(tr.tensor, []).append(tr)
        self._executors = {name: ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"cimsplit-{name}")
                           for name in self.devices}
        self.counter = TransferCounter()
        self._handed_out = {o.name for o in self.manifest.outputs}
        """Graph outputs go to the caller: they get fresh arrays, never a reused buffer."""
        parts = self.manifest.partitions
        self._readers: list[set[int]] = [
            {r for r, reader in enumerate(parts) if reader.device == part.device and set(reader.inputs) & set(part.outputs)}
            for part in parts
        ]
        """Per partition: the same-device partitions that read its outputs straight from its buffers."""
        self._uses: dict[tuple[str, str], int] = {}
        for part in parts:
            for tensor in part.inputs:
                self._uses[(tensor, part.device)] = self._uses.get((tensor, part.device), 0) + 1
        """(tensor, device) -> how many partitions read it there: after the last, the buffer is let go."""
        self._transferred = {(tr.tensor, tr.dst_device) for tr in self.manifest.transfers}
        self.timeline: Timeline = replay(self.manifest.plan.timeline)
        log.debug("loaded %d partitions and %d transfers from %s", len(parts), len(self.manifest.transfers),
                  self.manifest.directory)
        self.runs = 0

    # ------------------------------------------------------------------ inputs
    @property
    def input_specs(self):
        return self.manifest.inputs

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.manifest.outputs]

    def check_feeds(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Feeds as arrays, checked against the plan's inputs (names, dtypes, static dims)."""
        expected = {spec.name: spec for spec in self.manifest.inputs}
        missing = sorted(set(expected) - set(feeds))
        extra = sorted(set(feeds) - set(expected))
        if missing or extra:
            raise CimsplitError(
                f"inputs do not match the model: missing {missing}, unknown {extra}",
                hint=f"the model's inputs are {sorted(expected)}",
            )
        checked = {}
        for name, spec in expected.items():
            array = np.asarray(feeds[name])
            if array.dtype != np.dtype(spec.dtype):
                raise CimsplitError(f"input {name} has dtype {array.dtype}, the model wants {spec.dtype}")
            ok = len(array.shape) == len(spec.shape) and all(
                not isinstance(d, int) or d == s for d, s in zip(spec.shape, array.shape)
            )
            if not ok:
                raise CimsplitError(f"input {name} has shape {list(array.shape)}, the model wants {list(spec.shape)}")
            checked[name] = array
        return checked

    # --------------------------------------------------------------------- run
    def _arrive(self, buffers: dict[str, dict[str, np.ndarray]], device: str, values: Mapping[str, np.ndarray],
                stage: bool, fresh: bool = False) -> None:
        """Store values on ``device`` and perform the plan's transfers of them.

        Graph outputs landing on the host are copied here unless ``fresh`` (the
        kernel that made them returns new arrays each run): otherwise it may
        refill its buffer before the caller gets them.
        """
        if device == "host" and not fresh:
            values = {t: np.array(v, copy=True) if t in self._handed_out else v for t, v in values.items()}
        buffers[device].update(values)
        for tensor, value in values.items():
            for tr in self._transfers_by_tensor.get(tensor, ()):
                if tr.src_device == device:
                    reuse = tr.dst_device if stage and tensor not in self._handed_out else None
                    copied = self.counter.copy(value, buffers[tr.dst_device], tensor, tr.bytes, tr.latency_ns, reuse)
                    if reuse and not self._uses.get((tensor, reuse)):  # nobody reads it there
                        self.counter.release(copied, reuse)

    def _let_go(self, buffers: dict[str, dict[str, np.ndarray]], part: PartitionRecord,
                remaining: dict[tuple[str, str], int], stage: bool) -> None:
        """Drop the inputs ``part`` was the last reader of from its device's buffers, so their memory
        is reused while still warm (onnxruntime's arena for kernel outputs, the transfer pool for
        copies); graph outputs on the host stay for the caller."""
        for tensor in part.inputs:
            key = (tensor, part.device)
            remaining[key] -= 1
            if remaining[key] or (part.device == "host" and tensor in self._handed_out):
                continue
            value = buffers[part.device].pop(tensor)
            if stage and key in self._transferred and tensor not in self._handed_out:
                self.counter.release(value, part.device)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One inference: the original model's outputs, by name."""
        return self._execute([self.check_feeds(feeds)], window=1)[0]

    def run_stream(self, stream: Sequence[Mapping[str, np.ndarray]], window: int = 2) -> list[dict[str, np.ndarray]]:
        """Inferences of a stream, pipelined: up to ``window`` in flight, so one device
        works on input i+1 while the other finishes input i.  Results in input order."""
        if window < 1:
            raise ValueError("window must be at least 1")
        return self._execute([self.check_feeds(feeds) for feeds in stream], window=window)

    def _execute(self, stream: list[dict[str, np.ndarray]], window: int) -> list[dict[str, np.ndarray]]:
        """Run partition k of inference i when its inputs are on its device and, for i > 0,
        partition k and every same-device reader of its outputs are done for i-1 (kernels
        refill their output buffers, so those must be consumed first).  Each device runs one
        partition at a time, the lowest (i, k) first."""
        parts = self.manifest.partitions
        n = len(stream)
        stage = n == 1  # transfer buffers are reused only when one inference is in flight
        buffers: list[dict[str, dict[str, np.ndarray]] | None] = [None] * n
        done: list[set[int]] = [set() for _ in range(n)]
        started: list[set[int]] = [set() for _ in range(n)]
        remaining = [dict(self._uses) for _ in range(n)]
        results: list[dict[str, np.ndarray] | None] = [None] * n
        running: dict[Future, tuple[int, int]] = {}
        admitted = finished = 0

        def ready(i: int, k: int) -> bool:
            bufs = buffers[i]
            if k in started[i] or bufs is None or not all(t in bufs[parts[k].device] for t in parts[k].inputs):
                return False
            return i == 0 or (k in done[i - 1] and self._readers[k] <= done[i - 1])

        def complete(i: int, k: int, values: Mapping[str, np.ndarray]) -> None:
            nonlocal finished
            fresh = getattr(self._kernels[parts[k].name], "fresh_outputs", False)
            self._arrive(buffers[i], parts[k].device, values, stage, fresh)  # type: ignore[arg-type]
            self._let_go(buffers[i], parts[k], remaining[i], stage)  # type: ignore[arg-type]
            done[i].add(k)
            if len(done[i]) == len(parts):
                host = buffers[i]["host"]  # type: ignore[index]
                missing = [name for name in self.output_names if name not in host]
                if missing:
                    raise RuntimeError(f"the manifest never brings outputs {missing} to the host")
                results[i] = {name: host[name] for name in self.output_names}
                buffers[i] = None
                finished += 1

        while finished < n:
            while admitted < n and admitted - finished < window:
                buffers[admitted] = {name: {} for name in self.devices}
                self._arrive(buffers[admitted], "host", stream[admitted], stage)  # type: ignore[arg-type]
                admitted += 1
            if not parts:  # nothing to run: outputs are graph inputs
                for i in range(finished, admitted):
                    results[i] = {name: buffers[i]["host"][name] for name in self.output_names}  # type: ignore[index]
                finished = admitted
                continue
            busy = {parts[k].device for _, k in running.values()}
            launch: list[tuple[int, int]] = []
            for i in range(finished, admitted):
                for k in range(len(parts)):
                    if parts[k].device not in busy and ready(i, k):
                        launch.append((i, k))
                        busy.add(parts[k].device)
            for i, k in launch:
                started[i].add(k)
            if not running and len(launch) == 1:
                # Nothing else can start before this one ends: run it here, no thread hand-off.
                i, k = launch[0]
                complete(i, k, self._call(parts[k], self._feeds(parts[k], buffers[i])))  # type: ignore[arg-type]
                continue
            for i, k in launch:
                future = self._executors[parts[k].device].submit(self._call, parts[k], self._feeds(parts[k], buffers[i]))  # type: ignore[arg-type]
                running[future] = (i, k)
            if not running:
                i = finished
                waiting = {parts[k].name: [t for t in parts[k].inputs if t not in buffers[i][parts[k].device]]  # type: ignore[index]
                           for k in range(len(parts)) if k not in done[i]}
                raise RuntimeError(f"the manifest never provides the inputs of {waiting}")
            completed, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in sorted(completed, key=running.__getitem__):
                i, k = running.pop(future)
                complete(i, k, future.result())
        self.runs += n
        return results  # type: ignore[return-value]

    @staticmethod
    def _feeds(part: PartitionRecord, buffers: dict[str, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The partition's inputs from its own device's buffers (taken on the main thread)."""
        return {t: buffers[part.device][t] for t in part.inputs}

    def _call(self, part: PartitionRecord, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self._kernels[part.name].run(feeds)
        return {t: outputs[t] for t in part.outputs}

    # ------------------------------------------------------------------- timed
    def measure_latency(self, feeds: Mapping[str, np.ndarray], warm_up: bool = False) -> TimedRun:
        """One frame with the CIM and bus emulated, as the latency plan schedules it (``run --repeat``).

        ``warm_up``: run it once untimed first (the first run of each host piece allocates).
        """
        checked = self.check_feeds(feeds)
        if warm_up:
            self._executor("latency").run([checked])
        return self._executor("latency").run([checked])

    def measure_stream(self, stream: Sequence[Mapping[str, np.ndarray]], warm_up: bool = False) -> TimedRun:
        """A stream with the CIM and bus emulated, on the plan's periodic schedule (``run --stream``).

        ``warm_up``: run the stream once untimed first, so that onnxruntime's
        arena has grown to hold the tensors of ``frames_in_flight`` frames (with
        tens of frames in flight, a first stream spends much of its time
        faulting in fresh memory, which a steady stream does not).
        """
        checked: dict[int, dict[str, np.ndarray]] = {}
        for feeds in stream:  # a frame repeated keeps its identity: its values are computed once
            checked.setdefault(id(feeds), self.check_feeds(feeds))
        frames = [checked[id(feeds)] for feeds in stream]
        if warm_up:
            self._executor("stream").run(frames)
        return self._executor("stream").run(frames)

    def predict(self, mode: str, frames: int, host_ns: Mapping[str, float] | None = None,
                gap_ns: Mapping[str, float] | None = None) -> TimedRun:
        """A dry run (no compute, no waits) of ``frames`` frames on the ``latency`` or ``stream`` executor.

        ``host_ns``: host piece name -> its cost; None: each piece's summed per-operator cost.
        ``gap_ns``: host piece name -> the executor's time before it (:func:`~cimsplit.runtime.piece_costs.host_gaps`).
        """
        executor = self._executor(mode)
        costs = dict(host_ns) if host_ns is not None else {p.name: p.duration_ns for p in executor.pieces}
        nothing: dict[str, np.ndarray] = {}  # a dry run reads no input
        return executor.run([nothing] * max(1, frames), host_ns=costs, gap_ns=gap_ns)

    def host_piece_names(self, mode: str) -> list[str]:
        """Names of the host pieces the ``latency`` or ``stream`` executor runs, in schedule order."""
        return [p.name for p in self._executor(mode).pieces]

    @property
    def frames_in_flight(self) -> int:
        """Frames a stream overlaps: the plan's ``frames_in_flight``, or two for a plan without a stream schedule."""
        plan = self.manifest.plan
        return stream_frames_in_flight(plan) if plan.stream is not None else UNTIMED_STREAM_FRAMES

    def _executor(self, mode: str) -> TimedExecutor:
        cim = self.devices["cim"]
        if not isinstance(cim, ModeledCimSimulator):
            raise CimsplitError("timed runs need the modeled CIM timing", hint="pass --cim-timing modeled")
        if mode not in self._timed:
            plan = self.manifest.plan
            schedule = latency_schedule(plan) if mode == "latency" else stream_schedule(plan)
            files = {p.name: self.manifest.path(p) for p in self.manifest.partitions}
            kernels = {p.name: self._kernels[p.name] for p in self.manifest.partitions if p.device == "cim"}
            self._timed[mode] = build_executor(plan, files, self.devices["host"], cim, kernels, schedule)  # type: ignore[arg-type]
        return self._timed[mode]

    @property
    def transfer_stats(self) -> TransferStats:
        """Transfers performed since the session was made (or :meth:`reset_counters`)."""
        return self.counter.stats

    def reset_counters(self) -> None:
        self.counter.reset()

    def close(self) -> None:
        for executor in self._executors.values():
            executor.shutdown(wait=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _load_partition(device: Device, path: Path) -> Kernel:
    """Parse a partition file and load it on ``device``; a damaged file is a :class:`CimsplitError`."""
    try:
        model = onnx.load(str(path))
    except (DecodeError, OSError, ValueError, RuntimeError) as exc:
        raise CimsplitError(f"partition file {path} is damaged ({type(exc).__name__})", hint="recompile") from None
    if not model.HasField("graph") or not model.graph.output:
        raise CimsplitError(f"partition file {path} is damaged (no graph outputs)", hint="recompile")
    try:
        return device.load(model)
    except CimsplitError:
        raise
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CimsplitError(f"partition file {path} cannot be loaded on the {device.name}: {first}", hint="recompile") from None
