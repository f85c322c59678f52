"""Copy operators' cold output buffers: which kinds, the mix of a point's two times, the L2 it is mixed on."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import onnxruntime as ort
import pytest

from cimsplit.compiler import calibration
from cimsplit.compiler.cache_flush import l2_cache_bytes
from cimsplit.compiler.calibration import measure_point
from cimsplit.compiler.calibration_models import GridPoint
from cimsplit.compiler.cold_outputs import in_network_ns, is_copy_kind, output_bytes
from cimsplit.compiler.host_model import HostModel, Sample


@pytest.mark.parametrize(("kind", "copy"), [
    ("Split", True), ("int8:Split-s8out", True), ("Softmax-last", True), ("int8:Concat", True), ("int8:MaxPool-s8", True),
    ("Relu", False), ("int8:Add-s8in", False), ("Conv", False), ("glue:Transpose-u8", False), ("SiLU", False),
])
def test_copy_kinds_are_those_that_write_a_new_buffer(kind: str, copy: bool) -> None:
    assert is_copy_kind(kind) is copy


def test_the_output_share_of_the_flush_is_its_bytes_over_the_l2() -> None:
    mib = 1 << 20
    assert output_bytes("Split", 1000) == 4000 and output_bytes("int8:Concat", 1000) == 1000
    assert output_bytes("int8:Concat-s8in", 1000) == 4000  # (run in float between its Q/DQ kernels)
    assert [output_bytes(f"glue:{op}", 1000) for op in ("DequantizeLinear", "QuantizeLinear", "Transpose-u8", "Transpose-f32")] == [
        4000, 1000, 1000, 4000]
    # 256 k floats = 1 MiB of a 2 MiB L2: half of 300 - 100 added
    assert in_network_ns("Split", mib / 4, 100.0, 300.0, 2 * mib) == 200.0
    assert in_network_ns("int8:Concat", mib, 100.0, 300.0, 2 * mib) == 200.0  # (a byte an element)
    assert in_network_ns("int8:Concat-s8in", mib, 100.0, 300.0, 2 * mib) == 300.0  # 4 MiB: all of it
    assert in_network_ns("Split", mib / 4, 100.0, 80.0, 2 * mib) == 100.0  # a flush that took less adds nothing


def test_the_l2_is_read_from_sysfs(tmp_path: Path) -> None:
    """sysfs L1d 48K, L1i 64K, L2 2048K, L3 480M -> 2 MiB; without level files (or folders) -> 1 MiB."""
    for index, (level, size) in enumerate((("1", "48K"), ("1", "64K"), ("2", "2048K"), ("3", "491520K"))):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
        (tmp_path / f"index{index}" / "level").write_text(level + "\n")
    assert l2_cache_bytes(tmp_path) == 2 << 20
    for index in range(4):
        (tmp_path / f"index{index}" / "level").unlink()
    assert l2_cache_bytes(tmp_path) == 1 << 20 and l2_cache_bytes(tmp_path / "absent") == 1 << 20


def test_a_copy_point_is_measured_as_it_is_and_flushed() -> None:
    point = GridPoint("Split", (("c", 16), ("h", 18)))
    plain, _ = measure_point(point, threads=1, runs=1, warmup=0)
    sample, _ = measure_point(point, threads=1, runs=1, warmup=0, flush_bytes=1 << 20)
    assert plain.profiled_ns is None and sample.profiled_ns is not None
    hot, flushed = sample.profiled_ns
    assert sample.t_ns == in_network_ns("Split", 16 * 18 * 18, hot, flushed, l2_cache_bytes())
    assert sample.remixed({"float": 4.0}) == sample  # (its machine's mix: a refit keeps it)
    relu, _ = measure_point(GridPoint("Relu", (("c", 16), ("h", 18))), threads=1, runs=1, warmup=0, flush_bytes=1 << 20)
    assert relu.profiled_ns is None  # element-wise: left as it is


def test_an_extension_measures_again_the_copy_kinds_of_a_board_before_points_4() -> None:
    split, relu = GridPoint("Split", (("c", 8), ("h", 8))), GridPoint("Relu", (("c", 8), ("h", 8)))
    s8out = GridPoint("int8:Split-s8out", (("c", 8), ("h", 8)))
    old = HostModel(ort_version=ort.__version__, cpu="cpu", machine={}, threads=1, level="all", int8=True, fits={},
                    samples=(Sample("Split", {"n_in": 512.0, "n_out": 512.0}, 100.0),), campaign={"points": 3})
    assert calibration._stale(old, [split, relu, s8out]) == {"Split", "int8:Split-s8out"}
    assert calibration._stale(dataclasses.replace(old, campaign={"points": calibration.POINTS_VERSION}), [split, relu, s8out]) == set()


@pytest.mark.parametrize("kind", ["glue:DequantizeLinear", "glue:Transpose-u8", "glue:QuantizeLinear"])
def test_a_glue_point_is_measured_as_it_is_and_flushed(kind: str) -> None:
    """A uint8 input (the DequantizeLinear's, the uint8 Transpose's) takes the flush's zero in its own type."""
    sample, _ = measure_point(GridPoint(kind, (("c", 16), ("h", 18))), threads=1, runs=1, warmup=0, flush_bytes=1 << 20)
    assert sample.profiled_ns is not None
    hot, flushed = sample.profiled_ns
    assert sample.t_ns == in_network_ns(kind, 16 * 18 * 18, hot, flushed, l2_cache_bytes())


def test_an_extension_measures_again_the_glue_kinds_of_a_board_before_points_5() -> None:
    glue, split = GridPoint("glue:DequantizeLinear", (("c", 8), ("h", 8))), GridPoint("Split", (("c", 8), ("h", 8)))
    old = HostModel(ort_version=ort.__version__, cpu="cpu", machine={}, threads=1, level="all", int8=True, fits={},
                    samples=(), campaign={"points": 4})
    assert calibration._stale(old, [glue, split]) == {"glue:DequantizeLinear"}
