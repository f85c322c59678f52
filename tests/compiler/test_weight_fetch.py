"""What a layer pays in a network to fetch its weights: the mix of a point's two times, and the board's reuse."""

from __future__ import annotations

import json
import math
from pathlib import Path

import onnx
import pytest

from cimsplit.compiler.calibration_context import CONTEXT_CHANNELS, CONTEXT_SIZES, context_network
from cimsplit.compiler.frontend import load
from cimsplit.compiler.host_model import HostModel, Sample
from cimsplit.compiler.weight_fetch import (
    REUSE_CANDIDATES,
    WEIGHT_REUSE,
    ContextLayer,
    board_reuse,
    estimate_reuse,
    in_network_ns,
)

FEATURES = {"m": 40.0, "n": 16.0, "n_mvm": 16.0, "n_out": 160.0}


def test_a_network_keeps_the_weights_share_of_the_flush_its_compute_does_not_hide() -> None:
    """40 x 16 = 640 weights and 160 outputs, 1000 ns as it is, 1800 flushed: the weights' share is 800 * 640 / 800
    = 640 ns, of which 1 / (1 + n_mvm / 16) is kept: 1000 + 640 / 2 = 1320 at 16 pixels, 1000 + 640 / 4 = 1160 at 48,
    1000 + 640 * 16 / 17 on one pixel (a pooled conv keeps nearly all); a flushed run faster than the plain one adds
    nothing (noise, not a cache effect); a depthwise conv's 72 weights against 800 outputs keep little."""
    features = {"m": 40.0, "n": 16.0, "n_mvm": 16.0, "n_out": 160.0}
    assert in_network_ns(features, 1000.0, 1800.0) == 1320.0
    assert in_network_ns({**features, "n_mvm": 48.0}, 1000.0, 1800.0) == 1160.0
    assert in_network_ns({**features, "n_mvm": 1.0}, 1000.0, 1800.0) == pytest.approx(1000.0 + 640.0 * 16 / 17, rel=1e-12)
    assert in_network_ns(features, 1000.0, 900.0) == 1000.0
    depthwise = {"m": 8.0, "n": 9.0, "n_mvm": 800.0, "n_out": 800.0}
    assert in_network_ns(depthwise, 1000.0, 2000.0) == pytest.approx(1000.0 + 1000.0 * 72 / 872 / 51, rel=1e-12)


def test_with_nothing_hidden_a_network_keeps_the_weights_whole_share() -> None:
    """reuse = inf: 1000 + 640 (the weights' share of the 800 ns the flush adds) at any pixel count."""
    assert in_network_ns(FEATURES, 1000.0, 1800.0, math.inf) == 1640.0
    assert in_network_ns({**FEATURES, "n_mvm": 10_000.0}, 1000.0, 1800.0, math.inf) == 1640.0


def _layers(reuse: float, kind: str = "Conv") -> list[ContextLayer]:
    """Layers at 1, 16, 100 and 400 pixels whose network times are the mix at ``reuse``."""
    return [ContextLayer(kind, {**FEATURES, "n_mvm": pixels}, 1000.0, 1800.0,
                         in_network_ns({**FEATURES, "n_mvm": pixels}, 1000.0, 1800.0, reuse)) for pixels in (1.0, 16.0, 100.0, 400.0)]


@pytest.mark.parametrize("reuse", REUSE_CANDIDATES)
def test_the_reuse_whose_mix_gives_the_network_times_is_the_one_chosen(reuse: float) -> None:
    assert estimate_reuse(_layers(reuse)) == reuse


def test_a_board_has_a_reuse_per_precision_it_has_context_layers_of() -> None:
    """Float layers mixed at 256 and int8 ones at inf give those two; float layers alone give float only (an int8
    sample is then mixed at WEIGHT_REUSE); layers whose flush added nothing (1000 ns both ways) give WEIGHT_REUSE."""
    assert board_reuse(_layers(256.0) + _layers(math.inf, "int8:Conv-s8")) == {"float": 256.0, "int8": math.inf}
    assert board_reuse(_layers(256.0)) == {"float": 256.0} and board_reuse([]) == {}
    assert board_reuse([ContextLayer("Conv", FEATURES, 1000.0, 1000.0, 1500.0)]) == {"float": WEIGHT_REUSE}


def test_a_board_mixes_its_points_at_its_reuse_and_its_file_keeps_the_context(tmp_path: Path) -> None:
    """One float point at 16 pixels, 1000 ns as it is and 1800 flushed: 1320 ns at the default reuse of 16, 1640 once
    the board's context layers say nothing is hidden; an int8 point stays at 16 without int8 layers.  The
    calibration file keeps the layers (inf as JSON's Infinity), so a loaded board mixes the same."""
    samples = (Sample.profiled("Conv", FEATURES, 1000.0, 1800.0), Sample.profiled("int8:Conv", FEATURES, 1000.0, 1800.0))
    assert [s.t_ns for s in samples] == [1320.0, 1320.0]
    board = HostModel("1.0", "cpu", {}, 1, "all", True, {}, samples, context=tuple(_layers(math.inf)))
    assert [s.remixed(board.reuse).t_ns for s in samples] == [1640.0, 1320.0]
    board.save(tmp_path / "board.json")
    loaded = HostModel.load(tmp_path / "board.json")
    assert loaded.context == board.context and loaded.reuse == {"float": math.inf}
    assert len(json.loads((tmp_path / "board.json").read_text())["context"]) == 4


def test_a_context_network_chains_its_convs_through_the_grids_channels(tmp_path: Path) -> None:
    """Eight convs, 3 x 3 then 1 x 1 in turn, 40 -> 88 -> ... -> 680 -> ... -> 40 at the map's size (padded), about
    3.1 M float weights: more than an L2 holds; the front end lowers each to a GEMM operator of its own."""
    model = context_network(CONTEXT_SIZES[0])
    onnx.checker.check_model(model, full_check=True)
    weights = [init for init in model.graph.initializer if init.name.startswith("w")]
    assert [tuple(w.dims) for w in weights] == [(c_out, c_in, 3 if i % 2 == 0 else 1, 3 if i % 2 == 0 else 1)
                                               for i, (c_in, c_out) in enumerate(zip(CONTEXT_CHANNELS, CONTEXT_CHANNELS[1:]))]
    assert 3.0e6 < sum(math.prod(w.dims) for w in weights) < 3.2e6
    path = tmp_path / "context.onnx"
    onnx.save(model, path)
    ops = [op for op in load(path).workload.operators if op.m is not None]
    assert [(op.m, op.n_mvm) for op in ops] == [(c, CONTEXT_SIZES[0] ** 2) for c in CONTEXT_CHANNELS[1:]]


def test_measuring_the_context_times_each_inner_conv_in_its_network_and_as_its_point(monkeypatch) -> None:
    """A 4 -> 8 -> 8 -> 4 context network at 6 x 6, float and int8, profiled for real: a layer for its one inner conv
    (8 -> 8, 1 x 1) in each, of the kind the front end gives it in its network, with its point's two times (the
    point measured as that kind, once a round) and its network time."""
    from cimsplit.compiler import calibration_context
    from cimsplit.compiler.calibration import measure_point

    monkeypatch.setattr(calibration_context, "CONTEXT_CHANNELS", (4, 8, 8, 4))
    monkeypatch.setattr(calibration_context, "CONTEXT_SIZES", (6,))
    measured = []

    def measure(point):
        measured.append(point)
        return measure_point(point, threads=1, runs=1, warmup=0, flush_bytes=1 << 16)[0]

    layers = calibration_context.measure_context(measure, int8=True, threads=1, runs=1, warmup=0)
    rounds = calibration_context.CONTEXT_ROUNDS
    assert len(layers) == 2 and [p.kind for p in measured] == [layer.kind for layer in layers for _ in range(rounds)]
    assert layers[0].kind == "Conv" and layers[1].kind.startswith("int8:Conv")
    assert {(p.get("c_in"), p.get("c_out"), p.get("k"), p.get("h"), p.get("s")) for p in measured} == {(8, 8, 1, 6, 1)}
    assert all(layer.hot_ns > 0 and layer.flushed_ns > 0 and layer.network_ns > 0 for layer in layers)
    assert [(layer.features["m"], layer.features["n_mvm"]) for layer in layers] == [(8.0, 36.0), (8.0, 36.0)]
