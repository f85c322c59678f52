"""`cimsplit run`: split inference of a compile directory.

    cimsplit run DIR [--input NAME=FILE.npy ...] [--save-outputs OUT.npz]
                 [--check] [--repeat N] [--stream N] [--seed 0] [--threads 1]

Inputs not given with ``--input`` are seeded random arrays of the plan's
dtype and shape.  Always prints the modeled timeline (replayed from
plan.json) and the transfers counted.  ``--check`` runs the original model
(plan.json's path) in plain onnxruntime at the partitions' optimization level
on the same inputs and compares: a statically quantized model (QDQ or QOperator) must
give bit-identical outputs, since its partitions are cut at the quantized
tensors; a float or dynamically quantized one must agree within atol 1e-4 / rtol 1e-3
(``np.allclose``).  Exit status 1 otherwise.  ``--repeat N`` times N more inferences one after the
other (latency); ``--stream N`` times N inferences pipelined, the plan's
``frames_in_flight`` (two for a plan without a stream schedule) in flight,
so the host works on one input while the CIM works on another (throughput).

``--cim-timing modeled`` puts the CIM and the bus on the timed emulator
(:mod:`cimsplit.runtime.timed`): ``--repeat`` then measures one frame's
latency (median of N) beside the modeled one (the plan's schedule replayed
for one frame alone: the makespan of a latency plan), ``--stream`` the
steady-state period (the spacing of finishes, the first and last tenth of the
frames left out, see :attr:`cimsplit.runtime.timed.TimedRun.period_ns`; after
an untimed warm-up pass of the stream) beside the
plan's ``period_ns``, each with the ratio measured/modeled, and the stream's
outputs are compared frame by frame with the single-frame outputs.
``--report FILE.json`` writes those figures (keys for what was run).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Collection
from pathlib import Path

import numpy as np

from cimsplit.errors import CimsplitError
from cimsplit.files import write_atomic
from cimsplit.runtime.piece_costs import host_pieces_of, latency_prediction, stream_prediction
from cimsplit.runtime.plan import dumps
from cimsplit.runtime.session import CIM_TIMINGS

log = logging.getLogger(__name__)

ATOL = 1e-4
RTOL = 1e-3


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "run", help="run split inference of a compile directory",
        description="Execute DIR's plan.json: host partitions on onnxruntime's CPU provider, CIM partitions on "
                    "the CIM back end (functional simulation), transfers as counted copies.",
    )
    parser.add_argument("dir", metavar="DIR", help="output directory of `cimsplit compile`")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input array (repeatable)")
    parser.add_argument("--save-outputs", metavar="OUT.npz", help="save the outputs, keyed by output name")
    parser.add_argument("--check", action="store_true", help="compare with the original model in onnxruntime")
    parser.add_argument("--repeat", type=int, default=0, metavar="N", help="time N more inferences")
    parser.add_argument("--stream", type=int, default=0, metavar="N",
                        help="time N inferences pipelined across host and CIM (throughput)")
    parser.add_argument("--cim-timing", choices=CIM_TIMINGS, default="functional",
                        help="functional: the CIM returns as soon as it has computed (default); modeled: the CIM and "
                             "the bus complete when the modeled hardware would, so measured times meet the plan's")
    parser.add_argument("--report", metavar="FILE.json",
                        help="write measured and modeled latency/period (of --repeat/--stream) to FILE.json")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per onnxruntime session (default 1)")
    parser.add_argument("--custom-op-library", action="append", default=[], metavar="PATH",
                        help="an onnxruntime custom-op shared library for operators of custom domains (repeatable)")
    parser.set_defaults(func=run)


def parse_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    """``NAME=FILE.npy`` strings -> arrays; a malformed spec or unreadable file is a CimsplitError."""
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise CimsplitError(f"bad --input {spec!r}", hint="write NAME=FILE.npy")
        if name in arrays:
            raise CimsplitError(f"input {name} is given twice")
        try:
            value = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CimsplitError(f"cannot read --input {name}={path}: {exc}") from exc
        if not isinstance(value, np.ndarray):
            raise CimsplitError(f"--input {name}={path} is not one .npy array", hint="save it with numpy.save")
        arrays[name] = value
    return arrays


def random_inputs(specs, seed: int, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Seeded random arrays for the inputs not in ``given`` (normal floats, small integers, booleans)."""
    rng = np.random.default_rng(seed)
    feeds = dict(given)
    for spec in specs:
        if spec.name in feeds:
            continue
        if not all(isinstance(d, int) for d in spec.shape):
            raise CimsplitError(f"input {spec.name} has unknown dims {list(spec.shape)}", hint=f"pass --input {spec.name}=FILE.npy")
        dtype = np.dtype(spec.dtype)
        shape = tuple(spec.shape)
        if dtype.kind == "f":
            feeds[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[spec.name] = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            feeds[spec.name] = rng.integers(0, 10, size=shape).astype(dtype)
        else:
            raise CimsplitError(f"cannot make random values of dtype {dtype} for input {spec.name}",
                                hint=f"pass --input {spec.name}=FILE.npy")
    return feeds


def _describe(array: np.ndarray) -> str:
    return f"{array.dtype}[{','.join(str(d) for d in array.shape)}]"


def compare(got: dict[str, np.ndarray], ref: dict[str, np.ndarray],
            exact: Collection[str] = ()) -> list[tuple[str, float, float, bool]]:
    """Per output: (name, largest absolute difference, largest relative difference, equal).

    For an output in ``exact`` equal means bit-identical (:func:`exact_outputs`); otherwise ``np.allclose``
    within ``ATOL`` / ``RTOL``.
    """
    rows = []
    for name, expected in ref.items():
        actual = got[name]
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            rows.append((name, float("inf"), float("inf"), False))
            continue
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        diff = np.abs(a - e)
        abs_diff = float(diff.max()) if diff.size else 0.0
        significant = np.abs(e) > ATOL  # relative to a value that is zero within atol means nothing
        rel_diff = float((diff[significant] / np.abs(e[significant])).max()) if significant.any() else 0.0
        if name in exact:
            equal = actual.tobytes() == expected.tobytes()
        else:
            equal = bool(np.allclose(a, e, atol=ATOL, rtol=RTOL))
        rows.append((name, abs_diff, rel_diff, equal))
    return rows


QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul"})
"""Static quantization.  Dynamic quantization (onnxruntime's ``quantize_dynamic``: DynamicQuantizeLinear,
ConvInteger, MatMulInteger) is not among them: its operators hand on float tensors, and onnxruntime fuses
a whole model's DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul into one kernel
(DynamicQuantizeMatMul) that a partition boundary between them splits, so the split agrees with the
model to float precision (ViT-Tiny: 4.8e-7), not bit for bit."""


def is_quantized(model_path: str) -> bool:
    """True when the model computes in integers between its operators: QDQ (Q/DQ nodes) or QOperator
    (QLinear*); see :data:`QUANTIZED_OPS`."""
    import onnx

    model = onnx.load(model_path, load_external_data=False)
    return any(node.op_type in QUANTIZED_OPS for node in model.graph.node)


def exact_outputs(model_path: str) -> frozenset[str]:
    """The outputs ``--check`` wants bit-identical: of a quantized model (:func:`is_quantized`), those a
    DequantizeLinear, a QuantizeLinear or a QLinear operator writes, whose values the int8 tensors fix.  An
    output computed in float after the last DequantizeLinear (a partly quantized model: ``op_types_to_quantize``
    Conv only, then a MatMul) depends on the float kernels onnxruntime picks around it, like a float model's, and
    is compared within ``ATOL`` / ``RTOL`` (a MatMul alone in a partition: 1.5e-8 from the whole model's)."""
    import onnx

    if not is_quantized(model_path):
        return frozenset()
    model = onnx.load(model_path, load_external_data=False)
    writers = {out: node.op_type for node in model.graph.node for out in node.output}
    return frozenset(o.name for o in model.graph.output
                     if writers.get(o.name, "") in ("DequantizeLinear", "QuantizeLinear") or writers.get(o.name, "").startswith("QLinear"))


def reference_outputs(model_path: str, feeds: dict[str, np.ndarray], names: list[str], threads: int,
                      custom_op_libraries: list[str] = (), frozen: dict[str, list[float]] | None = None,
                      shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    """The original model's outputs on ``feeds`` in plain onnxruntime; inputs frozen at compile time take their values,
    and symbolic input dims the ``shapes`` it was compiled for (:func:`_at_shapes`)."""
    import onnxruntime as ort

    from cimsplit.runtime.devices import session_options

    path = Path(model_path)
    if not path.is_file():
        raise CimsplitError(f"the original model {path} is gone (moved or deleted), so --check cannot run",
                            hint="put it back or recompile")
    try:
        session = ort.InferenceSession(_at_shapes(path, shapes or {}),
                                       sess_options=session_options(threads, custom_op_libraries=custom_op_libraries),
                                       providers=["CPUExecutionProvider"])
    except CimsplitError:
        raise
    except Exception as exc:  # onnxruntime raises its own exception types
        raise CimsplitError(f"onnxruntime cannot load the original model {path}: {exc}") from exc
    wanted = {i.name for i in session.get_inputs()}
    feeds = {k: v for k, v in feeds.items() if k in wanted}
    for spec in session.get_inputs():
        if spec.name in (frozen or {}) and spec.name not in feeds:
            dtype = np.dtype(_ORT_TYPES.get(spec.type, "float32"))
            values_in = np.array(frozen[spec.name], dtype=dtype)
            shape = [d if isinstance(d, int) else len(values_in) for d in spec.shape]
            feeds[spec.name] = values_in.reshape(shape) if values_in.size == int(np.prod(shape)) else np.full(shape, values_in[0])
    values = session.run(names, feeds)
    return dict(zip(names, values))


def _at_shapes(path: Path, shapes: dict[str, tuple[int, ...]]) -> str | bytes:
    """``path``, or the model with its symbolic input dims fixed to ``shapes`` (``--input-shape`` at compile time).

    onnxruntime optimizes a model whose shapes it knows further than one whose batch is symbolic: it folds
    ``Shape`` subgraphs and an ``If`` on them, and fuses the QDQ pairs that meet across the folded nodes (an
    int8 Conv -> If(batch == 1) -> Q runs a float Conv with a symbolic batch, QLinearConv with batch 1).  The
    split runs the shapes it was compiled for, so the reference does too."""
    import onnx

    from cimsplit.compiler.loader import apply_input_shapes, declared_dims, real_inputs

    model = onnx.load(str(path), load_external_data=False)
    symbolic = {vi.name for vi in real_inputs(model.graph) if None in (declared_dims(vi) or [None])}
    if not symbolic & set(shapes):
        return str(path)
    model = onnx.load(str(path))
    apply_input_shapes(model, {name: shapes[name] for name in symbolic & set(shapes)})
    try:
        return model.SerializeToString()
    except ValueError:  # over protobuf's 2 GB: the model as it is
        log.warning("the reference runs %s with its symbolic input dims (too large to fix them)", path)
        return str(path)


_ORT_TYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
              "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16", "tensor(int8)": "int8",
              "tensor(uint8)": "uint8", "tensor(bool)": "bool"}


def _fmt_ns(ns: float) -> str:
    from cimsplit.compiler.units import format_time_ns

    return format_time_ns(ns)


def run(args: argparse.Namespace) -> int:
    from cimsplit.runtime import Session

    if args.repeat < 0 or args.stream < 0:
        raise CimsplitError(f"--repeat and --stream must be zero or more, got {args.repeat} and {args.stream}")
    if args.threads < 1:
        raise CimsplitError(f"--threads must be one or more, got {args.threads}")
    given = parse_inputs(args.input)
    if args.save_outputs and not Path(args.save_outputs).resolve().parent.is_dir():
        raise CimsplitError(f"--save-outputs {args.save_outputs}: its folder does not exist", hint="create the folder first")
    _check_report_path(args)
    report: dict[str, object] = {}
    with Session(args.dir, threads=args.threads, custom_op_libraries=args.custom_op_library,
                 cim_timing=args.cim_timing) as session:
        feeds = session.check_feeds(random_inputs(session.input_specs, args.seed, given))
        outputs = session.run(feeds)
        stats = session.transfer_stats
        for name, value in feeds.items():
            origin = "given" if name in given else f"random, seed {args.seed}"
            print(f"input  {name}: {_describe(value)} ({origin})")
        for name, value in outputs.items():
            print(f"output {name}: {_describe(value)}")

        plan = session.manifest.plan
        tl = session.timeline
        print(f"modeled timeline: makespan {_fmt_ns(tl.makespan_ns)} (plan {_fmt_ns(plan.timeline.makespan_ns)}), "
              f"host busy {_fmt_ns(tl.busy_ns.get('host', 0.0))}, cim busy {_fmt_ns(tl.busy_ns.get('cim', 0.0))}, "
              f"bus {_fmt_ns(tl.bus_ns)} in {tl.crossings} transfers")
        parts = session.manifest.partitions
        print(f"executed {len(parts)} partitions ({sum(p.device == 'host' for p in parts)} host, "
              f"{sum(p.device == 'cim' for p in parts)} cim); transfers counted: {stats.count} copies, "
              f"{stats.bytes} bytes copied ({stats.modeled_bytes} bytes modeled, {_fmt_ns(stats.modeled_latency_ns)})")

        if args.repeat and args.cim_timing == "modeled":
            report["latency_ns"] = _timed_latency(session, feeds, args.repeat)
        elif args.repeat:
            start = time.perf_counter()
            for _ in range(args.repeat):
                session.run(feeds)
            wall_s = time.perf_counter() - start
            per_ms = wall_s / args.repeat * 1e3
            print(f"measured: {args.repeat} inferences, {per_ms:.3f} ms per inference, "
                  f"{args.repeat / wall_s:.1f} inferences/s (wall time)")
            report["latency_ns"] = {"measured": wall_s / args.repeat * 1e9, "modeled": tl.makespan_ns}
        if args.stream and args.cim_timing == "modeled":
            report["period_ns"] = _timed_stream(session, feeds, outputs, args.stream)
        elif args.stream:
            window = session.frames_in_flight
            start = time.perf_counter()
            session.run_stream([feeds] * args.stream, window=window)
            wall_s = time.perf_counter() - start
            print(f"streamed: {args.stream} inferences pipelined ({window} in flight), "
                  f"{wall_s / args.stream * 1e3:.3f} ms per inference, {args.stream / wall_s:.1f} inferences/s (wall time)")
            report["period_ns"] = {"measured": wall_s / args.stream * 1e9,
                                   "modeled": plan.period_ns}
        stream_ok = report.get("period_ns", {}).pop("outputs_equal", True)  # type: ignore[union-attr]
        if report:
            report["frames"] = args.stream or args.repeat

    if args.report:
        try:
            write_atomic(args.report, dumps(report))
        except OSError as exc:
            raise CimsplitError(f"cannot write --report {args.report}: {exc.strerror or exc}") from None
        print(f"saved the timing report to {args.report}")
    if not stream_ok:
        print("stream check failed: a frame's outputs differ from its single-frame outputs")
        return 1

    if args.save_outputs:
        try:
            np.savez(args.save_outputs, **outputs)
        except OSError as exc:
            raise CimsplitError(f"cannot write --save-outputs {args.save_outputs}: {exc.strerror or exc}") from None
        print(f"saved outputs to {args.save_outputs}")

    if args.check:
        ref = reference_outputs(session.manifest.model_path, feeds, list(outputs), args.threads, args.custom_op_library,
                                frozen=session.manifest.plan.report.get("frozen_inputs"),
                                shapes={spec.name: tuple(spec.shape) for spec in session.manifest.inputs  # type: ignore[misc]
                                        if all(isinstance(d, int) for d in spec.shape)})
        exact = exact_outputs(session.manifest.model_path)
        ok = True
        tolerance = f"atol {ATOL:g}, rtol {RTOL:g}"
        rule = f"bit-identical where a DequantizeLinear writes the output, else {tolerance}" if exact else tolerance
        print(f"check against {session.manifest.model_path}, onnxruntime with all optimizations ({rule}):")
        for name, abs_diff, rel_diff, equal in compare(outputs, ref, exact):
            ok &= equal
            print(f"  {name}: max abs diff {abs_diff:.3g}, max rel diff {rel_diff:.3g} {'OK' if equal else 'MISMATCH'}")
        if not ok:
            print("check failed: the split outputs differ from the original model's")
            return 1
        print("check passed")
    return 0


def _check_report_path(args: argparse.Namespace) -> None:
    """--report needs something timed and a .json file of its own: never a file of the compile directory."""
    if not args.report:
        return
    if not (args.repeat or args.stream):
        raise CimsplitError("--report has nothing to report", hint="add --repeat N or --stream N")
    target = Path(args.report).resolve()
    if target.suffix != ".json" or target.is_dir() or not target.parent.is_dir():
        raise CimsplitError(f"--report {args.report}: not a .json file in an existing folder", hint="give a FILE.json path")
    if target.parent == Path(args.dir).resolve() and target.name in _COMPILE_FILES:
        raise CimsplitError(f"--report {args.report} would overwrite the compile directory's {target.name}",
                            hint="write the report to a file of its own, e.g. --report timing.json")


_COMPILE_FILES = frozenset({"plan.json", "trace.json", "explain.json"})
"""JSON files that `cimsplit compile` writes into its directory."""


def _ratio(measured: float, modeled: float | None) -> str:
    return f"{measured / modeled:.3f}" if modeled else "n/a"


def _timed_latency(session, feeds: dict[str, np.ndarray], repeat: int) -> dict[str, float]:
    """``repeat`` frames one at a time with the CIM emulated: the median latency beside the modeled one."""
    session.measure_latency(feeds)  # warm-up: each host piece's first run allocates
    latencies = sorted(session.measure_latency(feeds).latencies_ns[0] for _ in range(repeat))
    median = float(np.median(latencies))
    modeled = session.timeline.makespan_ns  # the plan's schedule replayed for one frame alone
    pieces = host_pieces_of(session.manifest.plan.report)
    predicted = latency_prediction(session, pieces)
    result = {"measured": median, "modeled": modeled}
    which = "one frame alone"
    if pieces is not None and predicted is not None:  # compiled with --measure-pieces: host costs measured in the runtime
        result = {"measured": median, "modeled": predicted, "modeled_per_operator": modeled}
        which += f", host pieces measured on {pieces.cpu}; per-operator costs {_fmt_ns(modeled)}"
    print(f"measured latency (modeled CIM timing): median {_fmt_ns(median)} of {repeat} frames "
          f"(min {_fmt_ns(latencies[0])}, max {_fmt_ns(latencies[-1])}); modeled {_fmt_ns(result['modeled'])} "
          f"({which}); measured/modeled {_ratio(median, result['modeled'])}")
    return result


def _timed_stream(session, feeds: dict[str, np.ndarray], single: dict[str, np.ndarray], frames: int) -> dict[str, float | None]:
    """A stream of ``frames`` with the CIM emulated: frames/s and the steady-state period beside the plan's."""
    run = session.measure_stream([feeds] * frames, warm_up=True)
    modeled = session.manifest.plan.period_ns
    pieces = host_pieces_of(session.manifest.plan.report)
    per_operator = modeled
    if pieces is not None and frames > 1:  # compiled with --measure-pieces: predicted for a stream of this length
        modeled = stream_prediction(session, frames, pieces)[0] or modeled
    measured = run.period_ns if frames > 1 else run.wall_ns
    print(f"streamed (modeled CIM timing): {frames} frames, {session.frames_in_flight} in flight, "
          f"{frames / run.wall_ns * 1e9:.1f} frames/s overall"
          + (f", steady state {1e9 / run.period_ns:.1f} frames/s" if frames > 1 else ""))
    m = frames // 10
    which = (f"spacing of the finishes of frames {m}..{frames - 1 - m}, leaving out fill and drain; "
             f"(last - first finish) / (frames - 1) = {_fmt_ns(run.period_end_to_end_ns)}") if frames > 1 else "one frame's latency"
    print(f"measured period {_fmt_ns(measured)} [{which}]; plan period "
          f"{_fmt_ns(modeled) if modeled else 'n/a (a plan written before streams: recompile)'}"
          + (f" (host pieces measured on {pieces.cpu}, a stream of {frames} frames; per-operator costs, steady "
             f"state {_fmt_ns(per_operator)})" if pieces is not None and modeled != per_operator and per_operator else "")
          + f"; measured/modeled {_ratio(measured, modeled)}")
    if 1 < frames < 2 * session.frames_in_flight:  # (PP-OCR int8, 46 in flight: 8 frames measured 0.12 of the period)
        print(f"note: {frames} frames with {session.frames_in_flight} in flight never reach the steady state; the "
              f"measured period is the fill's and the drain's (pass --stream {2 * session.frames_in_flight} or more)")
    exact = exact_outputs(session.manifest.model_path) if Path(session.manifest.model_path).is_file() else ()  # (as --check)
    same = all(equal for out in run.outputs for _, _, _, equal in compare(out, single, exact))
    print(f"stream outputs equal the single-frame outputs frame by frame: {'yes' if same else 'NO'}")
    result: dict[str, float | None] = {"measured": measured, "modeled": modeled, "outputs_equal": same}
    if modeled != per_operator:
        result["modeled_per_operator"] = per_operator
    return result
