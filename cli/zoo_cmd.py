"""`cimsplit zoo`: write a model of the zoo to an ONNX file, or list the zoo.

    cimsplit zoo resnet18 -o out/resnet18.onnx [--int8 [--activations int8|uint8] [--per-tensor]]
                 [--batch N] [--image-size S] [--seed N]
    cimsplit zoo --list      # each model with its operators and crossbars (256x256)

An existing file is never replaced unless ``--force`` is given; even then the
new model is written to a temporary file next to it and moved into place only
once complete, so an interrupted run loses nothing.  A build is kept in the zoo
cache (:mod:`cimsplit.models.build_cache`): the same model asked again is read back.
"""

from __future__ import annotations

import argparse

from cimsplit.cli.args import OutputArgs
from cimsplit.errors import CimsplitError
from cimsplit.files import write_atomic

OUTPUT = OutputArgs("file", required=False, help="ONNX file to write", force_help="overwrite FILE if it exists")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "zoo", help="write a zoo model (resnet18, yolov8n, vit_tiny, ... see --list) to an ONNX file",
        description="Build a zoo model with deterministic random weights (opset 17, float32 or int8 QDQ).",
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="model name (see --list)")
    OUTPUT.add_to_parser(parser)
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--int8", action="store_true", help="quantize to int8 QDQ with onnxruntime (static, seeded calibration)")
    parser.add_argument("--activations", choices=("int8", "uint8"), default=None,
                        help="with --int8: activation type, int8 (S8S8, the default) or uint8 (U8S8); weights are int8")
    parser.add_argument("--per-tensor", action="store_true",
                        help="with --int8: one weight scale per tensor (default: per output channel)")
    parser.add_argument("--batch", type=int, default=1, metavar="N", help="batch size (default 1)")
    parser.add_argument("--dynamic-batch", action="store_true", help="write a symbolic batch dim named 'batch'")
    parser.add_argument("--image-size", type=int, default=None, metavar="S", help="input side in pixels (default 224, YOLO 640)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="weight seed (default 0)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import onnx

    from cimsplit.models import zoo
    from cimsplit.models.build_cache import cached_build

    if args.list:
        width = max(len(n) for n in zoo.NAMES)
        print(f"{'model':<{width}}  {'ops':>4}  {'xbars':>5}  (operators, crossbars at 256x256)")
        for name in zoo.NAMES:
            operators, crossbars = zoo.workload_size(name)
            print(f"{name:<{width}}  {operators:>4}  {crossbars:>5}  {zoo.describe(name)}")
        return 0
    if not args.name:
        raise CimsplitError("no model name given", hint=f"pass one of {', '.join(zoo.NAMES)}, or --list")
    if not args.output:
        raise CimsplitError("no output file given", hint=f"pass -o FILE, e.g. -o {args.name}.onnx")
    zoo.describe(args.name)  # unknown names fail before touching the disk
    if (args.activations or args.per_tensor) and not args.int8:
        raise CimsplitError("--activations and --per-tensor choose how to quantize", hint="add --int8")
    path = OUTPUT.parse(args).path
    assert path is not None

    data = cached_build(
        args.name, batch=args.batch, image_size=args.image_size, int8=args.int8, seed=args.seed,
        dynamic_batch=args.dynamic_batch, activations=args.activations or "int8", per_channel=not args.per_tensor,
    )
    model = onnx.load_from_string(data)
    try:
        size_bytes = write_atomic(path, data)
    except OSError as exc:
        raise CimsplitError(f"cannot write {path}: {exc.strerror or exc}") from None
    if args.int8:
        from cimsplit.models.quantize import quantization_label

        kind = f"int8 QDQ ({quantization_label(args.activations or 'int8', not args.per_tensor)})"
    else:
        kind = "float32"
    shape = "x".join(str(d.dim_value or d.dim_param) for d in model.graph.input[0].type.tensor_type.shape.dim)
    print(
        f"wrote {path}: {args.name} {kind}, input {model.graph.input[0].name} {shape}, "
        f"{len(model.graph.node)} nodes, {zoo.parameter_count(model):,} parameters, {size_bytes / 1e6:.1f} MB"
    )
    return 0
