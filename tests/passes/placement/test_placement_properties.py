"""Invariants over random graphs (hypothesis): bounds, baselines and the ILP agree with brute force."""

from __future__ import annotations

import pytest
from _brute import brute_force_optimum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cimsplit.passes import PlacementProblem, SolveOptions, all_baselines, build_milp, place
from cimsplit.passes.placement.dag import min_duration_ns, release_ns, tail_ns


@st.composite
def problems(draw, max_ops: int = 7) -> PlacementProblem:
    n = draw(st.integers(1, max_ops))
    edges = tuple((u, v, float(draw(st.integers(0, 20))))
                  for v in range(n) for u in range(v) if draw(st.booleans()))
    t_host = tuple(float(draw(st.integers(0, 50))) for _ in range(n))
    t_cim = tuple(draw(st.one_of(st.none(), st.integers(0, 50).map(float))) for _ in range(n))
    crossbars = tuple(draw(st.integers(0, 4)) if t is not None else 0 for t in t_cim)
    budget = draw(st.integers(0, 8))
    return PlacementProblem(names=tuple(f"op{v}" for v in range(n)), t_host_ns=t_host, t_cim_ns=t_cim,
                            crossbars=crossbars, edges=edges, budget=budget)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_lower_bounds_baselines_and_ilp_agree(problem):
    optimum = brute_force_optimum(problem)
    # the critical-path bound the improved model puts on T is a lower bound on the optimum
    release, tail = release_ns(problem), tail_ns(problem)
    critical = max(release[v] + min_duration_ns(problem, v) + tail[v] for v in range(problem.n))
    assert critical <= optimum + 1e-9
    # the host-load cut on forced-host operators too
    assert sum(problem.t_host_ns[v] for v in range(problem.n) if not problem.capable(v)) <= optimum + 1e-9
    for schedule in all_baselines(problem).values():
        assert schedule.makespan_ns >= optimum - 1e-9
    result = place(problem, SolveOptions(solver="highs", threads=1))
    assert result.schedule.makespan_ns == pytest.approx(optimum, abs=1e-6)
    assert result.solver.bound_ns <= optimum + 1e-6


@settings(max_examples=30, deadline=None)
@given(problems())
def test_improved_model_is_never_larger_in_integer_columns(problem):
    plain = build_milp(problem, plain=True)
    improved = build_milp(problem, plain=False, upper_bound_ns=sum(problem.t_host_ns))
    assert improved.n_integer <= plain.n_integer
    assert improved.n_variables <= plain.n_variables
    assert len(improved.o_col) == len(plain.o_col)  # eq. 10: one order variable per incomparable pair in both
