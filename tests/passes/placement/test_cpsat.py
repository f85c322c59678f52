"""CP-SAT backend: hand-computed optima, exact time units, the backend contract."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.solvers.backend import get_backend
from cimsplit.passes.placement.solvers.cpsat import CpSatOptions, build_model, solve_cpsat, time_unit_ns
from cimsplit.passes.placement.solvers.cpsat.cuts import host_chains
from cimsplit.passes.placement.solvers.cpsat.model import floor_units
from cimsplit.passes.placement.testing import random_problem


def diamond(budget: int) -> PlacementProblem:
    r"""
          a        host-only, 10 ns
         / \       transfers a->b, a->c: 3 ns
        b   c      b: host 100 / CIM 20 ns, 2 crossbars; c: host 50 / CIM 10 ns, 2 crossbars
         \ /       transfers b->d, c->d: 4 ns
          d        host-only, 5 ns
    """
    return PlacementProblem(
        names=("a", "b", "c", "d"),
        t_host_ns=(10.0, 100.0, 50.0, 5.0),
        t_cim_ns=(None, 20.0, 10.0, None),
        crossbars=(0, 2, 2, 0),
        edges=((0, 1, 3.0), (0, 2, 3.0), (1, 3, 4.0), (2, 3, 4.0)),
        budget=budget,
    )


@pytest.mark.parametrize(
    ("budget", "expected_ns", "cim"),
    [
        # all host: 10 + 100 + 50 + 5 (single core)
        (0, 165.0, set()),
        # b on CIM: b runs 13..33 while c runs on the host 10..60; d starts at max(33 + 4, 60) = 60
        (2, 65.0, {"b"}),
        # both on CIM: b 13..33, c 13..23; d starts at max(33 + 4, 23 + 4) = 37, ends 42
        (4, 42.0, {"b", "c"}),
    ],
)
def test_diamond_optimum_by_hand(budget: int, expected_ns: float, cim: set[str]):
    p = diamond(budget)
    out = solve_cpsat(p, CpSatOptions(time_limit_s=10.0, threads=1)).outcome
    assert out.status == "optimal"
    assert out.objective_ns == expected_ns
    assert out.bound_ns == expected_ns  # integer ns: unit 1 ns, no rounding at all
    assert {p.names[v] for v in range(p.n) if not out.on_host[v]} == cim


def test_integer_and_binary_fraction_times_need_no_rounding():
    assert time_unit_ns(diamond(2)) == (1.0, True)
    # 100 bytes over 20.48 GB/s = 4.8828125 ns = 625/128 ns: exact in units of 2**-7 ns
    p = PlacementProblem(("a", "b"), (1.0, 2.0), (None, 1.0), (0, 1), ((0, 1, 100 / 20.48),), 1)
    assert time_unit_ns(p) == (2.0**-7, True)


@settings(max_examples=400, deadline=None)
@given(st.floats(0.0, 1e9), st.sampled_from([1.0, 2.0**-7, 0.1, 1 / 3, 1e6 / 2**32, 3.0]), st.integers(0, 10**6),
       st.sampled_from([-1, 0, 1]))
def test_floor_units_is_the_exact_rational_floor(t_ns: float, unit_ns: float, k: int, step: int):
    """Also for times one ulp either side of a whole number of units, where a float division can round up."""
    near = math.nextafter(k * unit_ns, math.inf * step) if step else k * unit_ns
    for t in (t_ns, near):
        assert floor_units(t, unit_ns) == max(0, int(Fraction(t) // Fraction(unit_ns)))


def test_rounded_units_keep_the_bound_below_the_real_makespan():
    # log-normal noise makes every time irrational in binary units: the rounding path
    p = random_problem(30, seed=3, style="layered")
    unit, exact = time_unit_ns(p)
    assert not exact and unit > 0
    out = solve_cpsat(p, CpSatOptions(time_limit_s=30.0, threads=1)).outcome
    assert out.bound_ns <= out.objective_ns
    assert out.status == "optimal"
    assert out.gap <= 1e-6


def test_backend_contract_and_counts():
    backend = get_backend("cpsat")
    assert backend.name == "cpsat"
    p = diamond(2)
    out = backend.solve(p, None, SolveOptions(time_limit_s=10.0), None)
    assert out.solver == "cpsat" and out.has_solution
    assert out.objective_ns == 65.0 and out.gap == 0.0
    # 2 free x, 4 starts, T, plus the model's own constants; rows: intervals, edges, no-overlap ...
    assert out.n_variables >= 2 + 4 + 1
    assert out.n_constraints >= 4 + 1 + 1


def test_same_seed_same_answer():
    p = random_problem(60, seed=1, style="layered")
    a = solve_cpsat(p, CpSatOptions(time_limit_s=5.0, seed=4)).outcome
    b = solve_cpsat(p, CpSatOptions(time_limit_s=5.0, seed=4)).outcome
    assert a.on_host == b.on_host
    assert a.objective_ns == b.objective_ns


def test_host_chains_by_hand():
    r"""
        a -> B -> c -> D -> e      lower case: host-only; B, D: CIM-capable
              \-> f                f: host-only, a second maximal end
    Longest host-only chain: a, c, e (B and D are capable); the other end f: a, f.
    """
    p = PlacementProblem(("a", "B", "c", "D", "e", "f"), (1.0,) * 6, (None, 1.0, None, 1.0, None, None),
                         (0, 1, 0, 1, 0, 0), ((0, 1, 0.0), (1, 2, 0.0), (2, 3, 0.0), (3, 4, 0.0), (1, 5, 0.0)), 2)
    chains = host_chains(build_model(p, plain=False, warm_start=None), limit=3)
    assert chains == [[0, 2, 4], [0, 5]]


@pytest.mark.parametrize("seed", range(8))
def test_cuts_keep_the_optimum(seed: int):
    # the improved model (cuts, bounds, idle chains, hints) and the bare model agree
    p = random_problem(12, seed=seed, style="layered", budget_fraction=0.5)
    plain = solve_cpsat(p, CpSatOptions(time_limit_s=60.0, plain=True)).outcome
    improved = solve_cpsat(p, CpSatOptions(time_limit_s=60.0)).outcome
    assert plain.status == improved.status == "optimal"
    assert improved.objective_ns == pytest.approx(plain.objective_ns, rel=1e-6)


def test_a_lower_bound_equal_to_the_optimum_keeps_it():
    # diamond(2): optimum 65 ns by hand (test_diamond_optimum_by_hand); integer ns, exact units.
    out = solve_cpsat(diamond(2), CpSatOptions(time_limit_s=10.0, threads=1), lower_bound_ns=65.0).outcome
    assert out.status == "optimal" and out.objective_ns == 65.0 and out.bound_ns == 65.0


@pytest.mark.parametrize("seed", range(6))
def test_the_optimum_as_lower_bound_keeps_it_with_rounded_units(seed: int):
    # Log-normal times: rounded units, where the row is T >= floor(LB / r) - (2n + 1).
    p = random_problem(14, seed=seed, style="layered", budget_fraction=0.5)
    assert not time_unit_ns(p)[1]
    optimum = solve_cpsat(p, CpSatOptions(time_limit_s=30.0, threads=1)).outcome
    assert optimum.status == "optimal"
    again = solve_cpsat(p, CpSatOptions(time_limit_s=30.0, threads=1), lower_bound_ns=optimum.objective_ns).outcome
    assert again.status == "optimal"
    assert again.objective_ns == pytest.approx(optimum.objective_ns, rel=1e-9)
    assert again.bound_ns == pytest.approx(optimum.objective_ns, rel=1e-9)
