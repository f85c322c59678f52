"""`cimsplit zoo`: list, write, refuse to overwrite, refuse bad input with exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from _zoo_helpers import run

from cimsplit.cli import main
from cimsplit.models import zoo

CIMSPLIT = Path(sys.executable).parent / "cimsplit"


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "--list"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["model", "ops", "xbars"]
    assert [line.split()[0] for line in lines] == list(zoo.NAMES)
    assert all(zoo.describe(name) in line for name, line in zip(zoo.NAMES, lines))
    assert lines[zoo.NAMES.index("vit_tiny")].split()[1:3] == ["320", "127"]  # operators, crossbars


def test_write_creates_folders_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "dir" / "r18.onnx"
    assert main(["zoo", "resnet18", "-o", str(out), "--image-size", "64", "--seed", "2"]) == 0
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    assert model.SerializeToString() == zoo.build("resnet18", image_size=64, seed=2).SerializeToString()
    (line,) = capsys.readouterr().out.splitlines()
    assert str(out) in line and "69 nodes" in line and "11,689,512 parameters" in line and "MB" in line
    assert not [p for p in out.parent.iterdir() if p.name != "r18.onnx"]  # no temporary left behind


def test_refuses_to_overwrite_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "model.onnx"
    out.write_bytes(b"the user's own file")
    assert main(["zoo", "mobilenet_v2", "-o", str(out), "--image-size", "32"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "already exists" in err and "--force" in err
    assert out.read_bytes() == b"the user's own file"

    assert main(["zoo", "mobilenet_v2", "-o", str(out), "--image-size", "32", "--force"]) == 0
    assert onnx.load(out).graph.input[0].name == "input"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["zoo", "resnet101", "-o", "{out}"], ["resnet101", "resnet18, resnet50, mobilenet_v2, yolov5n"]),
        (["zoo", "yolov5n", "--image-size", "100", "-o", "{out}"], ["divisible by 32"]),
        (["zoo", "resnet18", "--batch", "0", "-o", "{out}"], ["batch"]),
        (["zoo", "resnet18"], ["-o FILE"]),
        (["zoo"], ["--list"]),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    argv: list[str], words: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "m.onnx"
    assert main([a.format(out=out) for a in argv]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert all(word in err for word in words)
    assert not out.exists()


def test_output_under_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    assert main(["zoo", "resnet18", "--image-size", "32", "-o", str(blocker / "m.onnx")]) == 2
    assert "is a file" in capsys.readouterr().err


def test_subprocess_int8_dynamic_batch(tmp_path: Path) -> None:
    out = tmp_path / "y.onnx"
    proc = subprocess.run(
        [str(CIMSPLIT), "zoo", "yolov5n", "--int8", "--dynamic-batch", "--image-size", "64", "-o", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"wrote {out}: yolov5n int8 QDQ (S8S8 per-channel), input images batchx3x64x64")
    model = onnx.load(out)
    assert any(n.op_type == "QuantizeLinear" for n in model.graph.node)
    (boxes,) = run(model, batch=2)  # the symbolic batch dim takes any batch
    assert boxes.shape == (2, 3 * (8 * 8 + 4 * 4 + 2 * 2), 85)


def test_quantizer_configuration_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "u8.onnx"
    argv = ["zoo", "resnet18", "--image-size", "32", "-o", str(out), "--int8", "--activations", "uint8", "--per-tensor"]
    assert main(argv) == 0
    assert "resnet18 int8 QDQ (U8S8 per-tensor)" in capsys.readouterr().out
    assert main(["zoo", "resnet18", "-o", str(tmp_path / "f.onnx"), "--activations", "uint8"]) == 2
    assert "add --int8" in capsys.readouterr().err
    assert not (tmp_path / "f.onnx").exists()


def test_subprocess_unknown_name_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run([str(CIMSPLIT), "zoo", "alexnet", "-o", str(tmp_path / "a.onnx")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
