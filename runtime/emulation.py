"""Timed CIM emulation (``run --cim-timing modeled``, DESIGN §6): when the accelerator and the bus finish.

:class:`ModeledCimSimulator` is a CIM device back end: it loads a partition
like the functional simulator (its kernels compute the partition's exact
function with onnxruntime) and it also knows when the modeled accelerator
would be done.  Each CIM operator is its own weight-stationary unit (it owns
its crossbars) with a busy-until time; :meth:`ModeledCimSimulator.issue`
starts an operator of a frame when its inputs are there and its unit is
free, and finishes it exactly its modeled latency (T_acc of eq. 2-3, the
plan's ``duration_ns``) later.  :class:`ModeledBus` does the same for
transfers (eq. 4, ``TransferRecord.latency_ns``): one at a time when serial
(the stream's bus), each on its own when not (the latency model has no bus
contention).

Granularity: times are per CIM operator, not per partition, because the plan
times operators: the CIM operators of one partition may start at different
times, and in a stream different operators of one partition work on
different frames.  A partition's output is released when the operator that
makes it has finished.  Every issue is recorded (:class:`EmulatedTask`), so
that "no earlier than modeled" is a property of the record, checkable
without a stopwatch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from cimsplit.runtime.devices import FunctionalCimSimulator, Kernel
from cimsplit.runtime.steps import Step, partition_steps

__all__ = ["EmulatedTask", "ModeledCimSimulator", "ModeledCimKernel", "ModeledBus"]


@dataclass(frozen=True, slots=True)
class EmulatedTask:
    """One emulated (``cim``, ``bus``) or executed (``host``) task of one frame; times in ns of the runtime clock."""

    resource: str
    name: str
    frame: int
    ready_ns: float
    """When its inputs were there (and, for the host, its frame admitted)."""
    start_ns: float
    finish_ns: float
    modeled_ns: float
    """Its modeled duration."""
    cpu_ns: float = 0.0
    """Host tasks: CPU time of the thread that ran it (preemption by neighbours does not inflate it)."""


class ModeledCimKernel:
    """A loaded CIM partition: computes with onnxruntime (``run``) and lists its timed steps."""

    fresh_outputs = True

    def __init__(self, kernel: Kernel, steps: Sequence[Step]) -> None:
        self._kernel = kernel
        self.steps = tuple(steps)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._kernel.run(feeds)


class ModeledCimSimulator(FunctionalCimSimulator):
    """CIM back end with the modeled accelerator's timing; ``durations_ns``: CIM operator -> T_acc."""

    def __init__(self, durations_ns: Mapping[str, float], threads: int = 1, custom_op_libraries: Sequence[str] = ()) -> None:
        super().__init__(threads=threads, custom_op_libraries=custom_op_libraries)
        self.durations_ns = dict(durations_ns)
        self._log: list[tuple] = []
        self._busy_until: dict[str, float] = {}

    def load(self, model: onnx.ModelProto) -> ModeledCimKernel:
        return ModeledCimKernel(super().load(model), partition_steps(model, self.durations_ns))

    def reset(self) -> None:
        """Forget the units' busy times and the record (a new run)."""
        self._log = []
        self._busy_until = {}

    @property
    def records(self) -> list[EmulatedTask]:
        """Every step issued since :meth:`reset`."""
        return [EmulatedTask(*record) for record in self._log]

    def issue(self, frame: int, step: Step, ready_ns: float) -> float:
        """Run ``step`` of ``frame`` on its unit once its inputs are there (``ready_ns``); returns its finish.

        A step of no operator (a weight's DequantizeLinear) takes no time and no unit.
        """
        if step.operator is None:
            return ready_ns
        duration = self.durations_ns[step.operator]
        start = max(ready_ns, self._busy_until.get(step.operator, ready_ns))
        finish = start + duration
        self._busy_until[step.operator] = finish
        self._log.append(("cim", step.operator, frame, ready_ns, start, finish, duration))
        return finish


class ModeledBus:
    """The CPU-CIM bus: a transfer takes its modeled latency; ``serial`` ones take turns."""

    def __init__(self, serial: bool) -> None:
        self.serial = serial
        self._log: list[tuple] = []
        self._busy_until = float("-inf")

    def issue(self, frame: int, name: str, ready_ns: float, latency_ns: float) -> float:
        start = max(ready_ns, self._busy_until) if self.serial else ready_ns
        finish = start + latency_ns
        if self.serial:
            self._busy_until = finish
        self._log.append(("bus", name, frame, ready_ns, start, finish, latency_ns))
        return finish

    @property
    def records(self) -> list[EmulatedTask]:
        """Every transfer issued."""
        return [EmulatedTask(*record) for record in self._log]
