"""What a measurement records about the machine it ran on: the CPU model and the load average."""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["cpu_model", "load_average"]


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model string (/proc/cpuinfo), with its family and model numbers where the file has them (a
    virtual machine may name only the vendor's line: "AMD EPYC" for a Zen 3 and a Zen 4 alike), else what
    ``platform`` knows."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if value.strip():
                    fields.setdefault(key.strip(), value.strip())  # the first processor's
    except OSError:
        pass
    name = next((fields[key] for key in ("model name", "Hardware", "Model") if fields.get(key)), "")
    if not name:
        return platform.processor() or platform.machine() or "unknown"
    if fields.get("cpu family") and fields.get("model"):
        return f"{name} (family {fields['cpu family']}, model {fields['model']})"
    return name


def load_average() -> tuple[float, float, float]:
    """1, 5 and 15-minute load averages, rounded to 0.01 ((0, 0, 0) where the platform has none)."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return (0.0, 0.0, 0.0)
    return (round(one, 2), round(five, 2), round(fifteen, 2))
