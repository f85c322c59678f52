"""CP-SAT and the heuristics against exhaustive enumeration on 200+ small random DAGs.

The brute force enumerates every placement within the crossbar budget (eq. 5, 14)
and, for each, every precedence-respecting order of its host operators, re-timed
by ``simulate``: the minimum is the optimum of eq. 5-14 by definition.
"""

from __future__ import annotations

import itertools
import random

import pytest

from cimsplit.passes.placement.heuristics import best_heuristic
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.simulate import host_order_by_start, simulate
from cimsplit.passes.placement.solvers.cpsat import CpSatOptions, solve_cpsat
from cimsplit.passes.placement.testing import random_problem, with_zero_length_host_operators


def host_orders(problem: PlacementProblem, on_host: tuple[bool, ...]):
    """Every order of the host operators that respects precedence through any path."""
    anc = [0] * problem.n
    for u, v, _ in sorted(problem.edges, key=lambda e: e[1]):
        anc[v] |= anc[u] | (1 << u)
    hosts = [v for v in range(problem.n) if on_host[v]]
    host_mask = sum(1 << v for v in hosts)

    def extend(order: list[int], placed: int):
        if len(order) == len(hosts):
            yield list(order)
            return
        for v in hosts:
            if not (placed >> v) & 1 and anc[v] & host_mask & ~placed == 0:
                order.append(v)
                yield from extend(order, placed | (1 << v))
                order.pop()

    yield from extend([], 0)


def brute_force_ns(problem: PlacementProblem) -> float:
    capable = [v for v in range(problem.n) if problem.capable(v)]
    best = float("inf")
    for choice in itertools.product((True, False), repeat=len(capable)):
        on_host = [True] * problem.n
        for v, h in zip(capable, choice):
            on_host[v] = h
        if sum(problem.crossbars[v] for v in capable if not on_host[v]) > problem.budget:
            continue
        for order in host_orders(problem, tuple(on_host)):
            best = min(best, simulate(problem, on_host, order).makespan_ns)
    return best


def assert_brute_force_optimum(problem: PlacementProblem, out, optimum: float) -> None:
    """``out`` (a BackendOutcome) is proven optimal at ``optimum`` with a true lower bound, and its
    placement re-times to the reported objective within the crossbar budget."""
    assert out.status == "optimal", (problem, out)
    assert out.objective_ns == pytest.approx(optimum, rel=1e-6, abs=1e-9)
    assert out.bound_ns <= optimum * (1 + 1e-12) + 1e-12  # a true lower bound
    again = simulate(problem, out.on_host, out.host_order)
    assert again.makespan_ns == pytest.approx(out.objective_ns, rel=1e-12, abs=1e-12)
    assert sum(c for c, h in zip(problem.crossbars, out.on_host) if not h) <= problem.budget


def small_problems(count: int, seed: int, max_ops: int = 8) -> list[PlacementProblem]:
    """Layered random DAGs of 1-``max_ops`` operators with random budgets, transfers and io times."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        base = random_problem(rng.randint(1, max_ops), seed=seed * 1000 + i, style="layered",
                              budget_fraction=rng.choice((0.3, 0.6, 1.0)))
        # Scale transfers so that some placements pay for crossing and some do not.
        k = rng.choice((0.0, 1.0, 20.0, 200.0))
        edges = tuple((u, v, t * k) for u, v, t in base.edges)
        out.append(PlacementProblem(base.names, base.t_host_ns, base.t_cim_ns, base.crossbars, edges, base.budget,
                                    tuple(t * k for t in base.t_in_ns), tuple(t * k for t in base.t_out_ns),
                                    base.writes_output))
    return out


PROBLEMS = small_problems(210, seed=7)
ZERO_LENGTH = [with_zero_length_host_operators(p, 0.5, seed=i) for i, p in enumerate(small_problems(60, seed=8, max_ops=6))]
"""0 ns host operators in front of CIM-capable ones: the configuration of the CP-SAT host-order bug."""


def test_the_sample_has_branching_and_binding_budgets():
    # The brute-force agreement must not pass on trivial chains only.
    branchy = sum(1 for p in PROBLEMS if any(True for _ in _incomparable(p)))
    binding = sum(1 for p in PROBLEMS if sum(p.crossbars[v] for v in range(p.n) if p.capable(v)) > p.budget)
    assert len(PROBLEMS) >= 200
    assert branchy >= 100
    assert binding >= 50


def _incomparable(p: PlacementProblem):
    reach = [0] * p.n
    for u, v, _ in sorted(p.edges, key=lambda e: -e[0]):
        reach[u] |= reach[v] | (1 << v)
    for u in range(p.n):
        for v in range(u + 1, p.n):
            if not (reach[u] >> v) & 1:
                yield (u, v)


@pytest.mark.parametrize("chunk", range(7))
def test_cpsat_matches_brute_force(chunk: int):
    for problem in PROBLEMS[chunk * 30:(chunk + 1) * 30]:
        run = solve_cpsat(problem, CpSatOptions(time_limit_s=20.0, threads=1, heuristic_time_s=0.01))
        assert_brute_force_optimum(problem, run.outcome, brute_force_ns(problem))


def test_the_zero_length_sample_has_them_beside_other_host_operators():
    # A 0 ns host operator incomparable to a longer one: both can start at the same instant.
    beside = sum(1 for p in ZERO_LENGTH
                 if any(0 == min(p.t_host_ns[u], p.t_host_ns[v]) < max(p.t_host_ns[u], p.t_host_ns[v])
                        for u, v in _incomparable(p)))
    assert len(ZERO_LENGTH) == 60
    assert beside >= 30


@pytest.mark.parametrize("chunk", range(2))
def test_cpsat_matches_brute_force_with_zero_length_host_operators(chunk: int):
    for problem in ZERO_LENGTH[chunk * 30:(chunk + 1) * 30]:
        run = solve_cpsat(problem, CpSatOptions(time_limit_s=20.0, threads=1, heuristic_time_s=0.01))
        assert_brute_force_optimum(problem, run.outcome, brute_force_ns(problem))


@pytest.mark.parametrize("chunk", range(7))
def test_heuristics_valid_and_never_below_the_optimum(chunk: int):
    for problem in PROBLEMS[chunk * 30:(chunk + 1) * 30]:
        optimum = brute_force_ns(problem)
        sched = best_heuristic(problem, time_budget_s=0.01, seed=chunk)
        assert sum(c for c, h in zip(problem.crossbars, sched.on_host) if not h) <= problem.budget
        assert all(h or problem.capable(v) for v, h in enumerate(sched.on_host))
        again = simulate(problem, sched.on_host, host_order_by_start(sched))
        assert again.makespan_ns == pytest.approx(sched.makespan_ns, rel=1e-12, abs=1e-12)
        assert sched.makespan_ns >= optimum * (1 - 1e-12)


def test_plain_model_agrees_on_a_sample():
    for problem in PROBLEMS[:40]:
        optimum = brute_force_ns(problem)
        out = solve_cpsat(problem, CpSatOptions(time_limit_s=20.0, threads=1, plain=True)).outcome
        assert out.status == "optimal"
        assert out.objective_ns == pytest.approx(optimum, rel=1e-6, abs=1e-9)
