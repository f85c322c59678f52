"""The design-space grid of a sweep: models x hosts x crossbar counts x MVM latencies.

Values are typed as lists or ranges:

- ``25,50,100,200`` — a list;
- ``0:400:25`` — START:STOP:STEP, i.e. START, START+STEP, ... and STOP itself
  when it lands on the grid (both ends inclusive: ``0:400:25`` is 17 values,
  ``0:390:25`` stops at 375);
- times carry a unit on any item, and a unit written once at the end applies to
  every bare number before it: ``50,100,500,1000ns``, ``50:1000:50ns``,
  ``0.05,1us``; a number without any unit is ns (as ``--mvm-latency``).

Every axis is sorted ascending and deduplicated, so the grid order — model,
host, crossbars, MVM latency, nested in that order — is deterministic and does
not depend on how the values were typed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from itertools import product

from cimsplit.compiler.units import parse_time_ns
from cimsplit.errors import CimsplitError

__all__ = [
    "PAPER_MODELS",
    "PAPER_HOSTS",
    "PAPER_CROSSBARS",
    "PAPER_MVM_LATENCIES_NS",
    "SweepPoint",
    "SweepGrid",
    "parse_int_values",
    "parse_time_values",
]

# Section V of the paper: four CNNs, crossbar budgets and MVM latencies of Fig. 3-5.
PAPER_MODELS = ("resnet18", "resnet50", "mobilenet_v2", "yolov5n")
PAPER_HOSTS = ("x86",)
PAPER_CROSSBARS = (25, 50, 100, 200)
PAPER_MVM_LATENCIES_NS = (50.0, 100.0, 500.0, 1000.0)

_UNIT_SUFFIX = re.compile(r"[a-zA-Zµμ]+\s*$")
_MAX_VALUES = 100_000


@dataclass(frozen=True, order=True)
class SweepPoint:
    """One design point: which model on which host with which CIM configuration."""

    model: str
    host: str
    crossbars: int
    mvm_latency_ns: float
    max_latency_ns: float = 0.0
    """Throughput sweeps: the bound on one frame's latency (``--max-latency``), 0 = none."""

    @property
    def key(self) -> tuple:
        """(model, host, crossbars, MVM latency), and the latency bound when there is one."""
        base = (self.model, self.host, self.crossbars, self.mvm_latency_ns)
        return (*base, self.max_latency_ns) if self.max_latency_ns else base


@dataclass(frozen=True)
class SweepGrid:
    models: tuple[str, ...]
    hosts: tuple[str, ...]
    crossbars: tuple[int, ...]
    mvm_latencies_ns: tuple[float, ...]
    max_latencies_ns: tuple[float, ...] = (0.0,)
    """Throughput sweeps: the frame-latency bounds of the latency/throughput front (0 = none)."""

    def points(self) -> list[SweepPoint]:
        """Every point, models outermost and the latency bound innermost."""
        return [
            SweepPoint(m, h, c, t, bound)
            for m, h, c, t, bound in product(self.models, self.hosts, self.crossbars, self.mvm_latencies_ns,
                                             self.max_latencies_ns)
        ]

    def __len__(self) -> int:
        return len(self.models) * len(self.hosts) * len(self.crossbars) * len(self.mvm_latencies_ns) \
            * len(self.max_latencies_ns)


def _expand_range(start: float, stop: float, step: float, text: str) -> list[float]:
    if step <= 0 or not math.isfinite(step):
        raise CimsplitError(f"range {text!r} needs a positive step", hint="write START:STOP:STEP, e.g. 0:400:25")
    if stop < start:
        raise CimsplitError(f"range {text!r} ends before it starts", hint="write START:STOP:STEP with START <= STOP")
    # Both ends inclusive; the 1e-9 slack keeps STOP when float steps land on it (0.05:1:0.05).
    count = math.floor((stop - start) / step + 1e-9) + 1
    if count > _MAX_VALUES:
        raise CimsplitError(f"range {text!r} has {count} values", hint=f"a sweep axis takes at most {_MAX_VALUES}")
    return [round(start + i * step, 9) for i in range(count)]


def _split_items(text: str, what: str) -> list[str]:
    items = [item.strip() for item in str(text).split(",")]
    if not items or any(not item for item in items):
        raise CimsplitError(f"empty value in {what} {text!r}", hint="write a list like 25,50,100 or a range 0:400:25")
    return items


def parse_int_values(text: str, what: str = "--crossbars") -> tuple[int, ...]:
    """``"25,50,100,200"`` or ``"0:400:25"`` (or a mix) -> sorted unique ints."""
    values: list[float] = []
    for item in _split_items(text, what):
        try:
            parts = [float(p) for p in item.split(":")]
        except ValueError:
            raise CimsplitError(f"cannot read {what} value {item!r}", hint="write whole numbers, e.g. 25,50,100 or 0:400:25") from None
        if len(parts) == 1:
            values.append(parts[0])
        elif len(parts) == 3:
            values.extend(_expand_range(*parts, text=item))
        else:
            raise CimsplitError(f"cannot read {what} range {item!r}", hint="write START:STOP:STEP, e.g. 0:400:25")
    if any(v != int(v) or v < 0 for v in values):
        raise CimsplitError(f"{what} values must be whole numbers >= 0, got {text!r}", hint="e.g. 25,50,100,200")
    return tuple(sorted({int(v) for v in values}))


def parse_time_values(text: str, what: str = "--mvm-latency") -> tuple[float, ...]:
    """``"50,100,500,1000ns"``, ``"50:1000:50ns"`` or ``"0.05,1us"`` -> sorted unique ns."""
    items = _split_items(text, what)
    trailing = _UNIT_SUFFIX.search(items[-1])
    unit = trailing.group(0).strip() if trailing else "ns"

    def ns(number: str) -> float:
        number = number.strip()
        return parse_time_ns(number if _UNIT_SUFFIX.search(number) else number + unit)

    values: list[float] = []
    for item in items:
        parts = item.split(":")
        if len(parts) == 1:
            values.append(ns(parts[0]))
        elif len(parts) == 3:
            values.extend(_expand_range(*(ns(p) for p in parts), text=item))
        else:
            raise CimsplitError(f"cannot read {what} range {item!r}", hint="write START:STOP:STEP with a unit, e.g. 50:1000:50ns")
    if any(v <= 0 for v in values):
        raise CimsplitError(f"{what} values must be positive, got {text!r}", hint="e.g. 50,100,500,1000ns")
    return tuple(sorted(set(values)))
