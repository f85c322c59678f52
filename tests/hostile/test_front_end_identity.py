"""The compiled plan accepts exactly the original model's inputs, and dead nodes never become partitions.

Both found by the hostile run (issue 13, items 2 and 3): onnxslim drops a graph
input that only dead nodes read, which made cimsplit fall back to the
unslimmed model, keep the dead nodes and write a partition with no outputs;
and an unused graph input vanished from plan.json, so `run` refused the
original model's feeds.
"""

from __future__ import annotations

import json

import _models as m
import numpy as np
import onnx
import onnxruntime as ort
from _harness import Workspace
from onnx import helper

from cimsplit.cli import main
from cimsplit.compiler.frontend import load
from cimsplit.runtime import Session


# input[1,3,4,4] -> conv: Conv -> add: Add(bias) -> (nothing reads it)      dead
# aux[1,4] -> mm: MatMul (4x4) -> relu -> y[1,4]
#          -> leaf: Sigmoid -> (nothing reads it)                            dead
def dead_branch_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["input", "cw"], ["c"], name="conv"),
        helper.make_node("Add", ["c", "cb"], ["a"], name="add"),
        helper.make_node("MatMul", ["aux", "w"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
        helper.make_node("Sigmoid", ["aux"], ["s"], name="leaf"),
    ]
    inits = [m.weight("cw", (2, 3, 3, 3)), m.weight("cb", (1, 2, 1, 1), 1), m.weight("w", (4, 4), 2)]
    return m.model_of(nodes, [m.vi("input", [1, 3, 4, 4]), m.vi("aux", [1, 4])], [m.vi("y", [1, 4])], inits)


def test_dead_nodes_are_dropped_and_every_input_is_kept(tmp_path) -> None:
    loaded = load(m.save(dead_branch_model(), tmp_path))
    assert [n.name for n in loaded.model.graph.node] == ["mm", "relu"]
    assert [vi.name for vi in loaded.model.graph.input] == ["input", "aux"]
    assert loaded.input_shapes == {"input": (1, 3, 4, 4), "aux": (1, 4)}


def test_compile_and_run_with_exactly_the_original_inputs(tmp_path, capfd) -> None:
    path = m.save(dead_branch_model(), tmp_path)
    ws = Workspace(tmp_path, capfd)
    out = ws.compiled(path, "out", "--crossbars", "4", "--mvm-latency", "1ns", "--bus-bandwidth", "1000GB/s")
    assert "onnxslim changed" not in capfd.readouterr().err
    plan = json.loads((out / "plan.json").read_text())
    assert [i["name"] for i in plan["model"]["inputs"]] == ["input", "aux"]
    assert all(p["outputs"] for p in plan["partitions"])
    assert sorted(n for p in plan["partitions"] for n in p["nodes"]) == ["mm", "relu"]

    rng = np.random.default_rng(0)
    feeds = {"input": rng.standard_normal((1, 3, 4, 4)).astype(np.float32), "aux": rng.standard_normal((1, 4)).astype(np.float32)}
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["y"], feeds)[0]
    with Session(out) as session:
        got = session.run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    partitioned = ort.InferenceSession(str(out / "partitioned.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in partitioned.get_inputs()] == ["input", "aux"]
    np.testing.assert_allclose(partitioned.run(["y"], feeds)[0], want, rtol=1e-6, atol=1e-6)
    assert main(["run", str(out), "--check"]) == 0


def test_internal_error_is_one_line_asking_for_debug(tmp_path, capfd, monkeypatch) -> None:
    import cimsplit.cli.inspect_cmd as inspect_cmd

    def broken(args):
        raise ZeroDivisionError("a bug")

    path = m.save(m.matmul(), tmp_path)
    monkeypatch.setattr(inspect_cmd, "run", broken)  # main() builds its parser anew, binding the patched run
    status = main(["inspect", str(path)])
    err = capfd.readouterr().err
    assert status == 3
    assert err.count("\n") == 1 and err.startswith("error: internal error") and "--debug" in err and "Traceback" not in err
    try:
        main(["--debug", "inspect", str(path)])
    except ZeroDivisionError:
        pass
    else:  # pragma: no cover
        raise AssertionError("--debug must let the exception through")
