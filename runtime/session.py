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
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np
import onnx

from cimsplit.compiler.errors import CimsplitError
from cimsplit.runtime.devices import Device, FunctionalCimSimulator, Kernel, OrtCpuDevice
from cimsplit.runtime.manifest import Manifest, PartitionEntry, load_manifest
from cimsplit.runtime.timeline import Timeline, replay
from cimsplit.runtime.transfers import TransferCounter, TransferStats

__all__ = ["Session"]

log = logging.getLogger(__name__)


class Session:
    """Run a compiled model split over host and CIM.

    ``run`` calls are not re-entrant (transfer buffers are reused between
    inferences); use one session per thread.

    ``cim_device`` replaces the default functional CIM simulator (any object
    with ``name`` and ``load(model) -> kernel``); ``threads`` is the intra-op
    thread count of every onnxruntime session.
    """

    def __init__(self, plan_dir: str | Path, *, cim_device: Device | None = None,
                 host_device: Device | None = None, threads: int = 1) -> None:
        self.manifest: Manifest = load_manifest(plan_dir)
        self.devices: dict[str, Device] = {
            "host": host_device or OrtCpuDevice(threads=threads),
            "cim": cim_device or FunctionalCimSimulator(threads=threads),
        }
        self._kernels: dict[str, Kernel] = {}
        for part in self.manifest.partitions:
            if part.device not in self.devices:
                raise CimsplitError(f"partition {part.name} is for unknown device {part.device!r}", hint="recompile")
            self._kernels[part.name] = self.devices[part.device].load(onnx.load(str(part.path)))
        self._transfers_by_tensor: dict[str, list] = {}
        for tr in self.manifest.transfers:
            self._transfers_by_tensor.setdefault(tr.tensor, []).append(tr)
        self._executors = {name: ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"cimsplit-{name}")
                           for name in self.devices}
        self.counter = TransferCounter()
        self._handed_out = {o.name for o in self.manifest.outputs}
        """Graph outputs go to the caller: their transfers get fresh arrays, never a reused buffer."""
        self.timeline: Timeline = replay(self.manifest.plan["timeline"])
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
    def _arrive(self, buffers: dict[str, dict[str, np.ndarray]], device: str, values: Mapping[str, np.ndarray]) -> None:
        """Store values on ``device`` and perform the plan's transfers of them."""
        buffers[device].update(values)
        for tensor, value in values.items():
            for tr in self._transfers_by_tensor.get(tensor, ()):
                if tr.src_device == device:
                    stage = None if tensor in self._handed_out else tr.dst_device
                    self.counter.copy(value, buffers[tr.dst_device], tensor, tr.bytes, tr.latency_ns, stage)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One inference: the original model's outputs, by name."""
        feeds = self.check_feeds(feeds)
        buffers: dict[str, dict[str, np.ndarray]] = {name: {} for name in self.devices}
        self._arrive(buffers, "host", feeds)
        pending: list[PartitionEntry] = list(self.manifest.partitions)
        running: dict[Future, PartitionEntry] = {}

        def ready(part: PartitionEntry) -> bool:
            return all(t in buffers[part.device] for t in part.inputs)

        while pending or running:
            busy = {part.device for part in running.values()}
            launch = []
            for part in pending:
                if part.device not in busy and ready(part):
                    launch.append(part)
                    busy.add(part.device)
            for part in launch:
                pending.remove(part)
            if not running and len(launch) == 1:
                # Nothing else can start before this one ends: run it here, no thread hand-off.
                part = launch[0]
                self._arrive(buffers, part.device, self._call(part, self._feeds(part, buffers)))
                continue
            for part in launch:
                running[self._executors[part.device].submit(self._call, part, self._feeds(part, buffers))] = part
            if not running:
                waiting = {p.name: [t for t in p.inputs if t not in buffers[p.device]] for p in pending}
                raise RuntimeError(f"the manifest never provides the inputs of {waiting}")
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: self.manifest.partitions.index(running[f])):
                part = running.pop(future)
                self._arrive(buffers, part.device, future.result())
        self.runs += 1
        missing = [name for name in self.output_names if name not in buffers["host"]]
        if missing:
            raise RuntimeError(f"the manifest never brings outputs {missing} to the host")
        # Kernels may reuse their output arrays next run: hand out copies (graph outputs are small).
        return {name: np.array(buffers["host"][name], copy=True) for name in self.output_names}

    @staticmethod
    def _feeds(part: PartitionEntry, buffers: dict[str, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The partition's inputs from its own device's buffers (taken on the main thread)."""
        return {t: buffers[part.device][t] for t in part.inputs}

    def _call(self, part: PartitionEntry, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self._kernels[part.name].run(feeds)
        return {t: outputs[t] for t in part.outputs}

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
