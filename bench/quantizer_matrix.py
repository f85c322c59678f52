"""Real int8 exports: zoo models quantized by onnxruntime's quantizer in 15 configurations, compiled and checked.

A user's int8 model comes from onnxruntime's quantizer in whatever configuration
their deployment chose, not from the zoo's own ``--int8`` recipe.  For each model
and each configuration this script quantizes the float zoo model (seeded
calibration inputs), then runs, as a user would, ``cimsplit compile --crossbars 50``
and ``cimsplit run --check`` (static quantization bit for bit against the whole
model in onnxruntime, dynamic quantization within the float tolerance), and runs
the one-file ``partitioned.onnx`` in plain onnxruntime against the whole model.
One row per case: the compile's outcome (its last error line when it fails), the
CIM operators placed, the largest difference of ``partitioned.onnx``'s outputs
from the whole model's, and the check's last line.

Configurations: ``quantize_static`` in QDQ format with S8S8 per-channel, U8S8
per-tensor, U8U8, symmetric activations and weights, QDQKeepRemovableActivations,
DedicatedQDQPair, QuantizeBias=False, AddQDQPairToWeight, percentile calibration,
int16 activations, Conv-only, com.microsoft Q/DQ (UseQDQContribOps); QOperator format; ``quantize_dynamic``; and
``quant_pre_process`` followed by S8S8 per-channel QDQ.

    .venv/bin/python bench/quantizer_matrix.py [--models resnet18,mobilenet_v2,mobilenet_v3_small,yolov8n,efficientnet_b0,vit_tiny]
        [--configs a,b] [--crossbars 50] [--time-limit 5] [--out bench/results/quantizer_matrix.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader, quantize_dynamic, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fuzz"))

from quantizers import S8, STATIC  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "quantizer_matrix.txt"
CIMSPLIT = str(Path(sys.executable).with_name("cimsplit"))
CONFIGS = [*STATIC, "dynamic", "pre-processed"]


Shapes = dict[str, tuple[int, ...]]


class SeededInputs(CalibrationDataReader):
    """Three seeded batches for the model's inputs, as ``cimsplit profile`` makes them (floats standard normal,
    integers such as token ids small; ``shapes`` by input name, else their dynamic dims taken as 1)."""

    def __init__(self, model: Path, shapes: Shapes | None = None) -> None:
        from cimsplit.compiler.ort_profiler import random_inputs

        proto = onnx.load(model, load_external_data=False)
        shapes = shapes or {i.name: tuple(d.dim_value or 1 for d in i.type.tensor_type.shape.dim) for i in proto.graph.input}
        self._batches = iter([random_inputs(proto, shapes, seed) for seed in range(3)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def quantizer(config: str, shapes: Shapes | None = None) -> Callable[[Path, Path, Path], None]:
    """quantize(float model, int8 model, scratch directory) for ``config``, calibrated at ``shapes``."""
    if config == "dynamic":
        return lambda src, dst, _: quantize_dynamic(str(src), str(dst), weight_type=S8)
    if config == "pre-processed":
        def pre_processed(src: Path, dst: Path, tmp: Path) -> None:
            pre = tmp / f"{src.stem}-pre.onnx"
            quant_pre_process(str(src), str(pre))
            quantize_static(str(pre), str(dst), SeededInputs(pre, shapes), **STATIC["s8s8-per-channel"])
        return pre_processed
    return lambda src, dst, _: quantize_static(str(src), str(dst), SeededInputs(src, shapes), **STATIC[config])


class Report:
    """Lines printed as they come and kept for the results file; the first says the command, ``stamp`` when and at
    which commit."""

    def __init__(self, script: str) -> None:
        self.lines: list[str] = []
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        self.say(f"# {script} {' '.join(sys.argv[1:])}".rstrip())
        self.stamp = f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}"

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.lines.append(text)

    def save(self, path: str) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text("\n".join(self.lines) + "\n", encoding="utf-8")

    def close(self, passed: int, total: int, path: str) -> None:
        """Say how many cases passed and save the lines to ``path``."""
        self.say(f"# {passed} of {total} compiled and passed --check (the rest: the row says whose failure it is)")
        self.save(path)


def last_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1]


def largest_difference(whole: Path, partitioned: Path, shapes: Shapes | None = None) -> float:
    """max |partitioned.onnx - whole model| over all outputs, both in plain onnxruntime on one seeded input; the whole
    model at ``shapes``, as ``run --check`` runs it (onnxruntime optimizes a model whose dims it knows otherwise:
    PP-OCRv4's int8 recogniser, symbolic, is one quantization step, 0.0235, off itself at 1 x 3 x 48 x 320)."""
    from cimsplit.cli.run_cmd import reference_outputs

    feeds = SeededInputs(whole, shapes).get_next()
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 3  # (an exporter's unused initializers: one warning each)
    session = ort.InferenceSession(str(partitioned), quiet, providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    ref = reference_outputs(str(whole), feeds, list(got), threads=1, shapes=shapes)
    return max(float(np.max(np.abs(ref[name].astype(np.float64) - got[name]))) for name in got)


def case(model: Path, config: str, tmp: Path, crossbars: int, time_limit: float,
         shapes: Shapes | None = None) -> tuple[str, str, str, str]:
    """(compile outcome, operators placed on the CIM, partitioned.onnx's difference, check outcome) of one
    quantized model (``config`` "float": the model itself); ``shapes`` fix its inputs' dynamic dims."""
    quantized = tmp / f"{model.stem}-{config}.onnx"
    try:
        if config == "float":
            quantized = model
        else:
            quantizer(config, shapes)(model, quantized, tmp)
    except Exception as exc:  # the quantizer's own failure is a row, not the end of the run
        return f"quantizer failed: {str(exc)[:80]}", "-", "-", "-"
    out = tmp / f"{model.stem}-{config}"
    fixed = [arg for name, dims in (shapes or {}).items() for arg in ("--input-shape", f"{name}={','.join(map(str, dims))}")]
    built = subprocess.run([CIMSPLIT, "compile", str(quantized), "-o", str(out), "--force", "--crossbars",
                            str(crossbars), "--time-limit", str(time_limit), *fixed], capture_output=True, text=True)
    if built.returncode:
        return f"exit {built.returncode}: {last_line(built.stderr)[:120]}", "-", "-", "-"
    cim = str(json.loads((out / "plan.json").read_text(encoding="utf-8"))["operators_on_cim"])
    try:
        difference = f"{largest_difference(quantized, out / 'partitioned.onnx', shapes):.3g}"
    except Exception as exc:  # noqa: BLE001 - onnxruntime refusing partitioned.onnx is a row too
        difference = "refused"
        print(f"partitioned.onnx: {str(exc)[:300]}", file=sys.stderr)
    checked = subprocess.run([CIMSPLIT, "run", str(out), "--check"], capture_output=True, text=True)
    check = last_line(checked.stdout if checked.returncode == 0 else checked.stderr)
    return "ok", cim, difference, (check if checked.returncode == 0 else f"exit {checked.returncode}: {check}")[:100]


def say_case(say: Callable[[str], None], label: str, config: str, outcome: tuple[str, str, str, str]) -> bool:
    """Print one :func:`case`'s row after ``label`` (padded by the caller); True when its check passed."""
    built, cim, difference, check = outcome
    say(f"{label} {config:<18} {built:<8} {cim:>4} {difference:>11}  {check}")
    return check == "check passed"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2,mobilenet_v3_small,yolov8n,efficientnet_b0,vit_tiny")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"of {', '.join(CONFIGS)}")
    parser.add_argument("--crossbars", type=int, default=50)
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--image-size", type=int, default=64, help="CNNs' input size (ViT-Tiny keeps its 224)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    configs = args.configs.split(",")
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        print(f"error: unknown configuration {', '.join(unknown)}; choose of {', '.join(CONFIGS)}", file=sys.stderr)
        return 2

    report = Report("bench/quantizer_matrix.py")
    say = report.say
    say(f"{report.stamp}, onnxruntime quantizer, compile --crossbars {args.crossbars} --time-limit {args.time_limit:g}, "
        "then run --check; partitioned: max |partitioned.onnx - model| in plain onnxruntime")
    say(f"{'model':<18} {'configuration':<18} {'compile':<8} {'CIM':>4} {'partitioned':>11}  check")
    passed = total = identical = static = 0
    with tempfile.TemporaryDirectory(prefix="cimsplit-qmatrix-") as name:
        tmp = Path(name)
        for model_name in args.models.split(","):
            model = tmp / f"{model_name}.onnx"
            size = [] if model_name == "vit_tiny" else ["--image-size", str(args.image_size)]
            subprocess.run([CIMSPLIT, "zoo", model_name, "-o", str(model), *size], check=True, capture_output=True)
            for config in configs:
                outcome = case(model, config, tmp, args.crossbars, args.time_limit)
                total += 1
                passed += say_case(say, f"{model_name:<18}", config, outcome)
                if config != "dynamic":
                    static += 1
                    identical += outcome[2] == "0"
    say(f"# {passed} of {total} compiled and passed --check; partitioned.onnx bit-identical in {identical} of {static} "
        "statically quantized cases")
    report.save(args.out)
    return 0 if passed == total and identical == static else 1


if __name__ == "__main__":
    os.environ.setdefault("ORT_LOGGING_LEVEL", "3")
    sys.exit(main())
