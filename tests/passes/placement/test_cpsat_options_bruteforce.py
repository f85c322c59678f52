"""CP-SAT's opt-in options against exhaustive enumeration on the same 210 small random DAGs.

``bound_worker=True`` runs LB-tree search on a second thread beside the main
search and keeps the best solution and the best bound of the two;
``cumulative_host=True`` states the host a second time as a capacity-1
cumulative (for its propagators); ``whole_windows=True`` makes each host operator fill at most one window of the
idle-chain cut, whole; ``cim_idle_cut=True`` adds the host idle time forced
while a chain of CIM operators runs.  Each must keep the optimum (same makespan as the brute
force of ``test_cpsat_bruteforce``) and a bound that never exceeds it.
"""

from __future__ import annotations

import random

import pytest
from _brute import brute_force_optimum, random_problem
from test_cpsat_bruteforce import PROBLEMS, ZERO_LENGTH, assert_brute_force_optimum, brute_force_ns

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.solvers.cpsat import CpSatOptions, solve_cpsat

OPTIONS = {"bound_worker": dict(bound_worker=True, threads=2), "whole_windows": dict(whole_windows=True, threads=1),
           "cumulative_host": dict(cumulative_host=True, threads=1),
           "cim_idle_cut": dict(cim_idle_cut=True, threads=1),
           "cim_idle_cut+bound_worker": dict(cim_idle_cut=True, bound_worker=True, threads=2)}


@pytest.mark.parametrize("chunk", range(7))
@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_option_matches_brute_force(option: str, chunk: int):
    for problem in PROBLEMS[chunk * 30:(chunk + 1) * 30]:
        out = solve_cpsat(problem, CpSatOptions(time_limit_s=20.0, heuristic_time_s=0.01, **OPTIONS[option])).outcome
        assert_brute_force_optimum(problem, out, brute_force_ns(problem))


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_option_matches_brute_force_with_zero_length_host_operators(option: str):
    for problem in ZERO_LENGTH[:20]:
        out = solve_cpsat(problem, CpSatOptions(time_limit_s=20.0, heuristic_time_s=0.01, **OPTIONS[option])).outcome
        assert_brute_force_optimum(problem, out, brute_force_ns(problem))


def test_bound_worker_on_a_budget_bound_dag_keeps_a_valid_bound():
    r"""
        a -> B -> d          a, d: host-only
         \-> C -/            B, C: CIM-capable, one crossbar each, budget 1
    Host: a 10, B 30, C 30, d 10; CIM: B 5, C 5; no transfers.
    Put one of B, C on the CIM: host runs a, the other (30), d: 10 + 30 + 10 = 50,
    while the CIM one (5) overlaps.  Both on host: 10 + 30 + 30 + 10 = 80.  Optimum 50.
    """
    p = PlacementProblem(names=("a", "B", "C", "d"), t_host_ns=(10.0, 30.0, 30.0, 10.0),
                         t_cim_ns=(None, 5.0, 5.0, None), crossbars=(0, 1, 1, 0),
                         edges=((0, 1, 0.0), (0, 2, 0.0), (1, 3, 0.0), (2, 3, 0.0)), budget=1)
    out = solve_cpsat(p, CpSatOptions(time_limit_s=10.0, bound_worker=True, threads=2)).outcome
    assert out.status == "optimal"
    assert out.objective_ns == 10 + 30 + 10
    assert out.bound_ns == 10 + 30 + 10


@pytest.mark.parametrize("chunk", range(4))
def test_cim_idle_cut_on_io_heavy_dags(chunk: int):
    """The padded windows of the CIM idle cut, on DAGs with graph-input/output times and transfers."""
    rng = random.Random(1000 + chunk)
    for _ in range(55):
        problem = random_problem(rng)
        optimum = brute_force_optimum(problem)
        options = CpSatOptions(time_limit_s=20.0, heuristic_time_s=0.01, cim_idle_cut=True, threads=1)
        out = solve_cpsat(problem, options).outcome
        assert out.status == "optimal", (problem, out)
        assert out.objective_ns == pytest.approx(optimum, rel=1e-6, abs=1e-9)
        assert out.bound_ns <= optimum * (1 + 1e-12) + 1e-12
