"""--freeze-input: an input made a constant, and the If it decides inlined (compiler/freeze.py)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from graphs import save, silero_like

from cimsplit.cli import main
from cimsplit.compiler.freeze import freeze_inputs, parse_frozen_inputs
from cimsplit.compiler.frontend import load
from cimsplit.errors import CimsplitError


def _run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_frozen_condition_inlines_the_branch_taken() -> None:
    model = silero_like()
    frozen = freeze_inputs(model, {"sr": [16000.0]})
    onnx.checker.check_model(frozen, full_check=True)
    assert [n.op_type for n in frozen.graph.node] == ["Conv", "Relu", "Conv"]  # then branch, nothing of Equal/If left
    assert [vi.name for vi in frozen.graph.input] == ["x"]
    assert [vi.name for vi in frozen.graph.output] == ["y"]
    x = np.random.default_rng(0).standard_normal((1, 2, 8, 8)).astype(np.float32)
    # not bit for bit: onnxruntime fuses Conv+Relu in the main graph, not inside a branch
    np.testing.assert_allclose(_run(frozen, {"x": x}), _run(model, {"x": x, "sr": np.array(16000, np.int64)}), atol=1e-5)
    low = freeze_inputs(model, {"sr": [8000.0]})
    assert [n.op_type for n in low.graph.node] == ["Conv"]
    np.testing.assert_allclose(_run(low, {"x": x}), _run(model, {"x": x, "sr": np.array(8000, np.int64)}), atol=1e-5)
    assert model == silero_like()  # the caller's model is not modified


def test_front_end_sees_the_network_inside(tmp_path) -> None:
    path = save(silero_like(), tmp_path)
    loaded = load(path, frozen_inputs={"sr": [16000.0]})
    # Conv 3x3 (4 out, 2 in) with its Relu fused, then Conv 1x1 (3 out): both CIM-capable
    assert [(op.op_type, len(op.nodes), op.cim_capable) for op in loaded.workload.operators] == [
        ("Conv", 2, True), ("Conv", 1, True)]
    assert [op.op_type for op in loaded.workload.operators] == ["Conv", "Conv"]
    assert [(op.m, op.n, op.n_mvm) for op in loaded.workload.operators] == [(4, 2 * 3 * 3, 64), (3, 4, 64)]
    assert loaded.input_shapes == {"x": (1, 2, 8, 8)}


def test_unfrozen_if_is_one_host_operator_with_the_shape_of_one_run(tmp_path) -> None:
    """Static inference cannot type y (the branches differ); one onnxruntime run on seeded inputs does.

    The seeded sr is 0 or small, so the run takes the 8 kHz branch: y is [1,5,8,8].
    """
    loaded = load(save(silero_like(), tmp_path))
    assert [(op.op_type, op.cim_capable) for op in loaded.workload.operators] == [("Equal", False), ("If", False)]
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in loaded.model.graph.output}
    assert shapes == {"y": [1, 5, 8, 8]}


@pytest.mark.parametrize(("specs", "frozen", "message"), [
    (["sr=16000"], None, None),
    (["sr"], None, "is not NAME=VALUE"),
    (["sr=fast"], None, "is not a number"),
    (["sr=1", "sr=2"], None, "twice"),
    (None, {"rate": [1.0]}, "has no input 'rate'"),
    (None, {"sr": [1.5]}, "not whole numbers"),
    (None, {"sr": [1.0, 2.0]}, "2 values for an input of 1 elements"),
    (None, {"x": [0.0]}, "128 elements; at most 64"),
])
def test_bad_freeze_input_is_one_clear_error(specs, frozen, message) -> None:
    if specs is not None and message is None:
        assert parse_frozen_inputs(specs) == {"sr": [16000.0]}
        return
    with pytest.raises(CimsplitError, match=message):
        freeze_inputs(silero_like(), frozen if frozen is not None else parse_frozen_inputs(specs))


def test_compile_and_run_check_with_a_frozen_input(tmp_path, capsys) -> None:
    path = save(silero_like(), tmp_path)
    out = tmp_path / "out"
    assert main(["compile", str(path), "-o", str(out), "--freeze-input", "sr=16000", "--crossbars", "10",
                 "--mvm-latency", "1ns", "--bus-bandwidth", "1000GB/s"]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["frozen_inputs"] == {"sr": [16000.0]}
    assert [p["device"] for p in plan["partitions"]] == ["cim"]
    assert [i["name"] for i in plan["model"]["inputs"]] == ["x"]
    capsys.readouterr()
    assert main(["run", str(out), "--check"]) == 0  # the original model gets sr=16000 from plan.json
    assert "check passed" in capsys.readouterr().out


def _silero_vad_onnx():
    """silero_vad.onnx from the silero-vad PyPI package when it is installed (found without importing it: torch)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"
    return path if path.is_file() else None


@pytest.mark.slow
def test_silero_vad_compiles_and_runs_with_sr_frozen(tmp_path, capsys) -> None:
    """Fair test material, not a dependency: skipped unless `pip install --no-deps silero-vad`."""
    path = _silero_vad_onnx()
    if path is None:
        pytest.skip("the silero-vad package is not installed")
    shapes = ["--input-shape", "input=1,512", "--input-shape", "state=2,1,128"]
    out = tmp_path / "out"
    assert main(["compile", str(path), "-o", str(out), *shapes, "--freeze-input", "sr=16000"]) == 0
    plan = json.loads((out / "plan.json").read_text())
    op_types = [op["op_type"] for op in plan["operators"]]
    assert "If" not in op_types  # every If decided by sr (and by the fixed shapes) is inlined
    assert op_types.count("LSTM") == 1 and op_types.count("Conv") >= 5  # the 16 kHz network, operator by operator
    capsys.readouterr()
    assert main(["run", str(out), "--check"]) == 0
    assert "check passed" in capsys.readouterr().out
    assert main(["compile", str(path), "-o", str(tmp_path / "nofreeze"), *shapes]) == 2
    assert "--freeze-input" in capsys.readouterr().err
