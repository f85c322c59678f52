"""The validator re-times any result and refuses tampered ones."""

from __future__ import annotations

import pytest

from cimsplit.passes import InternalError, PlacementProblem, SolveOptions, place, validate

#   a -> b -> c    a, c host-only 10 ns; b host 100 / CIM 20 ns, 4 crossbars; transfers 5 ns.
CHAIN = PlacementProblem(names=("a", "b", "c"), t_host_ns=(10.0, 100.0, 10.0), t_cim_ns=(None, 20.0, None),
                         crossbars=(0, 4, 0), edges=((0, 1, 5.0), (1, 2, 5.0)), budget=4)


def test_a_correct_result_validates_to_its_makespan():
    result = place(CHAIN, SolveOptions(solver="highs"))
    schedule = validate(CHAIN, result.schedule.on_host, start_ns=result.schedule.start_ns, objective_ns=50.0)
    assert schedule.makespan_ns == pytest.approx(10 + 5 + 20 + 5 + 10)


def test_claimed_objective_shorter_than_the_retimed_schedule_is_a_bug():
    with pytest.raises(InternalError, match="exceeds the reported objective"):
        validate(CHAIN, (True, False, True), objective_ns=49.0)


def test_longer_claim_is_retimed_down():
    # a time-limited incumbent with slack: the re-timed schedule is what we report
    assert validate(CHAIN, (True, False, True), objective_ns=80.0).makespan_ns == pytest.approx(50)


def test_host_only_operator_on_the_cim_is_refused():
    with pytest.raises(InternalError, match="not CIM-capable"):
        validate(CHAIN, (False, False, True))


def test_over_budget_is_refused():
    over = PlacementProblem(names=CHAIN.names, t_host_ns=CHAIN.t_host_ns, t_cim_ns=CHAIN.t_cim_ns,
                            crossbars=CHAIN.crossbars, edges=CHAIN.edges, budget=3)
    with pytest.raises(InternalError, match="budget"):
        validate(over, (True, False, True))


def test_host_order_against_precedence_is_refused():
    with pytest.raises(InternalError):
        validate(CHAIN, (True, True, True), host_order=(2, 1, 0))


def test_tied_start_times_still_respect_precedence():
    # a zero-length host operator z -> w, both start at 0 in the solver's output but listed w first by noise
    p = PlacementProblem(names=("z", "w"), t_host_ns=(0.0, 10.0), t_cim_ns=(None, None), crossbars=(0, 0),
                         edges=((0, 1, 0.0),), budget=0)
    schedule = validate(p, (True, True), start_ns=(1e-12, 0.0), objective_ns=10.0)
    assert schedule.makespan_ns == pytest.approx(10)


def test_start_time_noise_does_not_reorder_the_host():
    """Found by hypothesis: HiGHS returned s_op1 = 1 - 1e-16 and s_op2 = 1 for the zero-length op2.

    op0 -> op2 -> op3 -> op4 and op2 -> op5; host: op0 (1 ns), op1 (2 ns), op2 (0 ns), op5 (0 ns);
    CIM: op3 (0 ns), op4 (1 ns).  The solver's order is op0 [0,1], op2 [1,1], op1 [1,3], op5 [3,3]
    with op3 [1,1] and op4 [1,2] on the CIM: makespan 3.  Sorting the raw starts runs op1 before op2,
    which delays op4 to [3,4]: a false internal error.
    """
    p = PlacementProblem(names=("op0", "op1", "op2", "op3", "op4", "op5"), t_host_ns=(1.0, 2.0, 0.0, 4.0, 1.0, 0.0),
                         t_cim_ns=(None, None, None, 0.0, 1.0, 4.0), crossbars=(0, 0, 0, 1, 3, 2),
                         edges=((0, 2, 6.0), (2, 3, 0.0), (3, 4, 0.0), (2, 5, 15.0)), budget=6)
    start = (0.0, 0.9999999999999999, 1.0, 1.0, 1.0, 2.9999999999999996)
    schedule = validate(p, (True, True, True, False, False, True), start_ns=start, objective_ns=3.0000000000000004)
    assert schedule.makespan_ns == pytest.approx(3)


def test_tolerance_noise_in_gurobi_starts_is_a_tie():
    """Found by a random hunt: Gurobi put op4 at 15.000000016 and its successor op6 at 15.0.

    Host: op1 (5 ns), zero-length op0, op2, op3, op4, op6; op5 on the CIM (4 ns).  The solver's
    schedule: op3 [0,0], op1 [0,5], op0 [5,5], op5 [6,10] (op3 -> op5 costs 6 ns), op2, op4 at 5,
    op6 at 10 + 5 = 15.  Starts within 1e-7 relative are ties, ordered by finish, then index.
    """
    p = PlacementProblem(names=tuple(f"op{i}" for i in range(7)), t_host_ns=(0.0, 5.0, 0.0, 0.0, 0.0, 937.0, 0.0),
                         t_cim_ns=(None, 616.0, 0.0, 630.0, None, 4.0, 5.0), crossbars=(0, 2, 0, 1, 0, 3, 4),
                         edges=((0, 2, 12.0), (1, 2, 17.0), (0, 4, 14.0), (1, 4, 0.0), (0, 5, 0.0), (3, 5, 6.0),
                                (0, 6, 0.0), (4, 6, 0.0), (5, 6, 5.0)), budget=4)
    start = (4.999999999999851, 0.0, 15.000000016000003, 0.0, 15.000000016000003, 5.999999999999998, 15.0)
    schedule = validate(p, (True, True, True, True, True, False, True), start_ns=start, objective_ns=15.0)
    assert schedule.makespan_ns == pytest.approx(15)
