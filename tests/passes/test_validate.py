"""The validator re-times any result and refuses tampered ones."""

from __future__ import annotations

import pytest

from cimsplit.passes import InternalError, PartitionProblem, partition, validate

#   a -> b -> c    a, c host-only 10 ns; b host 100 / CIM 20 ns, 4 crossbars; transfers 5 ns.
CHAIN = PartitionProblem(names=("a", "b", "c"), t_host_ns=(10.0, 100.0, 10.0), t_cim_ns=(None, 20.0, None),
                         crossbars=(0, 4, 0), edges=((0, 1, 5.0), (1, 2, 5.0)), budget=4)


def test_a_correct_result_validates_to_its_makespan():
    result = partition(CHAIN, solver="highs")
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
    over = PartitionProblem(names=CHAIN.names, t_host_ns=CHAIN.t_host_ns, t_cim_ns=CHAIN.t_cim_ns,
                            crossbars=CHAIN.crossbars, edges=CHAIN.edges, budget=3)
    with pytest.raises(InternalError, match="budget"):
        validate(over, (True, False, True))


def test_host_order_against_precedence_is_refused():
    with pytest.raises(InternalError):
        validate(CHAIN, (True, True, True), host_order=(2, 1, 0))


def test_tied_start_times_still_respect_precedence():
    # a zero-length host operator z -> w, both start at 0 in the solver's output but listed w first by noise
    p = PartitionProblem(names=("z", "w"), t_host_ns=(0.0, 10.0), t_cim_ns=(None, None), crossbars=(0, 0),
                         edges=((0, 1, 0.0),), budget=0)
    schedule = validate(p, (True, True), start_ns=(1e-12, 0.0), objective_ns=10.0)
    assert schedule.makespan_ns == pytest.approx(10)
