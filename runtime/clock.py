"""The runtime's clock: monotonic nanoseconds and a precise sleep until a deadline.

``time.sleep`` wakes up late by tens of microseconds (more on a busy
machine), which would add to every emulated completion; so the bulk of a wait
is slept and the last :data:`SPIN_NS` are spun on the clock.  The timed
executor is single-threaded, so the spin holds the GIL from no one.
"""

from __future__ import annotations

import time

__all__ = ["now_ns", "sleep_until_ns", "SPIN_NS"]

SPIN_NS = 100_000
"""The last 100 us of a wait are spun, not slept."""

now_ns = time.perf_counter_ns
"""Monotonic nanoseconds (CLOCK_MONOTONIC on Linux); only differences mean anything."""


def sleep_until_ns(deadline_ns: float) -> int:
    """Return at ``deadline_ns`` (of :func:`now_ns`) or just after it; returns the time of return."""
    now = now_ns()
    remaining = deadline_ns - now
    if remaining > SPIN_NS:
        time.sleep((remaining - SPIN_NS) * 1e-9)
    while (now := now_ns()) < deadline_ns:
        pass
    return now
