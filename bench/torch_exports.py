"""Real PyTorch exports: torchvision and ultralytics models through torch.onnx.export and ultralytics' exporter.

The zoo builds its own graphs; a user's come from an exporter.  This script exports, with seeded random weights
(no download), torchvision classifiers (ResNet-18, MobileNetV3-Small, ShuffleNetV2, SqueezeNet, ConvNeXt-Tiny,
RegNetX-400MF, GoogLeNet, DenseNet-121, EfficientNet-B0, Swin-T), a segmentation model (LR-ASPP), a detector with
its post-processing (SSDlite, NMS and all), a transformer encoder with token ids of symbolic batch and length, and
a Conv1d + LSTM, each through the TorchScript exporter (opset 17, dynamic batch) and the dynamo exporter
(``dynamo=True``, dynamic batch) where it exports; and ultralytics' own ONNX export (onnxslim-simplified, opset of
its choice, static and ``dynamic=True``) of YOLOv8n, YOLO11n, YOLOv5nu, YOLOv10n (NMS-free, TopK), YOLOv8n-seg,
-pose, -cls and YOLO11n-obb from their .yaml.  Each model is compiled with its symbolic dims fixed and checked
(``cimsplit run --check``) as it is, then after onnxruntime's quantizer in ``--configs`` (rows as
``bench/quantizer_matrix.py``'s).

torch, torchvision and ultralytics are not cimsplit's dependencies: the exports run in ``--torch-python``, an
interpreter that has them (e.g. a venv made with ``pip install torch torchvision ultralytics onnxscript``); the
checks run here.

    .venv/bin/python bench/torch_exports.py --torch-python /path/to/venv/bin/python
        [--configs float,s8s8-per-channel,u8s8-per-tensor,qoperator] [--out bench/results/torch_exports.txt]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from quantizer_matrix import CONFIGS, Report, case, say_case

RESULTS = Path(__file__).resolve().parent / "results" / "torch_exports.txt"
CLASSIFIERS = ("resnet18", "mobilenet_v3_small", "shufflenet_v2_x0_5", "squeezenet1_0", "convnext_tiny",
               "regnet_x_400mf", "googlenet", "densenet121", "efficientnet_b0", "swin_t")
ULTRALYTICS = ("yolov8n", "yolo11n", "yolov5n", "yolov10n", "yolov8n-seg", "yolov8n-pose", "yolov8n-cls", "yolo11n-obb")

EXPORT = r'''
import shutil, sys, torch, torchvision
from pathlib import Path
out = Path(sys.argv[1])
classifiers, ultralytics_models = ([name for name in arg.split(",") if name] for arg in sys.argv[2:4])

def export(name, model, args, names, axes, shapes):
    torch.manual_seed(0)
    for dynamo in (False, True):
        path = out / f"{name}-{'dynamo' if dynamo else 'torchscript'}.onnx"
        try:
            if dynamo:
                torch.onnx.export(model, args, path, dynamo=True, input_names=names, dynamic_shapes=shapes, external_data=False)
            else:
                torch.onnx.export(model, args, path, dynamo=False, opset_version=17, input_names=names, dynamic_axes=axes)
        except Exception as exc:
            print(f"{path.stem}: export failed: {type(exc).__name__}", flush=True)

batch = torch.export.Dim("batch", max=64)
for name in classifiers:
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    export(name, model, (torch.randn(1, 3, 224, 224),), ["input"], {"input": {0: "batch"}}, {"x": {0: batch}})
torch.manual_seed(0)
seg = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None).eval()
export("lraspp", seg, (torch.randn(1, 3, 256, 256),), ["input"], {"input": {0: "batch"}}, {"input": {0: batch}})
torch.manual_seed(0)
ssd = torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None).eval()
try:
    torch.onnx.export(ssd, ([torch.rand(3, 320, 320)],), out / "ssdlite-torchscript.onnx", dynamo=False, opset_version=17,
                      input_names=["input"])
except Exception as exc:
    print(f"ssdlite-torchscript: export failed: {type(exc).__name__}", flush=True)

class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 128)
        self.encoder = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(128, 4, 256, batch_first=True), 2)
        self.head = torch.nn.Linear(128, 10)
    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)).mean(1))

class Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(40, 64, 3, padding=1)
        self.lstm = torch.nn.LSTM(64, 64, batch_first=True)
        self.fc = torch.nn.Linear(64, 12)
    def forward(self, x):
        y, _ = self.lstm(self.conv(x).transpose(1, 2))
        return self.fc(y[:, -1])

torch.manual_seed(0)
export("encoder", Encoder().eval(), (torch.randint(0, 1000, (1, 32)),), ["ids"], {"ids": {0: "batch", 1: "seq"}},
       {"ids": {0: batch, 1: torch.export.Dim("seq", max=512)}})
torch.manual_seed(0)
torch.onnx.export(Recurrent().eval(), (torch.randn(1, 40, 50),), out / "lstm-torchscript.onnx", dynamo=False, opset_version=17,
                  input_names=["x"])

from ultralytics import YOLO
for name in ultralytics_models:
    for dynamic in (False, True):
        torch.manual_seed(0)
        written = YOLO(f"{name}.yaml").export(format="onnx", imgsz=320, dynamic=dynamic, simplify=True, verbose=False)
        shutil.move(written, out / f"{name}-ultralytics{'-dynamic' if dynamic else ''}.onnx")
'''
"""Run by ``--torch-python``: writes the exports into ``argv[1]`` (names ``MODEL-EXPORTER[-dynamic].onnx``)."""


def fixed_shapes(stem: str) -> dict[str, tuple[int, ...]]:
    """The input dims each export is compiled at (its symbolic batch, sequence length fixed)."""
    if stem.startswith("encoder"):
        return {"ids": (1, 32)}
    if stem.startswith("lstm"):
        return {"x": (1, 40, 50)}
    if stem.startswith("ssdlite"):
        return {}
    if "ultralytics" in stem:
        return {"images": (1, 3, 320, 320)}
    return {"input": (1, 3, 256, 256) if stem.startswith("lraspp") else (1, 3, 224, 224)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", required=True, help="a Python with torch, torchvision, onnxscript and ultralytics")
    parser.add_argument("--classifiers", default=",".join(CLASSIFIERS))
    parser.add_argument("--ultralytics", default=",".join(ULTRALYTICS))
    parser.add_argument("--configs", default="float,s8s8-per-channel,u8s8-per-tensor,qoperator")
    parser.add_argument("--crossbars", type=int, default=50)
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    unknown = sorted(set(args.configs.split(",")) - {"float", *CONFIGS})
    if unknown:
        print(f"error: unknown configuration {', '.join(unknown)}", file=sys.stderr)
        return 2
    versions = subprocess.run([args.torch_python, "-c", "import torch, torchvision, ultralytics; "
                               "print(torch.__version__, torchvision.__version__, ultralytics.__version__)"],
                              capture_output=True, text=True, check=True).stdout.split()
    report = Report("bench/torch_exports.py")
    say = report.say
    say(f"{report.stamp}; torch {versions[0]}, torchvision {versions[1]}, ultralytics {versions[2]}; compile --crossbars "
        f"{args.crossbars} --time-limit {args.time_limit:g} with the symbolic dims fixed, then run --check; partitioned: "
        "max |partitioned.onnx - model| in plain onnxruntime")
    with tempfile.TemporaryDirectory(prefix="cimsplit-torch-") as name:
        folder = Path(name)
        exported = subprocess.run([args.torch_python, "-c", EXPORT, str(folder), args.classifiers, args.ultralytics],
                                  capture_output=True, text=True, cwd=folder)
        for line in exported.stdout.splitlines():
            if "export failed" in line:
                say(f"# {line}")
        if exported.returncode:
            say(f"# the exports stopped: {exported.stderr.strip().splitlines()[-1]}")
        say(f"{'export':<36} {'configuration':<18} {'compile':<8} {'CIM':>4} {'partitioned':>11}  check")
        passed = total = 0
        (folder / "work").mkdir()
        for model in sorted(folder.glob("*.onnx")):
            for config in args.configs.split(","):
                outcome = case(model, config, folder / "work", args.crossbars, args.time_limit, fixed_shapes(model.stem) or None)
                total += 1
                passed += say_case(say, f"{model.stem:<36}", config, outcome)
    report.close(passed, total, args.out)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("ORT_LOGGING_LEVEL", "3")
    sys.exit(main())
