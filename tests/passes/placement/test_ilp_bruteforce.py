"""The ILP against brute force on 200 random DAGs of up to 8 operators.

Brute force (``_brute.py``) enumerates every placement within budget and every
precedence-respecting host order, timing each itself.  HiGHS must reach that
optimum within 1e-6 relative with the paper's plain formulation AND the
improved one, and its bound must not exceed it.  Gurobi too, where it runs.
"""

from __future__ import annotations

import random

import pytest
from _brute import brute_force_optimum, random_problem
from _solvers import solvers

from cimsplit.passes import SolveOptions, all_baselines, build_milp, validate
from cimsplit.passes.placement.solvers.backend import get_backend
from cimsplit.passes.placement.testing import with_zero_length_host_operators

PROBLEMS = [random_problem(random.Random(seed)) for seed in range(200)]
ZERO_LENGTH = [with_zero_length_host_operators(random_problem(random.Random(1000 + seed), max_ops=6), 0.5, seed=seed)
               for seed in range(40)]
"""0 ns host operators in front of CIM-capable ones (ties in start time that the host order must break)."""


@pytest.mark.parametrize("solver", solvers())
@pytest.mark.parametrize("plain", [True, False], ids=["plain", "improved"])
@pytest.mark.parametrize("sample", ["random", "zero_length"])
def test_solver_matches_brute_force(solver, plain, sample):
    backend = get_backend(solver)
    for seed, problem in enumerate(PROBLEMS if sample == "random" else ZERO_LENGTH):
        optimum = brute_force_optimum(problem)
        upper = min(s.makespan_ns for s in all_baselines(problem).values())
        assert optimum <= upper + 1e-9, seed
        model = build_milp(problem, plain=plain, upper_bound_ns=upper)
        outcome = backend.solve(problem, model, SolveOptions(time_limit_s=30, threads=1), None)
        assert outcome.status == "optimal", seed
        assert outcome.objective_ns == pytest.approx(optimum, rel=1e-6, abs=1e-9), seed
        assert outcome.bound_ns <= optimum * (1 + 1e-6) + 1e-9, seed
        retimed = validate(problem, outcome.on_host, start_ns=outcome.start_ns, objective_ns=outcome.objective_ns)
        assert retimed.makespan_ns == pytest.approx(optimum, rel=1e-6, abs=1e-9), seed


def test_the_random_problems_are_not_trivial():
    sizes = [p.n for p in PROBLEMS]
    assert max(sizes) == 8
    assert sum(1 for p in PROBLEMS if p.n >= 6) >= 50
    # the ILP must beat CPU-only somewhere and have interleaving choices
    assert sum(1 for p in PROBLEMS if brute_force_optimum(p) < sum(p.t_host_ns) - 1e-9) >= 50
