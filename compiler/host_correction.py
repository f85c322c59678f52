"""A kernel ridge correction of a GEMM kind's fit: what the linear cost model misses, learned in log space.

The linear fits (:mod:`cimsplit.compiler.host_regression`) give each kernel path one
cost per MAC, per element and per weight.  onnxruntime's kernels are not that
simple: their efficiency moves smoothly with the output width, the channel
blocking and the cache regime, so a linear fit is 5-10 % off on most shapes, and
by the same sign for neighbouring shapes (measured on one board: every ResNet-50
and YOLOv5n conv over-predicted by 5-13 % while the grid's points at the same
shapes measure within 1 % of the network).  The correction models the log of
the ratio of the measured latency to the linear fit as a kernel ridge regression
(scikit-learn's ``KernelRidge``, RBF kernel) on the standardized log descriptors
and the kernel-path indicators.  Far from every calibration point the RBF kernel
vanishes and the prediction falls back to the linear fit itself, so
extrapolation (the zoo's channel counts beyond the grid's) is the linear fit's.

It is kept only when it lowers, by half a percentage point at least, the
held-out error the linear methods are chosen by
(:func:`cimsplit.compiler.host_regression.transfer_mape`: the worse of whole
shapes and channel counts held out), with the linear fit refitted inside every
fold; its ridge strength and kernel width are chosen by that same score.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from cimsplit.compiler.host_regression import channel_folds, conv_regimes, evaluate, shape_folds, solve

__all__ = ["Correction", "correction_features", "fit_correction", "HYPERPARAMETERS", "MIN_GAIN", "MIN_SAMPLES"]

HYPERPARAMETERS = tuple((alpha, gamma) for alpha in (0.1, 1.0) for gamma in (0.03, 0.1, 0.3))
"""(ridge strength, RBF width) pairs tried; gamma is per squared standardized unit."""
MIN_SAMPLES = 300
"""A kind with fewer samples keeps its linear fit: a kernel method needs dense support.  (The grid's 180
depthwise shapes are too few: on one board their correction, kept by its held-out error, still raised
MobileNetV2's depthwise predictions by 10-30 % and its conv error from 10.9 to 14.8 %.)"""
MIN_GAIN = 0.005
"""A correction is kept only if it lowers the held-out error by this much at least (half a percentage point)."""


def correction_features(f: Mapping[str, float]) -> list[float]:
    """The log GEMM descriptors, the log kernel size and the kernel-path indicators of one sample."""
    logs = [math.log(max(f[key], 1.0)) for key in ("m", "n", "n_mvm", "n_in")]
    return [*logs, math.log(max(f.get("k", 1.0), 1.0)), *conv_regimes(f)]


@dataclass(frozen=True)
class Correction:
    """``log(t / linear fit)`` as ``sum_i dual_i exp(-gamma |x - x_i|^2)`` over standardized features ``x``."""

    alpha: float
    gamma: float
    center: tuple[float, ...]
    scale: tuple[float, ...]
    points: tuple[tuple[float, ...], ...]
    """The calibration samples' standardized features."""
    dual: tuple[float, ...]
    cv_mape: float
    """Held-out error of the linear fit with this correction (the score it was kept by)."""

    @cached_property
    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return np.asarray(self.center), np.asarray(self.scale), np.asarray(self.points), np.asarray(self.dual)

    def factors(self, features: Sequence[Mapping[str, float]]) -> np.ndarray:
        """The multiplicative corrections of the linear fit's predictions for ``features`` (at most e^5 either way)."""
        center, scale, points, dual = self._arrays
        x = (np.array([correction_features(f) for f in features]) - center) / scale
        distances = np.sum((x[:, None, :] - points[None, :, :]) ** 2, axis=2)
        return np.exp(np.clip(np.exp(-self.gamma * distances) @ dual, -5.0, 5.0))

    def factor(self, features: Mapping[str, float]) -> float:
        return float(self.factors([features])[0])

    def to_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "gamma": self.gamma, "center": list(self.center), "scale": list(self.scale),
                "points": [list(p) for p in self.points], "dual": list(self.dual), "cv_mape": self.cv_mape}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Correction:
        """Read :meth:`to_dict`'s form; ValueError when its arrays do not fit together."""
        correction = cls(float(data["alpha"]), float(data["gamma"]), tuple(float(v) for v in data["center"]),
                         tuple(float(v) for v in data["scale"]),
                         tuple(tuple(float(v) for v in p) for p in data["points"]),
                         tuple(float(v) for v in data["dual"]), float(data["cv_mape"]))
        width = len(correction_features({"m": 1.0, "n": 1.0, "n_mvm": 1.0, "n_in": 1.0}))
        if (len(correction.center) != width or len(correction.scale) != width or len(correction.dual) != len(correction.points)
                or any(len(p) != width for p in correction.points) or 0.0 in correction.scale):
            raise ValueError("correction arrays of mismatched sizes")
        return correction


def _fit(method: str, features: Sequence[Mapping[str, float]], t_ns: np.ndarray, alpha: float, gamma: float
         ) -> tuple[list[float], Correction]:
    """The linear coefficients of ``method`` and the correction of their residuals (``cv_mape`` unset)."""
    from sklearn.kernel_ridge import KernelRidge

    coefficients = solve(method, features, t_ns.tolist()).tolist()
    x = np.array([correction_features(f) for f in features])
    center, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    points = (x - center) / scale
    residual = np.log(t_ns) - np.log([evaluate(method, coefficients, f) for f in features])
    ridge = KernelRidge(kernel="rbf", alpha=alpha, gamma=gamma).fit(points, residual)
    return coefficients, Correction(alpha, gamma, tuple(center), tuple(scale), tuple(map(tuple, points)),
                                    tuple(float(d) for d in ridge.dual_coef_), math.nan)


def _held_out(method: str, features: Sequence[Mapping[str, float]], t_ns: np.ndarray, folds: Sequence[int | None],
              alpha: float, gamma: float) -> float:
    """Mean absolute percentage error of ``method`` corrected, each fold predicted by a fit on the others."""
    errors: list[float] = []
    for fold in sorted({f for f in folds if f is not None}):
        train = [i for i in range(len(features)) if folds[i] != fold]
        coefficients, correction = _fit(method, [features[i] for i in train], t_ns[train], alpha, gamma)
        test = [i for i in range(len(features)) if folds[i] == fold]
        linear = np.array([evaluate(method, coefficients, features[i]) for i in test])
        errors.extend(np.abs(linear * correction.factors([features[i] for i in test]) / t_ns[test] - 1))
    return float(np.mean(errors))


def fit_correction(method: str, features: Sequence[Mapping[str, float]], t_ns: Sequence[float],
                   linear_cv: float | None) -> Correction | None:
    """The correction of ``method``'s fit with the lowest held-out error, or None when none beats ``linear_cv``."""
    if len(features) < MIN_SAMPLES or linear_cv is None:
        return None
    t = np.asarray(t_ns, dtype=float)
    schemes: list[Sequence[int | None]] = [shape_folds(features)]
    channels = channel_folds(features)
    if len({c for c in channels if c is not None}) > 2:
        schemes.append(channels)
    best: tuple[float, float, float] | None = None
    for alpha, gamma in HYPERPARAMETERS:
        score = max(_held_out(method, features, t, folds, alpha, gamma) for folds in schemes)
        if score <= linear_cv - MIN_GAIN and (best is None or score < best[0]):
            best = (score, alpha, gamma)
    if best is None:
        return None
    score, alpha, gamma = best
    _, correction = _fit(method, features, t, alpha, gamma)
    return dataclasses.replace(correction, cv_mape=score)
