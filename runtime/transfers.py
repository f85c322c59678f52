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

    Like a device's receive buffers, destination arrays come from a pool
    (``stage`` = the destination device's name): :meth:`release` returns an
    array once its readers are done, and the next copy of the same shape and
    dtype on that device refills the most recently released one, still warm
    in cache, instead of touching memory of its own (a buffer per tensor was
    cold by the time it was refilled: copies then ran at a quarter of the
    memory bandwidth).  Pass ``stage=None`` for tensors handed out to the
    caller (graph outputs), which get a fresh array that is never reused.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = TransferStats()
        self._pool: dict[tuple[str, tuple[int, ...], str], list[np.ndarray]] = {}

    def copy(self, array: np.ndarray, destination: dict[str, np.ndarray], name: str,
             modeled_bytes: int = 0, modeled_latency_ns: float = 0.0, stage: str | None = None) -> np.ndarray:
        """``destination[name]`` = a C-contiguous copy of ``array`` (into a pooled buffer when ``stage``)."""
        free = self._pool.get((stage, array.shape, array.dtype.str)) if stage else None
        if free:
            copied = free.pop()
            np.copyto(copied, array)
        else:
            copied = np.array(array, copy=True, order="C")
        destination[name] = copied
        with self._lock:
            s = self._stats
            self._stats = TransferStats(
                s.count + 1, s.bytes + copied.nbytes,
                s.modeled_bytes + int(modeled_bytes), s.modeled_latency_ns + float(modeled_latency_ns),
            )
        return copied

    def release(self, array: np.ndarray, stage: str) -> None:
        """Give a buffer that :meth:`copy` filled for ``stage`` back to the pool; nobody may read it any more."""
        self._pool.setdefault((stage, array.shape, array.dtype.str), []).append(array)

    @property
    def stats(self) -> TransferStats:
        with self._lock:
            return self._stats

    def reset(self) -> None:
        with self._lock:
            self._stats = TransferStats()
