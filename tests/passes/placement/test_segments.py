"""The bottleneck decomposition: chain and segments by hand, exactness, and brute-force agreement."""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor

import ortools
import pytest
from _brute import brute_force_optimum

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.placement.solvers.cpsat import CpSatOptions, solve_cpsat, solve_staged
from cimsplit.passes.placement.solvers.cpsat import model as cpsat_backend
from cimsplit.passes.placement.solvers.cpsat.segments import (
    LARGEST_SEGMENT,
    _Decomposition,
    _segment_problem,
    augment,
    solve_by_segments,
    split_at_bottlenecks,
)
from cimsplit.passes.placement.solvers.cpsat.staged import LARGE_SHARE, decomposes
from cimsplit.passes.placement.testing import random_problem


def two_blocks(skip_ns: float = 0.0, budget: int = 2) -> PlacementProblem:
    r"""
        a -> b -> d -> e -> g        a, d, g: host-only (d is the join of b and c)
         \-> c -/ \-> f -/           b, c, e, f: CIM-capable, one crossbar each
             b -----------> g        skip edge b -> g carrying ``skip_ns``

    Host: a 10, b 40, c 40, d 5, e 30, f 30, g 10; CIM: b, c, e, f 10 each.
    Transfers: 1 ns on every edge but the skip edge.
    """
    edges = ((0, 1, 1.0), (0, 2, 1.0), (1, 3, 1.0), (1, 6, skip_ns), (2, 3, 1.0), (3, 4, 1.0), (3, 5, 1.0),
             (4, 6, 1.0), (5, 6, 1.0))
    return PlacementProblem(names=tuple("abcdefg"), t_host_ns=(10.0, 40.0, 40.0, 5.0, 30.0, 30.0, 10.0),
                            t_cim_ns=(None, 10.0, 10.0, None, 10.0, 10.0, None), crossbars=(0, 1, 1, 0, 1, 1, 0),
                            edges=edges, budget=budget)


def test_augment_links_graph_inputs_and_outputs_to_start_and_end():
    p = PlacementProblem(names=("a", "b"), t_host_ns=(4.0, 6.0), t_cim_ns=(2.0, None), crossbars=(1, 0),
                         edges=((0, 1, 3.0),), budget=1, t_in_ns=(7.0, 0.0), t_out_ns=(5.0, 9.0),
                         writes_output=(True, True))
    aug = augment(p)
    assert aug.names == ("<start>", "a", "b", "<end>")
    # a reads the graph input (7 ns when on the CIM) and writes an output (5 ns); b is host-only:
    # its output costs nothing, it only ends the graph.
    assert aug.edges == ((0, 1, 7.0), (1, 2, 3.0), (1, 3, 5.0), (2, 3, 0.0))
    # Same optimum: a on the CIM pays 7 in, runs 2, then 3 to b (host) 6 and the output transfer 5 in parallel.
    for on_host in ((True, True), (False, True)):
        assert simulate(aug, (True, *on_host, True)).makespan_ns == simulate(p, on_host).makespan_ns


def test_chain_segments_and_exactness_by_hand():
    seg = split_at_bottlenecks(two_blocks())
    # Augmented indices: <start> 0, a..g 1..7, <end> 8.  a, d, g are comparable to everything.
    assert seg.bottlenecks == (0, 1, 4, 7, 8)
    assert seg.members == ((), (2, 3), (5, 6), ())
    assert seg.largest == 2
    assert seg.exact  # the skip edge b -> g carries nothing
    # b -> g jumps over d (5 ns): 5 ns of transfer is covered by d's run, 6 ns may not be.
    assert split_at_bottlenecks(two_blocks(skip_ns=5.0)).exact
    assert not split_at_bottlenecks(two_blocks(skip_ns=6.0)).exact


def test_segment_problem_fixes_the_bottleneck_devices():
    seg = split_at_bottlenecks(two_blocks())
    sub, index = _segment_problem(seg, 1, True, True, 2)
    assert index == [1, 2, 3, 4] and sub.names == ("a", "b", "c", "d")
    assert sub.t_host_ns == (0.0, 40.0, 40.0, 0.0) and sub.t_cim_ns == (None, 10.0, 10.0, None)
    # b and c on the CIM: 1 ns in, 10 ns, 1 ns back: span 12.  One on the host: 40 + the other in parallel.
    assert solve_cpsat(sub, CpSatOptions(time_limit_s=10.0, threads=1)).outcome.objective_ns == 12.0
    assert solve_cpsat(dataclasses.replace(sub, budget=1), CpSatOptions(time_limit_s=10.0, threads=1)).outcome.objective_ns == 40.0
    cim_entry, _ = _segment_problem(seg, 1, False, True, 2)
    assert cim_entry.t_cim_ns[0] == 0.0 and cim_entry.crossbars[0] == 0
    assert cim_entry.t_host_ns[0] > sum(sub.t_host_ns)  # never worth the host


@pytest.mark.parametrize("budget, lowest", [(1, (0, 0)), (3, (1, 1)), (4, (2, 2)), (9, (2, 2))])
def test_a_loose_segment_is_solved_at_the_budget_every_allocation_leaves_it(budget: int, lowest: tuple[int, int]):
    """Two blocks of two one-crossbar operators, host-only bottlenecks: segment i can always take the
    budget less the other's cap of 2, at most its own cap of 2.  The lazy loop targets a segment the
    DP's lower path gives 0 crossbars at that budget (nothing is known yet: every bound is loose)."""
    problem = two_blocks(budget=budget)
    with ThreadPoolExecutor(max_workers=1) as pool:
        dec = _Decomposition(problem, split_at_bottlenecks(problem), 1e-6, 0, None, time.perf_counter() + 10.0, pool)
        assert (dec.lowest(1), dec.lowest(2)) == lowest
        path = [(True, 0), (True, 0), (True, 0), (True, 0)]  # (bottleneck on the host, crossbars of segment i)
        assert dec.loose_segments(path, 0.0) == [((1, True, True), lowest[0]), ((2, True, True), lowest[1])]


@pytest.mark.parametrize("budget, expected", [(0, 165.0), (1, 125.0), (2, 95.0), (3, 67.0), (4, 49.0)])
def test_two_blocks_optimum_by_hand(budget: int, expected: float, segment_fronts: str):
    """T = a 10 + span of block 1 + d 5 + span of block 2 + g 10.

    Block 1 (b, c: 40 ns on the host, 10 on the CIM): none on the CIM 80; one 40 (the host
    op; the CIM one takes 1 + 10 + 1 beside it); both 1 + 10 + 1 = 12.  Block 2 (e, f: 30
    host): 60, 30, 12.  Budget 1: one in block 1 (40 + 60); 2: one each (40 + 30); 3: both
    in block 1 and one in block 2 (12 + 30); 4: all (12 + 12).
    """
    run = solve_by_segments(two_blocks(budget=budget), time_limit_s=20.0)
    assert run.schedule.makespan_ns == expected
    assert run.bound_ns == expected
    assert run.segments.exact


def small_chains(count: int, seed: int) -> list[PlacementProblem]:
    """Random DAGs of 4-9 operators in layers of 1-3 (one-operator layers are bottlenecks).

    Every operator reads a random non-empty subset of the layer before and feeds
    at least one operator of the layer after; with probability 0.3 a layer also
    reads from an operator two or more layers back (a skip edge).  Times,
    transfers (none to dominant), graph inputs and outputs, crossbars and
    budgets are random.
    """
    rng = random.Random(seed)
    out = []
    for i in range(count):
        n = rng.randint(4, 9)
        edges: set[tuple[int, int]] = set()
        layers: list[list[int]] = []
        while sum(map(len, layers)) < n:
            first = sum(map(len, layers))
            layer = list(range(first, first + min(n - first, 1 if rng.random() < 0.5 else rng.randint(2, 3))))
            if layers:
                for w in layer:
                    edges.update((u, w) for u in rng.sample(layers[-1], rng.randint(1, len(layers[-1]))))
                edges.update((u, rng.choice(layer)) for u in layers[-1] if all(a != u for a, _ in edges))
                if len(layers) >= 2 and rng.random() < 0.3:
                    edges.add((rng.choice([u for earlier in layers[:-1] for u in earlier]), rng.choice(layer)))
            layers.append(layer)
        k = rng.choice((0.0, 1.0, 20.0, 200.0))
        capable = [rng.random() < 0.7 for _ in range(n)]
        has_succ = {u for u, _ in edges}
        writes = tuple(v not in has_succ or rng.random() < 0.1 for v in range(n))
        crossbars = tuple(rng.randint(1, 3) if c else 0 for c in capable)
        out.append(PlacementProblem(
            names=tuple(f"op{i}_{v}" for v in range(n)),
            t_host_ns=tuple(float(rng.randint(5, 100)) for _ in range(n)),
            t_cim_ns=tuple(float(rng.randint(2, 60)) if c else None for c in capable), crossbars=crossbars,
            edges=tuple(sorted((u, v, k * rng.randint(0, 4)) for u, v in edges)),
            budget=int(sum(crossbars) * rng.choice((0.3, 0.6, 1.0))),
            t_in_ns=tuple(k * rng.randint(0, 4) if v == 0 else 0.0 for v in range(n)),
            t_out_ns=tuple(k * rng.randint(0, 4) if writes[v] else 0.0 for v in range(n)), writes_output=writes))
    return out


CHAINS = small_chains(220, seed=11)


def test_the_sample_splits_and_is_sometimes_inexact():
    splits = [split_at_bottlenecks(p) for p in CHAINS]
    assert sum(1 for s in splits if sum(1 for m in s.members if m) >= 2) >= 40
    assert sum(1 for s in splits if not s.exact) >= 10


@pytest.mark.parametrize("chunk", range(4))
def test_segments_match_brute_force(chunk: int, segment_fronts: str):
    for p in CHAINS[chunk * 55:(chunk + 1) * 55]:
        optimum = brute_force_optimum(p)
        run = solve_by_segments(p, time_limit_s=20.0, threads=1)
        assert run.bound_ns <= optimum * (1 + 1e-9) + 1e-9  # a true lower bound, exact or not
        again = simulate(p, run.schedule.on_host, [v for v in sorted(range(p.n), key=lambda v: run.schedule.start_ns[v])
                                                   if run.schedule.on_host[v]])
        assert again.makespan_ns == pytest.approx(run.schedule.makespan_ns, rel=1e-12)
        assert sum(c for c, h in zip(p.crossbars, run.schedule.on_host) if not h) <= p.budget
        if run.segments.exact:
            assert run.schedule.makespan_ns == pytest.approx(optimum, rel=1e-6), p
            assert run.bound_ns == pytest.approx(optimum, rel=1e-6), p


@pytest.mark.parametrize("chunk", range(2))
def test_segments_without_the_descent_match_brute_force(chunk: int, segment_fronts: str):
    # No segment descends (largest_descent=0): the fronts are the knapsack floors and the first
    # solves, refined by the lazy loop alone, as a detector's large tail is.
    for p in CHAINS[chunk * 110:(chunk + 1) * 110:4]:
        optimum = brute_force_optimum(p)
        run = solve_by_segments(p, time_limit_s=20.0, threads=1, largest_descent=0)
        assert run.bound_ns <= optimum * (1 + 1e-9) + 1e-9
        assert run.schedule.makespan_ns >= optimum * (1 - 1e-9) - 1e-9
        if run.segments.exact:
            assert run.schedule.makespan_ns == pytest.approx(optimum, rel=1e-6), p
            assert run.bound_ns == pytest.approx(optimum, rel=1e-6), p


def test_the_decomposition_runs_when_large_segments_hold_at_most_half_the_operators():
    # detector-250: an 84-operator tail (34 % of the operators) beside 29 small segments; a
    # layered DAG of 100 operators is one segment; two_blocks has two small ones.
    assert LARGE_SHARE == 0.5
    detector = split_at_bottlenecks(random_problem(250, seed=0, style="detector"))
    assert detector.largest == 84 > LARGEST_SEGMENT and decomposes(detector)
    assert not decomposes(split_at_bottlenecks(random_problem(100, seed=0, style="layered")))
    assert decomposes(split_at_bottlenecks(two_blocks()))


@pytest.mark.parametrize("chunk", range(4))
def test_staged_without_the_whole_graph_slice_matches_brute_force(chunk: int, segment_fronts: str):
    # Inexact splits included: the last stage (whole graph with the segments' bound) closes them.
    for p in CHAINS[chunk * 55:(chunk + 1) * 55]:
        optimum = brute_force_optimum(p)
        run, how = solve_staged(p, CpSatOptions(time_limit_s=20.0, threads=1), slice_s=0.0)
        assert run.outcome.bound_ns <= optimum * (1 + 1e-9) + 1e-9
        assert run.outcome.objective_ns == pytest.approx(optimum, rel=1e-6), (p, how)


def test_a_presolve_failure_is_solved_again_without_presolve(monkeypatch, caplog):
    # A detector-250 segment that CP-SAT 9.15's presolve calls infeasible at 2**40 time units
    # (2**32, the default now, is fine).  Whatever the version, the answer must be the optimum.
    seg = split_at_bottlenecks(random_problem(250, seed=0, style="detector"))
    index = next(i for i, m in enumerate(seg.members) if len(m) == 29)
    sub, _ = _segment_problem(seg, index, True, True, 9)
    expected = solve_cpsat(sub, CpSatOptions(time_limit_s=20.0)).outcome
    assert expected.status == "optimal"
    monkeypatch.setattr(cpsat_backend, "_HORIZON_UNITS", 2.0**40)
    with caplog.at_level(logging.WARNING, logger="cimsplit.passes.placement.solvers.cpsat.solve"):
        out = solve_cpsat(sub, CpSatOptions(time_limit_s=20.0)).outcome
    assert out.status in ("optimal", "gap_limit")
    assert out.objective_ns == pytest.approx(expected.objective_ns, rel=1e-6)
    if ortools.__version__.startswith("9.15."):  # the version the failure was seen with
        assert "solving again without presolve" in caplog.text


def blocks(count: int, seed: int) -> PlacementProblem:
    """``count`` blocks like two_blocks' (a join, then 2-3 capable operators side by side), random times."""
    rng = random.Random(seed)
    host, cim, crossbars, edges = [20.0], [None], [0], []
    join = 0
    for _ in range(count):
        width = rng.randint(2, 3)
        inner = list(range(len(host), len(host) + width))
        for _ in inner:
            host.append(float(rng.randint(20, 90)))
            cim.append(float(rng.randint(5, 40)))
            crossbars.append(rng.randint(1, 2))
        edges += [(join, v, float(rng.randint(0, 3))) for v in inner]
        join = len(host)
        host.append(float(rng.randint(2, 10)))
        cim.append(None)
        crossbars.append(0)
        edges += [(v, join, float(rng.randint(0, 3))) for v in inner]
    return PlacementProblem(names=tuple(f"v{v}" for v in range(len(host))), t_host_ns=tuple(host),
                            t_cim_ns=tuple(cim), crossbars=tuple(crossbars), edges=tuple(edges),
                            budget=sum(crossbars) // 3)


def test_two_runs_give_the_same_schedule():
    p = blocks(12, seed=5)
    seg = split_at_bottlenecks(p)
    assert seg.exact and len([m for m in seg.members if m]) == 12
    a = solve_by_segments(p, time_limit_s=60.0, threads=2)
    b = solve_by_segments(p, time_limit_s=60.0, threads=2)
    assert a.bound_ns == a.schedule.makespan_ns  # proven, so no time limit cut either run
    assert (a.schedule, a.bound_ns, a.solves) == (b.schedule, b.bound_ns, b.solves)
