"""Proofs for slicing: the cheap lower bound, the sliced bottleneck decomposition, statuses from the gap.

Hand-computed numbers on tiny sliced problems, and brute force (every mode, every host order,
``_brute.py``) on random ones.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from _brute import brute_force_sliced, random_chained_sliced_problem, random_sliced_problem
from _one_conv import KS, one_conv

from cimsplit.passes.placement import PlacementProblem, SolveOptions, place
from cimsplit.passes.placement.problem import SliceOption
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.placement.sliced_bound import (
    critical_path_bound_ns,
    host_load_bound_ns,
    host_load_by_budget_ns,
    sliced_lower_bound_ns,
)
from cimsplit.passes.placement.sliced_place import place_sliced, whole_step_options
from cimsplit.passes.placement.slicing import WHOLE, expand, parts_schedule, sliced_crossbars
from cimsplit.passes.placement.solvers.cpsat import sliced_segments
from cimsplit.passes.placement.solvers.cpsat.fronts import dp_tables
from cimsplit.passes.placement.solvers.cpsat.sliced_segments import solve_sliced_by_segments
from cimsplit.passes.placement.solvers.cpsat.sliced_split import augmented_sliced, split_sliced
from cimsplit.passes.placement.validate import validate


def test_cheap_bound_of_one_conv():
    # Budget 2: host (host time 1000) or KS (host part 500 + join 50 = 550, 2 crossbars); the whole CIM
    # needs 4.  Host load 550; shortest durations: host 1000, KS 50 + max(500, 300 + 40) = 550.
    assert host_load_bound_ns(one_conv()) == 550.0
    assert critical_path_bound_ns(one_conv()) == 550.0
    assert place(one_conv(), SolveOptions()).schedule.makespan_ns == 550.0  # the bound is tight here
    # Budget 4: the whole CIM has host time 0 and duration 400.
    assert sliced_lower_bound_ns(one_conv(budget=4)) == 400.0


def test_host_load_bound_is_a_knapsack_over_modes():
    r"""
        a (host 100 | CIM 10, 3 crossbars | KS: host 40 + join 5, CIM 20 + back 2, 1 crossbar)
        b (host 100 | CIM 10, 3 crossbars)          independent, budget 4
    """
    ks = SliceOption(kind="ks", split=256, t_host_ns=40.0, t_cim_ns=20.0, crossbars=1, t_join_ns=5.0, t_back_ns=2.0)
    p = PlacementProblem(names=("a", "b"), t_host_ns=(100.0, 100.0), t_cim_ns=(10.0, 10.0), crossbars=(3, 3),
                         edges=(), budget=4, slicings=((ks,), ()))
    # a CIM + b host: 100 (3 crossbars); a KS + b CIM: 45 (4); both CIM: 6 crossbars, too many.
    assert host_load_bound_ns(p) == 45.0
    # By budget: 0: both host 200; 1-2: a KS + b host 145; 3: one whole CIM 100; 4: a KS + b CIM 45.
    assert host_load_by_budget_ns(p) == [200.0, 145.0, 145.0, 100.0, 45.0]
    assert critical_path_bound_ns(p) == 10.0  # a and b each at 10 on the CIM
    # The optimum: a sliced (host part 0..40, join 40..45; CIM part 0..20, back at 22), b on the CIM 0..10.
    assert place(p, SolveOptions()).schedule.makespan_ns == 45.0


def test_auto_keeps_the_whole_schedule_when_the_bound_proves_it_optimal():
    r"""conv (as one_conv, budget 4) beside a host-only op h of 1000 ns: the whole CIM conv (600 ns with its
    transfers) runs beside h, makespan 1000 = the host load of h, which no mode can lower."""
    p = PlacementProblem(names=("conv", "h"), t_host_ns=(1000.0, 1000.0), t_cim_ns=(400.0, None), crossbars=(4, 0),
                         edges=(), budget=4, t_in_ns=(100.0, 0.0), t_out_ns=(100.0, 0.0), writes_output=(True, True),
                         slicings=((KS,), ()))
    result = place(p, SolveOptions())
    assert result.schedule.slicing == () and result.schedule.makespan_ns == 1000.0
    assert (result.solver.status, result.solver.bound_ns, result.solver.gap) == ("optimal", 1000.0, 0.0)
    assert "optimal with slicing too" in result.solver.reason


def test_auto_slices_with_crossbars_to_spare():
    # Budget 4: the whole CIM conv takes 100 + 400 + 100 = 600; KS takes 550 (test_slicing's schedule):
    # more crossbars never give a slower plan than fewer.
    roomy = place(one_conv(budget=4), SolveOptions())
    assert roomy.schedule.slicing == (0,) and roomy.schedule.makespan_ns == 550.0
    assert roomy.solver.status == "optimal" and roomy.solver.gap == 0.0


def test_a_whole_schedule_returned_carries_the_sliced_bound():
    # A poor slicing (host part 900 + join 50): the whole CIM conv (600) stays; the cheap bound (400, the
    # CIM's duration) does not prove it, the sliced solve does: bound 600, optimal, for the sliced problem.
    poor = SliceOption(kind="ofm", split=3, t_host_ns=900.0, t_cim_ns=100.0, crossbars=4, t_join_ns=50.0,
                       t_back_ns=10.0, t_graph_in_ns=100.0)
    p = one_conv(budget=4, slicings=((poor,),))
    assert sliced_lower_bound_ns(p) == 400.0
    result = place(p, SolveOptions())
    assert result.schedule.slicing == () and result.schedule.makespan_ns == 600.0
    assert (result.solver.status, result.solver.bound_ns, result.solver.gap) == ("optimal", 600.0, 0.0)
    assert "no slicing shortens" in result.solver.reason


def test_a_shorter_schedule_of_the_sliced_step_is_kept_when_it_slices_nothing():
    """The whole step stops at its gap (whole_step_options), so its schedule may be all on the host (1000 ns)
    where the whole CIM conv takes 600 (the poor slicing above): the sliced step's 600-ns schedule, slicing
    nothing, is the answer, optimal, validated on the whole-operator problem, with its stream."""
    poor = SliceOption(kind="ofm", split=3, t_host_ns=900.0, t_cim_ns=100.0, crossbars=4, t_join_ns=50.0,
                       t_back_ns=10.0, t_graph_in_ns=100.0)
    p = one_conv(budget=4, slicings=((poor,),))
    stripped = replace(p, slicings=())
    whole = place(stripped, SolveOptions())
    on_host = validate(stripped, (True,), source="test")
    stopped = replace(whole, schedule=on_host, solver=replace(whole.solver, objective_ns=1000.0, bound_ns=550.0))
    result = place_sliced(p, SolveOptions(), stopped, 10.0)
    assert on_host.makespan_ns == 1000.0 and result.schedule.on_host == (False,) and result.schedule.slicing == ()
    assert (result.schedule.makespan_ns, result.solver.status, result.solver.bound_ns) == (600.0, "optimal", 600.0)
    assert result.problem == stripped and result.stream is not None
    assert (result.stream.latency_ns, result.stream.period_ns) == (600.0, 400.0)  # a frame each CIM run
    assert "a shorter whole-operator schedule" in result.solver.reason


def test_augmented_sliced_moves_the_graph_input_onto_the_start_edge():
    aug = augmented_sliced(one_conv())
    assert aug.names == ("<start>", "conv", "<end>")
    assert aug.edges == ((0, 1, 100.0), (1, 2, 100.0))
    (option,) = aug.slicings[1]
    assert option.in_cim_ns == ((0, 100.0),) and option.t_graph_in_ns == 0.0
    assert aug.slicings[0] == aug.slicings[2] == ()


def test_split_sliced_takes_bottlenecks_without_slicing_options():
    r"""
        j0 -> a -> j1 -> b -> j2      j0, j1, j2 host-only; a sliceable, b not
    """
    opt = SliceOption(kind="ofm", split=1, t_host_ns=5.0, t_cim_ns=5.0, crossbars=1, t_join_ns=1.0, t_back_ns=1.0)
    p = PlacementProblem(names=("j0", "a", "j1", "b", "j2"), t_host_ns=(1.0, 10.0, 1.0, 10.0, 1.0),
                         t_cim_ns=(None, 4.0, None, 4.0, None), crossbars=(0, 1, 0, 1, 0),
                         edges=((0, 1, 2.0), (1, 2, 2.0), (2, 3, 2.0), (3, 4, 2.0)), budget=2,
                         slicings=((), (opt,), (), (), ()))
    seg = split_sliced(p)
    # Augmented indices: <start> 0, j0..j2 1..5, <end> 6.  b (4) has no options: a bottleneck; a (2) not.
    assert seg.bottlenecks == (0, 1, 3, 4, 5, 6)
    assert seg.members == ((), (2,), (), (), ())
    assert seg.exact


def _brute_problems(seeds: range) -> list[PlacementProblem]:
    return [random_sliced_problem(random.Random(5000 + seed), max_ops=6) for seed in seeds]


def test_cheap_bound_never_exceeds_the_brute_force_optimum():
    proven = 0
    for problem in _brute_problems(range(150)):
        optimum = brute_force_sliced(problem)
        bound = sliced_lower_bound_ns(problem)
        assert bound <= optimum + 1e-9, problem
        proven += bound >= optimum - 1e-9
    assert proven >= 10  # and it is tight on some


def _check_decomposition(problem: PlacementProblem) -> tuple[bool, bool]:
    optimum = brute_force_sliced(problem)
    seg = split_sliced(problem)
    run = solve_sliced_by_segments(problem, time_limit_s=20.0, threads=1, warm_start=simulate(problem, [True] * problem.n))
    schedule = run.schedule
    assert run.bound_ns <= optimum + 1e-9, problem
    again = validate(problem, schedule.on_host, slicing=schedule.slicing,
                     start_ns=(schedule.parts or schedule).start_ns)
    assert again.makespan_ns == pytest.approx(schedule.makespan_ns, abs=1e-9)
    if seg.exact:
        assert schedule.makespan_ns == pytest.approx(optimum, abs=1e-9), problem
        assert run.bound_ns == pytest.approx(optimum, abs=1e-6)
    return seg.exact, len([m for m in seg.members if m]) >= 2


@pytest.mark.parametrize("half", range(2))
def test_sliced_decomposition_agrees_with_brute_force(half: int, segment_fronts: str):
    exact = several = 0
    for seed in range(50 * half, 50 * (half + 1)):
        e, s = _check_decomposition(random_chained_sliced_problem(random.Random(5000 + seed)))
        exact, several = exact + e, several + s
    assert exact >= 40 and several >= 25  # mostly exact, mostly several segments


def test_segment_solves_shared_across_budgets_keep_every_budgets_optimum(segment_fronts: str,
                                                                         monkeypatch: pytest.MonkeyPatch):
    """One memo for a problem at its budget and every smaller one (a budget chain, largest first):
    each run still agrees with the brute force where the decomposition is exact, bounds it always,
    and a run again at a budget already solved asks for nothing (every job answered).  Enumerated
    (these segments are all small), CP-SAT never runs and every answer is proven and exact."""
    if segment_fronts == "enumerated":
        def no_solve(*args, **kwargs):
            raise AssertionError("CP-SAT ran on a small segment")

        monkeypatch.setattr(sliced_segments, "solve_sliced", no_solve)
    shared = 0
    for seed in range(20):
        top = random_chained_sliced_problem(random.Random(9000 + seed))
        memo: dict = {}
        for budget in sorted({top.budget, top.budget // 2, 1, 0}, reverse=True):
            problem = replace(top, budget=budget)
            optimum = brute_force_sliced(problem)
            before = sum(1 for solves in memo.values() for s in solves if s.seconds > 0)
            shared += before > 0
            run = solve_sliced_by_segments(problem, time_limit_s=20.0, threads=1, memo=memo,
                                           warm_start=simulate(problem, [True] * problem.n))
            assert run.bound_ns <= optimum + 1e-9, problem
            if split_sliced(problem).exact:
                assert run.schedule.makespan_ns == pytest.approx(optimum, abs=1e-9), problem
        solves = [s for solves in memo.values() for s in solves if s.seconds > 0]
        again = solve_sliced_by_segments(problem, time_limit_s=20.0, threads=1, memo=memo,
                                         warm_start=simulate(problem, [True] * problem.n))
        assert sum(1 for solves in memo.values() for s in solves if s.seconds > 0) == len(solves)
        assert again.bound_ns == run.bound_ns and again.schedule.makespan_ns == run.schedule.makespan_ns
        if segment_fronts == "enumerated":
            assert all(s.finished and s.bound_ns == s.span_ns for s in solves)
    assert shared >= 20  # the smaller budgets found solves of the larger ones


def _scaled(problem: PlacementProblem, factor: float) -> PlacementProblem:
    """Every time of ``problem`` times ``factor`` (a factor like 1000 / 3 makes float sums round)."""
    def option(o: SliceOption) -> SliceOption:
        return replace(o, t_host_ns=o.t_host_ns * factor, t_cim_ns=o.t_cim_ns * factor, t_join_ns=o.t_join_ns * factor,
                       t_back_ns=o.t_back_ns * factor, t_graph_in_ns=o.t_graph_in_ns * factor,
                       in_cim_ns=tuple((u, t * factor) for u, t in o.in_cim_ns),
                       in_host_ns=tuple((u, t * factor) for u, t in o.in_host_ns))
    return replace(problem, t_host_ns=tuple(t * factor for t in problem.t_host_ns),
                   t_cim_ns=tuple(None if t is None else t * factor for t in problem.t_cim_ns),
                   edges=tuple((u, v, t * factor) for u, v, t in problem.edges),
                   t_in_ns=tuple(t * factor for t in problem.t_in_ns), t_out_ns=tuple(t * factor for t in problem.t_out_ns),
                   slicings=tuple(tuple(option(o) for o in options) for options in problem.slicings))


def test_a_large_segments_cutoff_admits_the_incumbents_own_segment_schedule():
    """With every front exact (enumerated at every budget), the incumbent is the DP's best concatenation, and
    at the crossbars it gives a segment, that segment's cutoff lies at or just above its span there (by
    CUTOFF_SLACK of the incumbent): the incumbent's own segment schedule is in reach of the search.  Times
    that round in float sums (without the slack, 28 of these 63 cutoffs fell a hair below the span)."""
    checked = 0
    for seed in range(30):
        problem = _scaled(random_chained_sliced_problem(random.Random(9500 + seed), blocks=3), 1000.0 / 3.0 + 0.017)
        seg = split_sliced(problem)
        if not seg.exact:
            continue
        with ThreadPoolExecutor(1) as pool:
            dec = sliced_segments._SlicedDecomposition(problem, seg, 1e-6, 0, None, time.perf_counter() + 20.0, pool)
            dec.solve_all([dec.prepare(key, b, 1.0) for key in dec.keys for b in range(dec.caps[key[0]] + 1)])
        _, path = dec.best(lower=False)
        dec.incumbent_ns = dec.assemble(path).makespan_ns
        tables = dp_tables(dec)
        for i, (h0, spent) in enumerate(path):
            if not seg.members[i]:
                continue
            key = (i, h0, dec._exit_host(path, i))
            span = dec.fronts[key].upper(spent).span_ns
            cutoff = dec.cutoff_ns(key, spent, tables)
            assert span <= cutoff <= span + 2 * sliced_segments.CUTOFF_SLACK * dec.incumbent_ns, (problem, key)
            checked += 1
    assert checked >= 60


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(4))
def test_sliced_decomposition_agrees_with_brute_force_400(chunk: int, segment_fronts: str):
    for seed in range(100 + 100 * chunk, 200 + 100 * chunk):
        _check_decomposition(random_chained_sliced_problem(random.Random(5000 + seed), blocks=3))


@pytest.mark.parametrize("half", range(2))
def test_placement_with_slicing_agrees_with_brute_force_and_its_status_with_its_gap(half: int, segment_fronts: str):
    for seed in range(30 * half, 30 * (half + 1)):
        problem = random_chained_sliced_problem(random.Random(7000 + seed))
        result = place(problem, SolveOptions(time_limit_s=20.0))
        optimum = brute_force_sliced(problem)
        assert result.schedule.makespan_ns == pytest.approx(optimum, abs=1e-9), problem
        assert result.solver.bound_ns <= optimum + 1e-9
        assert (result.solver.status == "optimal") == (result.solver.gap <= 1e-6)
        assert result.solver.status == "optimal"


def test_a_sliced_schedule_indexes_the_problems_own_options():
    # Option 0 (8 crossbars) does not fit the budget of 2, option 1 (KS, 2 crossbars) does: the schedule
    # says 1, and the result's problem keeps both (a budget chain re-validates it at other budgets).
    big = SliceOption(kind="ks", split=512, t_host_ns=100.0, t_cim_ns=100.0, crossbars=8, t_join_ns=1.0, t_back_ns=1.0)
    p = one_conv(slicings=((big, KS),))
    result = place(p, SolveOptions())
    assert result.schedule.slicing == (1,) and result.schedule.makespan_ns == 550.0
    assert result.problem.slicings == p.slicings
    assert split_sliced(p).bottlenecks == (0, 2)  # conv keeps an option that fits: no bottleneck
    assert split_sliced(one_conv(budget=1, slicings=((big, KS),))).bottlenecks == (0, 1, 2)


def test_the_whole_operator_step_gets_half_the_limit_and_a_5_percent_gap_when_a_sliced_step_follows():
    options = SolveOptions(time_limit_s=20.0)
    whole = whole_step_options(one_conv(), options)  # KS (2 crossbars) fits the budget of 2
    assert (whole.time_limit_s, whole.mip_gap) == (10.0, 0.05)
    assert whole_step_options(one_conv(), replace(options, mip_gap=0.1)).mip_gap == 0.1  # the caller's, if larger
    for alone in (whole_step_options(one_conv(), replace(options, slicing="off")),
                  whole_step_options(one_conv(budget=1), options)):  # nothing fits: no sliced step
        assert (alone.time_limit_s, alone.mip_gap) == (20.0, None)
    result = place(one_conv(), options)  # and the answer is the sliced optimum (550, as computed above)
    assert (result.schedule.makespan_ns, result.solver.status) == (550.0, "optimal")


def _random_sliced_schedule(problem: PlacementProblem, rng: random.Random):
    """A random feasible schedule: a random mode per operator, moved to the host until the budget holds."""
    on_host, slicing = [True] * problem.n, [WHOLE] * problem.n
    for v in range(problem.n):
        if problem.capable(v):
            k = rng.randint(-2, len(problem.slicings[v]) - 1 if problem.slicings else -1)
            on_host[v], slicing[v] = (k == -2, WHOLE) if k < 0 else (True, k)
    for v in rng.sample(range(problem.n), problem.n):
        if sliced_crossbars(problem, on_host, slicing) > problem.budget:
            on_host[v], slicing[v] = True, WHOLE
    expansion = expand(problem, on_host, slicing)
    return parts_schedule(problem, expansion, simulate(expansion.problem, expansion.on_host), slicing)


def test_the_sliced_decomposition_starts_from_its_warm_start_and_cheap_bounds():
    """Before any solve, each segment's front holds the warm start restricted to it (so the DP's best
    composition is at most the warm start) and the segment's cheap bound at its cap (so the DP's
    bound is positive and at most the optimum); from random warm starts the answer is the optimum."""
    from concurrent.futures import ThreadPoolExecutor

    from cimsplit.passes.placement.solvers.cpsat.sliced_segments import _SlicedDecomposition

    rng = random.Random(3)
    for seed in range(15):
        problem = random_chained_sliced_problem(random.Random(5200 + seed))
        warm = _random_sliced_schedule(problem, rng)
        seg = split_sliced(problem)
        optimum = brute_force_sliced(problem)
        with ThreadPoolExecutor(1) as pool:
            dec = _SlicedDecomposition(problem, seg, 1e-6, 0, warm, time.perf_counter() + 10.0, pool)
            value, path = dec.best(lower=False)
            assert value <= warm.makespan_ns + 1e-9
            if seg.exact:
                assert dec.assemble(path).makespan_ns <= warm.makespan_ns + 1e-9
            lower, _ = dec.best(lower=True)
            assert 0 < lower <= optimum + 1e-9
        run = solve_sliced_by_segments(problem, time_limit_s=20.0, threads=1, warm_start=warm)
        assert run.bound_ns <= optimum + 1e-9
        assert run.schedule.makespan_ns <= warm.makespan_ns + 1e-9
        if seg.exact:
            assert run.schedule.makespan_ns == pytest.approx(optimum, abs=1e-9), problem
