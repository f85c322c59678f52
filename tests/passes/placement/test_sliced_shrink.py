"""Shrinking a placement to a budget (heuristics/shrink.py), and the sliced decomposition's use of it: the warm
start of a segment solve below every known solution of its front (solvers/cpsat/sliced_segments.py)."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from _brute import brute_force_sliced, random_chained_sliced_problem, random_sliced_problem

from cimsplit.passes.placement.heuristics.shrink import shrink_to_budget
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.slicing import WHOLE, sliced_crossbars
from cimsplit.passes.placement.solvers.cpsat import sliced_segments
from cimsplit.passes.placement.solvers.cpsat.sliced import solve_sliced
from cimsplit.passes.placement.solvers.cpsat.sliced_split import split_sliced
from cimsplit.passes.placement.validate import validate


def _two_branches() -> PlacementProblem:
    """Entry and exit on the host (zero time); between them a (host 10 / CIM 2, 3 crossbars, 1 ns to the exit
    from the CIM) and b (host 6 / CIM 1, 2 crossbars)."""
    return PlacementProblem(names=("in", "a", "b", "out"), t_host_ns=(0.0, 10.0, 6.0, 0.0), t_cim_ns=(None, 2.0, 1.0, None),
                            crossbars=(0, 3, 2, 0), edges=((0, 1, 0.0), (0, 2, 0.0), (1, 3, 1.0), (2, 3, 0.0)), budget=5)


@pytest.mark.parametrize(("limit", "polish", "on_host", "span"), [
    (5, True, (True, False, False, True), 3.0),   # fits already: both on the CIM, a's result back at 2 + 1
    (3, True, (True, False, True, True), 6.0),    # b to the host (span 6) beats a to the host (span 10)
    (2, False, (True, True, True, True), 16.0),   # then a too: all on the host, 10 + 6
    (2, True, (True, True, False, True), 10.0),   # polished: b back on the CIM (2 crossbars), a on the host
])
def test_shrink_moves_the_operator_whose_schedule_is_shortest_until_it_fits(limit: int, polish: bool, on_host: tuple,
                                                                             span: float):
    out = shrink_to_budget(_two_branches(), [True, False, False, True], [WHOLE] * 4, limit, polish=polish)
    assert tuple(out.on_host) == on_host
    assert out.makespan_ns == pytest.approx(span)


def test_shrunk_schedules_fit_their_budget_and_are_valid_sliced_schedules():
    """Random sliced problems, random modes (slices included), every budget below their crossbars: the greedy part
    only moves operators to the host, the polish only shortens it, and the result fits, re-times to its own
    makespan and is no shorter than the optimum."""
    checked = 0
    for seed in range(40):
        rng = random.Random(900 + seed)
        problem = random_sliced_problem(rng, max_ops=6)
        n = problem.n
        on_host = [not problem.capable(v) or rng.random() < 0.4 for v in range(n)]
        slicing = [rng.randrange(len(problem.slicings[v])) if problem.slicings[v] and rng.random() < 0.5 else WHOLE
                   for v in range(n)]
        used = sliced_crossbars(problem, on_host, slicing)
        for limit in range(used):
            at = replace(problem, budget=limit)
            greedy = shrink_to_budget(at, on_host, slicing, limit, polish=False)
            assert all(greedy.on_host[v] for v in range(n) if on_host[v] and slicing[v] == WHOLE)  # moves go to the host
            assert all(k in (WHOLE, slicing[v]) for v, k in enumerate(greedy.slicing or [WHOLE] * n))
            out = shrink_to_budget(at, on_host, slicing, limit)
            assert out.makespan_ns <= greedy.makespan_ns
            assert sliced_crossbars(at, out.on_host, out.slicing or [WHOLE] * n) <= limit
            again = validate(at, out.on_host, slicing=out.slicing or (), start_ns=(out.parts or out).start_ns)
            assert again.makespan_ns == pytest.approx(out.makespan_ns, abs=1e-9)
            assert out.makespan_ns >= brute_force_sliced(at) - 1e-9
            checked += 1
    assert checked >= 40


def test_prepare_starts_below_every_known_solution_from_the_nearest_one_shrunk(monkeypatch: pytest.MonkeyPatch):
    """A front whose solutions all exceed the budget asked: the job's warm start fits it and is the shrunk
    solution where that beats all on the host.  Above them (a large segment's known solution leaving crossbars
    unused): it fits and is no longer than that solution, shorter where the spare crossbars help."""
    monkeypatch.setattr(sliced_segments, "LARGE_SEGMENT", 2)
    shrunk_used = filled = 0
    for seed in range(40):
        problem = random_chained_sliced_problem(random.Random(4400 + seed), blocks=3)
        best = solve_sliced(problem, SolveOptions(time_limit_s=10.0, threads=1), None).schedule
        seg = split_sliced(problem)
        with ThreadPoolExecutor(1) as pool:
            dec = sliced_segments._SlicedDecomposition(problem, seg, 1e-6, 0, best, time.perf_counter() + 20.0, pool)
        for key, front in dec.fronts.items():
            for limit in range(dec.caps[key[0]] + 1):
                sub, index = dec.segment(key, limit)
                warm = dec.prepare(key, limit, 0.1)[5]
                assert sliced_crossbars(sub, warm.on_host, warm.slicing or [WHOLE] * sub.n) <= limit
                known = front.upper(limit)
                before = dec._timed(sub, index, known, key[1], key[2])  # all on the host when nothing fits
                assert warm.makespan_ns <= before.makespan_ns
                if known is None:
                    shrunk_used += warm.makespan_ns < before.makespan_ns
                else:
                    filled += warm.makespan_ns < before.makespan_ns
    assert shrunk_used >= 20 and filled >= 5, (shrunk_used, filled)  # (39 and 9 here)
