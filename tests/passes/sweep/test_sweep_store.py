"""Sweep rows, journal, result tables and Table I on hand-built problems (no ONNX)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.sweep.execute import execute
from cimsplit.passes.sweep.grid import SweepGrid, SweepPoint
from cimsplit.passes.sweep.store import JOURNAL, Journal, read_journal, write_results
from cimsplit.passes.sweep.table1 import table1_markdown
from cimsplit.passes.sweep.task import COLUMNS, TIME_COLUMNS, PointTask, run_point, task_fingerprint


def chain(budget: int) -> PlacementProblem:
    """
    a (host only, 10 ns) --5 ns--> b (host 100 ns | CIM 20 ns, 1 crossbar) --5 ns--> c (host only, 10 ns)
    """
    return PlacementProblem(
        names=("a", "b", "c"),
        t_host_ns=(10.0, 100.0, 10.0),
        t_cim_ns=(None, 20.0, None),
        crossbars=(0, 1, 0),
        edges=((0, 1, 5.0), (1, 2, 5.0)),
        budget=budget,
        writes_output=(False, False, True),
    )


def task(budget: int, model: str = "chain") -> PointTask:
    problem = chain(budget)
    return PointTask(SweepPoint(model, "x86", budget, 50.0), problem, fingerprint=task_fingerprint(problem, "auto", 60.0, None, False))


def test_row_of_a_solved_point_matches_the_hand_schedule() -> None:
    row = run_point(task(budget=1))
    # b on the CIM: a ends at 10, +5 transfer, b runs 20 -> 35, +5 transfer, c runs 10 -> 50.
    assert row["makespan_ns"] == pytest.approx(10 + 5 + 20 + 5 + 10)
    assert row["cpu_only_ns"] == pytest.approx(10 + 100 + 10)
    assert row["speedup"] == pytest.approx(120 / 50)
    assert (row["ops_on_cim"], row["ops_on_host"], row["crossbars_used"]) == (1, 2, 1)
    assert row["host_busy_ns"] == pytest.approx(10 + 10)
    assert row["cim_busy_ns"] == pytest.approx(20)
    assert row["transfer_ns"] == pytest.approx(5 + 5)
    assert row["status"] == "optimal" and row["error"] is None
    assert list(row) == list(COLUMNS)


def test_zero_budget_keeps_everything_on_the_host() -> None:
    row = run_point(task(budget=0))
    assert row["makespan_ns"] == pytest.approx(120) and row["speedup"] == pytest.approx(1.0)
    assert row["ops_on_cim"] == 0 and row["transfer_ns"] == 0.0


def test_a_failing_point_becomes_an_error_row() -> None:
    unbuilt = run_point(PointTask(SweepPoint("m", "arm", 25, 50.0), None, error="no host profile for arm"))
    assert unbuilt["status"] == "error" and unbuilt["error"] == "no host profile for arm"
    assert unbuilt["makespan_ns"] is None and unbuilt["crossbars"] == 25
    bad_solver = run_point(PointTask(SweepPoint("m", "x86", 1, 50.0), chain(1), solver="no-such-solver"))
    assert bad_solver["status"] == "error" and "no-such-solver" in bad_solver["error"]


def test_fingerprint_changes_with_costs_and_solver_settings() -> None:
    base = task_fingerprint(chain(1), "auto", 60.0, None, False)
    assert base == task_fingerprint(chain(1), "auto", 60.0, None, False)
    assert base != task_fingerprint(chain(2), "auto", 60.0, None, False)
    assert base != task_fingerprint(chain(1), "highs", 60.0, None, False)
    assert base != task_fingerprint(chain(1), "auto", 10.0, None, False)


def test_journal_keeps_the_latest_record_and_ignores_a_torn_line(tmp_path: Path) -> None:
    first, second = run_point(task(0)), run_point(task(1))
    with Journal(tmp_path) as journal:
        journal.append("f0", first)
        journal.append("f1", second)
        journal.append("f1b", second)
    with open(tmp_path / JOURNAL, "a", encoding="utf-8") as handle:
        handle.write('{"fingerprint": "torn", "row": {"model": "ch')  # killed mid-write
    records = read_journal(tmp_path)
    assert set(records) == {("chain", "x86", 0, 50.0), ("chain", "x86", 1, 50.0)}
    assert records[("chain", "x86", 1, 50.0)]["fingerprint"] == "f1b"


def test_results_are_written_in_grid_order_with_exact_columns(tmp_path: Path) -> None:
    rows = {t.point.key: run_point(t) for t in (task(1), task(0))}  # finished out of order
    points = SweepGrid(("chain",), ("x86",), (0, 1, 2), (50.0,)).points()  # budget 2 never ran
    write_results(tmp_path, points, rows)
    with open(tmp_path / "results.csv", newline="", encoding="utf-8") as handle:
        table = list(csv.reader(handle))
    assert tuple(table[0]) == COLUMNS
    assert [r[2] for r in table[1:]] == ["0", "1"]
    assert table[1][COLUMNS.index("error")] == ""
    data = json.loads((tmp_path / "results.json").read_text())
    assert [list(r) for r in data] == [list(COLUMNS)] * 2
    assert data[1]["makespan_ns"] == pytest.approx(50.0)
    assert not list(tmp_path.glob(".*tmp"))


def test_local_pool_gives_the_rows_of_in_process_runs() -> None:
    tasks = [task(b, model=f"m{i}") for i, b in enumerate((0, 1, 0, 1))]
    serial = sorted(execute(tasks, workers=1))
    pooled = sorted(execute(tasks, workers=2), key=lambda pair: pair[0])
    strip = [{k: v for k, v in row.items() if k not in TIME_COLUMNS} for _, row in serial]
    assert [i for i, _ in pooled] == [0, 1, 2, 3]
    assert [{k: v for k, v in row.items() if k not in TIME_COLUMNS} for _, row in pooled] == strip


def test_table1_counts_sizes_means_and_errors() -> None:
    def row(model: str, variables: int, time_s: float, gap: float | None, status: str = "optimal", makespan_ns: float = 3e6) -> dict:
        return {"model": model, "host": "arm", "ops_on_cim": 3, "ops_on_host": 35, "n_variables": variables,
                "n_constraints": 204, "time_s": time_s, "gap": gap, "status": status, "makespan_ns": makespan_ns,
                "cpu_only_ns": 6e6}

    rows = [row("resnet18", 44, 0.001, 0.0002), row("resnet18", 44, 0.003, 0.0, makespan_ns=2e6),
            row("yolov5n", 3000, 600.0, 0.1, "time_limit"), row("yolov5n", 3041, 500.0, None, "time_limit"),
            {"model": "yolov5n", "host": "arm", "status": "error"}]
    lines = table1_markdown(rows, {("resnet18", "arm"): 4e6}).splitlines()
    resnet = next(line for line in lines if line.startswith("| resnet18"))
    # mean time (0.001 + 0.003) / 2 = 0.002 s -> "< 0.01"; mean gap (0.0002 + 0) / 2 = 0.01 %.
    assert resnet == "| resnet18 | arm | 38 | 44 | 204 | < 0.01 | 0.01 | 2 | 0 | 0 |"
    yolo = next(line for line in lines if line.startswith("| yolov5n"))
    # sizes differ -> range; mean time (600 + 500) / 2 = 550 s; the gap without a bound is left out: 10 %.
    assert yolo == "| yolov5n | arm | 38 | 3,000–3,041 | 204 | 550.00 | 10.00 | 3 | 2 | 1 |"
    # Honest references: best makespan 2 ms; 6 ms / 2 ms = 3x over the sum of medians, 4 ms / 2 ms = 2x over ORT.
    assert "| resnet18 | arm | 6.000 | 4.000 | 2.000 | 3.00x | 2.00x |" in lines
    assert "| yolov5n | arm | 6.000 | – | 3.000 | 2.00x | – |" in lines
