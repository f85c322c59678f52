"""What a layer pays in a network to fetch its weights, from its point's times as it is and after a cache flush.

A calibration point with a weight is profiled twice: as it is (``hot``: its weights stay in cache between runs)
and after reading the last-level cache's worth of memory (``flushed``: everything cold).  In a network a layer
finds its weights evicted by the other layers but its output buffer in cache, so it pays the weights' share of
what the flush adds, less what its compute hides while streaming them (:func:`in_network_ns`).  How much the
compute hides is the machine's: :data:`WEIGHT_REUSE` was read off a Zen 3, and a board whose calibration
profiled context networks (:mod:`.calibration_context`) has its own, per precision (:func:`board_reuse`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["WEIGHT_REUSE", "REUSE_CANDIDATES", "ContextLayer", "in_network_ns", "estimate_reuse", "board_reuse", "precision"]

WEIGHT_REUSE = 16.0
"""Output pixels (uses of each weight) over which a conv's compute hides the fetch of its weights from beyond L2
(:func:`in_network_ns`): about where one core's MACs per weight take as long as streaming that weight from memory
(0.03-0.05 ns a MAC, 0.4-0.8 ns a 4-byte weight at 5-10 GB/s).  The default of a board without context layers."""

REUSE_CANDIDATES = (4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, math.inf)
"""The reuses :func:`estimate_reuse` chooses among (``inf``: the compute hides nothing)."""


def in_network_ns(features: Mapping[str, float], hot_ns: float, flushed_ns: float, reuse: float = WEIGHT_REUSE) -> float:
    """A GEMM operator's time in a network, from its point's time as it is (``hot_ns``) and flushed
    (:func:`cimsplit.compiler.cache_flush.flushed`).

    What the flush adds is split between weights and outputs by their element counts (``m * n`` weights,
    ``n_out`` outputs), and of the weights' share only what the conv's compute does not hide:
    ``1 / (1 + n_mvm / reuse)``, each weight being used once per output pixel.  Pointwise convs on a pooled tensor
    keep nearly all of it (a 1152 -> 48 1x1 conv at 1 x 1: 5.5 us, 15 us flushed, 13-16 us in EfficientNet-B0),
    depthwise convs nearly none (their weights are k x k per channel).  On a Zen 3, with reuse 16, 17 of the
    nine zoo models' 18 sums (float and int8) were within 5 % of their profiles (14 with the weights' whole share,
    ``reuse = inf``).  On an Intel Xeon (AVX-512) ResNet-50's convs at 7 x 7 and 14 x 14 took their flushed
    times in the network (753 us for 559 hot and 771 flushed), where reuse 16 kept 8 % of the difference, but
    that network was profiled run by run (:data:`.ort_profiler.TURN_RUNS`); in turns a board there estimates 64.
    """
    weights, outputs = features["m"] * features["n"], features["n_out"]
    hidden = 1.0 + features["n_mvm"] / reuse
    return hot_ns + max(0.0, flushed_ns - hot_ns) * weights / max(weights + outputs, 1.0) / hidden


def precision(kind: str) -> str:
    """``int8`` for a quantized kind (``int8:``, :data:`.host_model.INT8_PREFIX`, which imports this module),
    ``float`` otherwise: the keys of :func:`board_reuse`."""
    return "int8" if kind.startswith("int8:") else "float"


@dataclass(frozen=True)
class ContextLayer:
    """A conv of a context network: its point's times (as it is, flushed) and its time in the network."""

    kind: str
    features: Mapping[str, float]
    hot_ns: float
    flushed_ns: float
    network_ns: float

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "features": dict(self.features), "hot_ns": self.hot_ns,
                "flushed_ns": self.flushed_ns, "network_ns": self.network_ns}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ContextLayer:
        return cls(str(data["kind"]), {k: float(v) for k, v in data["features"].items()}, float(data["hot_ns"]),
                   float(data["flushed_ns"]), float(data["network_ns"]))


def estimate_reuse(layers: Iterable[ContextLayer]) -> float:
    """The :data:`REUSE_CANDIDATES` reuse whose :func:`in_network_ns` is closest to the layers' network times (least
    mean absolute log ratio; the smaller reuse on a tie); :data:`WEIGHT_REUSE` when no layer's flush added time."""
    telling = [layer for layer in layers if layer.flushed_ns > layer.hot_ns > 0 and layer.network_ns > 0]
    if not telling:
        return WEIGHT_REUSE

    def error(reuse: float) -> float:
        return math.fsum(abs(math.log(in_network_ns(layer.features, layer.hot_ns, layer.flushed_ns, reuse) / layer.network_ns))
                         for layer in telling)

    return min(REUSE_CANDIDATES, key=lambda reuse: (round(error(reuse), 9), reuse))


def board_reuse(layers: Iterable[ContextLayer]) -> dict[str, float]:
    """Reuse per precision (``float``, ``int8``) that has context layers; a sample of another precision is mixed at
    :data:`WEIGHT_REUSE`."""
    by_precision: dict[str, list[ContextLayer]] = {}
    for layer in layers:
        by_precision.setdefault(precision(layer.kind), []).append(layer)
    return {key: estimate_reuse(group) for key, group in sorted(by_precision.items())}
