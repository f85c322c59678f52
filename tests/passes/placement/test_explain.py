"""Explanations on hand-made DAGs: every reason, forced makespan and budget curve worked out by hand."""

from __future__ import annotations

import pytest

from cimsplit.passes import PlacementProblem, SolveOptions, place
from cimsplit.passes.placement.baselines import greedy
from cimsplit.passes.placement.budget import budget_curve
from cimsplit.passes.placement.explain import critical_operators, explain_operators
from cimsplit.passes.placement.result import PlacementResult, SolverStats
from cimsplit.passes.placement.validate import InternalError
from cimsplit.passes.placement.whatif import force_device, forced_move

SOLVERS = ["highs", "cpsat"]


def problem(t_host, t_cim, crossbars, edges, budget) -> PlacementProblem:
    return PlacementProblem(names=tuple("abcdefgh"[:len(t_host)]), t_host_ns=tuple(map(float, t_host)),
                            t_cim_ns=tuple(None if t is None else float(t) for t in t_cim),
                            crossbars=tuple(crossbars), edges=tuple((u, v, float(t)) for u, v, t in edges),
                            budget=budget)


def solver(name: str):
    return lambda p: place(p, SolveOptions(solver=name, time_limit_s=10))


def by_name(explanations):
    return {e.name: e for e in explanations}


# a -> b -> c: a, c host-only 10 ns; b host 100 ns, CIM 20 ns, 4 crossbars; 5 ns on each edge.
CHAIN = dict(t_host=(10, 100, 10), t_cim=(None, 20, None), crossbars=(0, 4, 0), edges=((0, 1, 5), (1, 2, 5)))


@pytest.mark.parametrize("name", SOLVERS)
def test_chain_on_the_cim_saves_the_forced_host_makespan(name):
    solve = solver(name)
    plan = solve(problem(**CHAIN, budget=4))
    assert plan.schedule.makespan_ns == pytest.approx(10 + 5 + 20 + 5 + 10)
    ex = by_name(explain_operators(plan, solve, not_capable={"a": "Relu: no constant weight"}))
    assert ex["a"].reason == "not_cim_capable" and ex["a"].detail == "Relu: no constant weight"
    assert ex["a"].forced_makespan_ns is None
    assert ex["c"].reason == "not_cim_capable" and ex["c"].detail == "not CIM-capable"
    b = ex["b"]
    assert b.reason == "on_cim" and b.device == "cim"
    assert b.forced.device == "host"
    assert b.forced_makespan_ns == pytest.approx(10 + 100 + 10)  # all on the host
    assert b.saving_ns == pytest.approx(120 - 50)
    assert b.forced.gap == pytest.approx(0.0, abs=1e-6)
    assert all(e.critical for e in ex.values())  # a chain: every operator is on the path


def test_chain_one_crossbar_short_is_crowded_out_and_cannot_move():
    solve = solver("highs")
    plan = solve(problem(**CHAIN, budget=3))
    b = by_name(explain_operators(plan, solve))["b"]
    # solo on the CIM: 5 + 20 + 5 = 30 < 100 ns on the host, but 4 crossbars > 3.
    assert b.reason == "crowded_out" and b.solo_cim_ns == pytest.approx(30)
    assert b.forced.device == "cim" and b.forced_makespan_ns is None and b.forced.status == "impossible"
    assert b.detail == "needs 4 crossbars, the budget is 3"


# a -> b -> c with 15 ns transfers: b host 30 ns, CIM 10 ns, 1 crossbar.
EXPENSIVE_TRANSFERS = dict(t_host=(10, 30, 10), t_cim=(None, 10, None), crossbars=(0, 1, 0),
                           edges=((0, 1, 15), (1, 2, 15)))


@pytest.mark.parametrize("name", SOLVERS)
def test_never_profitable_gives_its_numbers(name):
    solve = solver(name)
    plan = solve(problem(**EXPENSIVE_TRANSFERS, budget=1))
    assert plan.schedule.makespan_ns == pytest.approx(10 + 30 + 10)
    b = by_name(explain_operators(plan, solve))["b"]
    assert b.reason == "never_profitable" and b.device == "host"
    assert b.solo_cim_ns == pytest.approx(15 + 10 + 15)  # slowest in + T_acc + slowest out > 30
    assert b.forced_makespan_ns == pytest.approx(10 + 15 + 10 + 15 + 10)
    assert b.saving_ns == pytest.approx(60 - 50)
    assert b.detail == "alone on the CIM it takes 40 ns (T_acc 10 ns plus transfers) > 30 ns on the host"


#      a
#     / \        a, d host-only (10 ns); b: host 50, CIM 5; c: host 40, CIM 5;
#    b   c       2 crossbars each; every transfer 1 ns.
#     \ /
#      d
DIAMOND = dict(t_host=(10, 50, 40, 10), t_cim=(None, 5, 5, None), crossbars=(0, 2, 2, 0),
               edges=((0, 1, 1), (0, 2, 1), (1, 3, 1), (2, 3, 1)))


@pytest.mark.parametrize("name", SOLVERS)
def test_diamond_budget_of_two_crowds_out_c(name):
    solve = solver(name)
    plan = solve(problem(**DIAMOND, budget=2))
    # b on the CIM: a 0-10, b 11-16 (+1 back = 17), c on the host 10-50, d 50-60.
    # c on the CIM instead: b on the host 10-60, d 60-70.
    assert plan.schedule.makespan_ns == pytest.approx(60)
    ex = by_name(explain_operators(plan, solve))
    b, c = ex["b"], ex["c"]
    assert b.reason == "on_cim" and b.forced_makespan_ns == pytest.approx(70) and b.saving_ns == pytest.approx(10)
    assert c.reason == "crowded_out" and c.device == "host"
    assert c.solo_cim_ns == pytest.approx(1 + 5 + 1)
    assert c.forced_makespan_ns == pytest.approx(70) and c.saving_ns == pytest.approx(10)
    assert c.displaced == ("b",)
    assert c.detail == "needs 2 crossbars, 0 free; forced to the CIM: 70 ns (+10 ns), displacing 1 CIM operator(s)"
    # critical path a -> c -> d (host, back to back); b ends at 17 < 50.
    assert {e.name for e in ex.values() if e.critical} == {"a", "c", "d"}


@pytest.mark.parametrize("name", SOLVERS)
def test_diamond_budget_curve(name):
    solve = solver(name)
    curve = budget_curve(solve(problem(**DIAMOND, budget=2)), solve)
    # 0-1: all host 10+50+40+10 = 110; 2-3: b on the CIM, 60; 4: both, a 0-10, b and c 11-16, d 17-27.
    assert [p.makespan_ns for p in curve.points] == pytest.approx([110, 110, 60, 60, 27])
    assert curve.saturation == 4
    assert [p.cim_operators for p in curve.points] == [(), (), ("b",), ("b",), ("b", "c")]
    assert [curve.marginal_ns(b) for b in range(4)] == pytest.approx([0, 110 - 60, 0, 60 - 27])
    assert curve.marginal_ns(4) is None and curve.marginal_ns(9) == 0.0
    assert curve.placement_changes == (2, 4) and curve.makespan_changes == (2, 4)
    # the plan solved budget 2; then solves at 4 (uses 4), 3 (uses 2: covers 3), 1 (uses 0: covers 0-1).
    assert curve.solves == 3
    assert [p.solved for p in curve.points] == [False, True, True, True, True]


#   a -> b -> d      a, d host-only 10 ns; b host 200, CIM 100; c host 30, CIM 20;
#   a -> c -> d      1 crossbar each, no transfer time.
HIDDEN = dict(t_host=(10, 200, 30, 10), t_cim=(None, 100, 20, None), crossbars=(0, 1, 1, 0),
              edges=((0, 1, 0), (0, 2, 0), (1, 3, 0), (2, 3, 0)))


@pytest.mark.parametrize("name", SOLVERS)
def test_host_work_hidden_behind_the_cim_is_off_the_critical_path(name):
    solve = solver(name)
    plan = solve(problem(**HIDDEN, budget=2))
    assert plan.schedule.makespan_ns == pytest.approx(10 + 100 + 10)  # b on the CIM 10-110, d 110-120
    ex = by_name(explain_operators(plan, solve))
    c = ex["c"]  # on either device it ends by 40 < 110
    assert c.reason == "off_critical_path" and c.forced_makespan_ns == pytest.approx(120) and c.saving_ns == 0.0
    assert not c.critical and not c.forced.solved  # the flipped plan already meets the bound: no solve
    assert ex["b"].reason == "on_cim" and ex["b"].forced_makespan_ns == pytest.approx(10 + 200 + 10)


def test_only_the_named_operators_are_explained():
    solve = solver("highs")
    plan = solve(problem(**DIAMOND, budget=2))
    assert [e.name for e in explain_operators(plan, solve, operators=["d", "b"])] == ["b", "d"]
    with pytest.raises(KeyError):
        explain_operators(plan, solve, operators=["nope"])


def test_forcing_reuses_the_problem_encoding():
    p = problem(**DIAMOND, budget=2)
    to_host = force_device(p, 1, on_host=True)
    assert not to_host.capable(1) and to_host.crossbars[1] == 0 and to_host.t_host_ns == p.t_host_ns
    to_cim = force_device(p, 2, on_host=False, cim_upper_ns=70.0)
    assert to_cim.t_host_ns[2] == 2 * 70 + 1 and to_cim.t_cim_ns == p.t_cim_ns
    with pytest.raises(ValueError):
        force_device(p, 0, on_host=False)


def _stats(makespan: float, bound: float, status: str) -> SolverStats:
    return SolverStats("greedy", status, makespan, bound, 0.0, 0.0, 0, 0, 0)


def test_a_what_if_below_the_plans_proven_bound_is_an_internal_error():
    p = problem(**DIAMOND, budget=2)
    schedule = place(p, SolveOptions(solver="highs")).schedule
    solve = solver("highs")
    # b forced to the host: the flipped plan is all-host (110 ns), the re-solve finds c on the CIM, 70 ns.
    assert forced_move(PlacementResult(p, schedule, _stats(60.0, 65.0, "optimal")), 1, solve).makespan_ns == 70
    lying = PlacementResult(p, schedule, _stats(60.0, 75.0, "optimal"))  # claims T* >= 75
    with pytest.raises(InternalError, match="below the plan's proven bound"):
        forced_move(lying, 1, solve)


def test_a_solve_without_proof_reports_its_bound_and_gap():
    p = problem(**DIAMOND, budget=2)
    plan = place(p, SolveOptions(solver="highs"))

    def unproven(q: PlacementProblem) -> PlacementResult:  # a heuristic stands in for a timed-out solve
        schedule = greedy(q)
        return PlacementResult(q, schedule, _stats(schedule.makespan_ns, 35.0, "time_limit"))

    move = forced_move(plan, 1, unproven)  # b forced to the host
    assert move.solved and move.status == "time_limit"
    assert move.makespan_ns == pytest.approx(70) and move.bound_ns == 35.0 and move.gap == pytest.approx(0.5)


def test_critical_operators_follow_the_host_order():
    p = problem(**HIDDEN, budget=0)
    plan = place(p, SolveOptions(solver="highs"))  # all on the host, back to back: everything is critical
    assert critical_operators(p, plan.schedule) == frozenset(range(4))
