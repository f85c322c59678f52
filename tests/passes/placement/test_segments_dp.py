"""The decomposition's DP over the chain (``_Decomposition.best``) against enumerating every path."""

from __future__ import annotations

import itertools
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor

from test_segments import CHAINS

from cimsplit.passes.placement.solvers.cpsat.fronts import _Solve
from cimsplit.passes.placement.solvers.cpsat.segments import _Decomposition, split_at_bottlenecks


def _fill_fronts(dec: _Decomposition, rng: random.Random) -> None:
    """Random solves on every front: spans on a coarse grid (so that paths tie), bounds at or below them."""
    for i, h0, h1 in dec.keys:
        for _ in range(rng.randint(0, 4)):
            limit = rng.randint(0, dec.caps[i])
            span = float(rng.randint(1, 3) * 10)
            dec.fronts[(i, h0, h1)].solves.append(
                _Solve(limit=limit, used=rng.randint(0, limit), span_ns=span, bound_ns=span - rng.choice((0.0, 5.0)),
                       on_host={}, host_order=(), finished=False, seconds=0.0))


def _every_path(dec: _Decomposition, lower: bool) -> list[tuple[float, int, list[tuple[bool, int]]]]:
    """(value, crossbars, path) of every path through the chain that fits the budget, values summed in chain order."""
    paths = []
    last = len(dec.chain) - 1
    for devices in itertools.product(*dec.devices[1:]):
        hosts = [True] + [h for h, _, _ in devices]
        steps = []
        for i in range(last):
            if dec.seg.members[i]:
                front = dec.fronts[(i, hosts[i], hosts[i + 1])]
                steps.append(front.lower_steps(dec.caps[i]) if lower else front.upper_points())
            else:
                steps.append([(0, dec.direct(i, hosts[i], hosts[i + 1]))])
        for choice in itertools.product(*steps):
            value, used = 0.0, 0
            for (spent, span), (_, duration, crossbars) in zip(choice, devices):
                value, used = value + span + duration, used + spent + crossbars
            if used <= dec.budget:
                paths.append((value, used, [(hosts[i], choice[i][0]) for i in range(last)]))
    return paths


def test_the_dp_finds_the_best_path_with_the_fewest_crossbars():
    rng = random.Random(7)
    checked = ties = 0
    with ThreadPoolExecutor(1) as pool:
        for problem in CHAINS[:80]:
            seg = split_at_bottlenecks(problem)
            dec = _Decomposition(problem, seg, 1e-6, 0, None, time.perf_counter() + 60.0, pool)
            _fill_fronts(dec, rng)
            for lower in (False, True):
                paths = _every_path(dec, lower)
                value, path = dec.best(lower)
                if not paths:
                    assert (value, path) == (math.inf, [])
                    continue
                best_value, fewest, _ = min(paths, key=lambda p: p[:2])
                assert value == best_value
                chosen = [p for p in paths if p[2] == path]
                assert len(chosen) == 1 and chosen[0][:2] == (best_value, fewest)
                checked += 1
                ties += sum(1 for p in paths if p[0] == best_value) > 1
    assert checked >= 120 and ties >= 10
