"""Differential check of one model: compile at several budgets, run split, compare with onnxruntime.

For each crossbar budget the model goes through ``cimsplit compile`` (the real
CLI entry point, in this process, with a deterministic host profile and a
short solver time limit), every ``.onnx`` written passes ``onnx.checker``'s
full check, ``plan.json`` loads in the runtime, ``cimsplit.runtime.Session``
runs it and ``partitioned.onnx`` runs in plain onnxruntime; both are compared
with onnxruntime on the original model (float: atol 1e-4, rtol 1e-3; int8
QDQ models: bit for bit).  Each problem is a :class:`Failure` with a class
name, so a campaign can count them.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import traceback
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

BUDGETS = (0, 2, 10, 1000)
ATOL, RTOL = 1e-4, 1e-3
INT8_BIT_EXACT = True
"""Whether int8 mismatches are failures of their own class ``int8-mismatch`` (until QDQ cuts move to
the quantized tensors, branch int8cut) or ordinary ``mismatch`` failures."""

FAILURE_CLASSES = (
    "generator", "compile-refused", "compile-crash", "checker", "plan", "run-crash", "mismatch",
    "int8-mismatch", "partitioned-crash", "partitioned-mismatch", "partitioned-int8-mismatch", "stream-crash",
    "stream-mismatch",
)


@dataclass(frozen=True)
class Failure:
    kind: str
    budget: int | None
    detail: str

    def line(self) -> str:
        where = "" if self.budget is None else f" at {self.budget} crossbars"
        return f"{self.kind}{where}: {' '.join(self.detail.split())[:300]}"


def _shape_flags(model: onnx.ModelProto) -> list[str]:
    """``--input-shape`` flags fixing every symbolic input dim to 1 (none for a static model)."""
    flags = []
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if any(not d.dim_value for d in dims):
            flags += ["--input-shape", f"{vi.name}={','.join(str(d.dim_value or 1) for d in dims)}"]
    return flags


def synthetic_profile(path: Path, out: Path, shape_flags: Sequence[str] = ()) -> Path:
    """A host profile for ``path``'s simplified model: latency by element count, the same on every machine.

    T_host = 100 ns + 20 ns per output element for Conv/Gemm/MatMul (and their quantized
    forms), 100 ns + 1 ns per output element for everything else.
    """
    from cimsplit.compiler.frontend import load
    from cimsplit.compiler.host_profile import FORMAT_VERSION, HostProfile
    from cimsplit.compiler.loader import parse_input_shapes

    loaded = load(path, input_shapes=parse_input_shapes(shape_flags[1::2]))
    elements = {vi.name: int(np.prod([d.dim_value for d in vi.type.tensor_type.shape.dim]))
                for vi in [*loaded.model.graph.value_info, *loaded.model.graph.output]}
    heavy = ("Conv", "Gemm", "MatMul", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger")
    nodes = {}
    for node in loaded.model.graph.node:
        count = sum(elements.get(name, 0) for name in node.output)
        ns = 100.0 + count * (20.0 if node.op_type in heavy else 1.0)
        nodes[node.name] = {"op_type": node.op_type, "median_ns": ns, "p10_ns": ns, "p90_ns": ns, "samples": 1}
    total = sum(s["median_ns"] for s in nodes.values())
    profile = HostProfile(
        format_version=FORMAT_VERSION, fingerprint=loaded.fingerprint, ort_version=ort.__version__, cpu="fuzz",
        threads=1, runs=1, warmup=0, nodes=nodes, model_median_ns={"optimizations_off": total, "optimizations_all": total},
    )
    profile.save(out)
    return out


def _feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {vi.name: rng.standard_normal([d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
            for vi in model.graph.input}  # (a symbolic dim, as an export's batch, is fed as 1)


def _ort_run(model_path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference `run --check` uses: the runtime's own session options, symbolic input dims fixed to the feeds'."""
    from cimsplit.cli.run_cmd import reference_outputs

    names = [o.name for o in onnx.load(str(model_path), load_external_data=False).graph.output]
    return reference_outputs(str(model_path), feeds, names, 1, shapes={k: v.shape for k, v in feeds.items()})


def _compare(got: dict[str, np.ndarray], ref: dict[str, np.ndarray], exact: Collection[str]) -> str | None:
    """The first difference ``run --check`` would report (bit for bit for the outputs in ``exact``), or None."""
    if set(got) != set(ref):
        return f"outputs {sorted(got)} != {sorted(ref)}"
    for name, want in ref.items():
        have = np.asarray(got[name])
        if have.shape != want.shape or have.dtype != want.dtype:
            return f"{name}: {have.dtype}{list(have.shape)} != {want.dtype}{list(want.shape)}"
        if name in exact:
            if not np.array_equal(have, want):
                return f"{name}: not bit-identical, max |diff| {float(np.max(np.abs(have - want))):.3g}"
        elif not np.allclose(have, want, atol=ATOL, rtol=RTOL):
            return f"{name}: max |diff| {float(np.max(np.abs(have - want))):.3g}"
    return None


def _compile(model: Path, out: Path, profile: Path, budget: int, mvm_latency: str, time_limit_s: float,
             shape_flags: list[str], objective: str = "latency") -> Failure | None:
    from cimsplit.cli import main

    argv = ["compile", str(model), "-o", str(out), "--crossbars", str(budget), "--mvm-latency", mvm_latency,
            "--host-profile", str(profile), "--time-limit", str(time_limit_s), "--objective", objective, *shape_flags]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            status = main(argv)
    except BaseException as exc:  # noqa: BLE001 - every escape is a finding
        return Failure("compile-crash", budget, f"{type(exc).__name__}: {exc} | {_where(exc)}")
    if status != 0:
        return Failure("compile-refused", budget, stderr.getvalue().strip().splitlines()[-1:][0] if stderr.getvalue() else str(status))
    return None


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(frames[-3:]))


def _check_outputs(out: Path, budget: int) -> Failure | None:
    for file in sorted(out.glob("*.onnx")):
        try:
            onnx.checker.check_model(onnx.load(str(file)), full_check=True)
        except Exception as exc:  # noqa: BLE001
            return Failure("checker", budget, f"{file.name}: {type(exc).__name__}: {exc}")
    try:
        from cimsplit.runtime.manifest import load_manifest

        load_manifest(out)
        json.loads((out / "trace.json").read_text())
    except Exception as exc:  # noqa: BLE001
        return Failure("plan", budget, f"{type(exc).__name__}: {exc}")
    return None


def check_model(model_path: Path, work: Path, *, quantized: bool, seed: int = 0, budgets: tuple[int, ...] = BUDGETS,
                mvm_latency: str = "10ns", time_limit_s: float = 2.0, keep: bool = False, objective: str = "latency",
                stream: int = 0) -> list[Failure]:
    """All failures of ``model_path`` (an ONNX file in ``work``) over ``budgets``; empty when everything holds.

    ``objective``: the compile's (``throughput``: a stream's period); ``stream``: also run that many frames on the
    plan's stream schedule with the CIM emulated (``run --stream``), each frame's outputs equal to the single
    run's (bit for bit when quantized)."""
    from cimsplit.runtime import Session

    model = onnx.load(str(model_path))
    feeds = _feeds(model, seed)
    flags = _shape_flags(model)
    try:
        ref = _ort_run(model_path, feeds)
        profile = synthetic_profile(model_path, work / "host_profile.json", flags)
    except Exception as exc:  # noqa: BLE001
        return [Failure("generator", None, f"{type(exc).__name__}: {exc} | {_where(exc)}")]
    from cimsplit.cli.run_cmd import exact_outputs

    exact = exact_outputs(str(model_path)) if quantized else frozenset()
    mismatch = "int8-mismatch" if quantized and not INT8_BIT_EXACT else "mismatch"
    failures: list[Failure] = []
    for budget in budgets:
        out = work / f"out_{budget}"
        failure = _compile(model_path, out, profile, budget, mvm_latency, time_limit_s, flags, objective) or _check_outputs(out, budget)
        if failure is None:
            try:
                got = Session(out).run(feeds)
            except Exception as exc:  # noqa: BLE001
                failure = Failure("run-crash", budget, f"{type(exc).__name__}: {exc} | {_where(exc)}")
            else:
                diff = _compare(got, ref, exact)
                failure = Failure(mismatch, budget, diff) if diff else None
        if failure is None and stream:
            failure = _check_stream(out, budget, feeds, got, exact, stream)
        if failure is None:
            try:
                whole = _ort_run(out / "partitioned.onnx", feeds)
            except Exception as exc:  # noqa: BLE001
                failure = Failure("partitioned-crash", budget, f"{type(exc).__name__}: {exc}")
            else:
                diff = _compare(whole, ref, exact)
                failure = Failure("partitioned-" + ("mismatch" if mismatch == "mismatch" else "int8-mismatch"), budget, diff) if diff else None
        if failure is not None:
            failures.append(failure)
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
    return failures


def _check_stream(out: Path, budget: int, feeds: dict[str, np.ndarray], single: dict[str, np.ndarray],
                  exact: Collection[str], frames: int) -> Failure | None:
    """``frames`` frames of ``feeds`` on the plan's stream schedule, each compared with the single run."""
    from cimsplit.runtime import Session

    try:
        with Session(out, cim_timing="modeled") as session:
            run = session.measure_stream([feeds] * frames)
    except Exception as exc:  # noqa: BLE001
        return Failure("stream-crash", budget, f"{type(exc).__name__}: {exc} | {_where(exc)}")
    for k, outputs in enumerate(run.outputs):
        diff = _compare(outputs, single, exact)
        if diff:
            return Failure("stream-mismatch", budget, f"frame {k}: {diff}")
    return None


def is_int8_seed(seed: int) -> bool:
    """Campaigns quantize every 5th seed (4, 9, 14, ...)."""
    return seed % 5 == 4


def quantizer_of(seed: int, quantizer: str) -> str:
    """The quantizer configuration of an int8 seed: ``quantizer``, or for ``random`` one drawn from the seed."""
    from quantizers import STATIC

    return list(STATIC)[int(np.random.default_rng([seed, 2028]).integers(len(STATIC)))] if quantizer == "random" else quantizer


def check_seed(seed: int, work: Path, *, max_steps: int = 10, clutter: bool = False, dynamic: bool = False,
               quantizer: str = "s8s8-per-channel", opset: int = 17, **options) -> list[Failure]:  # noqa: ANN003
    """Generate seed's model (its int8 variant for every 5th seed, from ``quantizer``'s configuration, or
    ``random``'s: :func:`quantizer_of`) in ``work`` and :func:`check_model` it;
    ``clutter``: with exporter clutter added to the model (quantized or not) (:func:`clutter.add_clutter`);
    ``dynamic``: with a symbolic batch and views computed from it (:func:`export.as_dynamic_export`);
    ``opset`` 11: written as an opset-11 exporter writes it (:func:`export.as_opset_11`; opset 11 has no per-channel
    Q/DQ, so a per-channel configuration quantizes per tensor, as u8s8-per-tensor; int16 activations raise the
    quantized model's opset to 21)."""
    from clutter import add_clutter
    from export import as_dynamic_export, as_opset_11
    from quantizers import STATIC
    from random_models import quantize, seeded_model

    work.mkdir(parents=True, exist_ok=True)
    quantized = is_int8_seed(seed)
    try:
        model = seeded_model(seed, max_steps=max_steps)
        model = as_opset_11(model) if opset == 11 else model
        config = quantizer_of(seed, quantizer)
        if opset == 11 and STATIC[config].get("per_channel"):
            config = "u8s8-per-tensor"
        if quantized:
            path = quantize(model, work, seed, config)
        else:
            path = work / "model.onnx"
            onnx.save(model, str(path))
        if clutter:
            onnx.save(add_clutter(onnx.load(str(path)), seed), str(path))
        if dynamic:
            onnx.save(as_dynamic_export(onnx.load(str(path)), seed), str(path))
    except Exception as exc:  # noqa: BLE001
        return [Failure("generator", None, f"{type(exc).__name__}: {exc} | {_where(exc)}")]
    options.setdefault("mvm_latency", ("10ns", "1ns", "100ns")[seed % 3])
    return check_model(path, work, quantized=quantized, seed=seed, **options)
