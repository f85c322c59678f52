"""HiGHS (highspy) backend: the open MILP solver, always available."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator

import highspy
import numpy as np

from cimsplit.passes.placement.options import DEFAULT_MIP_GAP, SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import host_order_by_start
from cimsplit.passes.placement.solvers.backend import (
    STATUS_GAP_LIMIT,
    STATUS_INFEASIBLE,
    STATUS_NO_SOLUTION,
    STATUS_OPTIMAL,
    STATUS_TIME_LIMIT,
    BackendOutcome,
)
from cimsplit.passes.placement.solvers.milp import MilpModel, build_milp

__all__ = ["HighsBackend"]

log = logging.getLogger(__name__)

_MIP_FEASIBILITY_TOLERANCE = 1e-8
"""Tighter than HiGHS's 1e-6 so that big-M rows cannot leak time (validator: 1e-6 relative)."""


@contextlib.contextmanager
def _stdout_silenced(enabled: bool) -> Iterator[None]:
    """Silence C-level stdout: HiGHS prints its banner when an instance is created."""
    if not enabled:
        yield
        return
    try:
        sys.stdout.flush()
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


class HighsBackend:
    """HiGHS on the :class:`MilpModel`, warm-started with a consistency check.

    HiGHS 1.16 has a presolve bug with MIP starts (not ours: the start vector
    gives every column, x/s/z/o/T, in the model's scaled units, and satisfies
    every row to 1e-12; reproduced in
    ``tests/passes/test_highs_warm_start.py``).  Its log says "MIP start solution
    is feasible: objective value is 9986.45" and then "... is feasible in the
    reduced space: objective value is 9639.84": the start, mapped into the
    presolved space, gets a better objective than it has; HiGHS takes that value
    as incumbent and bound, stops "optimal" at node 0, and ``getSolution()``
    returns the start's own columns (objective c·x = 9986.45) beside
    ``objective_function_value`` = 9639.84, which can even lie below the true
    optimum.  Seen on 2 of 5,554 brute-forced small DAGs, all with the plain
    model; the same solves with ``presolve=off`` or without the start are right.
    So: after a warm-started solve, if the returned columns' objective differs
    from the reported one, the answer is discarded and the model re-solved cold
    in the remaining time (logged).  The cold answer is the one returned.
    """

    name = "highs"
    use_warm_start = True

    def solve(
        self,
        problem: PlacementProblem,
        formulation: MilpModel | None,
        options: SolveOptions,
        warm_start: Schedule | None,
    ) -> BackendOutcome:
        model = formulation if formulation is not None else build_milp(problem)
        begin = time.perf_counter()
        vector = None
        if warm_start is not None and self.use_warm_start:
            vector = model.vector_from_schedule(problem, warm_start, host_order_by_start(warm_start))
        h = self._run(highspy, model, options, float(options.time_limit_s), vector)
        if vector is not None and not _consistent(h, model):
            remaining = float(options.time_limit_s) - (time.perf_counter() - begin)
            log.info("HiGHS returned the warm start's columns with another objective (presolve bug with MIP "
                     "starts): re-solving cold for %.2f s", remaining)
            h = self._run(highspy, model, options, max(remaining, 0.5 * options.time_limit_s), None)
        elapsed = time.perf_counter() - begin

        status = h.getModelStatus()
        info = h.getInfo()
        has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
        unit = model.time_unit_ns
        # A proven bound of the model solved: with T <= UB (UB >= optimum) still a bound on the optimum.
        bound_ns = max(0.0, float(info.mip_dual_bound) * unit) if np.isfinite(info.mip_dual_bound) else 0.0
        if status == highspy.HighsModelStatus.kOptimal:
            reached_gap = options.mip_gap is not None and info.mip_gap > DEFAULT_MIP_GAP
            label = STATUS_GAP_LIMIT if reached_gap else STATUS_OPTIMAL
        elif status == highspy.HighsModelStatus.kInfeasible:
            label = STATUS_INFEASIBLE
        elif has_solution:
            label = STATUS_TIME_LIMIT
        else:
            label = STATUS_NO_SOLUTION
        log.debug("HiGHS: %s, status %s, %.3fs", h.modelStatusToString(status), label, elapsed)
        if not has_solution:
            return BackendOutcome(self.name, label, None, None, None, float("inf"), bound_ns, elapsed,
                                  model.n_variables, model.n_constraints)
        values = np.asarray(h.getSolution().col_value)
        on_host, start_ns, _ = model.decode(values)
        objective_ns = float(info.objective_function_value) * unit
        return BackendOutcome(self.name, label, on_host, start_ns, None, objective_ns, min(bound_ns, objective_ns),
                              elapsed, model.n_variables, model.n_constraints)

    @staticmethod
    def _run(highspy, model: MilpModel, options: SolveOptions, time_limit_s: float, start: np.ndarray | None):
        """One HiGHS run of ``model`` (with ``start`` as MIP start when given); returns the instance."""
        with _stdout_silenced(not options.verbose):
            h = highspy.Highs()
        h.setOptionValue("output_flag", bool(options.verbose))
        h.setOptionValue("time_limit", float(time_limit_s))
        h.setOptionValue("random_seed", int(options.seed))
        h.setOptionValue("mip_feasibility_tolerance", _MIP_FEASIBILITY_TOLERANCE)
        if options.threads:
            # HiGHS keeps one thread scheduler per process; asking for another thread count
            # after it started makes run() fail ("scheduler has already been initialized").
            highspy.Highs.resetThreadScheduler(False)
            h.setOptionValue("threads", int(options.threads))
        h.setOptionValue("mip_rel_gap", options.effective_mip_gap)
        integrality = np.where(model.col_integer, 1, 0).astype(np.int32)  # HighsVarType kInteger = 1
        h.passModel(
            model.n_variables, model.n_constraints, len(model.a_value),
            2,  # MatrixFormat.kRowwise
            1,  # ObjSense.kMinimize
            0.0,
            model.col_cost, model.col_lower, model.col_upper,
            model.row_lower, model.row_upper,
            model.a_start, model.a_index, model.a_value,
            integrality,
        )
        if start is not None:
            h.setSolution(model.n_variables, np.arange(model.n_variables, dtype=np.int32), start)
        run_status = h.run()
        status = h.getModelStatus()
        if run_status == highspy.HighsStatus.kError and status != highspy.HighsModelStatus.kTimeLimit:
            raise RuntimeError(f"HiGHS failed: {h.modelStatusToString(status)}")
        return h


def _consistent(h, model: MilpModel) -> bool:
    """Whether the returned columns have the objective HiGHS reports (true without a solution)."""
    info = h.getInfo()
    if info.primal_solution_status != 2:
        return True
    values = np.asarray(h.getSolution().col_value)
    recomputed = float(model.col_cost @ values)
    reported = float(info.objective_function_value)
    return abs(recomputed - reported) <= 1e-9 * max(1.0, abs(reported))
