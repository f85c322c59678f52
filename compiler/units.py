"""Explicit units for times, bandwidths and crossbar sizes (DESIGN §3).

Inside cimsplit every time is a float in nanoseconds and every bandwidth a float
in bytes per second; these helpers turn what a user types (``50ns``,
``20.48GB/s``, ``256x256``) into those numbers and back.

Conventions, chosen to match the paper's figures:

- A bare time number is nanoseconds (``--mvm-latency 50`` = 50 ns), because the
  paper quotes every MVM latency in ns.
- A bandwidth must carry a unit: ``20.48`` alone could mean GB/s or B/s and a
  silent factor of 1e9 is worse than an error.  Decimal prefixes are powers of
  ten (GB/s = 1e9 B/s, as the paper's 20.48 GB/s); binary prefixes are explicit
  (GiB/s = 2**30 B/s).  Bits (``Gb/s``) are refused: b is ambiguous.
- Parsing only checks the form; whether zero or a negative is acceptable is for
  the caller (``Hardware`` validation) to decide.
"""

from __future__ import annotations

import math
import re

from cimsplit.errors import CimsplitError

__all__ = [
    "parse_time_ns",
    "parse_bandwidth",
    "parse_crossbar_size",
    "format_time_ns",
    "format_bandwidth",
]

_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"

_TIME_NS_PER_UNIT = {"ns": 1.0, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9}

_BYTES_PER_UNIT = {
    "B/s": 1.0,
    "kB/s": 1e3,
    "KB/s": 1e3,
    "MB/s": 1e6,
    "GB/s": 1e9,
    "TB/s": 1e12,
    "KiB/s": 2.0**10,
    "MiB/s": 2.0**20,
    "GiB/s": 2.0**30,
    "TiB/s": 2.0**40,
}

_TIME_RE = re.compile(rf"^\s*({_NUMBER})\s*([a-zµμ]*)\s*$")
_BANDWIDTH_RE = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z]*/s)\s*$")
_CROSSBAR_RE = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*$")


def parse_time_ns(text: str | int | float) -> float:
    """``"50ns"``, ``"0.05us"``, ``"1ms"``, ``"2s"`` or a bare number (ns) -> ns."""
    if isinstance(text, bool):
        raise CimsplitError(f"time {text!r} is not a number with a unit", hint="write e.g. 50ns, 0.05us, 1ms or 2s")
    if isinstance(text, (int, float)):
        return _finite(float(text), text, "time", "50ns")
    match = _TIME_RE.match(str(text))
    if match is None or match.group(2) not in ("", *_TIME_NS_PER_UNIT):
        raise CimsplitError(
            f"cannot read time {str(text)!r}",
            hint="write a number with one of ns, us, ms, s (e.g. 50ns or 0.05us); a bare number means ns",
        )
    value, unit = float(match.group(1)), match.group(2) or "ns"
    return _finite(value * _TIME_NS_PER_UNIT[unit], text, "time", "50ns")


def parse_bandwidth(text: str) -> float:
    """``"20.48GB/s"``, ``"10240MB/s"``, ``"2e10B/s"``, ``"16GiB/s"`` -> bytes per second."""
    match = _BANDWIDTH_RE.match(str(text)) if isinstance(text, str) else None
    if match is None or match.group(2) not in _BYTES_PER_UNIT:
        raise CimsplitError(
            f"cannot read bandwidth {str(text)!r}",
            hint="write a number with a unit, e.g. 20.48GB/s (GB = 1e9 bytes), 10240MB/s, 2e10B/s or 16GiB/s",
        )
    return _finite(float(match.group(1)) * _BYTES_PER_UNIT[match.group(2)], text, "bandwidth", "20.48GB/s")


def parse_crossbar_size(text: str) -> tuple[int, int]:
    """``"256x256"`` -> (rows, cols)."""
    match = _CROSSBAR_RE.match(str(text)) if isinstance(text, str) else None
    if match is None:
        raise CimsplitError(f"cannot read crossbar size {str(text)!r}", hint="write ROWSxCOLS, e.g. 256x256")
    return int(match.group(1)), int(match.group(2))


def format_time_ns(ns: float) -> str:
    """A time with an explicit unit chosen so that the number stays readable: ``"3.2 us"``."""
    magnitude = abs(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if magnitude >= scale:
            return f"{ns / scale:.4g} {unit}"
    return f"{ns:.4g} ns"


def format_bandwidth(bytes_per_s: float) -> str:
    """A bandwidth in decimal units: ``20.48e9`` -> ``"20.48 GB/s"``."""
    magnitude = abs(bytes_per_s)
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if magnitude >= scale:
            return f"{bytes_per_s / scale:.6g} {unit}"
    return f"{bytes_per_s:.6g} B/s"


def _finite(value: float, text: object, what: str, example: str) -> float:
    if not math.isfinite(value):
        raise CimsplitError(f"{what} {str(text)!r} is not a finite number", hint=f"write e.g. {example}")
    return value
