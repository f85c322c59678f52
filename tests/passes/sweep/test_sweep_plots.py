"""Sweep figures from hand-made rows: which files appear, that they are valid, and deterministic."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib.image

from cimsplit.passes.sweep.plots import write_figures
from cimsplit.passes.sweep.task import COLUMNS


def row(model: str, host: str, crossbars: int, latency_ns: float) -> dict:
    """A made-up point: makespan falls with crossbars, rises with latency; 1 ms on the CPU alone."""
    cpu_only = 1e6
    makespan = cpu_only / (1 + crossbars / 50) + latency_ns * 100
    values = dict.fromkeys(COLUMNS)
    values.update(model=model, host=host, crossbars=crossbars, mvm_latency_ns=latency_ns, makespan_ns=makespan,
                  cpu_only_ns=cpu_only, speedup=cpu_only / makespan, ops_on_cim=crossbars // 25, ops_on_host=40 - crossbars // 25,
                  host_busy_ns=0.8 * makespan, cim_busy_ns=0.3 * makespan, transfer_ns=1000.0, status="optimal")
    return values


def rows(crossbars: list[int]) -> list[dict]:
    return [row(m, h, c, t) for m in ("net_a", "net b") for h in ("x86", "arm") for c in crossbars for t in (50.0, 1000.0)]


def test_figures_of_a_paper_sized_grid(tmp_path: Path) -> None:
    data = rows([25, 50, 100, 200]) + [{**row("net_a", "x86", 400, 50.0), "status": "error", "speedup": None}]
    files = write_figures(tmp_path, data)
    names = sorted(p.name for p in files)
    # Four crossbar counts: no budget curve; "net b" gets a file-safe name.
    assert names == sorted(f"{stem}.{ext}" for stem in ("fig3_net_a", "fig3_net_b", "fig5_net_a", "fig5_net_b", "fig4")
                           for ext in ("png", "svg"))
    for path in files:
        if path.suffix == ".png":
            height, width, _ = matplotlib.image.imread(path).shape
            assert height > 300 and width > 300
        else:
            assert ET.parse(path).getroot().tag.endswith("svg")
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_budget_curve_from_five_crossbar_counts_and_deterministic_files(tmp_path: Path) -> None:
    data = rows([0, 25, 50, 75, 100])
    (tmp_path / "a").mkdir()
    first = {p.name: p.read_bytes() for p in write_figures(tmp_path / "a", data)}
    assert "budget_net_a.png" in first and "budget_net_a.svg" in first
    (tmp_path / "b").mkdir()
    second = {p.name: p.read_bytes() for p in write_figures(tmp_path / "b", data)}
    assert second == first
    # Step 0 -> 25 crossbars at 50 ns saves (1e6 - 1e6 / 1.5) / 25 = 13333 ns = 13.3 us per crossbar.
    svg = first["budget_net_a.svg"].decode()
    assert ">13.3<" in svg and "µs saved per added crossbar" in svg


def test_no_successful_point_means_no_figure(tmp_path: Path) -> None:
    failed = {**row("m", "arm", 25, 50.0), "status": "error", "speedup": None}
    assert write_figures(tmp_path, [failed]) == []
