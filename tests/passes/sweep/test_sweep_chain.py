"""Sweeps solve the budgets of one model, host and MVM latency as a chain (:mod:`cimsplit.passes.sweep.chain`).

Real front end, real solvers; host latencies from a deterministic table profile
(``tests/_profiles.py``), so that every run costs the same problems.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from _profiles import table_profile

from cimsplit.compiler import frontend
from cimsplit.models import zoo
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.sweep.chain import ChainTask
from cimsplit.passes.sweep.execute import start_order
from cimsplit.passes.sweep.grid import SweepPoint
from cimsplit.passes.sweep.run import SweepObserver, SweepSpec, run_sweep
from cimsplit.passes.sweep.store import read_journal
from cimsplit.passes.sweep.task import TIME_COLUMNS, PointTask

BUDGETS = (3, 50, 250, 400)
"""ResNet-18 at 32x32 (float) uses 201 crossbars with every capable operator on the CIM: 250 reuses 400's proof."""


@pytest.fixture(scope="module")
def resnet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The zoo ResNet-18 at 32x32 and its table profile."""
    root = tmp_path_factory.mktemp("chain_inputs")
    model = root / "resnet18.onnx"
    onnx.save(zoo.build("resnet18", image_size=32), model)
    profile = root / "resnet18.json"
    table_profile(frontend.load(model)).save(profile)
    return model, profile


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CIMSPLIT_CACHE_DIR", str(tmp_path / "cache"))


def spec(resnet, **changes) -> SweepSpec:
    model, profile = resnet
    values = dict(models=(str(model),), crossbars=BUDGETS, mvm_latencies_ns=(50.0,),
                  host_profiles={"x86": str(profile)}, solver="highs", time_limit_s=30.0, slicing="off")
    return SweepSpec(**{**values, **changes})


def without_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIME_COLUMNS} for row in rows]


@pytest.mark.parametrize("solver", ["cpsat", "highs"])
def test_makespans_are_monotone_in_the_budget_and_equal_to_solving_each_point_alone(resnet, tmp_path, solver):
    chained = run_sweep(spec(resnet, solver=solver), tmp_path / "chain", workers=1, reports=False).rows
    alone = run_sweep(spec(resnet, solver=solver, reuse=False), tmp_path / "alone", workers=1, reports=False).rows
    assert len(chained) == len(alone) == len(BUDGETS)
    for t in (50.0,):
        rows = sorted((r for r in chained if r["mvm_latency_ns"] == t), key=lambda r: r["crossbars"])
        spans = [r["makespan_ns"] for r in rows]
        assert all(a >= b for a, b in zip(spans, spans[1:])), spans
        assert all(r["status"] == "optimal" for r in rows)
        # A reused point reports the schedule of a larger budget that fits it.
        for r in rows:
            if r["reused_from"] is not None:
                assert r["reused_from"] > r["crossbars"] >= r["crossbars_used"]
    assert any(r["reused_from"] is not None for r in chained)
    assert all(r["reused_from"] is None for r in alone)
    for a, b in zip(chained, alone):
        assert (a["crossbars"], a["mvm_latency_ns"]) == (b["crossbars"], b["mvm_latency_ns"])
        assert a["makespan_ns"] == pytest.approx(b["makespan_ns"], rel=2e-6)


class StopAfter(SweepObserver):
    def __init__(self, points: int) -> None:
        self.left = points

    def point_done(self, row: dict) -> None:
        self.left -= 1
        if self.left == 0:
            raise KeyboardInterrupt


def test_a_chain_cut_short_resumes_from_its_journal_with_the_same_rows(resnet, tmp_path):
    fresh = run_sweep(spec(resnet), tmp_path / "fresh", workers=1, reports=False)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec(resnet), tmp_path / "cut", workers=1, reports=False, observer=StopAfter(2))
    journal = read_journal(tmp_path / "cut")
    assert len(journal) == 2 and all("carry" in record for record in journal.values())
    resumed = run_sweep(spec(resnet), tmp_path / "cut", workers=1, reports=False)
    assert (resumed.computed, resumed.reused) == (len(fresh.rows) - 2, 2)
    assert without_time(resumed.rows) == without_time(fresh.rows)
    # Nothing left: a third run solves nothing; a pool gives the same rows (deterministic).
    assert run_sweep(spec(resnet), tmp_path / "cut", workers=1, reports=False).computed == 0
    pooled = run_sweep(spec(resnet), tmp_path / "pool", workers=2, reports=False)
    assert without_time(pooled.rows) == without_time(fresh.rows)


def test_a_chain_s_work_is_operators_plus_incomparable_pairs_of_the_points_left():
    """A diamond a -> (b, c) -> d has 4 operators and one incomparable pair (b, c); a chain x -> y has
    2 and none.  A point an earlier run finished (``known``) is left out; a point without a problem
    counts nothing."""
    diamond = PlacementProblem(names=tuple("abcd"), t_host_ns=(1.0,) * 4, t_cim_ns=(None,) * 4, crossbars=(0,) * 4,
                               edges=((0, 1, 0.0), (0, 2, 0.0), (1, 3, 0.0), (2, 3, 0.0)), budget=1)
    pair = PlacementProblem(names=("x", "y"), t_host_ns=(1.0, 1.0), t_cim_ns=(None, None), crossbars=(0, 0),
                            edges=((0, 1, 0.0),), budget=1)
    point = SweepPoint("m", "x86", 1, 50.0)
    tasks = (PointTask(point, diamond), PointTask(point, pair), PointTask(point, None, error="no model"))
    assert ChainTask(tasks).work == 5 + 2
    assert ChainTask(tasks, known=({"done": True}, None, None)).work == 2


def test_chains_of_equal_work_start_with_the_most_contested():
    """Two one-point chains of the same graph x -> y: host (4, 6) ns with CIM (1, 10) contests 1 + 6 = 7 ns,
    with CIM (3, 5) 3 + 5 = 8 ns (an operator without a CIM time contests nothing); the bigger diamond
    (5 + 1 work against 2) still goes first."""
    point = SweepPoint("m", "x86", 1, 50.0)

    def pair(cim: tuple) -> ChainTask:
        return ChainTask((PointTask(point, PlacementProblem(names=("x", "y"), t_host_ns=(4.0, 6.0), t_cim_ns=cim,
                                                            crossbars=(1, 1), edges=((0, 1, 0.0),), budget=1)),))
    diamond = PlacementProblem(names=tuple("abcd"), t_host_ns=(1.0,) * 4, t_cim_ns=(None,) * 4, crossbars=(0,) * 4,
                               edges=((0, 1, 0.0), (0, 2, 0.0), (1, 3, 0.0), (2, 3, 0.0)), budget=1)
    chains = [pair((1.0, 10.0)), pair((3.0, 5.0)), pair((None, 5.0)), ChainTask((PointTask(point, diamond),))]
    assert [c.contested_ns for c in chains] == [7.0, 8.0, 5.0, 0.0]
    assert start_order(chains) == [3, 1, 0, 2]
