"""The ILP on hand-made DAGs whose optimal makespans are worked out below (HiGHS and Gurobi)."""

from __future__ import annotations

import pytest
from _solvers import solvers

from cimsplit.passes import PlacementProblem, SolveOptions, place

SOLVERS = solvers()
FORMULATIONS = [pytest.param(True, id="plain"), pytest.param(False, id="improved")]


def problem(t_host, t_cim, crossbars, edges, budget, **kw) -> PlacementProblem:
    return PlacementProblem(names=tuple(f"op{i}" for i in range(len(t_host))), t_host_ns=tuple(map(float, t_host)),
                            t_cim_ns=tuple(None if t is None else float(t) for t in t_cim),
                            crossbars=tuple(crossbars), edges=tuple((u, v, float(t)) for u, v, t in edges),
                            budget=budget, **kw)


# a(host) -> b(capable) -> c(host), transfers 5 ns on each edge.
CHAIN = dict(t_host=(10, 100, 10), t_cim=(None, 20, None), crossbars=(0, 4, 0), edges=((0, 1, 5), (1, 2, 5)))


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("plain", FORMULATIONS)
def test_chain_offloads_the_middle_when_it_fits(solver, plain):
    result = place(problem(**CHAIN, budget=4), SolveOptions(solver=solver, plain=plain))
    # a on host, 5 ns to the CIM, b 20 ns, 5 ns back, c 10 ns.
    assert result.schedule.makespan_ns == pytest.approx(10 + 5 + 20 + 5 + 10)
    assert result.schedule.on_host == (True, False, True)
    assert result.solver.status == "optimal" and result.solver.name == solver
    assert result.solver.bound_ns == pytest.approx(50, rel=1e-6)
    assert result.speedup == pytest.approx(120 / 50)
    assert result.crossbars_used == 4


@pytest.mark.parametrize("solver", SOLVERS)
def test_chain_stays_on_host_when_the_budget_is_one_short(solver):
    result = place(problem(**CHAIN, budget=3), SolveOptions(solver=solver))
    assert result.schedule.makespan_ns == pytest.approx(10 + 100 + 10)
    assert all(result.schedule.on_host)


#      a
#     / \        a, d host-only (10 ns); b, c: host 50 ns, CIM 5 ns, 2 crossbars each;
#    b   c       every transfer 1 ns.
#     \ /
#      d
DIAMOND = dict(t_host=(10, 50, 50, 10), t_cim=(None, 5, 5, None), crossbars=(0, 2, 2, 0),
               edges=((0, 1, 1), (0, 2, 1), (1, 3, 1), (2, 3, 1)))


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("plain", FORMULATIONS)
@pytest.mark.parametrize(
    "budget, expected",
    [
        (0, 10 + 50 + 50 + 10),  # CPU only
        (2, 10 + 50 + 10),  # one branch on the CIM (11..16, back by 17) overlaps the other on the host (10..60)
        (4, 10 + 1 + 5 + 1 + 10),  # both branches on the CIM in parallel
    ],
)
def test_diamond(solver, plain, budget, expected):
    result = place(problem(**DIAMOND, budget=budget), SolveOptions(solver=solver, plain=plain))
    assert result.schedule.makespan_ns == pytest.approx(expected)
    assert result.crossbars_used <= budget


#   h1 -> c1 -> g1      h*, g* host-only 10 ns; c* CIM 30 ns (host 1000 ns), no transfer cost.
#   h2 -> c2 -> g2      Best: h1 [0,10], h2 [10,20], c1 [10,40], c2 [20,50], g1 [40,50], g2 [50,60].
# The host must interleave the branches: running one branch to its end first gives 10+30+10+10+30+10 = 100.
BRANCHES = dict(t_host=(10, 1000, 10, 10, 1000, 10), t_cim=(None, 30, None, None, 30, None), crossbars=(0, 1, 0, 0, 1, 0),
                edges=((0, 1, 0), (1, 2, 0), (3, 4, 0), (4, 5, 0)))


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("plain", FORMULATIONS)
def test_independent_branches_interleave_on_the_host(solver, plain):
    result = place(problem(**BRANCHES, budget=2), SolveOptions(solver=solver, plain=plain))
    schedule = result.schedule
    assert schedule.makespan_ns == pytest.approx(60)
    assert schedule.on_host == (True, False, True, True, False, True)
    heads = sorted(schedule.start_ns[v] for v in (0, 3))
    assert heads == pytest.approx([0, 10])  # both heads before either tail: interleaved


# Three independent operators, budget 4 crossbars:
#   a: host 100, CIM 10, 3 crossbars (saves 90/3 = 30 ns per crossbar)
#   b: host 60,  CIM 10, 2 crossbars (saves 25 per crossbar), c: same as b.
# {a} on CIM leaves b, c on the host: 120; {b, c} on CIM leaves a: 100 (optimal).
# Greedy by savings per crossbar takes a first, then nothing fits: 120.
KNAPSACK = dict(t_host=(100, 60, 60), t_cim=(10, 10, 10), crossbars=(3, 2, 2), edges=())


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("plain", FORMULATIONS)
def test_budget_forces_a_choice_that_greedy_gets_wrong(solver, plain):
    result = place(problem(**KNAPSACK, budget=4), SolveOptions(solver=solver, plain=plain))
    assert result.schedule.makespan_ns == pytest.approx(100)
    assert result.schedule.on_host == (True, False, False)
    assert result.baselines["greedy"].makespan_ns == pytest.approx(120)
    assert result.baselines["cpu_only"].makespan_ns == pytest.approx(220)


@pytest.mark.parametrize("solver", SOLVERS)
def test_graph_io_transfers_count(solver):
    # One capable operator reading the graph input and writing the graph output:
    # host 100; CIM 10 + input transfer 30 + output transfer 70 = 110 > 100, so it stays.
    p = problem((100,), (10,), (1,), (), 1, t_in_ns=(30.0,), t_out_ns=(70.0,), writes_output=(True,))
    assert place(p, SolveOptions(solver=solver)).schedule.makespan_ns == pytest.approx(100)
    # With a 50 ns output transfer, 30 + 10 + 50 = 90 < 100: offloaded.
    p = problem((100,), (10,), (1,), (), 1, t_in_ns=(30.0,), t_out_ns=(50.0,), writes_output=(True,))
    result = place(p, SolveOptions(solver=solver))
    assert result.schedule.makespan_ns == pytest.approx(90)
    assert result.schedule.on_host == (False,)
