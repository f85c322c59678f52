"""`cimsplit compile` then `cimsplit run`, through the real front end, profiler and solver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import cimsplit.passes.emit.artifacts as emit
from cimsplit.cli import main
from cimsplit.cli.run_cmd import random_inputs
from cimsplit.runtime import Session

CIMSPLIT = str(Path(sys.executable).with_name("cimsplit"))
# A CIM so fast and a bus so wide that every CIM-capable operator belongs on it.
FAST_CIM = ["--crossbars", "1000", "--mvm-latency", "1ns", "--bus-bandwidth", "1000GB/s"]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CIMSPLIT_CACHE_DIR", str(tmp_path / "cache"))


def tiny_cnn(folder: Path, seed: int = 0) -> Path:
    """x[1,3,8,8] -> conv1: Conv 3x3 (4) -> relu1 -> pool: MaxPool 2x2 -> conv2: Conv 3x3 (4) -> relu2
         -> gap: GlobalAveragePool -> flat: Flatten -> fc: Gemm (10 x 4) -> y[1,10]

    Conv and Gemm are CIM-capable; MaxPool, GlobalAveragePool and Flatten stay on the host.
    """
    rng = np.random.default_rng(seed)
    w = {name: numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)
         for name, shape in {"w1": (4, 3, 3, 3), "w2": (4, 4, 3, 3), "fw": (10, 4), "fb": (10,)}.items()}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializer=list(w.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path = folder / "tiny.onnx"
    onnx.save(model, path)
    return path


def _devices(out: Path) -> dict[str, str]:
    annotated = onnx.load(out / "annotated.onnx")
    return {n.name: {p.key: p.value for p in n.metadata_props}["cimsplit.device"] for n in annotated.graph.node}


def test_compile_all_cim_capable_on_cim_then_run_check(tmp_path, capsys) -> None:
    model = tiny_cnn(tmp_path)
    out = tmp_path / "out"
    assert main(["compile", str(model), "-o", str(out), *FAST_CIM]) == 0
    printed = capsys.readouterr().out
    assert "partitions: 5 (2 host, 3 cim)" in printed
    devices = _devices(out)
    assert {n for n, d in devices.items() if d == "cim"} == {"conv1", "relu1", "conv2", "relu2", "fc"}
    plan = json.loads((out / "plan.json").read_text())
    assert [(p["name"], p["nodes"]) for p in plan["partitions"]] == [
        ("cim_0", ["conv1", "relu1"]), ("host_0", ["pool"]), ("cim_1", ["conv2", "relu2"]), ("host_1", ["gap", "flat"]),
        ("cim_2", ["fc"]),
    ]
    for file in out.glob("*.onnx"):
        onnx.checker.check_model(onnx.load(file), full_check=True)

    npz = tmp_path / "y.npz"
    assert main(["run", str(out), "--check", "--save-outputs", str(npz), "--repeat", "2", "--stream", "3"]) == 0
    printed = capsys.readouterr().out
    assert "check passed" in printed and "modeled timeline: makespan" in printed
    assert "measured: 2 inferences" in printed and "streamed: 3 inferences pipelined" in printed
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)  # --seed 0, as the run drew it
    ref = ort.InferenceSession(str(model)).run(None, {"x": x})[0]
    with np.load(npz) as saved:
        assert list(saved) == ["y"]
        np.testing.assert_allclose(saved["y"], ref, rtol=1e-3, atol=1e-4)
    partitioned = ort.InferenceSession(str(out / "partitioned.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(partitioned, ref, rtol=1e-5, atol=1e-6)


def test_a_graph_output_onnx_graphsurgeon_wrote_without_a_shape_compiles_and_runs(tmp_path, capsys) -> None:
    """onnx-graphsurgeon's own examples declare an output as ``gs.Variable("Y", dtype=np.float32)``: exported with a
    type but no shape, which onnxruntime runs and onnx's checker refuses.  It takes the shape onnx infers."""
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(onnx.load(tiny_cnn(tmp_path)))
    probs = gs.Variable("probs", dtype=np.float32)
    graph.nodes.append(gs.Node("Softmax", name="softmax", attrs={"axis": 1}, inputs=[graph.outputs[0]], outputs=[probs]))
    graph.outputs = [probs]
    model = gs.export_onnx(graph)
    assert not model.graph.output[0].type.tensor_type.HasField("shape")
    path = tmp_path / "gs.onnx"
    onnx.save(model, path)
    out = tmp_path / "out"
    assert main(["compile", str(path), "-o", str(out), *FAST_CIM]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--check"]) == 0
    assert "check passed" in capsys.readouterr().out
    shape = onnx.load(out / "partitioned.onnx").graph.output[0].type.tensor_type.shape
    assert [d.dim_value for d in shape.dim] == [1, 10]  # (inferred: the Gemm's 1 x 10 through the Softmax)


def test_an_output_whose_shape_onnx_cannot_infer_is_measured(tmp_path, capsys) -> None:
    """A GroupNormalization (opset 21) output declared without a shape: onnx's inference gives it none, the checker
    refused it; onnxruntime runs it, and the front end measures the shape it cannot infer."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
             for name, shape in (("w", (8, 4, 3, 3)), ("s", (8,)), ("b", (8,)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("GroupNormalization", ["c", "s", "b"], ["y"], name="norm", num_groups=2)]
    graph = helper.make_graph(nodes, "gn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path, out = tmp_path / "gn.onnx", tmp_path / "out"
    onnx.save(model, path)
    assert main(["compile", str(path), "-o", str(out), *FAST_CIM]) == 0
    assert main(["run", str(out), "--check"]) == 0
    assert "check passed" in capsys.readouterr().out
    shape = onnx.load(out / "partitioned.onnx").graph.output[0].type.tensor_type.shape
    assert [d.dim_value for d in shape.dim] == [1, 8, 8, 8]


def _nodes_reversed(model: onnx.ModelProto) -> None:
    model.graph.node.reverse()  # (onnx-graphsurgeon writes nodes appended out of order unless toposort() is called)


def _stale_value_info(model: onnx.ModelProto) -> None:
    model.graph.value_info.append(helper.make_tensor_value_info("c1", TensorProto.FLOAT, [1, 4, 5, 5]))  # conv1 makes 1x4x8x8


def _bias_as_output(model: onnx.ModelProto) -> None:
    model.graph.output.append(helper.make_tensor_value_info("fb", TensorProto.FLOAT, [10]))  # an initializer, read by fc


def _constant_node_as_output(model: onnx.ModelProto) -> None:
    bias = next(t for t in model.graph.initializer if t.name == "fb")
    model.graph.initializer.remove(bias)
    model.graph.node.insert(0, helper.make_node("Constant", [], ["fb"], name="bias", value=bias))  # (folded by onnxslim)
    _bias_as_output(model)


@pytest.mark.parametrize("edit", [_nodes_reversed, _stale_value_info, _bias_as_output, _constant_node_as_output])
def test_models_onnxruntime_runs_and_onnx_checker_refuses_compile_and_run(tmp_path, capsys, edit) -> None:
    """Before, the first two were "not a valid ONNX model" and the last two compiled but their run failed with an
    internal error: the plan had nothing to return for a constant graph output."""
    model = onnx.load(tiny_cnn(tmp_path))
    edit(model)
    path = tmp_path / "edited.onnx"
    onnx.save(model, path)
    out, npz = tmp_path / "out", tmp_path / "y.npz"
    assert main(["compile", str(path), "-o", str(out), *FAST_CIM]) == 0
    assert main(["run", str(out), "--check", "--save-outputs", str(npz)]) == 0
    assert "check passed" in capsys.readouterr().out
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)  # --seed 0, as the run drew it
    session = ort.InferenceSession(str(path))
    with np.load(npz) as saved:
        assert list(saved) == [o.name for o in session.get_outputs()]
        for name, ref in zip(saved, session.run(None, {"x": x})):
            np.testing.assert_allclose(saved[name], ref, rtol=1e-3, atol=1e-4)
        if "fb" in saved:  # the constant itself, exactly
            assert np.array_equal(saved["fb"], numpy_helper.to_array(next(t for t in onnx.load(tiny_cnn(tmp_path)).graph.initializer
                                                                            if t.name == "fb")))


def test_no_crossbars_puts_everything_in_one_host_partition(tmp_path, capsys) -> None:
    model = tiny_cnn(tmp_path)
    out = tmp_path / "out"
    assert main(["compile", str(model), "-o", str(out), "--crossbars", "0"]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert [p["name"] for p in plan["partitions"]] == ["host_0"]
    assert plan["transfers"] == []
    assert set(_devices(out).values()) == {"host"}
    assert main(["run", str(out), "--check"]) == 0
    assert "transfers counted: 0 copies" in capsys.readouterr().out


def test_existing_directory_needs_force_and_failed_write_leaves_nothing(tmp_path, capsys, monkeypatch) -> None:
    model = tiny_cnn(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    assert main(["compile", str(model), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not empty" in err and "--force" in err

    def broken(path, trace):
        raise OSError("injected failure in the last write")

    monkeypatch.setattr(emit, "write_trace", broken)
    assert main(["compile", str(model), "-o", str(tmp_path / "fresh")]) == 2  # an I/O failure is one line too
    assert main(["compile", str(model), "-o", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and err.count("injected failure") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "out", "tiny.onnx"]
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    monkeypatch.undo()
    assert main(["compile", str(model), "-o", str(out), "--force"]) == 0
    assert not (out / "old.txt").exists() and (out / "plan.json").is_file()
    assert main(["compile", str(model), "-o", str(tmp_path), "--force"]) == 2  # would delete the model
    assert model.is_file()


def test_run_refuses_bad_input_with_one_line(tmp_path, capsys) -> None:
    model = tiny_cnn(tmp_path)
    out = tmp_path / "out"
    assert main(["compile", str(model), "-o", str(out), *FAST_CIM]) == 0
    capsys.readouterr()
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros((1, 3, 4, 4), np.float32))
    cases = [
        (["run", str(tmp_path / "absent")], "no such directory"),
        (["run", str(tmp_path)], "not a cimsplit compile directory"),
        (["run", str(out), "--input", "x"], "bad --input"),
        (["run", str(out), "--input", f"x={tmp_path / 'none.npy'}"], "cannot read"),
        (["run", str(out), "--input", f"x={wrong}"], "shape [1, 3, 4, 4]"),
        (["run", str(out), "--input", f"z={wrong}"], "unknown ['z']"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (argv, err)
    model.rename(tmp_path / "moved.onnx")
    assert main(["run", str(out), "--check"]) == 2
    assert "is gone" in capsys.readouterr().err


def test_check_fails_with_status_1_when_outputs_differ(tmp_path, capsys) -> None:
    model = tiny_cnn(tmp_path)
    out = tmp_path / "out"
    assert main(["compile", str(model), "-o", str(out), *FAST_CIM]) == 0
    tiny_cnn(tmp_path, seed=1)  # same path and interface, other weights
    assert main(["run", str(out), "--check"]) == 1
    assert "MISMATCH" in capsys.readouterr().out


def test_given_inputs_are_used(tmp_path, capsys) -> None:
    model = tiny_cnn(tmp_path)
    out = tmp_path / "out"
    assert main(["compile", str(model), "-o", str(out), *FAST_CIM]) == 0
    x = np.full((1, 3, 8, 8), 0.5, np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(out), "--input", f"x={tmp_path / 'x.npy'}", "--save-outputs", str(tmp_path / "y.npz")]) == 0
    assert "(given)" in capsys.readouterr().out
    ref = ort.InferenceSession(str(model)).run(None, {"x": x})[0]
    with np.load(tmp_path / "y.npz") as saved:
        np.testing.assert_allclose(saved["y"], ref, rtol=1e-3, atol=1e-4)


def test_subprocess_compile_and_run(tmp_path) -> None:
    model = tiny_cnn(tmp_path)
    env = {**os.environ, "CIMSPLIT_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([CIMSPLIT, "compile", str(model), "-o", str(tmp_path / "out"), *FAST_CIM],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "files: annotated.onnx" in done.stdout
    done = subprocess.run([CIMSPLIT, "run", str(tmp_path / "out"), "--check"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "check passed" in done.stdout
    done = subprocess.run([CIMSPLIT, "run", str(tmp_path / "missing")], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_same_inputs_give_the_same_files(tmp_path) -> None:
    model = tiny_cnn(tmp_path)
    profile = tmp_path / "profile.json"
    assert main(["profile", str(model), "-o", str(profile), "--runs", "3", "--warmup", "1"]) == 0
    for name in ("one", "two"):
        assert main(["compile", str(model), "-o", str(tmp_path / name), "--host-profile", str(profile), *FAST_CIM]) == 0
    for file in (tmp_path / "one").iterdir():
        if file.name == "plan.json":  # the solver's wall time is the one figure that may differ
            one, two = (json.loads((tmp_path / d / "plan.json").read_text()) for d in ("one", "two"))
            one["solver"].pop("time_s"), two["solver"].pop("time_s")
            assert one == two
        else:
            assert file.read_bytes() == (tmp_path / "two" / file.name).read_bytes(), file.name


def _table_profile(model: Path, folder: Path, perturb_seed: int | None = None) -> str:
    """A deterministic host profile of ``model`` saved in ``folder`` (no measurement: CI's profile is not ours)."""
    from _profiles import table_profile

    from cimsplit.compiler.frontend import load

    path = folder / f"host_{perturb_seed}.json"
    table_profile(load(model), perturb_seed).save(path)
    return str(path)


@pytest.mark.parametrize("name,int8", [("resnet18", False), ("mobilenet_v2", False), ("resnet18", True), ("yolov5n", False)])
def test_zoo_model_at_small_image_size_compiles_and_runs_equal(tmp_path, capsys, name, int8) -> None:
    model = tmp_path / f"{name}.onnx"
    argv = ["zoo", name, "-o", str(model), "--image-size", "32"] + (["--int8"] if int8 else [])
    assert main(argv) == 0
    out = tmp_path / "out"
    # A short time limit: the incumbent is enough here.
    assert main(["compile", str(model), "-o", str(out), "--crossbars", "100", "--mvm-latency", "50ns",
                 "--time-limit", "5", "--host-profile", _table_profile(model, tmp_path)]) == 0
    assert main(["run", str(out), "--check"]) == 0
    printed = capsys.readouterr().out
    assert "check passed" in printed and ("bit-identical" in printed) == int8


def test_int8_model_runs_bit_identical_under_two_perturbed_profiles(tmp_path, capsys) -> None:
    """Whatever the host profile places where, the split int8 model equals the original bit for bit
    and copies exactly the bytes the plan charges."""
    model = tmp_path / "resnet18.onnx"
    assert main(["zoo", "resnet18", "-o", str(model), "--image-size", "32", "--int8"]) == 0
    for seed in (1, 2):
        out = tmp_path / f"out{seed}"
        assert main(["compile", str(model), "-o", str(out), "--crossbars", "50", "--time-limit", "5",
                     "--host-profile", _table_profile(model, tmp_path, seed)]) == 0
        assert main(["run", str(out), "--check"]) == 0
        assert "check passed" in capsys.readouterr().out
        plan = json.loads((out / "plan.json").read_text())
        with Session(out) as session:
            session.run(random_inputs(session.input_specs, 0, {}))
            stats = session.transfer_stats
        assert stats.bytes == stats.modeled_bytes == sum(t["bytes"] for t in plan["transfers"]) > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v2", "yolov5n"])
def test_zoo_model_at_full_size_compiles_and_runs_equal(tmp_path, capsys, name) -> None:
    model = tmp_path / f"{name}.onnx"
    assert main(["zoo", name, "-o", str(model)]) == 0
    out = tmp_path / "out"
    assert main(["compile", str(model), "-o", str(out), "--crossbars", "100", "--mvm-latency", "50ns",
                 "--time-limit", "30"]) == 0
    assert main(["run", str(out), "--check"]) == 0
    assert "check passed" in capsys.readouterr().out
    plan = json.loads((out / "plan.json").read_text())
    with Session(out) as session:
        assert session.timeline.makespan_ns == plan["makespan_ns"]
    assert len(plan["partitions"]) >= 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_an_int8_zoo_models_throughput_plan_streams_bit_for_bit(tmp_path, capsys, name) -> None:
    """The stream executor cuts host partitions into pieces at the modulo schedule's interleavings; the pieces
    must run the partitions' int8 kernels (when a float tensor or an unconverted pair crossed between them, ResNet-18
    int8's stream differed from one frame)."""
    model = tmp_path / f"{name}.onnx"
    assert main(["zoo", name, "--int8", "--image-size", "64", "-o", str(model)]) == 0
    out = tmp_path / "out"
    assert main(["compile", str(model), "-o", str(out), "--objective", "throughput", "--time-limit", "20"]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--cim-timing", "modeled", "--stream", "12"]) == 0
    assert "stream outputs equal the single-frame outputs frame by frame: yes" in capsys.readouterr().out


@pytest.mark.slow
def test_yolov5n_at_25_crossbars_is_proven_optimal_and_compiles_the_same_twice(tmp_path) -> None:
    # The whole-graph CP-SAT model does not prove this point in its slice; the bottleneck
    # segments do, deterministically, so the two plans agree but for the solver's wall time.
    # (Whole operators: with slicing the sliced segments stop near a 0.02 % gap at 60 s.)
    model = tmp_path / "yolov5n.onnx"
    assert main(["zoo", "yolov5n", "-o", str(model)]) == 0
    for name in ("one", "two"):
        assert main(["compile", str(model), "-o", str(tmp_path / name), "--crossbars", "25", "--mvm-latency", "50ns",
                     "--time-limit", "60", "--slicing", "off"]) == 0
    one, two = (json.loads((tmp_path / d / "plan.json").read_text()) for d in ("one", "two"))
    assert one["solver"]["status"] == "optimal"
    assert "bottleneck segments" in one["solver"]["reason"]
    one["solver"].pop("time_s"), two["solver"].pop("time_s")
    assert one == two


def test_quantized_models_are_checked_bit_for_bit(tmp_path) -> None:
    """x -> q: QuantizeLinear(0.5, 0) -> dq: DequantizeLinear(0.5, 0) -> yq ;  x -> r: Relu -> yf

    The model holds Q/DQ nodes, so --check wants the output a DequantizeLinear writes (yq) bit-identical: one
    step (0.5) off fails, and so does the smallest float difference where it is asked; the Relu's float output
    (yf), like a float model's, is allowed atol 1e-4, rtol 1e-3.
    """
    from cimsplit.cli.run_cmd import compare, exact_outputs, is_quantized

    scale = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.int8), "z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["yq"], name="dq"),
             helper.make_node("Relu", ["x"], ["yf"], name="r")]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("yq", TensorProto.FLOAT, [4]),
                               helper.make_tensor_value_info("yf", TensorProto.FLOAT, [4])], initializer=[scale, zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "qdq.onnx")
    assert is_quantized(str(tmp_path / "qdq.onnx")) and not is_quantized(tiny_cnn(tmp_path))
    assert exact_outputs(str(tmp_path / "qdq.onnx")) == {"yq"} and exact_outputs(tiny_cnn(tmp_path)) == set()
    # Dynamic quantization hands float tensors between operators: checked within the float tolerance.
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(tiny_cnn(tmp_path), tmp_path / "dynamic.onnx", weight_type=QuantType.QInt8)
    dynamic = {n.op_type for n in onnx.load(tmp_path / "dynamic.onnx").graph.node}
    assert {"DynamicQuantizeLinear", "ConvInteger"} <= dynamic and not is_quantized(str(tmp_path / "dynamic.onnx"))
    ref = {"yq": np.array([0.0, 0.5, 1.0, 1.5], np.float32), "yf": np.array([0.0, 0.5, 1.0, 1.5], np.float32)}
    same = {k: v.copy() for k, v in ref.items()}
    one_step = {"yq": ref["yq"] + np.array([0, 0.5, 0, 0], np.float32), "yf": ref["yf"]}
    one_ulp = {"yq": ref["yq"], "yf": np.nextafter(ref["yf"], np.float32(2))}
    both = {"yq", "yf"}
    assert [row[3] for row in compare(same, ref, exact=both)] == [True, True]
    assert [row[3] for row in compare(one_step, ref, exact=both)] == [False, True]
    assert [row[3] for row in compare(one_ulp, ref, exact=both)] == [True, False]
    assert [row[3] for row in compare(one_ulp, ref, exact={"yq"})] == [True, True]  # float: within 1e-4
    assert [row[3] for row in compare(one_step, ref)] == [False, True]  # 0.5 is beyond any tolerance
    # max abs diff 0.5 on yq; relative to 0.5 at that element: 1.0
    assert compare(one_step, ref, exact=both)[0][1:3] == (0.5, 1.0)


def test_check_runs_the_original_at_the_shapes_it_was_compiled_for(tmp_path, capsys) -> None:
    """x[batch,16,6,6] -> Q/DQ (0.05, 0) -> Conv (DQ of int8 weights, 16 -> 8, 3x3) -> If(Shape(c)[0] == 1)
    { then: Identity(c), else: Relu(c) } -> Q/DQ (0.1, 0) -> y, compiled with --input-shape x=1,2,4,4.

    onnxruntime runs a float Conv for the model as written (the If, undecided while the batch is symbolic,
    stands between the Conv and its Q) and a QLinearConv once the batch is 1 (it folds the If): here one
    quantization step (0.003) apart.  ``run --check`` compares with the second, the model the split was compiled for."""
    from graphs import kernels

    rng = np.random.default_rng(3)
    constants = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in
                 (("s", 0.05, np.float32), ("z", 0, np.int8), ("so", 0.003, np.float32), ("ws", 0.002, np.float32),
                  ("wz", 0, np.int8), ("zero", 0, np.int64), ("one", 1, np.int64))]
    constants.append(numpy_helper.from_array(rng.integers(-100, 100, (8, 16, 3, 3)).astype(np.int8), "wq"))

    def branch(op: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["c"], [f"{op}_out"], name=op)], op, [],
                                 [helper.make_tensor_value_info(f"{op}_out", TensorProto.FLOAT, None)])

    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dqx"),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], name="dqw"),
             helper.make_node("Conv", ["xd", "w"], ["c"], name="conv"),
             helper.make_node("Shape", ["c"], ["shape"], name="shape"),
             helper.make_node("Gather", ["shape", "zero"], ["batch"], name="gather", axis=0),
             helper.make_node("Equal", ["batch", "one"], ["cond"], name="equal"),
             helper.make_node("If", ["cond"], ["t"], name="if", then_branch=branch("Identity"), else_branch=branch("Relu")),
             helper.make_node("QuantizeLinear", ["t", "so", "z"], ["tq"], name="qt"),
             helper.make_node("DequantizeLinear", ["tq", "so", "z"], ["y"], name="dqt")]
    graph = helper.make_graph(nodes, "dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, 4, 4])], initializer=constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "dynamic.onnx"
    onnx.save(model, path)
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    fixed.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    assert kernels(model)["Conv"] == 1 and kernels(fixed)["QLinearConv"] == 1
    x = np.random.default_rng(0).standard_normal((1, 16, 6, 6)).astype(np.float32)  # --seed 0, as the run draws it
    as_written, at_batch_1 = (ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0] for m in (model, fixed))
    assert not np.array_equal(as_written, at_batch_1)

    out = tmp_path / "out"
    assert main(["compile", str(path), "-o", str(out), "--input-shape", "x=1,16,6,6", *FAST_CIM]) == 0
    npz = tmp_path / "y.npz"
    assert main(["run", str(out), "--check", "--save-outputs", str(npz)]) == 0
    assert "y: max abs diff 0, max rel diff 0 OK" in capsys.readouterr().out
    with np.load(npz) as saved:
        np.testing.assert_array_equal(saved["y"], at_batch_1)
