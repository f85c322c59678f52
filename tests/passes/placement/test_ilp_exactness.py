"""Reductions: the ones build_milp makes keep the optimum; chain merging does not."""

from __future__ import annotations

import pytest
from _brute import brute_force_optimum
from _solvers import solvers

from cimsplit.passes import PlacementProblem, SolveOptions, build_milp, host_order_by_start, place
from cimsplit.passes.placement.dag import incomparable_pairs


def chain_merge_example(merged: bool) -> PlacementProblem:
    """The issue's counterexample (no transfer costs, budget fits every CIM operator):

        u(host 10) ----------------------> v(host 10) --> c(CIM 90)
        r(CIM 10)  --> a(host 10) --> b(CIM 100)

    Optimal: u [0,10] and r [0,10]; a is released at 10 and runs [10,20] *between*
    u and v; b [20,120]; v [20,30]; c [30,120] -> 120.
    Merging the host-only chain u -> v into one 20 ns operator forbids that:
    uv [0,20], a [20,30], b [30,130] -> 130 (or a first: a [10,20], uv [20,40], c [40,130]).
    r, b, c are capable with huge host times, so they always go to the CIM.
    """
    if merged:
        names = ("uv", "r", "a", "b", "c")
        t_host = (20.0, 1000.0, 10.0, 10000.0, 10000.0)
        t_cim = (None, 10.0, None, 100.0, 90.0)
        crossbars = (0, 1, 0, 1, 1)
        edges = ((0, 4, 0.0), (1, 2, 0.0), (2, 3, 0.0))
    else:
        names = ("u", "r", "a", "b", "v", "c")
        t_host = (10.0, 1000.0, 10.0, 10000.0, 10.0, 10000.0)
        t_cim = (None, 10.0, None, 100.0, None, 90.0)
        crossbars = (0, 1, 0, 1, 0, 1)
        edges = ((0, 4, 0.0), (1, 2, 0.0), (2, 3, 0.0), (4, 5, 0.0))
    return PlacementProblem(names=names, t_host_ns=t_host, t_cim_ns=t_cim, crossbars=crossbars, edges=edges, budget=3)


@pytest.mark.parametrize("solver", solvers())
@pytest.mark.parametrize("plain", [True, False], ids=["plain", "improved"])
def test_merging_a_host_chain_is_not_exact(solver, plain):
    exact = place(chain_merge_example(merged=False), SolveOptions(solver=solver, plain=plain))
    merged = place(chain_merge_example(merged=True), SolveOptions(solver=solver, plain=plain))
    assert exact.schedule.makespan_ns == pytest.approx(120)
    assert merged.schedule.makespan_ns == pytest.approx(130)
    assert brute_force_optimum(chain_merge_example(merged=False)) == 120
    assert brute_force_optimum(chain_merge_example(merged=True)) == 130
    # a runs between u and v
    start = exact.schedule.start_ns
    assert start[0] < start[2] < start[4]


#      a
#     / \        a, d host-only; b, c capable; every edge has a forced-host end.
#    b   c
#     \ /
#      d
DIAMOND = PlacementProblem(names=("a", "b", "c", "d"), t_host_ns=(10.0, 50.0, 50.0, 10.0), t_cim_ns=(None, 5.0, 5.0, None),
                           crossbars=(0, 2, 2, 0), edges=((0, 1, 1.0), (0, 2, 1.0), (1, 3, 1.0), (2, 3, 1.0)), budget=2)


def test_plain_model_is_the_papers_size():
    model = build_milp(DIAMOND, plain=True)
    assert incomparable_pairs(DIAMOND) == [(1, 2)]  # eq. 10: only {b, c}
    # variables: 4 x + 4 s + 4 z (one per edge) + 1 o + T  (f substituted by eq. 7)
    assert model.n_variables == 4 + 4 + 4 + 1 + 1
    # rows: 2 per edge (eq. 9) + 1 per edge (eq. 8) + 1 sink (eq. 6) + 2 for the pair (eq. 11-12) + budget (eq. 14)
    assert model.n_constraints == 8 + 4 + 1 + 2 + 1
    assert model.n_integer == 4 + 4 + 1
    # eq. 5 as fixed bounds
    assert [model.col_lower[c] for c in model.x_col] == [1.0, 0.0, 0.0, 1.0]
    # eq. 13: sum of max(T_host, T_acc) + sum of transfers = 120 + 4 -> M = 1e4 model units
    assert model.time_unit_ns * 1e4 == pytest.approx(124)


def test_improved_model_drops_fixed_z_and_adds_cuts():
    model = build_milp(DIAMOND, plain=False, upper_bound_ns=70.0)
    # every edge has a forced-host end, so z is substituted by 1 - x_other: no z columns
    assert model.z_col == {}
    assert model.n_variables == 4 + 4 + 1 + 1
    # eq. 8 x4, sink, eq. 11-12, budget, host-load cut, ancestors of d, descendants of a
    assert model.n_constraints == 4 + 1 + 2 + 1 + 1 + 1 + 1
    unit = model.time_unit_ns
    # T in [critical path of min durations, UB]: a 10 + min(50, 5) + d 10 = 25
    assert model.col_lower[model.t_col] * unit == pytest.approx(25)
    assert model.col_upper[model.t_col] * unit == pytest.approx(70, rel=1e-6)
    # release of d = 10 + 5; latest start of d = UB - 10
    d = model.s_col[3]
    assert (model.col_lower[d] * unit, model.col_upper[d] * unit) == pytest.approx((15, 60), rel=1e-6)


def test_tight_big_m_keeps_the_optimal_schedule_feasible():
    """The optimal schedule, as a column vector, satisfies every row of the improved model."""
    result = place(DIAMOND, SolveOptions(solver="highs"))
    model = build_milp(DIAMOND, plain=False, upper_bound_ns=result.schedule.makespan_ns)
    vector = model.vector_from_schedule(DIAMOND, result.schedule, host_order_by_start(result.schedule))
    assert all(model.col_lower - 1e-9 <= vector) and all(vector <= model.col_upper + 1e-9)
    for lower, upper, index, value in model.rows():
        activity = float(sum(vector[i] * a for i, a in zip(index, value)))
        assert lower - 1e-7 <= activity <= upper + 1e-7
