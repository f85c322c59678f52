"""Split inference: execute a compile directory on host and CIM (DESIGN §6)."""

from __future__ import annotations

from cimsplit.runtime.devices import CimDevice, Device, FunctionalCimSimulator, Kernel, OrtCpuDevice
from cimsplit.runtime.emulation import EmulatedTask, ModeledCimSimulator
from cimsplit.runtime.manifest import Manifest, load_manifest
from cimsplit.runtime.plan import Plan, read_plan
from cimsplit.runtime.session import CIM_TIMINGS, Session
from cimsplit.runtime.timed import TimedRun
from cimsplit.runtime.timeline import Timeline, replay
from cimsplit.runtime.transfers import TransferCounter, TransferStats

__all__ = [
    "Session",
    "CIM_TIMINGS",
    "TimedRun",
    "EmulatedTask",
    "ModeledCimSimulator",
    "Device",
    "CimDevice",
    "Kernel",
    "OrtCpuDevice",
    "FunctionalCimSimulator",
    "Manifest",
    "load_manifest",
    "Plan",
    "read_plan",
    "Timeline",
    "replay",
    "TransferCounter",
    "TransferStats",
]
