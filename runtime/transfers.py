"""Explicit, counted copies of tensors between device buffers (DESIGN §6)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

__all__ = ["TransferStats", "TransferCounter"]


@dataclass(frozen=True)
class TransferStats:
    count: int = 0
    bytes: int = 0
    """Bytes actually copied (the arrays' nbytes)."""
    modeled_bytes: int = 0
    """Bytes the plan charges for the same transfers (elements x the hardware's element size)."""
    modeled_latency_ns: float = 0.0


class TransferCounter:
    """Copies a tensor into a destination buffer and counts it; totals are thread-safe.

    Like a device's receive buffer, the destination array of a transfer is
    allocated once and refilled on later runs (``staging=True``), which spares
    the page faults of a fresh allocation per inference: pass ``stage`` (the
    destination device's name) to reuse the buffer, and ``None`` for tensors
    handed out to the caller (graph outputs), which must stay untouched.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = TransferStats()
        self._staging: dict[tuple[str, str], np.ndarray] = {}

    def copy(self, array: np.ndarray, destination: dict[str, np.ndarray], name: str,
             modeled_bytes: int = 0, modeled_latency_ns: float = 0.0, stage: str | None = None) -> None:
        """``destination[name]`` = a C-contiguous copy of ``array`` (into a reused buffer when ``stage``)."""
        key = (name, stage or "")
        buffer = self._staging.get(key) if stage else None
        if buffer is not None and buffer.shape == array.shape and buffer.dtype == array.dtype:
            np.copyto(buffer, array)
            copied = buffer
        else:
            copied = np.array(array, copy=True, order="C")
            if stage:
                self._staging[key] = copied
        destination[name] = copied
        with self._lock:
            s = self._stats
            self._stats = TransferStats(
                s.count + 1, s.bytes + copied.nbytes,
                s.modeled_bytes + int(modeled_bytes), s.modeled_latency_ns + float(modeled_latency_ns),
            )

    @property
    def stats(self) -> TransferStats:
        with self._lock:
            return self._stats

    def reset(self) -> None:
        with self._lock:
            self._stats = TransferStats()
