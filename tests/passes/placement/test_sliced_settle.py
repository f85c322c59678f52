"""Large segments of the sliced decomposition (solvers/cpsat/sliced_segments.py): no start solves; once the lazy
loop targets one, the other segments' fronts are settled at every budget that matters, and the decomposition
with cutoffs and settled fronts (and no starts for the large ones) still agrees with the brute force."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from _brute import brute_force_sliced, random_chained_sliced_problem, random_sliced_problem

from cimsplit.passes.placement import SolveOptions
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.placement.solvers.cpsat import sliced_segments
from cimsplit.passes.placement.solvers.cpsat.sliced import solve_sliced
from cimsplit.passes.placement.solvers.cpsat.sliced_split import sliced_segment, split_sliced

pytestmark = pytest.mark.usefixtures("solved_fronts")  # the solves' cutoffs and settling: none enumerated


def test_settle_pins_every_small_front_to_its_optimum_from_the_cap_down_to_lowest(monkeypatch: pytest.MonkeyPatch):
    """After :meth:`settle`, each small segment's front has lower(b) = upper(b) = the brute-force optimum of
    its segment problem at every budget from :meth:`lowest` to its cap, with fewer solves than budgets
    where a proven schedule left crossbars unused (the step down to u - 1)."""
    monkeypatch.setattr(sliced_segments, "LARGE_SEGMENT", 2)
    checked = skipped = 0
    for seed in range(25):
        problem = random_chained_sliced_problem(random.Random(7100 + seed), blocks=3)
        seg = split_sliced(problem)
        with ThreadPoolExecutor(1) as pool:
            dec = sliced_segments._SlicedDecomposition(problem, seg, 1e-6, 0, simulate(problem, [True] * problem.n),
                                                       time.perf_counter() + 20.0, pool)
            dec.settle()
        for key in dec.keys:
            i, h0, h1 = key
            assert (dec.starts(key) == set()) == (len(seg.members[i]) >= 2)  # {cap, 0, ...} for the small ones
            if len(seg.members[i]) >= 2:
                continue
            front, solved = dec.fronts[key], {s.limit for s in dec.fronts[key].solves if s.seconds > 0}
            budgets = range(dec.lowest(i), dec.caps[i] + 1)
            for b in budgets:
                sub, _ = sliced_segment(seg, i, h0, h1, b)
                optimum = brute_force_sliced(sub)
                assert front.lower(b) == pytest.approx(optimum, abs=1e-6), (problem, key, b)
                assert front.upper(b).span_ns == pytest.approx(optimum, abs=1e-6), (problem, key, b)
                checked += 1
            skipped += len(set(budgets) - solved)
    assert checked >= 40 and skipped >= 8  # several budgets each, and some settled without a solve of their own


def test_the_decomposition_with_large_segments_agrees_with_brute_force(monkeypatch: pytest.MonkeyPatch):
    """Segments of two or more operators large: their solves get cutoffs, the first one targeted settles
    the others; every run bounds the optimum and meets it where the decomposition is exact."""
    monkeypatch.setattr(sliced_segments, "LARGE_SEGMENT", 2)
    settled = []
    settle = sliced_segments._SlicedDecomposition.settle

    def counted(self, *args):
        settled.append(True)
        settle(self, *args)

    monkeypatch.setattr(sliced_segments._SlicedDecomposition, "settle", counted)
    for seed in range(60):
        problem = random_chained_sliced_problem(random.Random(6000 + seed), blocks=3)
        for budget in sorted({problem.budget, problem.budget // 2}, reverse=True):
            at = replace(problem, budget=budget)
            optimum = brute_force_sliced(at)
            run = sliced_segments.solve_sliced_by_segments(at, time_limit_s=20.0, threads=1,
                                                           warm_start=simulate(at, [True] * at.n))
            assert run.bound_ns <= optimum + 1e-9, at
            if split_sliced(at).exact:
                assert run.schedule.makespan_ns == pytest.approx(optimum, abs=1e-9), at
                assert run.bound_ns == pytest.approx(optimum, rel=1e-5)
    assert len(settled) >= 15  # the lazy loop did target large segments


def test_a_sliced_solve_with_a_cutoff_and_almost_no_work_keeps_a_true_bound():
    """With a tiny deterministic limit, below or just above the optimum, a solve with a cutoff (decisions,
    then the objective) reports a bound between the lower bound it was given and the brute-force optimum,
    a schedule no shorter than the optimum, and "nothing within the cutoff" only below the optimum."""
    without = 0
    for seed in range(40):
        problem = random_sliced_problem(random.Random(7300 + seed))
        optimum = brute_force_sliced(problem)
        for factor in (0.97, 1.001):
            out = solve_sliced(problem, SolveOptions(time_limit_s=10.0, threads=1), None, work_limit_s=1e-4,
                               cutoff_ns=optimum * factor, lower_bound_ns=0.5 * optimum)
            assert 0.5 * optimum - 1e-6 <= out.bound_ns <= optimum + 1e-6, (problem, factor)
            if out.schedule is not None:
                assert out.schedule.makespan_ns >= optimum - 1e-6, (problem, factor)
            else:
                assert factor < 1 and out.finished and out.bound_ns == pytest.approx(optimum * factor), problem
                without += 1
    assert without >= 20  # many proofs that nothing is within the cutoff
