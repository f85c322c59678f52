"""Properties of optimal partitions over the paper's grid (section V), on this machine's profiles.

For an exact optimum:
- speedup >= 1: CPU-only is always feasible, so the optimum is never slower;
- at fixed crossbars, speedup never increases with the MVM latency: every CIM
  cost T_acc,v = ... + N_mvm,v * T_mvm (eq. 2-3) grows, so any placement gets
  slower and the old optimum bounds the new one;
- at fixed MVM latency, speedup never decreases with crossbars: a larger C
  keeps every placement that fitted (eq. 14).
Solves stop at the default relative MIP gap (1e-6), hence the tolerance.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cimsplit.passes.placement.options import DEFAULT_MIP_GAP
from cimsplit.passes.sweep.grid import PAPER_CROSSBARS, PAPER_MVM_LATENCIES_NS
from cimsplit.passes.sweep.run import SweepSpec, run_sweep

TOLERANCE = 2 * DEFAULT_MIP_GAP


def check_properties(rows: list[dict]) -> None:
    assert rows and all(r["status"] == "optimal" for r in rows), [r["error"] or r["status"] for r in rows]
    speedup = {(r["model"], r["crossbars"], r["mvm_latency_ns"]): r["speedup"] for r in rows}
    for (model, crossbars, latency), value in speedup.items():
        assert value >= 1.0 - 1e-9
        slower = [t for t in PAPER_MVM_LATENCIES_NS if t > latency]
        if slower:
            assert speedup[(model, crossbars, slower[0])] <= value * (1 + TOLERANCE), (model, crossbars, latency)
        larger = [c for c in PAPER_CROSSBARS if c > crossbars]
        if larger:
            assert speedup[(model, larger[0], latency)] >= value * (1 - TOLERANCE), (model, crossbars, latency)
    # The budget binds somewhere: at the fastest MVM the largest budget beats the smallest.
    for model in {r["model"] for r in rows}:
        fast = PAPER_MVM_LATENCIES_NS[0]
        assert speedup[(model, PAPER_CROSSBARS[-1], fast)] > speedup[(model, PAPER_CROSSBARS[0], fast)]


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CIMSPLIT_CACHE_DIR", str(tmp_path / "cache"))


def test_paper_grid_properties_at_small_image_size(tmp_path: Path) -> None:
    # Whole operators: the properties need proven optima, which the sliced solve does not always reach in time.
    spec = SweepSpec(models=("resnet18", "mobilenet_v2"), image_size=32, slicing="off")  # x86 = this machine
    outcome = run_sweep(spec, tmp_path, workers=1, reports=False)
    assert len(outcome.rows) == 2 * 4 * 4
    check_properties(outcome.rows)


@pytest.mark.slow
def test_paper_grid_properties_at_full_size(tmp_path: Path) -> None:
    outcome = run_sweep(SweepSpec(models=("resnet18", "mobilenet_v2"), slicing="off"), tmp_path, reports=False)
    check_properties(outcome.rows)
