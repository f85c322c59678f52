"""Random branchy DAG problems: exact size, determinism, real branching, sane costs."""

from __future__ import annotations

import pytest

from cimsplit.passes.placement.dag import incomparable_pairs
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.testing import STYLES, random_problem, with_zero_length_host_operators


@pytest.mark.parametrize(("style", "n"), [("detector", 93), ("detector", 100), ("detector", 251),
                                          ("detector", 400), ("inception", 150), ("inception", 1),
                                          ("layered", 1), ("layered", 8), ("layered", 400)])
def test_requested_operator_count(style: str, n: int):
    p = random_problem(n, seed=0, style=style)
    assert p.n == n
    assert all(u < v for u, v, _ in p.edges)  # topological indices (the problem checks it too)


@pytest.mark.parametrize("style", STYLES)
def test_same_seed_same_problem_other_seed_other_problem(style: str):
    a = random_problem(150, seed=11, style=style)
    assert a == random_problem(150, seed=11, style=style)
    assert a != random_problem(150, seed=12, style=style)


@pytest.mark.parametrize(("style", "n"), [("detector", 251), ("inception", 150), ("layered", 200)])
def test_real_branching(style: str, n: int):
    p = random_problem(n, seed=0, style=style)
    pairs = len(incomparable_pairs(p))
    # A chain has 0 incomparable pairs; ask for at least 2 per operator (YOLOv5n in the
    # paper has about 11: 3,041 variables for 251 operators).
    assert pairs >= 2 * n
    joins = sum(1 for v in range(n) if sum(1 for _, w, _ in p.edges if w == v) >= 2)
    forks = sum(1 for u in range(n) if sum(1 for w, _, _ in p.edges if w == u) >= 2)
    assert joins >= 5 and forks >= 5  # concats / adds and parallel branches


def test_incomparable_pairs_by_hand():
    r"""
        0
       / \      pairs with no path: {1, 2} and {1, 3}? no: 1 -> 3. Only {1, 2}.
      1   2
       \ /
        3
    """
    p = PlacementProblem(("a", "b", "c", "d"), (1.0,) * 4, (None,) * 4, (0,) * 4,
                         ((0, 1, 0.0), (0, 2, 0.0), (1, 3, 0.0), (2, 3, 0.0)), 0)
    assert len(incomparable_pairs(p)) == 1


def test_detector_costs_look_like_a_detector():
    p = random_problem(251, seed=0, style="detector")
    capable = [v for v in range(p.n) if p.capable(v)]
    host_only = [v for v in range(p.n) if not p.capable(v)]
    assert len(host_only) >= 50  # many small host-only operators
    mean = lambda vs: sum(p.t_host_ns[v] for v in vs) / len(vs)  # noqa: E731
    assert mean(capable) > 5 * mean(host_only)  # convs dominate the host time
    assert sum(1 for v in capable if p.t_cim_ns[v] < p.t_host_ns[v]) > len(capable) // 2
    total = sum(p.crossbars[v] for v in capable)
    assert 0 < p.budget < total  # the crossbar budget binds
    assert any(p.writes_output) and any(t > 0 for t in p.t_in_ns)


def test_zero_length_host_operators_take_over_the_inputs():
    r"""
        a -5-> b -3-> c      b, c CIM-capable; a -> c carries 4 ns
         \-----4-----/
    becomes a -5-> zero1 -5-> b -3-> zero3 -7-> c and a -4-> zero3: every zero
    operator host-only, 0 ns, just before its capable operator, feeding it the sum.
    """
    p = PlacementProblem(names=("a", "b", "c"), t_host_ns=(1.0, 2.0, 3.0), t_cim_ns=(None, 1.0, 1.0),
                         crossbars=(0, 1, 1), edges=((0, 1, 5.0), (0, 2, 4.0), (1, 2, 3.0)), budget=2)
    q = with_zero_length_host_operators(p, 1.0)
    assert q.names == ("a", "zero1", "b", "zero3", "c")
    assert q.t_host_ns == (1.0, 0.0, 2.0, 0.0, 3.0)
    assert q.t_cim_ns == (None, None, 1.0, None, 1.0)
    assert q.crossbars == (0, 0, 1, 0, 1)
    assert q.edges == ((0, 1, 5.0), (0, 3, 4.0), (1, 2, 5.0), (2, 3, 3.0), (3, 4, 7.0))
    assert with_zero_length_host_operators(p, 0.0) == p
