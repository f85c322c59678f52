"""`cimsplit sweep` end to end: real front end, saved host profiles, real solvers.

Host latencies come from profiles saved once per module, so every run in a
test costs the same problems and must give the same rows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cimsplit.cli import main
from cimsplit.compiler import frontend
from cimsplit.compiler.host_profile import profile_model
from cimsplit.models import zoo
from cimsplit.passes.sweep.run import SweepObserver, SweepSpec, run_sweep
from cimsplit.passes.sweep.store import JOURNAL, read_journal, read_results
from cimsplit.passes.sweep.task import COLUMNS, TIME_COLUMNS

CIMSPLIT = str(Path(sys.executable).with_name("cimsplit"))
IMAGE = "32"  # zoo models at 32x32: the same graph as at 224, far cheaper to profile


def residual_model(path: Path) -> Path:
    """
      x[1,64,8,8] -> conv1 (64, 3x3) -> relu -+-> conv2 (64, 3x3) -> relu -> add -> gap -> flatten -> gemm (64->10) -> y
                                              +-------------------------------^
    Each conv needs ceil(64/256) * ceil(64*9/256) = 3 crossbars (eq. 1), the gemm 1.
    """
    rng = np.random.default_rng(0)
    init = [
        numpy_helper.from_array(rng.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05, "w1"),
        numpy_helper.from_array(rng.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05, "w2"),
        numpy_helper.from_array(rng.standard_normal((10, 64)).astype(np.float32), "fc"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Add", ["r1", "r2"], ["s"], name="add"),
        helper.make_node("GlobalAveragePool", ["s"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc"], ["y"], name="gemm", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], init,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A model file, the zoo ResNet-18 at 32x32, and a folder of saved x86 profiles (MODEL.json)."""
    root = tmp_path_factory.mktemp("sweep_inputs")
    tiny = residual_model(root / "tiny.onnx")
    resnet = root / "resnet18.onnx"
    onnx.save(zoo.build("resnet18", image_size=int(IMAGE)), resnet)
    profiles = root / "profiles"
    profiles.mkdir()
    for path in (tiny, resnet):
        profile_model(frontend.load(path), runs=5, warmup=1).save(profiles / f"{path.stem}.json")
    return {"tiny": tiny, "resnet": resnet, "profiles": profiles}


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CIMSPLIT_CACHE_DIR", str(tmp_path / "cache"))


def grid_args(inputs: dict[str, Path], out: Path) -> list[str]:
    return ["sweep", str(inputs["tiny"]), "resnet18", "--image-size", IMAGE, "--host-profile", f"x86={inputs['profiles']}",
            "--crossbars", "3,100", "--mvm-latency", "50,1000ns", "-o", str(out)]


def without_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIME_COLUMNS} for row in rows]


@pytest.fixture(scope="module")
def dask_address():
    distributed = pytest.importorskip("dask.distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def test_same_rows_in_process_in_a_pool_and_on_dask(inputs, tmp_path, capsys, dask_address) -> None:
    results = {}
    for name, where in (("one", ["--workers", "1"]), ("two", ["--workers", "2"]), ("dask", ["--scheduler", dask_address])):
        assert main([*grid_args(inputs, tmp_path / name), *where]) == 0
        assert "8 solved now, 0 from an earlier run, 0 failed" in capsys.readouterr().out
        results[name] = read_results(tmp_path / name)
    rows = results["one"]
    assert len(rows) == 8 and [list(r) for r in rows] == [list(COLUMNS)] * 8
    # Grid order: model (as given), host, crossbars, MVM latency.
    assert [(r["model"], r["crossbars"], r["mvm_latency_ns"]) for r in rows[:4]] == [
        ("tiny", 3, 50.0), ("tiny", 3, 1000.0), ("tiny", 100, 50.0), ("tiny", 100, 1000.0)]
    assert without_time(results["two"]) == without_time(rows)
    assert without_time(results["dask"]) == without_time(rows)
    csv_one = (tmp_path / "one" / "results.csv").read_text().splitlines()
    csv_two = (tmp_path / "two" / "results.csv").read_text().splitlines()
    time_col = COLUMNS.index("time_s")
    strip = lambda lines: [",".join(c for i, c in enumerate(line.split(",")) if i != time_col) for line in lines]  # noqa: E731
    assert strip(csv_one) == strip(csv_two)


def test_every_row_is_what_cimsplit_partition_gives_for_that_point(inputs, tmp_path, capsys) -> None:
    assert main([*grid_args(inputs, tmp_path), "--workers", "1", "--no-plots"]) == 0
    capsys.readouterr()
    for row in read_results(tmp_path):
        path = inputs["tiny"] if row["model"] == "tiny" else tmp_path / "models" / "resnet18.onnx"
        profile = inputs["profiles"] / f"{row['model']}.json"
        assert main(["partition", str(path), "--host-profile", str(profile), "--crossbars", str(row["crossbars"]),
                     "--mvm-latency", f"{row['mvm_latency_ns']:g}ns", "--json"]) == 0
        alone = json.loads(capsys.readouterr().out)
        assert row["cpu_only_ns"] == alone["cpu_only_ns"]
        if row["reused_from"] is not None and row["reused_from"] < row["crossbars"]:
            # The sweep's budget chain kept a smaller budget's schedule, shorter than this point's
            # solve alone (e.g. a sliced one where --slicing auto does not slice, the budget not binding).
            assert row["makespan_ns"] < alone["makespan_ns"] and row["crossbars_used"] <= row["reused_from"]
            continue
        # Both solves are optimal within the default relative MIP gap (1e-6).
        assert row["status"] == alone["solver"]["status"] == "optimal"
        assert row["makespan_ns"] == pytest.approx(alone["makespan_ns"], rel=2e-6)
        assert row["speedup"] == pytest.approx(alone["speedup"], rel=2e-6)
        assert row["ops_on_cim"] == alone["operators_on_cim"]
        assert row["ops_on_cim"] + row["ops_on_host"] + row["ops_sliced"] == len(alone["operators"]) \
            == alone["solver"]["n_operators"]
        assert row["ops_sliced"] == alone.get("operators_sliced", 0)
        assert row["crossbars_used"] == alone["crossbars_used"] <= row["crossbars"]
        # The sweep solves a model's budgets as one chain (larger budgets' bounds and schedules
        # in the model), so its model's size may differ from the point solved alone.
        assert row["solver"] == alone["solver"]["name"]
        # The host is single-core: busy time never exceeds the makespan (two float sums of the same times).
        assert row["host_busy_ns"] <= row["makespan_ns"] * (1 + 1e-12)


def test_a_host_without_profile_fails_its_points_only(inputs, tmp_path, capsys) -> None:
    code = main(["sweep", str(inputs["tiny"]), "--hw", "x86,arm", "--host-profile", f"x86={inputs['profiles']}",
                 "--crossbars", "3", "--mvm-latency", "50", "-o", str(tmp_path), "--workers", "1"])
    captured = capsys.readouterr()
    assert code == 1
    rows = {r["host"]: r for r in read_results(tmp_path)}
    assert rows["x86"]["status"] != "error" and rows["x86"]["speedup"] >= 1.0
    message = "no host profile for arm: profile on the board with `cimsplit profile` and pass --host-profile arm=FILE"
    assert rows["arm"]["status"] == "error" and rows["arm"]["error"] == message
    assert rows["arm"]["makespan_ns"] is None
    assert f"error: 1 point(s): {message}" in captured.err


@pytest.mark.parametrize("argv, needle", [
    (["sweep", "no_such_model", "-o", "OUT"], "neither an ONNX file nor a zoo model"),
    (["sweep", "--paper", "resnet18", "-o", "OUT"], "--paper fixes the grid"),
    (["sweep", "resnet18", "--crossbars", "50:0:5", "-o", "OUT"], "ends before it starts"),
    (["sweep", "resnet18", "--hw", "nonsense", "-o", "OUT"], "unknown hardware"),
    (["sweep", "resnet18", "--host-profile", "arm=x.json", "-o", "OUT"], "not in --hw"),
    (["sweep", "resnet18", "--host-profile", "x.json", "-o", "OUT"], "HW=FILE"),
    (["sweep", "-o", "OUT"], "no model"),
    (["sweep", "resnet18", "--float", "-o", "OUT"], "--float only applies to --paper"),
    (["sweep", "resnet18", "--solver", "simplex-by-hand", "-o", "OUT"], "unknown solver"),
])
def test_bad_input_is_one_line_and_status_2(argv, needle, tmp_path, capsys) -> None:
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


class _StopAfter(SweepObserver):
    """Simulates a crash of the sweep after ``n`` points."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def point_done(self, row: dict) -> None:
        self.seen += 1
        if self.seen == self.n:
            raise KeyboardInterrupt


def test_an_interrupted_sweep_resumes_with_the_missing_points_only(inputs, tmp_path) -> None:
    spec = SweepSpec(models=(str(inputs["tiny"]),), crossbars=(0, 3, 6, 100), mvm_latencies_ns=(50.0, 1000.0),
                     host_profiles={"x86": str(inputs["profiles"])})
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, tmp_path, workers=1, observer=_StopAfter(3), reports=False)
    # (a budget chain may journal a point twice: a shorter schedule of a smaller budget replaced its first row)
    assert len(read_journal(tmp_path)) == 3
    assert len(read_results(tmp_path)) == 3  # the tables show what finished before the crash
    outcome = run_sweep(spec, tmp_path, workers=1, reports=False)
    assert (outcome.reused, outcome.computed) == (3, 8 - 3)
    assert len(read_journal(tmp_path)) == 8
    again = run_sweep(spec, tmp_path, workers=1, reports=False)
    assert (again.reused, again.computed) == (8, 0)
    assert without_time(again.rows) == without_time(outcome.rows)
    # A changed setting changes every point's fingerprint: nothing stale is reused.
    changed = run_sweep(SweepSpec(**{**spec.__dict__, "paper_exact": True}), tmp_path, workers=1, reports=False)
    assert (changed.reused, changed.computed) == (0, 8)


def test_a_killed_cimsplit_process_resumes(inputs, tmp_path, capsys) -> None:
    """The real console script, killed with SIGKILL part-way; the rerun solves only what is missing."""
    argv = ["sweep", str(inputs["tiny"]), "--host-profile", f"x86={inputs['profiles']}", "--crossbars", "0:400:25",
            "--mvm-latency", "50:1000:50ns", "--workers", "1", "--no-plots", "-o", str(tmp_path)]
    total = 17 * 20
    proc = subprocess.Popen([CIMSPLIT, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "CIMSPLIT_CACHE_DIR": str(tmp_path / "cache")})
    journal = tmp_path / JOURNAL
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and len(journal.read_text().splitlines()) >= 5:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    done = sum(1 for line in journal.read_text().splitlines() if line.endswith("}"))
    assert 5 <= done < total, err.decode()
    assert main(argv) == 0
    out = capsys.readouterr().out
    match = re.search(r"swept (\d+) points .*: (\d+) solved now, (\d+) from an earlier run, 0 failed", out)
    assert match and int(match.group(1)) == total
    assert int(match.group(3)) >= done - 1  # a line torn by the kill is solved again
    assert int(match.group(2)) + int(match.group(3)) == total


def test_plots_and_table_are_valid_and_deterministic(inputs, tmp_path, capsys) -> None:
    assert main([*grid_args(inputs, tmp_path), "--workers", "1"]) == 0
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".png", ".svg")}
    assert set(first) == {f"{stem}.{ext}" for stem in ("fig3_tiny", "fig3_resnet18", "fig5_tiny", "fig5_resnet18", "fig4")
                          for ext in ("png", "svg")}
    for name, data in first.items():
        if name.endswith(".png"):
            assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
        else:
            assert ET.fromstring(data).tag.endswith("svg")
    table = (tmp_path / "table1.md").read_text()
    assert "| tiny | x86 |" in table and "| resnet18 | x86 |" in table
    # The rerun reuses every row; identical rows give identical figures.
    assert main([*grid_args(inputs, tmp_path), "--workers", "1"]) == 0
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".png", ".svg")} == first
    manifest = json.loads((tmp_path / "sweep.json").read_text())
    assert manifest["grid"]["points"] == 8 and manifest["hosts"]["x86"]["profile"] == str(inputs["profiles"])


def test_paper_flag_is_the_paper_grid() -> None:
    from cimsplit.cli import build_parser
    from cimsplit.cli.sweep_cmd import spec_from_args

    spec = spec_from_args(build_parser().parse_args(["sweep", "--paper", "-o", "out"]))
    assert spec.models == ("resnet18", "resnet50", "mobilenet_v2", "yolov5n")
    assert spec.hosts == ("x86",)
    assert spec.crossbars == (25, 50, 100, 200) and spec.mvm_latencies_ns == (50.0, 100.0, 500.0, 1000.0)
    both = spec_from_args(build_parser().parse_args(["sweep", "--paper", "--hw", "x86,arm", "--host-profile", "arm=boards", "-o", "out"]))
    assert both.hosts == ("x86", "arm") and both.host_profiles == {"arm": "boards"} and both.models == spec.models


def test_paper_models_are_int8_unless_float() -> None:
    from cimsplit.cli import build_parser
    from cimsplit.cli.sweep_cmd import spec_from_args

    def spec(*flags: str):
        return spec_from_args(build_parser().parse_args(["sweep", *flags, "-o", "out"]))

    assert spec("--paper").int8 is True  # section V: "All models are quantized to 8-bit integer precision"
    assert spec("--paper", "--float").int8 is False
    assert spec("resnet18").int8 is False and spec("resnet18", "--int8").int8 is True
