"""Gurobi (gurobipy) backend: the paper's solver, used first when it is licensed.

gurobipy is optional (``pip install 'cimsplit[gurobi]'``) and imported lazily.
Licence problems are told apart by ``GurobiError.errno`` (never by message
text): 10009 no licence, 10010 model too large for a size-limited licence.
Both become :class:`BackendUnavailable` so that ``--solver auto`` falls back.
"""

from __future__ import annotations

import logging
import time

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
    BackendMissing,
    BackendOutcome,
    BackendUnavailable,
)
from cimsplit.passes.placement.solvers.milp import MilpModel, build_milp

__all__ = ["GurobiBackend", "ERRNO_NO_LICENSE", "ERRNO_SIZE_LIMIT", "import_gurobipy"]

log = logging.getLogger(__name__)

ERRNO_NO_LICENSE = 10009
ERRNO_SIZE_LIMIT = 10010
_INSTALL_HINT = "pip install 'cimsplit[gurobi]'"


def import_gurobipy():
    """gurobipy, or :class:`BackendMissing` naming the extra to install."""
    try:
        import gurobipy
    except ImportError as exc:
        raise BackendMissing("Gurobi was requested but gurobipy is not installed", hint=_INSTALL_HINT) from exc
    return gurobipy


def _licence_error(gp, exc: Exception) -> BackendUnavailable | None:
    errno = getattr(exc, "errno", None)
    if errno == ERRNO_SIZE_LIMIT:
        return BackendUnavailable("the model is too large for this Gurobi licence (size-limited)",
                                  hint="a full licence lifts the limit; HiGHS solves it meanwhile")
    if errno == ERRNO_NO_LICENSE:
        return BackendUnavailable("no valid Gurobi licence was found", hint="run grbgetkey or use --solver highs")
    return None


class GurobiBackend:
    name = "gurobi"

    def solve(
        self,
        problem: PlacementProblem,
        formulation: MilpModel | None,
        options: SolveOptions,
        warm_start: Schedule | None,
    ) -> BackendOutcome:
        gp = import_gurobipy()
        model = formulation if formulation is not None else build_milp(problem)
        begin = time.perf_counter()
        try:
            env = gp.Env(empty=True)
            env.setParam("OutputFlag", 1 if options.verbose else 0)
            env.start()
        except gp.GurobiError as exc:
            raise (_licence_error(gp, exc) or exc) from exc
        try:
            return self._solve(gp, env, problem, model, options, warm_start, begin)
        finally:
            env.dispose()

    def _solve(self, gp, env, problem, model: MilpModel, options: SolveOptions, warm_start, begin: float) -> BackendOutcome:
        GRB = gp.GRB
        m = gp.Model("cimsplit", env=env)
        try:
            m.Params.TimeLimit = float(options.time_limit_s)
            m.Params.MIPGap = options.effective_mip_gap
            m.Params.IntFeasTol = 1e-9  # big-M rows must not leak time (validator: 1e-6 relative)
            m.Params.FeasibilityTol = 1e-9
            m.Params.Seed = int(options.seed)
            if options.threads:
                m.Params.Threads = int(options.threads)
            vtypes = [GRB.BINARY if integer and lo >= 0 and hi <= 1 else (GRB.INTEGER if integer else GRB.CONTINUOUS)
                      for integer, lo, hi in zip(model.col_integer, model.col_lower, model.col_upper)]
            lower = [float(v) if np.isfinite(v) else -GRB.INFINITY for v in model.col_lower]
            upper = [float(v) if np.isfinite(v) else GRB.INFINITY for v in model.col_upper]
            cols = m.addVars(model.n_variables, lb=lower, ub=upper, obj=model.col_cost.tolist(), vtype=vtypes)
            var = [cols[i] for i in range(model.n_variables)]
            m.ModelSense = GRB.MINIMIZE
            for lo, hi, index, value in model.rows():
                expr = gp.LinExpr(value.tolist(), [var[i] for i in index])
                if np.isfinite(lo) and np.isfinite(hi):
                    if lo == hi:
                        m.addLConstr(expr, GRB.EQUAL, float(lo))
                    else:
                        m.addRange(expr, float(lo), float(hi))
                elif np.isfinite(lo):
                    m.addLConstr(expr, GRB.GREATER_EQUAL, float(lo))
                else:
                    m.addLConstr(expr, GRB.LESS_EQUAL, float(hi))
            if warm_start is not None:
                vector = model.vector_from_schedule(problem, warm_start, host_order_by_start(warm_start))
                m.setAttr("Start", var, vector.tolist())
            m.optimize()
        except gp.GurobiError as exc:
            raise (_licence_error(gp, exc) or exc) from exc
        elapsed = time.perf_counter() - begin

        unit = model.time_unit_ns
        has_solution = m.SolCount > 0
        bound = m.ObjBound if m.Status != GRB.INFEASIBLE else float("inf")
        bound_ns = max(0.0, bound * unit) if np.isfinite(bound) else 0.0
        if m.Status == GRB.OPTIMAL:
            reached_gap = options.mip_gap is not None and m.MIPGap > DEFAULT_MIP_GAP
            label = STATUS_GAP_LIMIT if reached_gap else STATUS_OPTIMAL
        elif m.Status in (GRB.INFEASIBLE, GRB.INF_OR_UNBD):
            label = STATUS_INFEASIBLE
        elif has_solution:
            label = STATUS_TIME_LIMIT
        else:
            label = STATUS_NO_SOLUTION
        log.debug("Gurobi: status %d (%s), %.3fs", m.Status, label, elapsed)
        n_vars, n_rows = model.n_variables, model.n_constraints
        if not has_solution:
            m.dispose()
            return BackendOutcome(self.name, label, None, None, None, float("inf"), bound_ns, elapsed, n_vars, n_rows)
        values = m.getAttr("X", var)
        objective_ns = float(m.ObjVal) * unit
        m.dispose()
        on_host, start_ns, _ = model.decode(values)
        return BackendOutcome(self.name, label, on_host, start_ns, None, objective_ns, min(bound_ns, objective_ns),
                              elapsed, n_vars, n_rows)
