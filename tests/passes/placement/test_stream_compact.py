"""Compaction of a stream's frame (same placement, same period, shorter frame): by hand and on random problems."""

from __future__ import annotations

import random

import pytest

from cimsplit.passes.placement import PlacementProblem, SolveOptions, place
from cimsplit.passes.placement.stream.compact import compact_stream
from cimsplit.passes.placement.stream.construct import modulo_schedule
from cimsplit.passes.placement.stream.tasks import resource_bound_ns, task_graph
from cimsplit.passes.placement.stream.validate import validate_stream
from cimsplit.passes.placement.testing import random_problem


def _branch() -> PlacementProblem:
    """a (host 1) -> c (CIM 0.5) -> d (host 2), and b (host 1) on its own; no transfer costs.

    c on the CIM: host busy 1 + 2 + 1 = 4 = P (c on the host: 54).  The construction packs the host
    in task order a [0, 1), d at offset 1, b at offset 3: d is ready at 1.5, past its offset, so it
    runs a turn later, [5, 7): L = 7, two frames in flight (first fit finds no room for b).  The cycle
    a, b, d: a [0, 1), c [1, 1.5), b [1, 2), d at offset 2 = [2, 4): L = 4 = P, one frame in flight.
    """
    return PlacementProblem(names=("a", "c", "d", "b"), t_host_ns=(1.0, 50.0, 2.0, 1.0),
                            t_cim_ns=(None, 0.5, None, None), crossbars=(0, 1, 0, 0),
                            edges=((0, 1, 0.0), (1, 2, 0.0)), budget=1)


def test_branch_by_hand() -> None:
    problem = _branch()
    on_host = (True, False, True, True)
    built = modulo_schedule(problem, on_host, 4.0)
    assert built.period_ns == 4.0 and built.latency_ns == 7.0 and built.frames_in_flight == 2
    compact = compact_stream(problem, built)
    assert compact.period_ns == 4.0 and compact.latency_ns == 4.0 and compact.frames_in_flight == 1
    starts = {t.name: (t.start_ns, t.finish_ns) for t in compact.tasks}
    assert starts == {"a": (0.0, 1.0), "c": (1.0, 1.5), "b": (1.0, 2.0), "d": (2.0, 4.0)}
    result = place(problem, SolveOptions(objective="throughput", solver="highs"))
    assert result.stream.period_ns == 4.0 and result.stream.latency_ns == 4.0
    assert result.schedule.makespan_ns == 4.0  # the throughput plan's frame is the compacted one


@pytest.mark.parametrize("seed", range(30))
def test_never_longer_and_valid(seed: int) -> None:
    """Random placements of random problems (two 93-110-operator detectors): same period, frame no longer."""
    rng = random.Random(seed)
    style = "detector" if seed in (0, 15) else rng.choice(["inception", "layered"])
    problem = random_problem(rng.randint(93, 110) if style == "detector" else rng.randint(4, 30), seed=seed, style=style)
    capable = [v for v in range(problem.n) if problem.t_cim_ns[v] is not None]
    on_host = [True] * problem.n
    used = 0
    for v in rng.sample(capable, len(capable)):
        if used + problem.crossbars[v] <= problem.budget:
            on_host[v], used = False, used + problem.crossbars[v]
    on_host = tuple(on_host)
    period = resource_bound_ns(task_graph(problem, on_host))
    built = modulo_schedule(problem, on_host, period)
    compact = compact_stream(problem, built)
    assert compact.period_ns == built.period_ns and compact.on_host == built.on_host
    assert compact.latency_ns <= built.latency_ns
    validate_stream(problem, compact, source="test", slack_free=False)  # raises when anything is wrong
