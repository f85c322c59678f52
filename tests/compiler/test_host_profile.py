"""Host profiler: ORT's own profiler per node, whole-model medians, JSON files, the cache."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cimsplit.compiler.host_profile import (
    FORMAT_VERSION,
    PROFILED_HERE,
    HostProfile,
    check_fingerprint,
    operator_latencies,
    profile_onnx,
)
from cimsplit.compiler.ort_profiler import random_inputs, turns
from cimsplit.compiler.profile_cache import cache_dir, cached_profile
from cimsplit.compiler.workload import Operator, Workload
from cimsplit.errors import CimsplitError

RUNS, WARMUP = 5, 2


def tiny_model() -> onnx.ModelProto:
    """
        x[1,3,8,8]
           |
         conv (4 ch, 3x3, pad 1)   k = Constant 2.0
           |                        |
         relu ------------------- mul
                                    |
                                 flatten -> matmul (256x10) -> y[1,10]
    """
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((256, 10)).astype(np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Constant", [], ["k"], name="k", value=numpy_helper.from_array(np.array(2.0, np.float32))),
        helper.make_node("Mul", ["r", "k"], ["m"], name="mul"),
        helper.make_node("Flatten", ["m"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc"], ["y"], name="matmul"),
    ]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [w, fc],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


@dataclass(frozen=True)
class Loaded:
    """The fields of the front end's LoadedModel that profiling reads."""

    model: onnx.ModelProto
    fingerprint: str
    input_shapes: dict


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> HostProfile:
    """Optimizations off: ORT's kernels are the nodes one to one."""
    return profile_onnx(tiny_model(), fingerprint="fp-tiny", runs=RUNS, warmup=WARMUP, progress=False, level="off")


def test_every_node_gets_a_latency_with_ordered_percentiles(profile):
    assert profile.level == "off"
    assert set(profile.nodes) == {"conv", "relu", "k", "mul", "flatten", "matmul"}
    for name in ("conv", "relu", "mul", "flatten", "matmul"):
        stats = profile.nodes[name]
        assert stats["samples"] == RUNS  # only the recorded runs, warm-up dropped
        assert 0 <= stats["p10_ns"] <= stats["median_ns"] <= stats["p90_ns"]
        assert stats["median_ns"] % 1000 == 0  # ORT reports whole us; the median of 5 runs is one of them
    assert profile.nodes["conv"]["op_type"] == "Conv"
    # ORT turns Constant into an initializer: never reported, counted 0.
    assert profile.nodes["k"] == {"op_type": "Constant", "median_ns": 0.0, "p10_ns": 0.0, "p90_ns": 0.0, "samples": 0,
                                  "index": 2}
    assert [profile.nodes[node.name]["index"] for node in tiny_model().graph.node] == list(range(6))
    assert len(profile.load_average_before) == 3 and len(profile.load_average_after) == 3
    assert profile.model_median_ns["optimizations_off"] > 0 and profile.model_median_ns["optimizations_all"] > 0
    assert (profile.fingerprint, profile.threads, profile.runs, profile.warmup) == ("fp-tiny", 1, RUNS, WARMUP)
    assert profile.format_version == FORMAT_VERSION and profile.source == PROFILED_HERE


def test_all_optimizations_charge_the_fused_kernels_to_the_nodes():
    """At level all ORT fuses conv + relu; their kernel time is split between them, the Constant still costs 0."""
    profile = profile_onnx(tiny_model(), fingerprint="fp", runs=RUNS, warmup=WARMUP, progress=False)
    assert profile.level == "all" and set(profile.nodes) == {"conv", "relu", "k", "mul", "flatten", "matmul"}
    assert profile.nodes["k"]["median_ns"] == 0.0
    assert profile.nodes["conv"]["median_ns"] + profile.nodes["relu"]["median_ns"] > 0
    for stats in profile.nodes.values():
        assert 0 <= stats["p10_ns"] <= stats["median_ns"] <= stats["p90_ns"] and stats["samples"] <= RUNS
    assert profile.sum_over_model == profile.sum_of_medians_ns / profile.model_median_ns["optimizations_all"]


def test_an_uncharged_kernel_costs_its_node_nothing():
    """Level off runs every node as its own kernel: uncharging ``mul``'s leaves it 0 in every run, the others not."""
    profile = profile_onnx(tiny_model(), fingerprint="fp", runs=RUNS, warmup=WARMUP, progress=False, level="off",
                           uncharged=frozenset({"mul"}))
    assert (profile.nodes["mul"]["median_ns"], profile.nodes["mul"]["samples"]) == (0.0, 0)
    assert all(profile.nodes[name]["samples"] == RUNS for name in ("conv", "relu", "flatten", "matmul"))


@pytest.mark.parametrize("level", ["off", "all"])
def test_a_function_onnxruntime_inlines_is_charged_its_bodys_kernels(level: str) -> None:
    """onnxruntime runs HardSwish as its function body (HardSigmoid, Mul), saved without names in its optimized graph;
    the profiler names those kernels ``<OpType>_<node index>``.  Their time is the HardSwish's (it was 0), in every run."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 32, 32])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("HardSwish", ["r"], ["y"], name="swish")]
    model = helper.make_model(helper.make_graph(nodes, "swish", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    profile = profile_onnx(model, fingerprint="fp", runs=RUNS, warmup=WARMUP, progress=False, level=level)
    assert profile.nodes["swish"]["samples"] == RUNS and profile.nodes["swish"]["median_ns"] > 0


def test_unnamed_kernels_take_the_profilers_names_in_trace_order_where_the_counts_agree() -> None:
    from cimsplit.compiler.ort_profiler import UNNAMED, _name_as_traced

    graph = helper.make_graph([helper.make_node("HardSigmoid", ["a"], ["b"], name=f"{UNNAMED}0"),
                               helper.make_node("Mul", ["a", "b"], ["c"], name=f"{UNNAMED}1"),
                               helper.make_node("HardSigmoid", ["c"], ["d"], name=f"{UNNAMED}2"),
                               helper.make_node("Relu", ["d"], ["e"], name="relu")], "g", [], [])
    events = [{"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "args": {"op_name": op}}
              for name, op, ts in [("HardSigmoid_9", "HardSigmoid", 30), ("HardSigmoid_4", "HardSigmoid", 10),
                                   ("HardSigmoid_9", "HardSigmoid", 130), ("relu", "Relu", 40), ("Mul_5", "Mul", 20),
                                   ("Mul_7", "Mul", 25)]]
    model = helper.make_model(graph)
    _name_as_traced(model, events)
    # HardSigmoids in the order they first ran; two Mul kernels traced for one unnamed Mul: left as it was
    assert [node.name for node in model.graph.node] == ["HardSigmoid_4", f"{UNNAMED}1", "HardSigmoid_9", "relu"]


def test_sessions_take_turns_of_several_runs_each_after_one_that_fills_the_caches_again():
    assert turns(warmup=2, runs=12, per_turn=5) == [(2, 5), (1, 5), (1, 2)]
    assert turns(warmup=0, runs=5, per_turn=5) == [(0, 5)]
    assert turns(warmup=3, runs=1, per_turn=5) == [(3, 1)]
    # Two turns: 1 + 5 and 1 + 2 runs of each session, the re-warming run of the second turn not recorded either.
    profile = profile_onnx(tiny_model(), fingerprint="fp-tiny", runs=7, warmup=1, progress=False, level="off")
    assert {profile.nodes[name]["samples"] for name in ("conv", "relu", "mul", "flatten", "matmul")} == {7}


def test_profiler_removes_its_trace_files(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    profile_onnx(tiny_model(), fingerprint="fp", runs=1, warmup=0, progress=False)
    assert list(scratch.iterdir()) == []
    assert not any(name.startswith("ort_") and name.endswith(".json") for name in os.listdir("."))


def test_save_is_deterministic_and_load_round_trips(profile, tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    profile.save(first)
    profile.save(second)
    assert first.read_bytes() == second.read_bytes()
    text = first.read_text()
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"
    loaded = HostProfile.load(first)
    assert loaded == profile and loaded.source == str(first)
    assert (oct(first.stat().st_mode & 0o777)) == oct(0o644)


def test_the_sum_of_medians_does_not_depend_on_the_nodes_order(profile):
    """Saved with sorted keys, a profile comes back in another order; 0.1 + 0.2 + 0.3 summed left to right
    gives 0.6000000000000001 one way and 0.6 the other, so the sum must not be a left-to-right one."""
    medians = {"a": 0.1, "b": 0.2, "c": 0.3}
    forward = {name: {"median_ns": v, "p10_ns": v, "p90_ns": v} for name, v in medians.items()}
    backward = dict(reversed(list(forward.items())))
    sums = {replace(profile, nodes=nodes).sum_of_medians_ns for nodes in (forward, backward)}
    assert sums == {0.6}


def test_bad_profile_files_are_refused(profile, tmp_path):
    path = tmp_path / "p.json"
    path.write_text("conv 12us\n")
    with pytest.raises(CimsplitError, match="is not JSON"):
        HostProfile.load(path)
    data = profile.to_dict()
    del data["nodes"]
    path.write_text(json.dumps(data))
    with pytest.raises(CimsplitError, match="lacks nodes"):
        HostProfile.load(path)
    path.write_text(json.dumps({**profile.to_dict(), "format_version": 99}))
    with pytest.raises(CimsplitError, match="format version 99"):
        HostProfile.load(path)
    path.write_text(json.dumps({**profile.to_dict(), "nodes": {"conv": {"median_ns": "fast"}}}))
    with pytest.raises(CimsplitError, match="node 'conv' lacks numeric"):
        HostProfile.load(path)
    with pytest.raises(CimsplitError, match="does not exist"):
        HostProfile.load(tmp_path / "missing.json")


def _op(name: str, nodes: tuple[str, ...]) -> Operator:
    return Operator(name=name, op_type="X", nodes=nodes, cim_capable=False, reason="test", m=None, n=None,
                    n_mvm=None, crossbars=None, n_in=1, n_out=1)


def test_operator_latency_sums_its_nodes(profile):
    workload = Workload(operators=(_op("conv", ("conv", "relu")), _op("mul", ("k", "mul")), _op("mm", ("flatten", "matmul"))), edges=())
    latencies = operator_latencies(workload, profile)
    median = {name: stats["median_ns"] for name, stats in profile.nodes.items()}
    assert latencies == {
        "conv": median["conv"] + median["relu"],  # the fused activation adds to its producer
        "mul": 0.0 + median["mul"],  # the Constant counts 0
        "mm": median["flatten"] + median["matmul"],
    }


def test_a_node_missing_from_the_profile_is_named(profile):
    workload = Workload(operators=(_op("gemm", ("gemm_node",)),), edges=())
    with pytest.raises(CimsplitError, match="no latency for node 'gemm_node' of operator 'gemm'"):
        operator_latencies(workload, profile)


def test_profile_of_another_model_names_both_fingerprints(profile):
    check_fingerprint(profile, "fp-tiny")
    with pytest.raises(CimsplitError, match="fingerprint fp-tiny.*fingerprint is fp-other"):
        check_fingerprint(profile, "fp-other")


def test_bad_run_counts_are_refused():
    with pytest.raises(CimsplitError, match="runs must be at least 1"):
        profile_onnx(tiny_model(), fingerprint="fp", runs=0, progress=False)
    with pytest.raises(CimsplitError, match="warm-up runs must be zero or more"):
        profile_onnx(tiny_model(), fingerprint="fp", warmup=-1, progress=False)


def test_unnamed_nodes_are_refused():
    model = tiny_model()
    model.graph.node[1].name = ""
    with pytest.raises(CimsplitError, match="unique, non-empty name"):
        profile_onnx(model, fingerprint="fp", progress=False)


def test_random_inputs_are_seeded_and_match_dtypes():
    graph = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["o"], name="cast", to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, ["n", 4]), helper.make_tensor_value_info("f", TensorProto.FLOAT16, [2])],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, ["n", 4])],
    )
    model = helper.make_model(graph)
    feeds = random_inputs(model, {"i": (3, 4)}, seed=1)
    assert feeds["i"].dtype == np.int64 and feeds["i"].shape == (3, 4) and set(np.unique(feeds["i"])) <= {0, 1, 2}
    assert feeds["f"].dtype == np.float16 and feeds["f"].shape == (2,)
    again = random_inputs(model, {"i": (3, 4)}, seed=1)
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)
    with pytest.raises(CimsplitError, match="--input-shape i=D0,D1"):
        random_inputs(model, {}, seed=1)
    given = np.ones(2, np.float16)
    fed = random_inputs(model, {"i": (3, 4)}, seed=1, given={"f": given})
    assert fed["f"] is given and np.array_equal(fed["i"], feeds["i"])  # a given input is fed as it is, unknown dims or not
    assert random_inputs(model, {}, seed=1, given={"i": feeds["i"], "f": given})["i"] is feeds["i"]


def test_cache_profiles_once_per_model(tmp_path, monkeypatch):
    monkeypatch.setenv("CIMSPLIT_CACHE_DIR", str(tmp_path / "cache"))
    assert cache_dir() == tmp_path / "cache"
    loaded = Loaded(model=tiny_model(), fingerprint="fp-cache", input_shapes={})
    first = cached_profile(loaded)
    files = list((tmp_path / "cache" / "profiles").iterdir())
    assert [Path(first.cache_file)] == files and first.source == PROFILED_HERE
    stamp = files[0].stat().st_mtime_ns
    second = cached_profile(loaded)
    assert second == first and files[0].stat().st_mtime_ns == stamp  # read back, not measured again
    # Another thread count is another profile.
    third = cached_profile(loaded, threads=2)
    assert third.threads == 2 and len(list((tmp_path / "cache" / "profiles").iterdir())) == 2
    # A corrupt cache entry is measured again, not an error.
    files[0].write_text("{")
    assert cached_profile(replace(loaded)).fingerprint == "fp-cache"


def test_cache_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("CIMSPLIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "cimsplit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "cimsplit"


def test_onnxruntime_failures_become_one_clear_error():
    """x[n,4] @ w[4,2], fed a (2,3) input: ORT fails inside session.run, not with a traceback."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])],
        [numpy_helper.from_array(np.ones((4, 2), np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CimsplitError, match="onnxruntime failed to run the model"):
        profile_onnx(model, fingerprint="fp", input_shapes={"x": (2, 3)}, runs=1, warmup=0, progress=False)


def test_progress_bar_goes_to_stderr_only_when_asked(capsys):
    profile_onnx(tiny_model(), fingerprint="fp", runs=2, warmup=1, progress=True)
    captured = capsys.readouterr()
    assert "profiling" in captured.err and captured.out == ""
    profile_onnx(tiny_model(), fingerprint="fp", runs=2, warmup=1, progress=False)
    assert capsys.readouterr().err == ""


def hand_profile(medians_ns: dict[str, float], whole_ns: float, **fields) -> HostProfile:
    """A profile written by hand: node medians in graph order, the whole model at level all."""
    nodes = {name: {"op_type": "X", "median_ns": ns, "p10_ns": ns, "p90_ns": ns, "samples": 1, "index": index}
             for index, (name, ns) in enumerate(medians_ns.items())}
    return HostProfile(format_version=FORMAT_VERSION, fingerprint="fp", ort_version="1", cpu="c", threads=1, runs=1,
                       warmup=0, nodes=nodes, model_median_ns={"optimizations_off": whole_ns, "optimizations_all": whole_ns},
                       **fields)


def test_a_profile_outside_the_band_warns_with_its_figures():
    ms = 1e6
    assert hand_profile({"a": 0.6 * ms, "b": 0.4 * ms}, ms).warnings == ()
    assert hand_profile({"a": 0.85 * ms}, ms).warnings == () and hand_profile({"a": 1.15 * ms}, ms).warnings == ()
    (warning,) = hand_profile({"a": ms, "b": 0.5 * ms}, ms, load_average_before=(3.5, 2.0, 1.0),
                              load_average_after=(4.25, 2.0, 1.0)).warnings
    assert "1.50x the whole model's 1 ms at optimization level all" in warning
    assert "expected 0.85-1.15x" in warning and "load average 3.50 before, 4.25 after" in warning
    assert hand_profile({"a": ms}, 0.0).warnings == ()  # no whole-model figure: nothing to compare
    # Below 1 ms the ratio says more about session.run's fixed cost than about the profile: not checked.
    assert hand_profile({"a": 1500.0}, 1000.0).warnings == () and hand_profile({"a": 2 * ms}, 0.999 * ms).warnings == ()


def test_a_profile_measured_twice_says_so_when_read_back(tmp_path):
    """The cache keeps a remeasured profile with its flag: the compile that measured it and every later one that
    reads it warn in the same words (plan.json the same); a profile measured once saves no flag."""
    ms = 1e6
    twice = hand_profile({"a": ms, "b": 0.5 * ms}, ms, remeasured=True)
    twice.save(tmp_path / "twice.json")
    hand_profile({"a": ms}, ms).save(tmp_path / "once.json")
    assert twice.warnings[0].startswith("host profile (measured twice): the sum of per-node medians 1.5 ms")
    assert HostProfile.load(tmp_path / "twice.json").warnings == twice.warnings
    assert "remeasured" not in json.loads((tmp_path / "once.json").read_text())
    assert HostProfile.load(tmp_path / "once.json").remeasured is False


def test_format_1_profiles_are_read_as_optimizations_off(tmp_path):
    path = tmp_path / "v1.json"
    path.write_text(json.dumps({
        "format_version": 1, "fingerprint": "fp", "ort_version": "1", "cpu": "c", "threads": 1, "runs": 1, "warmup": 0,
        "seed": 0, "nodes": {"a": {"op_type": "X", "median_ns": 5.0, "p10_ns": 5.0, "p90_ns": 5.0, "samples": 1}},
        "model_median_ns": {"optimizations_off": 5.0, "optimizations_all": 4.0},
    }))
    profile = HostProfile.load(path)
    assert (profile.level, profile.load_average_before, profile.sum_over_model) == ("off", None, 1.0)
    path.write_text(json.dumps({**profile.to_dict(), "level": "max"}))
    with pytest.raises(CimsplitError, match="'level' must be one of off, all"):
        HostProfile.load(path)


def test_for_model_rekeys_a_profile_of_renamed_nodes_by_position():
    profile = hand_profile({"conv": 7.0, "relu": 1.0, "k": 0.0, "mul": 2.0, "flatten": 0.0, "matmul": 3.0}, 13.0)
    profile = replace(profile, nodes={name: {**stats, "op_type": op} for (name, stats), op in
                                      zip(profile.nodes.items(), ["Conv", "Relu", "Constant", "Mul", "Flatten", "MatMul"])})
    renamed = tiny_model()
    for node in renamed.graph.node:
        node.name = f"other_{node.name}"
    rekeyed = profile.for_model(renamed)
    assert {name: stats["median_ns"] for name, stats in rekeyed.nodes.items()} == {
        "other_conv": 7.0, "other_relu": 1.0, "other_k": 0.0, "other_mul": 2.0, "other_flatten": 0.0, "other_matmul": 3.0}
    assert profile.for_model(tiny_model()) is profile
    renamed.graph.node[0].op_type = "Relu"  # positions no longer line up: left alone (operator_latencies names the node)
    assert profile.for_model(renamed) is profile


def test_cache_measures_a_suspect_profile_once_more_and_keeps_the_better(tmp_path, monkeypatch):
    """The measured figures are stood in for by hand-made profiles: what is tested is the decision, not a timing."""
    import cimsplit.compiler.host_profile as host_profile
    import cimsplit.compiler.profile_cache as profile_cache

    monkeypatch.setenv("CIMSPLIT_CACHE_DIR", str(tmp_path / "cache"))
    bad, good = hand_profile({"conv": 2e6}, 1e6), hand_profile({"conv": 1.1e6}, 1e6)
    measured = iter([bad, good, bad, hand_profile({"conv": 3e6}, 1e6)])
    calls = []

    def fake_profile_model(loaded, **kwargs):
        calls.append(kwargs)
        return replace(next(measured), fingerprint=loaded.fingerprint, cpu=host_profile.cpu_model(),
                       ort_version=host_profile.ort.__version__)

    monkeypatch.setattr(profile_cache, "profile_model", fake_profile_model)
    first = cached_profile(Loaded(model=tiny_model(), fingerprint="fp-1", input_shapes={}))
    assert len(calls) == 2 and first.nodes["conv"]["median_ns"] == 1.1e6 and first.warnings == ()
    second = cached_profile(Loaded(model=tiny_model(), fingerprint="fp-2", input_shapes={}))
    assert len(calls) == 4 and second.nodes["conv"]["median_ns"] == 2e6
    (warning,) = second.warnings
    assert warning.startswith("host profile (measured twice): ") and "2.00x" in warning
    # Read back from the cache, it still warns (the figures are saved).
    assert cached_profile(Loaded(model=tiny_model(), fingerprint="fp-2", input_shapes={})).warnings != ()
    assert len(calls) == 4


@pytest.mark.parametrize(("text", "expected"), [
    # a KVM guest names only the line: the family and model tell a Zen 3 (25, 1) from a Zen 4 (25, 17)
    ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n\n"
     "processor\t: 1\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n", "AMD EPYC (family 25, model 1)"),
    ("processor\t: 0\nBogoMIPS\t: 48.00\nCPU part\t: 0xd0c\n\nHardware\t: BCM2835\nModel\t\t: Raspberry Pi 4\n",
     "BCM2835"),
])
def test_the_cpu_is_named_with_its_family_and_model(tmp_path, text: str, expected: str) -> None:
    """Profiles, their cache and calibrations are told apart by this name (``--extend`` refuses another CPU's)."""
    from cimsplit.machine import cpu_model

    (tmp_path / "cpuinfo").write_text(text)
    assert cpu_model(tmp_path / "cpuinfo") == expected
