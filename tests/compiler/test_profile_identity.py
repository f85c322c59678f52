"""A host profile follows the model it was measured on, whatever its nodes are called (issue 13, item 3)."""

from __future__ import annotations

import json

import onnx
from graphs import clean_cnn, save

from cimsplit.cli import main
from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_profile import FORMAT_VERSION, HostProfile
from cimsplit.compiler.profile_cache import cache_dir

FAST = ["--crossbars", "4", "--solver", "highs", "--time-limit", "5"]


def renamed(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same architecture as another exporter would name it: every node and tensor renamed."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    keep = {vi.name for vi in (*model.graph.input, *model.graph.output)}
    rename = lambda name: name if not name or name in keep else f"exported/{name}"  # noqa: E731
    for node in model.graph.node:
        node.name = f"/model/{node.op_type}_{len(node.name)}_{node.name}"
        node.input[:] = [rename(name) for name in node.input]
        node.output[:] = [rename(name) for name in node.output]
    for init in model.graph.initializer:
        init.name = rename(init.name)
    for vi in model.graph.value_info:
        vi.name = rename(vi.name)
    return model


def test_compile_then_a_renamed_re_export_uses_the_cached_profile(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CIMSPLIT_CACHE_DIR", str(tmp_path / "cache"))
    first, second = save(clean_cnn(), tmp_path, "a.onnx"), save(renamed(clean_cnn()), tmp_path, "b.onnx")
    a, b = load(first), load(second)
    assert a.fingerprint == b.fingerprint
    assert not {node.name for node in a.model.graph.node} & {node.name for node in b.model.graph.node}
    assert main(["compile", str(first), "-o", str(tmp_path / "out-a"), *FAST]) == 0
    cached = list((cache_dir() / "profiles").iterdir())
    assert main(["compile", str(second), "-o", str(tmp_path / "out-b"), *FAST]) == 0
    assert list((cache_dir() / "profiles").iterdir()) == cached  # one profile, not measured again
    plans = [json.loads((tmp_path / out / "plan.json").read_text()) for out in ("out-a", "out-b")]
    assert plans[0]["model"]["fingerprint"] == plans[1]["model"]["fingerprint"] == a.fingerprint
    assert plans[0]["cpu_only_ns"] == plans[1]["cpu_only_ns"]  # the same latencies, under the new names


def test_a_saved_profile_serves_a_renamed_re_export_and_its_warning_reaches_plan_json(tmp_path) -> None:
    """A hand-written profile (1 ms per node) 1.5x the whole model: compile uses it and says so in plan.json."""
    first, second = save(clean_cnn(), tmp_path, "a.onnx"), save(renamed(clean_cnn()), tmp_path, "b.onnx")
    a = load(first)
    nodes = {node.name: {"op_type": node.op_type, "median_ns": 1e6, "p10_ns": 0.9e6, "p90_ns": 1.1e6,
                         "samples": 3, "index": index} for index, node in enumerate(a.model.graph.node)}
    whole_ns = 1e6 * len(nodes) / 1.5
    path = tmp_path / "host.json"
    HostProfile(format_version=FORMAT_VERSION, fingerprint=a.fingerprint, ort_version="x", cpu="hand", threads=1,
                runs=3, warmup=1, nodes=nodes,
                model_median_ns={"optimizations_off": whole_ns, "optimizations_all": whole_ns}).save(path)
    assert main(["compile", str(second), "-o", str(tmp_path / "out"), "--host-profile", str(path), *FAST]) == 0
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    warnings = [text for text in plan["warnings"] if text.startswith("host profile")]
    assert len(warnings) == 1 and "1.50x the whole model's" in warnings[0]


def test_a_profile_of_another_model_is_still_refused(tmp_path, capsys) -> None:
    other = load(save(clean_cnn(batch=2), tmp_path, "batch2.onnx"))
    path = tmp_path / "host.json"
    HostProfile(format_version=FORMAT_VERSION, fingerprint=other.fingerprint, ort_version="x", cpu="hand", threads=1,
                runs=1, warmup=0, nodes={}, model_median_ns={"optimizations_off": 1.0, "optimizations_all": 1.0}).save(path)
    model = save(clean_cnn(), tmp_path, "a.onnx")
    assert main(["compile", str(model), "-o", str(tmp_path / "out"), "--host-profile", str(path), *FAST]) == 2
    assert "this model's fingerprint is" in capsys.readouterr().err
