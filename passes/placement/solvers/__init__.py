"""Exact solvers of the placement problem: the MILP (Gurobi, HiGHS) and CP-SAT, behind one backend protocol."""

from __future__ import annotations

from cimsplit.passes.placement.solvers.backend import BACKENDS, Backend, BackendOutcome, get_backend

__all__ = ["BACKENDS", "Backend", "BackendOutcome", "get_backend"]
