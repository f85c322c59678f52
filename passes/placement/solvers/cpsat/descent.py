"""Minimizing a CP-SAT model's makespan by decisions: "is there a schedule with T <= U?", U lowered below
each schedule found (:class:`Descent`), for :func:`.sliced.solve_sliced`'s solves with a cutoff."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.solvers.cpsat.solve import CpSatOptions, _configure

__all__ = ["DECISION_SHARE", "Descent"]

DECISION_SHARE = 0.75
"""Of a solve with a cutoff below its warm start, the share of the work its decisions get (:class:`Descent`);
if they do not finish, CP-SAT's objective gets the rest, for a bound.  Decisions alone left YOLOv8n int8 at
100 crossbars / 1000 ns 5.8 % from its bound after 60 s (1.6 % with the objective alone): a 46-crossbar
decision of its head ran to every limit without a proof, stating nothing.  With three quarters, 1.8 %, and
YOLOv5n int8's four chains of the paper's grid take 60-66 s (86 s with the objective alone, 69 s with
decisions alone; ``bench/yolo_chains.py``)."""


@dataclass
class Descent:
    """Minimize T by decisions: is there a schedule with T <= U units?  Each schedule found lowers U below
    it; a decision without one proves the last U + 1 a bound (:func:`.sliced.solve_sliced`'s ``cutoff_ns``)."""

    m: cp_model.CpModel
    """The model without an objective, T's upper end at the cutoff's U."""
    makespan: cp_model.IntVar
    unit: float
    cp_options: CpSatOptions
    deadline: float
    work_s: float | None
    proves: float = 0.0
    """What a decision without a schedule at the current U proves (a bound on the real optimum)."""

    def decide(self) -> tuple[int, cp_model.CpSolver]:
        """One decision within the limits left; its work is taken from them."""
        solver = cp_model.CpSolver()
        _configure(solver, self.cp_options, self.cp_options.threads, max(0.05, self.deadline - time.perf_counter()))
        if self.work_s is not None:
            solver.parameters.max_deterministic_time = max(0.01, self.work_s)
        code = solver.Solve(self.m)
        if self.work_s is not None:
            self.work_s -= solver.ResponseProto().deterministic_time
        return code, solver

    def run(self, read, cutoff_ns: float, gap: float) -> tuple[Schedule | None, tuple[int, ...] | None, float, bool]:
        """(best schedule or None, its host order, bound, proven) within the limits.

        Exactness: T's domain is all that changes between decisions.  At the cutoff's U (the model's
        UB) no schedule proves the real optimum above the cutoff (:func:`.sliced.solve_sliced`).  After a
        schedule of real makespan M found at T = t units, U is the least of ``ceil(M (1 - gap) / unit)
        + 1`` (then no schedule proves the optimum above M (1 - gap), the same argument: M is within
        the gap) and t - 1 (then none proves the floored optimum at least t units, and the real one at
        least t units, as CP-SAT's own bound would); either way U is below t, so the search moves on."""
        best, order, self.proves = None, None, cutoff_ns
        while self.deadline - time.perf_counter() > 0.01 and (self.work_s is None or self.work_s > 0.01):
            code, solver = self.decide()
            if code == cp_model.INFEASIBLE:
                return best, order, self.proves, True
            if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                break
            best, order = read(solver.Value)
            found = solver.Value(self.makespan)
            ub = math.ceil(best.makespan_ns * (1.0 - gap) / self.unit) + 1
            self.proves = best.makespan_ns * (1.0 - gap)
            if ub >= found:
                ub, self.proves = found - 1, found * self.unit * (1.0 - 1e-15)
            domain = self.m.Proto().variables[self.makespan.Index()].domain  # [lower end, upper end]
            domain[1] = ub
            if ub < domain[0]:  # T's lower end (the cheap bounds' row) is reached: nothing below it
                return best, order, self.proves, True
            self.m.ClearHints()
            for i in range(len(self.m.Proto().variables)):
                var = self.m.GetIntVarFromProtoIndex(i)
                self.m.AddHint(var, solver.Value(var))
        return best, order, 0.0, False

    def minimize(self, read, best: Schedule | None, order: tuple[int, ...] | None
                 ) -> tuple[Schedule | None, tuple[int, ...] | None, float, bool]:
        """:meth:`run`'s result after the work left on CP-SAT's objective within T <= U: a bound where the
        decisions gave none.  The optimum is within U (at least CP-SAT's bound) or above it (at least
        :attr:`proves`)."""
        self.m.Minimize(self.makespan)
        code, solver = self.decide()
        if code == cp_model.INFEASIBLE:
            return best, order, self.proves, True
        bound = min(self.proves, solver.BestObjectiveBound() * self.unit * (1.0 - 1e-15))
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            found, found_order = read(solver.Value)
            if best is None or found.makespan_ns < best.makespan_ns:
                best, order = found, found_order
        return best, order, bound, code == cp_model.OPTIMAL
