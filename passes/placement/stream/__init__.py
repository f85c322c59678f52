"""Streams (Pipe-it, DESIGN §8): the throughput objective, periodic schedules and their validator."""

from __future__ import annotations

from cimsplit.passes.placement.stream.tasks import PeriodicSchedule, StreamTask

__all__ = ["PeriodicSchedule", "StreamTask"]
