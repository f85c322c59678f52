"""What a measurement records about the machine it ran on: the CPU model and the load average."""

from __future__ import annotations

import os
import platform

__all__ = ["cpu_model", "load_average"]


def cpu_model() -> str:
    """The CPU's model string (/proc/cpuinfo), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "Model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def load_average() -> tuple[float, float, float]:
    """1, 5 and 15-minute load averages, rounded to 0.01 ((0, 0, 0) where the platform has none)."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return (0.0, 0.0, 0.0)
    return (round(one, 2), round(five, 2), round(fifteen, 2))
