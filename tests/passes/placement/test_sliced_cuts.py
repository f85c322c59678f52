"""The rows of the sliced CP-SAT model (``sliced_cuts``): hand-computed releases and tails, every row
checked on enumerated sliced schedules, and the model with them against brute force."""

from __future__ import annotations

import itertools
import random

import pytest
from _brute import brute_force_sliced, random_sliced_problem

from cimsplit.passes.placement import PlacementProblem, SolveOptions, dag
from cimsplit.passes.placement.problem import SliceOption
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.placement.sliced_bound import modes
from cimsplit.passes.placement.slicing import WHOLE, expand, parts_schedule, sliced_crossbars
from cimsplit.passes.placement.solvers.cpsat.sliced import solve_sliced
from cimsplit.passes.placement.solvers.cpsat.sliced_cuts import releases_and_tails

KS = SliceOption(kind="ks", split=128, t_host_ns=30.0, t_cim_ns=20.0, crossbars=1, t_join_ns=5.0, t_back_ns=2.0)


def _chain() -> PlacementProblem:
    r"""
        a (host 10) --> b (host 100 | CIM 40, 2 crossbars | KS: join 5 + max(host 30, CIM 20 + back 2) = 35)
                    \-> c (host 7) --> d (host 3)
    """
    return PlacementProblem(names=("a", "b", "c", "d"), t_host_ns=(10.0, 100.0, 7.0, 3.0),
                            t_cim_ns=(None, 40.0, None, None), crossbars=(0, 2, 0, 0),
                            edges=((0, 1, 1.0), (0, 2, 0.0), (2, 3, 0.0)), budget=2,
                            slicings=((), (KS,), (), ()))


def _shortest_ns(problem: PlacementProblem) -> list[float]:
    return [min(d for _, _, d in modes(problem, v)) for v in range(problem.n)]


def test_releases_and_tails_by_hand():
    # dmin: a 10, b min(100, 40, 35) = 35, c 7, d 3.
    rel, ready, tail = releases_and_tails(_chain(), _shortest_ns(_chain()))
    assert rel == [10.0, 45.0, 17.0, 20.0]  # b: 10 + 35, c: 10 + 7, d: 17 + 3
    assert ready == [0, 10.0, 10.0, 17.0]  # the latest input's release
    assert tail == [35.0, 0, 3.0, 0]  # a: max(b 35, c 7 + d 3)


def _schedules(problem: PlacementProblem, rng: random.Random, orders: int):
    """(slicing, expansion, schedule of the parts) for every mode choice within the budget and
    ``orders`` random precedence-respecting host orders of each."""
    choices = []
    for v in range(problem.n):
        mine = [(True, WHOLE)]
        if problem.capable(v):
            mine.append((False, WHOLE))
            mine += [(True, k) for k in range(len(problem.slicings[v]) if problem.slicings else 0)]
        choices.append(mine)
    for choice in itertools.product(*choices):
        on_host, slicing = [h for h, _ in choice], [k for _, k in choice]
        if sliced_crossbars(problem, on_host, slicing) > problem.budget:
            continue
        expansion = expand(problem, on_host, slicing)
        ex = expansion.problem
        preds = [{u for u, w, _ in ex.edges if w == v} for v in range(ex.n)]
        for _ in range(orders):  # a random topological order, its host operators in that order
            done: set[int] = set()
            order = []
            while len(done) < ex.n:
                ready = [v for v in range(ex.n) if v not in done and preds[v] <= done]
                v = rng.choice(ready)
                done.add(v)
                order.append(v)
            hosts = [v for v in order if expansion.on_host[v]]
            yield slicing, expansion, simulate(ex, expansion.on_host, hosts)


def test_every_row_holds_on_enumerated_sliced_schedules():
    """f_v >= rel_v, T >= f_v + tail_v, every part's start >= the latest input's release, and the
    load rows, on every mode choice and random host orders of random small sliced problems."""
    rng = random.Random(17)
    checked = 0
    for seed in range(40):
        problem = random_sliced_problem(random.Random(9000 + seed), max_ops=5)
        rel, ready, tail = releases_and_tails(problem, _shortest_ns(problem))
        anc, desc = dag.ancestors(problem), dag.descendants(problem)
        for slicing, expansion, parts in _schedules(problem, rng, 3):
            sched = parts_schedule(problem, expansion, parts, slicing)
            host_time = [0.0] * problem.n
            for i, v in enumerate(expansion.owner):
                if expansion.on_host[i]:
                    host_time[v] += expansion.problem.t_host_ns[i]
                assert parts.start_ns[i] >= ready[v] - 1e-9  # every part starts after its inputs' releases
            assert sched.makespan_ns >= sum(host_time) - 1e-9  # host load
            for v in range(problem.n):
                assert sched.finish_ns[v] >= rel[v] - 1e-9
                assert sched.makespan_ns >= sched.finish_ns[v] + tail[v] - 1e-9
                before = sum(host_time[u] for u in range(problem.n) if (anc[v] >> u) & 1)
                after = sum(host_time[w] for w in range(problem.n) if (desc[v] >> w) & 1)
                assert sched.finish_ns[v] >= before + host_time[v] - 1e-9
                assert sched.makespan_ns >= sched.finish_ns[v] + after - 1e-9
            checked += 1
    assert checked > 1000


def _all_host(problem: PlacementProblem):
    expansion = expand(problem, [True] * problem.n, [WHOLE] * problem.n)
    parts = simulate(expansion.problem, expansion.on_host)
    return parts_schedule(problem, expansion, parts, [WHOLE] * problem.n)


@pytest.mark.parametrize("half", range(2))
@pytest.mark.parametrize("small", [False, True])
def test_the_sliced_model_with_its_rows_agrees_with_brute_force(half: int, small: bool):
    """Also with the small segments' CP-SAT parameters (``small``)."""
    for seed in range(40 * half, 40 * (half + 1)):
        problem = random_sliced_problem(random.Random(9500 + seed), max_ops=6)
        optimum = brute_force_sliced(problem)
        out = solve_sliced(problem, SolveOptions(time_limit_s=20.0, threads=1), _all_host(problem), small=small)
        assert out.schedule is not None and out.status == "optimal", problem
        assert out.schedule.makespan_ns == pytest.approx(optimum, abs=1e-9), problem
        assert out.bound_ns <= optimum + 1e-9


def test_a_cutoff_below_the_optimum_proves_it_and_one_above_keeps_it():
    """``cutoff_ns``: well below the brute-force optimum (beyond the model's rounding slack of two
    time units) the model has no schedule and its bound is the cutoff, a true bound; above it, the
    descent of decisions ends at the optimum, proven, just above it or far above it."""
    for seed in range(30):
        problem = random_sliced_problem(random.Random(9700 + seed), max_ops=6)
        optimum = brute_force_sliced(problem)
        options = SolveOptions(time_limit_s=20.0, threads=1)
        below = solve_sliced(problem, options, _all_host(problem), cutoff_ns=0.9 * optimum)
        assert below.schedule is None and below.finished, problem
        assert below.bound_ns == pytest.approx(0.9 * optimum) and below.bound_ns <= optimum
        for factor in (1.01, 1.5):
            above = solve_sliced(problem, options, _all_host(problem), cutoff_ns=factor * optimum)
            assert above.schedule is not None and above.status == "optimal" and above.finished, problem
            assert above.schedule.makespan_ns == pytest.approx(optimum, abs=1e-9), problem
            assert optimum * (1 - 1e-6) - 1e-9 <= above.bound_ns <= optimum + 1e-9
