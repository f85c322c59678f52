"""Loading: bad input is one clear line and exit status 2; external data cannot leave the folder."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from graphs import clean_cnn, pytorch_style, save
from onnx import numpy_helper

from cimsplit.cli import main
from cimsplit.compiler.frontend import load, parse_input_shapes
from cimsplit.errors import CimsplitError


def run_cli_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run `cimsplit inspect ...`, expect exit 2 and exactly one stderr line; return it."""
    rc = main(["inspect", *argv])
    captured = capsys.readouterr()
    assert rc == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in captured.err
    assert captured.out == ""
    return lines[0]


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = run_cli_error(capsys, str(tmp_path / "nope.onnx"))
    assert "does not exist" in line


def test_not_onnx(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "notes.onnx"
    path.write_text("this is a text file, not a protobuf\n" * 10)
    line = run_cli_error(capsys, str(path))
    assert "not" in line and "ONNX" in line


def test_truncated_protobuf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = save(clean_cnn(), tmp_path).read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(whole[: len(whole) // 2])
    line = run_cli_error(capsys, str(path))
    assert "truncated.onnx" in line


def test_symbolic_dim_without_flag_names_input_and_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(pytorch_style(), tmp_path)  # x is float[N,3,8,8]
    line = run_cli_error(capsys, str(path))
    assert "'x'" in line and "--input-shape" in line


def test_input_shape_unknown_name_lists_real_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(pytorch_style(), tmp_path)
    line = run_cli_error(capsys, str(path), "--input-shape", "image=1,3,8,8")
    assert "'image'" in line and "x" in line.split("inputs are:")[1]


def test_input_shape_wrong_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(pytorch_style(), tmp_path)
    line = run_cli_error(capsys, str(path), "--input-shape", "x=1,3,8")
    assert "rank 3" in line and "rank 4" in line


def test_input_shape_cannot_change_a_fixed_dim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(pytorch_style(), tmp_path)  # dim 1 is fixed to 3
    line = run_cli_error(capsys, str(path), "--input-shape", "x=1,4,8,8")
    assert "fixes it to 3" in line


def test_input_shape_syntax_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(pytorch_style(), tmp_path)
    line = run_cli_error(capsys, str(path), "--input-shape", "x=1,three,8,8")
    assert "--input-shape" in line


def test_parse_input_shapes() -> None:
    assert parse_input_shapes(["x=1,3,224,224", "mask=2x5"]) == {"x": (1, 3, 224, 224), "mask": (2, 5)}
    with pytest.raises(CimsplitError):
        parse_input_shapes(["x=0,3"])


def test_old_opset_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = clean_cnn()
    model.opset_import[0].version = 10
    line = run_cli_error(capsys, str(save(model, tmp_path)))
    assert "opset 10" in line and "11" in line


def test_checker_failure_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = clean_cnn()
    model.graph.node[0].input[0] = "nowhere"  # reads a tensor nobody produces
    line = run_cli_error(capsys, str(save(model, tmp_path)))
    assert "not a valid ONNX model" in line


def test_initializers_listed_as_inputs_are_not_inputs(tmp_path: Path) -> None:
    model = clean_cnn()
    for init in model.graph.initializer:  # what old exporters wrote
        model.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    loaded = load(save(model, tmp_path))
    assert loaded.input_shapes == {"x": (1, 3, 8, 8)}
    assert [vi.name for vi in loaded.model.graph.input] == ["x"]
    assert load(save(clean_cnn(), tmp_path, "plain.onnx")).workload == loaded.workload


def test_static_input_accepts_matching_input_shape(tmp_path: Path) -> None:
    loaded = load(save(clean_cnn(), tmp_path), {"x": (1, 3, 8, 8)})
    assert loaded.input_shapes == {"x": (1, 3, 8, 8)}


# ---- external data -------------------------------------------------------------------------


def external_model(folder: Path, location: str) -> tuple[Path, bytes]:
    """clean_cnn with its Gemm weight ``fw`` stored externally at ``location`` (written by the caller)."""
    model = clean_cnn()
    fw = next(t for t in model.graph.initializer if t.name == "fw")
    data = numpy_helper.to_array(fw).tobytes()
    fw.ClearField("raw_data")
    fw.ClearField("float_data")
    fw.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(len(data)))):
        entry = fw.external_data.add()
        entry.key, entry.value = key, value
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path, data


def test_external_data_inside_the_folder_loads(tmp_path: Path) -> None:
    path, data = external_model(tmp_path / "m", "weights/fw.bin")
    (tmp_path / "m" / "weights").mkdir()
    (tmp_path / "m" / "weights" / "fw.bin").write_bytes(data)
    loaded = load(path)
    gemm = loaded.workload.operators[-1]
    assert (gemm.m, gemm.n) == (10, 256)
    fw = next(t for t in loaded.model.graph.initializer if t.name == "fw")
    assert np.array_equal(numpy_helper.to_array(fw), np.frombuffer(data, np.float32).reshape(10, 256))


def test_external_data_parent_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, data = external_model(tmp_path / "m", "../x.bin")
    (tmp_path / "x.bin").write_bytes(data)
    line = run_cli_error(capsys, str(path))
    assert "leaves the model's folder" in line


def test_external_data_absolute_path_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "abs.bin"
    path, data = external_model(tmp_path / "m", str(target))
    target.write_bytes(data)
    line = run_cli_error(capsys, str(path))
    assert "absolute location" in line


def test_external_data_symlink_outside_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, data = external_model(tmp_path / "m", "fw.bin")
    outside = tmp_path / "secret.bin"
    outside.write_bytes(data)
    os.symlink(outside, tmp_path / "m" / "fw.bin")
    line = run_cli_error(capsys, str(path))
    assert "leaves the model's folder" in line


def test_external_data_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = external_model(tmp_path / "m", "fw.bin")
    line = run_cli_error(capsys, str(path))
    assert "missing" in line


def test_input_file_is_not_modified(tmp_path: Path) -> None:
    path = save(pytorch_style(), tmp_path)
    before = path.read_bytes()
    load(path, {"x": (2, 3, 8, 8)})
    assert path.read_bytes() == before


def test_an_input_of_unknown_rank_takes_its_shape_from_input_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An input declared with a type and no shape: onnxruntime runs the model, onnx's checker refused it ("not a
    valid ONNX model") before --input-shape could give it one."""
    model = clean_cnn()
    model.graph.input[0].type.tensor_type.ClearField("shape")
    path = save(model, tmp_path)
    line = run_cli_error(capsys, str(path))
    assert "input 'x' has an unknown rank" in line and "--input-shape x=" in line
    loaded = load(path, {"x": (1, 3, 8, 8)})
    assert loaded.input_shapes == {"x": (1, 3, 8, 8)}
    assert loaded.workload == load(save(clean_cnn(), tmp_path, "plain.onnx")).workload
