"""The regressions a host model fits per operator kind, and the held-out errors that choose among them.

See :mod:`cimsplit.compiler.host_model` for the methods and the choice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["METHODS", "HINGE_ELEMENTS", "blocked_macs", "conv_regimes", "design_matrix", "solve", "evaluate", "mape", "shape_folds", "channel_folds",
           "cross_validated_mape", "transfer_mape"]

_FOLDS = 5
HINGE_ELEMENTS = 512e3
"""Elements read and written past which ``relative-elements-hinge`` adds a second cost per element.  The copy kinds
slow down past it on the calibrated boards (a float Concat at 0.20-0.24 ns per output element up to 557 k, 0.34-0.39
from 813 k; a Transpose 0.18-0.23 up to 406 k, 0.29-0.54 beyond): fitted with one slope, YOLOv5n's 2.1 M-element
output Concat was predicted 0.43 ms for 0.69."""


@dataclass(frozen=True)
class _Method:
    gemm: bool
    """Applies to GEMM kinds (else to element-count kinds)."""
    log_target: bool
    weighted: bool
    """Least squares on relative residuals (each row divided by its latency)."""
    columns: Callable[[Mapping[str, float]], list[float]]


def _gemm_logs(f: Mapping[str, float]) -> list[float]:
    return [math.log(max(f[key], 1.0)) for key in ("m", "n", "n_mvm", "n_in")]


def _log_quadratic(f: Mapping[str, float]) -> list[float]:
    x = _gemm_logs(f)
    return [1.0, *x, *(x[i] * x[j] for i in range(len(x)) for j in range(i, len(x)))]


def conv_regimes(f: Mapping[str, float]) -> list[float]:
    """Indicators of a conv's kernel path, read off its GEMM descriptors (no new calibration fields).

    With C_in = N_v / k^2 and N_in = C_in H_in W_in (depthwise: N_v = k^2, N_mvm and
    N_in both times C), the stride squared is N_in k^2 / (N_v N_mvm) for both kinds
    (a Gemm gives 1).  Pointwise (k = 1), strided (s >= 2), reading the image (C_in <= 4,
    no blocked layout before it), and input/output channels off onnxruntime's 16-channel
    NCHWc block.
    """
    k = f.get("k", 1.0)
    c_in = f["n"] / (k * k)
    stride_sq = f["n_in"] * k * k / max(f["n"] * f["n_mvm"], 1.0)
    return [float(k == 1), float(stride_sq > 2.0), float(c_in <= 4), float(round(c_in) % 16 != 0),
            float(round(f["m"]) % 16 != 0)]


def _log_cubic(f: Mapping[str, float]) -> list[float]:
    x = _gemm_logs(f)
    width = len(x)
    cubic = [x[i] * x[j] * x[h] for i in range(width) for j in range(i, width) for h in range(j, width)]
    regimes = conv_regimes(f)
    # Each path (pointwise, strided, image) gets its own slope in every log descriptor.
    slopes = [r * v for r in regimes[:3] for v in x]
    return [*_log_quadratic(f), *cubic, *regimes, *slopes]


def _relative_linear(f: Mapping[str, float]) -> list[float]:
    return [1.0, f["m"] * f["n"] * f["n_mvm"], f["n_in"], f["n_out"], f["m"] * f["n"]]


def _per_path(base: list[float], f: Mapping[str, float]) -> list[float]:
    """``base`` and a copy of it for each of the pointwise, strided and image paths (its own overhead, ns per MAC,
    per element and per weight)."""
    return [*base, *(r * v for r in conv_regimes(f)[:3] for v in base)]


def _relative_regimes(f: Mapping[str, float]) -> list[float]:
    return _per_path(_relative_linear(f), f)


def blocked_macs(f: Mapping[str, float], block: int) -> float:
    """A conv's MACs with its channels padded to whole ``block``-channel blocks, as onnxruntime's NCHWc kernels run them.

    (16 channels with AVX-512, 8 with AVX2; 40 channels run as 48 on 16.)  An image
    input (C_in <= 4) is not blocked; a depthwise conv pads its channels C = M_v.
    """
    k = f.get("k", 1.0)
    m_padded = math.ceil(f["m"] / block) * block
    if f["n"] == k * k and k > 1:  # depthwise: N_v = k^2, N_mvm = H_out W_out C
        return m_padded * k * k * f["n_mvm"] / f["m"]
    c_in = f["n"] / (k * k)
    c_padded = math.ceil(c_in / block) * block if c_in > 4 else c_in
    return m_padded * c_padded * k * k * f["n_mvm"]


def _relative_blocked(block: int) -> Callable[[Mapping[str, float]], list[float]]:
    def columns(f: Mapping[str, float]) -> list[float]:
        return _per_path([1.0, blocked_macs(f, block), f["n_in"], f["n_out"], f["m"] * f["n"]], f)
    return columns


METHODS: dict[str, _Method] = {
    "pipeit": _Method(True, False, False, lambda f: [
        1.0, f["n_mvm"], f["n"], f["m"], f["n_mvm"] * f["n"], f["n"] * f["m"], f["n_mvm"] * f["m"]]),
    "log-quadratic": _Method(True, True, False, _log_quadratic),
    "log-cubic-regimes": _Method(True, True, False, _log_cubic),
    "relative-linear": _Method(True, False, True, _relative_linear),
    "relative-regimes": _Method(True, False, True, _relative_regimes),
    "relative-nchwc8": _Method(True, False, True, _relative_blocked(8)),
    "relative-nchwc16": _Method(True, False, True, _relative_blocked(16)),
    "log-linear": _Method(False, True, False, lambda f: [
        1.0, math.log(max(f["n_in"], 1.0)), math.log(max(f["n_out"], 1.0))]),
    "relative-elements": _Method(False, False, True, lambda f: [1.0, f["n_in"], f["n_out"]]),
    "relative-elements-hinge": _Method(False, False, True, lambda f: [
        1.0, f["n_in"], f["n_out"], max(0.0, f["n_in"] + f["n_out"] - HINGE_ELEMENTS)]),
}


def design_matrix(method: str, features: Sequence[Mapping[str, float]]) -> np.ndarray:
    """One row of ``method``'s columns per sample."""
    return np.array([METHODS[method].columns(f) for f in features], dtype=float)


def solve(method: str, features: Sequence[Mapping[str, float]], t_ns: Sequence[float]) -> np.ndarray:
    """Least-squares coefficients of ``method`` (columns scaled to unit max for conditioning).

    A column other than the intercept (the first) that is constant over the samples gets 0: a regime's
    indicator is fitted only where the samples have both sides of it.  (The calibration's Gemm points
    all have channel counts off the 16-channel block, so that indicator was the intercept on them; a
    minimum-norm solution shared the intercept with it, and a Gemm on whole blocks, as ResNet's and
    ViT's are, lost that share: 3 us predicted for 140.)  Columns that are collinear otherwise keep
    the minimum-norm split (an element kind's inputs and output grow together on its samples).
    """
    spec = METHODS[method]
    x = design_matrix(method, features)
    keep = np.ptp(x, axis=0) > 0
    keep[0] = True
    t = np.asarray(t_ns, dtype=float)
    y = np.log(t) if spec.log_target else t.copy()
    if spec.weighted:
        x, y = x / t[:, None], y / t
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    coefficients = np.zeros(x.shape[1])
    coefficients[keep], *_ = np.linalg.lstsq(x[:, keep] / scale[keep], y, rcond=None)
    return coefficients / scale


def evaluate(method: str, coefficients: Sequence[float], features: Mapping[str, float]) -> float:
    """Predicted latency in ns (at least 1 ns)."""
    spec = METHODS[method]
    value = float(np.dot(spec.columns(features), coefficients))
    if spec.log_target:
        value = math.exp(min(value, 50.0))
    return max(value, 1.0)


def mape(method: str, coefficients: np.ndarray, features: Sequence[Mapping[str, float]], t_ns: Sequence[float]) -> float:
    errors = [abs(evaluate(method, coefficients, f) - t) / t for f, t in zip(features, t_ns)]
    return float(np.mean(errors)) if errors else math.nan


def shape_folds(features: Sequence[Mapping[str, float]]) -> list[int]:
    """Fold of each sample, whole shapes held out together: the i-th distinct shape (sorted) is in fold i mod 5."""
    keys = [tuple(sorted(f.items())) for f in features]
    index = {key: i for i, key in enumerate(sorted(set(keys)))}
    return [index[key] % _FOLDS for key in keys]


def channel_folds(features: Sequence[Mapping[str, float]]) -> list[int | None]:
    """Fold of each sample by its input channel count (depthwise: channels; Gemm: N_v), to test extrapolation.

    The zoo's channel counts are none of the grid's, so holding one count out at a time
    (the smallest and largest ones included) asks a fit what it must do on the zoo.
    Image-reading convs (C_in <= 4) are never held out (there is one such count), nor
    is anything without GEMM descriptors (None).
    """
    folds: list[int | None] = []
    for f in features:
        if "m" not in f:
            folds.append(None)
            continue
        k = f.get("k", 1.0)
        c_in = f["n"] / (k * k)
        folds.append(round(f["m"]) if f["n"] == k * k and k > 1 else (round(c_in) if c_in > 4 else None))
    return folds


def cross_validated_mape(method: str, features: Sequence[Mapping[str, float]], t_ns: Sequence[float],
                         folds: Sequence[int | None] | None = None) -> float | None:
    """Mean absolute percentage error on held-out folds (default :func:`shape_folds`; None never held out).

    None if some fold leaves too few samples to fit ``method``.
    """
    folds = shape_folds(features) if folds is None else folds
    width = len(METHODS[method].columns(features[0]))
    errors: list[float] = []
    for fold in sorted({f for f in folds if f is not None}):
        train = [i for i in range(len(features)) if folds[i] != fold]
        if len(train) < width + 1:
            return None
        coefficients = solve(method, [features[i] for i in train], [t_ns[i] for i in train])
        errors.extend(abs(evaluate(method, coefficients, features[i]) - t_ns[i]) / t_ns[i]
                      for i in range(len(features)) if folds[i] == fold)
    return float(np.mean(errors)) if errors else None


def transfer_mape(method: str, features: Sequence[Mapping[str, float]], t_ns: Sequence[float]) -> float | None:
    """The selection score: the worse of shape-held-out and channel-held-out error (shape only without channels)."""
    scores = [cross_validated_mape(method, features, t_ns)]
    channels = channel_folds(features)
    if len({c for c in channels if c is not None}) > 2:
        scores.append(cross_validated_mape(method, features, t_ns, channels))
    return None if any(score is None for score in scores) else max(s for s in scores if s is not None)
