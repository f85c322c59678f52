"""Operator slicing in the placement: hand-computed schedules, the validator, brute-force agreement.

One Conv whose 4 crossbars do not fit a budget of 2, with one KS option (2 crossbars):

    input --(graph input, 100 ns to the CIM part)--> conv --> output

whole on the host: 1000 ns.  KS: the CIM part runs 100..400 (300 ns after its input), its output
reaches the host at 440 (40 ns back); the host part runs 0..500; the join (Concat, 50 ns) runs
500..550.  Makespan 550 ns, 2 crossbars.
"""

from __future__ import annotations

import random

import pytest
from _brute import brute_force_sliced, random_sliced_problem
from _one_conv import KS, one_conv

from cimsplit.passes.placement import PlacementProblem, SolveOptions, place
from cimsplit.passes.placement.problem import SliceOption
from cimsplit.passes.placement.slicing import WHOLE, expand, sliced_crossbars
from cimsplit.passes.placement.validate import InternalError, validate


def test_one_conv_budget_forces_a_ks_split():
    result = place(one_conv(), SolveOptions(slicing="all"))
    assert result.schedule.slicing == (0,)
    assert result.schedule.makespan_ns == 550.0
    assert result.crossbars_used == 2
    parts = result.schedule.parts
    assert parts is not None
    # parts: conv/cim 100..400, conv/host 0..500, conv/join 500..550
    assert parts.start_ns == (100.0, 0.0, 500.0)
    assert parts.finish_ns == (400.0, 500.0, 550.0)
    assert (result.schedule.start_ns, result.schedule.finish_ns) == ((0.0,), (550.0,))
    assert result.solver.status == "optimal"


def test_slicing_off_keeps_the_whole_operator_result_and_auto_slices_when_shorter():
    off = place(one_conv(), SolveOptions(slicing="off"))
    assert off.schedule.slicing == () and off.schedule.makespan_ns == 1000.0
    plain = place(one_conv(slicings=()), SolveOptions())
    assert off.schedule == plain.schedule
    # Budget 4: the whole CIM (100 + 400 + 100 = 600) fits, yet KS is shorter (550): auto slices too.
    roomy = place(one_conv(budget=4), SolveOptions(slicing="auto"))
    assert roomy.schedule.slicing == (0,) and roomy.schedule.makespan_ns == 550.0
    # auto with the budget binding slices.
    assert place(one_conv(), SolveOptions()).schedule.makespan_ns == 550.0


def test_a_consumer_on_the_cim_pays_the_full_transfer_after_the_join():
    #   conv --(30 ns)--> fc (CIM, 1 crossbar, 10 ns; on the host 900 ns)
    problem = PlacementProblem(
        names=("conv", "fc"), t_host_ns=(1000.0, 900.0), t_cim_ns=(400.0, 10.0), crossbars=(4, 1),
        edges=((0, 1, 30.0),), budget=3, t_in_ns=(100.0, 0.0), t_out_ns=(0.0, 5.0), writes_output=(False, True),
        slicings=((KS,), ()))
    result = place(problem, SolveOptions(slicing="all"))
    # join ends 550, fc starts 550 + 30, ends 590, its output back 5: 595
    assert result.schedule.makespan_ns == 595.0
    assert result.schedule.slicing == (0, WHOLE)
    assert result.crossbars_used == 3


def test_expansion_charges_in_cim_when_the_producer_is_on_the_host():
    opt = SliceOption(kind="ofm", split=3, t_host_ns=10.0, t_cim_ns=5.0, crossbars=1, t_join_ns=1.0,
                      t_back_ns=2.0, in_cim_ns=((0, 7.0),), in_host_ns=((0, 4.0),))
    problem = PlacementProblem(names=("a", "b"), t_host_ns=(3.0, 20.0), t_cim_ns=(1.0, 8.0), crossbars=(1, 1),
                               edges=((0, 1, 9.0),), budget=2, slicings=((), (opt,)))
    e = expand(problem, (True, True), (WHOLE, 0))
    assert e.problem.names == ("a", "b/cim", "b/host", "b/join")
    assert e.problem.edges == ((0, 1, 7.0), (0, 2, 4.0), (1, 3, 2.0), (2, 3, 0.0))
    # a on the host 0..3; b/cim 3+7=10..15, back 17; b/host 3..13; join 17..18
    assert validate(problem, (True, True), slicing=(WHOLE, 0)).makespan_ns == 18.0
    # a on the CIM 0..1; b/cim 1..6 back 8; b/host 1+4=5..15; join 15..16
    assert validate(problem, (False, True), slicing=(WHOLE, 0)).makespan_ns == 16.0
    assert sliced_crossbars(problem, (False, True), (WHOLE, 0)) == 2


def test_validator_refuses_a_slicing_over_budget_or_missing():
    with pytest.raises(InternalError, match="budget"):
        validate(one_conv(budget=1), (True,), slicing=(0,))
    with pytest.raises(InternalError, match="no slicing"):
        validate(one_conv(), (True,), slicing=(3,))


def _check(problem: PlacementProblem) -> None:
    result = place(problem, SolveOptions(slicing="all", solver="cpsat", time_limit_s=20))
    optimum = brute_force_sliced(problem)
    assert result.schedule.makespan_ns == pytest.approx(optimum, rel=1e-9, abs=1e-9), problem
    assert result.solver.bound_ns <= optimum + 1e-9
    assert (result.solver.status == "optimal") == (result.solver.gap <= 1e-6)
    schedule = result.schedule
    again = validate(result.problem, schedule.on_host, slicing=schedule.slicing,
                     start_ns=schedule.parts.start_ns if schedule.parts else schedule.start_ns)
    assert again.makespan_ns == pytest.approx(schedule.makespan_ns, rel=1e-12, abs=1e-12)


SAMPLE = [random_sliced_problem(random.Random(seed), max_ops=5) for seed in range(20)]
MANY = [random_sliced_problem(random.Random(1000 + seed), max_ops=6) for seed in range(220)]


def test_the_samples_slice():
    assert sum(1 for p in MANY if any(p.slicings)) >= 150


def test_brute_force_agreement_sample():
    for problem in SAMPLE:
        _check(problem)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(4))
def test_brute_force_agreement_220(chunk: int):
    for problem in MANY[chunk * 55:(chunk + 1) * 55]:
        _check(problem)
