"""One sweep point as picklable plain data, and the function that solves it.

A :class:`PointTask` carries the point's :class:`PlacementProblem` (cost tables
only, no ONNX object), so a worker — a local process or a Dask worker on
another machine — needs nothing but ``cimsplit`` installed: no model file, no
host profile, no onnxruntime session.  :func:`run_point` never raises: a point
that fails becomes a row with ``status = "error"`` and the message in
``error``, and the sweep goes on.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from typing import Any

from cimsplit.errors import CimsplitError
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.slicing import expanded_view
from cimsplit.passes.sweep.grid import SweepPoint

__all__ = ["COLUMNS", "TIME_COLUMNS", "PointTask", "run_point", "solve_options", "row_from_result", "error_row", "task_fingerprint"]

log = logging.getLogger(__name__)

COLUMNS = (
    "model", "host", "crossbars", "mvm_latency_ns",
    "makespan_ns", "cpu_only_ns", "speedup",
    "ops_on_cim", "ops_on_host", "ops_sliced", "crossbars_used",
    "host_busy_ns", "cim_busy_ns", "transfer_ns",
    "solver", "status", "gap", "time_s", "reused_from", "n_variables", "n_constraints",
    "objective", "max_latency_ns", "period_ns", "stream_latency_ns", "frames_in_flight",
    "error",
)
"""The columns of results.csv / results.json, in order."""

TIME_COLUMNS = ("time_s",)
"""Columns that measure wall time and so differ between otherwise identical runs."""

SOLVER_THREADS = 1
"""Each point is solved single-threaded: parallelism comes from running points side by
side, and a fixed thread count keeps the solver's choice among equal optima the same
in this process, a local pool or on Dask."""


@dataclass(frozen=True)
class PointTask:
    point: SweepPoint
    problem: PlacementProblem | None
    """None when the point cannot be built (then ``error`` says why)."""
    solver: str = "auto"
    time_limit_s: float = 60.0
    mip_gap: float | None = None
    plain: bool = False
    slicing: str = "auto"
    error: str | None = None
    objective: str = "latency"
    frames_in_flight: int | None = None
    fingerprint: str | None = None
    """Hash of the problem and solver settings: a journal row is reused only if it matches."""


def task_fingerprint(problem: PlacementProblem, solver: str, time_limit_s: float, mip_gap: float | None, plain: bool,
                     objective: str = "latency", max_latency_ns: float = 0.0, frames_in_flight: int | None = None,
                     slicing: str = "auto", reuse: bool = True) -> str:
    """Everything that determines a point's result, hashed (float reprs are exact).

    ``reuse=False`` (a sweep solving every point alone) hashes differently: its rows may differ."""
    stream = () if objective == "latency" else (objective, float(max_latency_ns), frames_in_flight)
    alone = () if reuse else ("alone",)
    text = repr((problem, solver, float(time_limit_s), mip_gap, plain, *stream, slicing, *alone))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def error_row(point: SweepPoint, message: str) -> dict[str, Any]:
    row: dict[str, Any] = {column: None for column in COLUMNS}
    row.update(model=point.model, host=point.host, crossbars=point.crossbars, mvm_latency_ns=point.mvm_latency_ns)
    row.update(status="error", error=message, max_latency_ns=point.max_latency_ns)
    return row


def row_from_result(point: SweepPoint, result: Any) -> dict[str, Any]:
    """The results row of one solved point (``result`` is a ``PlacementResult``)."""
    whole_ops = [v for v in range(result.problem.n) if not result.schedule.slicing or result.schedule.slicing[v] < 0]
    ops_on_cim = sum(1 for v in whole_ops if not result.schedule.on_host[v])
    # Busy and bus times at the level the runtime sees: sliced operators as their parts.
    problem, schedule = expanded_view(result.problem, result.schedule)
    on_host = schedule.on_host
    cim = [v for v in range(problem.n) if not on_host[v]]
    # Bus time actually paid: boundary edges (eq. 4) plus the graph inputs and
    # outputs of CIM operators (DESIGN §3; zero under --paper-exact).
    transfer_ns = sum(t for u, v, t in problem.edges if on_host[u] != on_host[v])
    transfer_ns += sum(problem.t_in_ns[v] + (problem.t_out_ns[v] if problem.writes_output[v] else 0.0) for v in cim)
    stats = result.solver
    return {
        "model": point.model,
        "host": point.host,
        "crossbars": point.crossbars,
        "mvm_latency_ns": point.mvm_latency_ns,
        "makespan_ns": float(result.schedule.makespan_ns),
        "cpu_only_ns": float(result.cpu_only_ns),
        "speedup": float(result.speedup),
        "ops_on_cim": ops_on_cim,
        "ops_on_host": len(whole_ops) - ops_on_cim,
        "ops_sliced": len(result.sliced),
        "crossbars_used": int(result.crossbars_used),
        "host_busy_ns": float(sum(problem.t_host_ns[v] for v in range(problem.n) if on_host[v])),
        "cim_busy_ns": float(sum(problem.t_cim_ns[v] for v in cim)),  # type: ignore[misc]
        "transfer_ns": float(transfer_ns),
        "solver": stats.name,
        "status": stats.status,
        "gap": float(stats.gap) if math.isfinite(stats.gap) else None,  # no bound: no gap
        "time_s": float(stats.time_s),
        "reused_from": None,
        "n_variables": int(stats.n_variables),
        "n_constraints": int(stats.n_constraints),
        "objective": result.objective,
        "max_latency_ns": point.max_latency_ns,
        "period_ns": None if result.stream is None else float(result.stream.period_ns),
        "stream_latency_ns": None if result.stream is None else float(result.stream.latency_ns),
        "frames_in_flight": None if result.stream is None else int(result.stream.frames_in_flight),
        "error": None,
    }


def solve_options(task: PointTask) -> SolveOptions:
    """The placement options of ``task``'s point."""
    bound = task.point.max_latency_ns or None
    return SolveOptions(solver=task.solver, time_limit_s=task.time_limit_s, mip_gap=task.mip_gap,
                        plain=task.plain, threads=SOLVER_THREADS, objective=task.objective,
                        max_latency_ns=bound if task.objective == "throughput" else None,
                        frames_in_flight=task.frames_in_flight if task.objective == "throughput" else None,
                        slicing=task.slicing)


def run_point(task: PointTask) -> dict[str, Any]:
    """Solve one point; never raises (a failure is a row with status ``error``)."""
    if task.problem is None:
        return error_row(task.point, task.error or "the point could not be built")
    try:
        from cimsplit.passes.placement.driver import place

        result = place(task.problem, solve_options(task))
        return row_from_result(task.point, result)
    except CimsplitError as exc:
        return error_row(task.point, exc.one_line())
    except Exception as exc:  # a bug in one point must not end a long sweep; the row keeps the message
        log.debug("sweep point %s failed", task.point, exc_info=True)
        return error_row(task.point, f"{type(exc).__name__}: {exc}")
