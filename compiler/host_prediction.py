"""Host latencies predicted from a board's calibration instead of profiled (``--host-model``).

:func:`predicted_profile` turns a :class:`HostModel` and a loaded model into a
:class:`PredictedProfile`, a :class:`HostProfile` whose per-node medians are
predictions (an operator's whole latency on its anchor node, 0 on the nodes
fused into it), so that costs, placement, the sweep and plan.json take it
as they take a measured profile; its ``summary()`` says the costs are
predicted and from which calibration.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import onnx
import onnxruntime as ort

from cimsplit.compiler.host_chains import Chain, calibrated, fused_chains
from cimsplit.compiler.host_fused import QUANTIZED_SILU, SILU_CHAIN_KERNELS, activation_kernels, quantized_silu
from cimsplit.compiler.host_glue import GLUE_KINDS, GLUE_PREFIX, REORDER_KINDS, Glue, glue_kernels
from cimsplit.compiler.host_model import (
    INT8_PREFIX,
    RUNS_IN_FLOAT,
    HostModel,
    fused_activations,
    fused_kind,
    is_gemm_kind,
    operator_features,
    operator_kind,
    plain_kind,
)
from cimsplit.compiler.host_profile import FORMAT_VERSION, HostProfile
from cimsplit.compiler.host_variants import SECOND_LAST_AXIS, op_variants
from cimsplit.compiler.kernel_attribution import ATTRIBUTION_VERSION, CALIBRATION_ATTRIBUTIONS, attribute_kernels
from cimsplit.compiler.ort_profiler import optimized_model
from cimsplit.compiler.qdq_kernels import int8_kernels
from cimsplit.compiler.workload import Operator, Workload
from cimsplit.errors import CimsplitError

__all__ = ["PredictedProfile", "predict_latencies", "predicted_profile", "check_host_model", "host_costs"]

log = logging.getLogger(__name__)


class _Loaded(Protocol):
    model: onnx.ModelProto
    workload: Workload
    fingerprint: str
    input_shapes: dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class PredictedProfile(HostProfile):
    calibration: dict[str, Any] = field(default_factory=dict, compare=False)
    """The calibration's summary (file, cpu, onnxruntime, level, kinds)."""
    unpredicted: tuple[str, ...] = field(default=(), compare=False)
    """Operators whose kind the calibration lacks, profiled on this machine instead."""
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def summary(self) -> dict[str, Any]:
        summary = super().summary()
        summary.update(predicted=True, calibration=dict(self.calibration), unpredicted=list(self.unpredicted))
        return summary

    def describe(self) -> str:
        profiled = f"; {len(self.unpredicted)} operator(s) profiled here" if self.unpredicted else ""
        return (f"host costs: predicted from calibration {self.calibration.get('calibration')} (cpu {self.cpu}, "
                f"onnxruntime {self.ort_version}, {self.threads} thread(s), level {self.calibration.get('level')}){profiled}")


_RUNS_AS = {"HardSwish": (("HardSigmoid", 1), ("Mul", 2))}
"""Activations onnxruntime runs as their ONNX function body: the kinds that predict them, with the tensors each reads."""


def _element_kinds(op_type: str, elements: float, prefix: str = "") -> list[tuple[str, dict[str, float]]]:
    """(kind, features) that predict an element-wise op of ``elements`` outputs: its own kind, or its function body's."""
    return [(prefix + kind, {"n_in": elements * reads, "n_out": elements}) for kind, reads in _RUNS_AS.get(op_type, ((op_type, 1),))]


def _function_body(kind: str, elements: float) -> list[tuple[str, dict[str, float]]] | None:
    """(kind, features) of the function body onnxruntime runs for an op of ``kind`` (None if it has none): a float
    op's body in float kinds; a quantized op's first body op in its int8 kind (the DequantizeLinear before the op and
    the QuantizeLinear after it, ``int8:HardSwish-s8in`` -> ``int8:HardSigmoid-s8in``), the rest float between them."""
    op_type = plain_kind(kind).removeprefix(INT8_PREFIX)
    if op_type not in _RUNS_AS:
        return None
    body = _element_kinds(op_type, elements)
    (first, features), rest = body[0], body[1:]
    return [(kind.replace(op_type, first, 1), features), *rest]


def _in_float(op: Operator, kind: str) -> list[tuple[str, dict[str, float]]] | None:
    """(kind, features) of what onnxruntime runs for a quantized op it has no quantized kernel for
    (:data:`RUNS_IN_FLOAT`; None for any other kind): the float kernel and its weight's DequantizeLinear (not folded:
    it runs at every inference).  The op's own QuantizeLinear and DequantizeLinear kernels are its glue
    (:mod:`cimsplit.compiler.host_glue`)."""
    base = plain_kind(kind).removeprefix(INT8_PREFIX)
    if not kind.startswith(INT8_PREFIX) or base not in RUNS_IN_FLOAT:
        return None
    features = operator_features(op)
    kernels = [(base, features)]
    if "m" in features:
        weights = features["m"] * features["n"]
        kernels.append((GLUE_PREFIX + "DequantizeLinear", {"n_in": weights, "n_out": weights}))
    return kernels


def check_host_model(host_model: HostModel) -> None:
    """A calibration measured with another onnxruntime predicts another runtime: refuse it."""
    if host_model.ort_version != ort.__version__:
        raise CimsplitError(
            f"host model {host_model.source!r} was calibrated with onnxruntime {host_model.ort_version}, "
            f"this is onnxruntime {ort.__version__}",
            hint="calibrate the board again with this onnxruntime (`cimsplit calibrate -o FILE`)",
        )


def predict_latencies(workload: Workload, model: onnx.ModelProto, host_model: HostModel) -> tuple[dict[str, float], dict[str, str]]:
    """T_host,v in ns for every operator whose kind is calibrated, and operator -> kind for those that are not."""
    node_types = {node.name: node.op_type for node in model.graph.node}
    kernels = int8_kernels(model.graph, host_model.machine.get("machine"))
    latencies: dict[str, float] = {}
    missing: dict[str, str] = {}
    glue: dict[str, list[Glue]] = {}
    optimized = optimized_model(model, host_model.level, host_model.threads)
    regions = attribute_kernels(model, optimized)
    fused = {name: [(calibrated(kind, host_model.fits), features) for kind, features in ran]
             for name, ran in activation_kernels(model, optimized, workload, regions).items()}
    variants = op_variants(model, optimized)
    chains = [replace(chain, kind=calibrated(chain.kind, host_model.fits)) for chain in fused_chains(model, optimized, workload, regions)]
    chains = [chain for chain in chains if chain.kind in host_model.fits]
    chained = {name for chain in chains for name in chain.operators}
    # calibrations from before a family of glue kinds predict without it
    known = {kind for family in (GLUE_KINDS, REORDER_KINDS) if all(k in host_model.fits for k in family) for kind in family}
    if known:
        glue = {name: [g for g in kernels if g.kind in known] for name, kernels in
                glue_kernels(model, optimized, workload, regions).items()}
        if int(host_model.campaign.get("points", 1)) < 2:  # a calibration whose element points held their glue
            gemm = {op.name for op in workload.operators if op.m is not None}
            glue = {name: kernels for name, kernels in glue.items() if name in gemm}
    for op in workload.operators:
        variant = variants.get(op.name, "")
        kind = operator_kind(op, node_types, kernels.get(op.name, ""), variant)
        if kind not in host_model.fits and variant == SECOND_LAST_AXIS:  # a calibration from before that variant
            kind = operator_kind(op, node_types, kernels.get(op.name, ""))
        if kind not in host_model.fits:
            kind = plain_kind(kind)  # a calibration from before the kernel kinds
        prefix = INT8_PREFIX if kind.startswith(INT8_PREFIX) else ""
        needed = [(kind, operator_features(op))]
        elements = float(max(op.n_out, 1))
        if kind not in host_model.fits:  # a HardSwish of its own: its function body; an int8 ConvTranspose: in float
            needed = _function_body(kind, elements) or _in_float(op, kind) or needed
        ran = fused.get(op.name)
        pair = fused_kind(kind, fused_activations(op, node_types))
        if pair != kind and pair in host_model.fits:  # measured with its activation (``Conv-depthwise+Clip``)
            needed = [(pair, operator_features(op))]
        elif (QUANTIZED_SILU in host_model.fits and quantized_silu(op, node_types) and ran is not None
              and {k for k, _ in ran} == SILU_CHAIN_KERNELS):  # measured as a network runs it
            needed.append((QUANTIZED_SILU, {"n_in": elements, "n_out": elements}))
        elif ran is not None and all(k in host_model.fits for k, _ in ran):  # the activation: what runs
            needed += ran
        else:
            needed += [item for act in fused_activations(op, node_types) for item in _element_kinds(act, elements, prefix)]
        # (a GEMM kind needs the product's shape: a ConvTranspose or activation MatMul of unknown shapes has none)
        absent = [k for k, f in needed if k not in host_model.fits or (is_gemm_kind(k) and "m" not in f)]
        if absent:
            if op.name not in chained:
                missing[op.name] = absent[0]
            continue
        needed += [(g.kind, {"n_in": g.elements, "n_out": g.elements}) for g in glue.get(op.name, ())]
        latencies[op.name] = sum(host_model.predict_kind_ns(k, f) for k, f in needed)
    for chain in chains:
        latencies.update(_chain_shares(chain, host_model, latencies))
    return latencies, missing


def _chain_shares(chain: Chain, host_model: HostModel, alone: dict[str, float]) -> dict[str, float]:
    """The chain's one kernel, predicted by its kind, split among its operators as their predictions alone split
    (equally if one has none), as a profile splits a fused kernel's time by the nodes' unfused times."""
    total = host_model.predict_kind_ns(chain.kind, {"n_in": chain.elements, "n_out": chain.elements})
    weights = [alone.get(name, 0.0) for name in chain.operators]
    if not all(w > 0 for w in weights):
        weights = [1.0] * len(weights)
    return {name: total * w / sum(weights) for name, w in zip(chain.operators, weights)}


def predicted_profile(loaded: _Loaded, host_model: HostModel, *, allow_unpredicted: bool = False,
                      measured: HostProfile | None = None) -> PredictedProfile:
    """The predicted profile of ``loaded``; uncovered kinds are an error unless ``allow_unpredicted``.

    With ``allow_unpredicted``, the operators of uncovered kinds take their
    latencies from ``measured`` (profiled on this machine when not given).
    """
    check_host_model(host_model)
    latencies, missing = predict_latencies(loaded.workload, loaded.model, host_model)
    nodes: dict[str, dict[str, Any]] = {}
    warnings: list[str] = []
    if missing:
        kinds = sorted(set(missing.values()))
        if not allow_unpredicted:
            raise CimsplitError(
                f"host model {host_model.source!r} does not cover operator kind {kinds[0]!r} "
                f"(operator {next(op for op, kind in missing.items() if kind == kinds[0])!r})"
                + (f" nor {', '.join(repr(k) for k in kinds[1:])}" if len(kinds) > 1 else ""),
                hint="calibrate with `cimsplit calibrate --int8` for int8 models, or pass --allow-unpredicted "
                     "to profile those operators on this machine",
            )
        if measured is None:
            from cimsplit.compiler.profile_cache import cached_profile

            measured = cached_profile(loaded, threads=host_model.threads)
        by_name = {op.name: op for op in loaded.workload.operators}
        for name in missing:
            for node in by_name[name].nodes:
                stats = measured.nodes.get(node)
                nodes[node] = dict(stats) if stats is not None else _stats(0.0)
        warnings.append(f"host latencies of {len(missing)} operator(s) of kind(s) {', '.join(kinds)} are not covered "
                        f"by host model {host_model.source!r}: profiled on this machine instead")
    if host_model.level != "off" and host_model.campaign.get("attribution") not in CALIBRATION_ATTRIBUTIONS:
        warnings.append(f"host model {host_model.source!r} was measured with another charging of onnxruntime's kernels "
                        f"to nodes (attribution {host_model.campaign.get('attribution', 1)}, this cimsplit "
                        f"{ATTRIBUTION_VERSION}): calibrate the board again")
        log.warning("%s", warnings[-1])
    for op in loaded.workload.operators:
        if op.name in latencies:
            nodes[op.nodes[0]] = _stats(latencies[op.name], op.op_type)
            for node in op.nodes[1:]:
                nodes[node] = _stats(0.0)
    total = sum(float(stats["median_ns"]) for stats in nodes.values())
    return PredictedProfile(
        format_version=FORMAT_VERSION, fingerprint=loaded.fingerprint, ort_version=host_model.ort_version,
        cpu=host_model.cpu, threads=host_model.threads, runs=0, warmup=0, nodes=nodes,
        # No whole model was timed: the predicted sum stands for the level-off median, the level-all one is unknown.
        model_median_ns={"optimizations_off": total},
        source=f"predicted by {host_model.source}", calibration=host_model.summary(),
        unpredicted=tuple(sorted(missing)), warnings=tuple(warnings),
    )


def host_costs(loaded: _Loaded, *, host_model: str | None, host_profile: str | None, allow_unpredicted: bool = False,
               profile_here: Any = None) -> HostProfile | None:
    """The predicted profile for ``--host-model``; None when no host model is asked for.

    ``--host-model`` with ``--host-profile`` is an error: the two are two answers to one question.
    """
    if host_model is None:
        if allow_unpredicted:
            raise CimsplitError("--allow-unpredicted needs --host-model", hint="pass --host-model board.json")
        return None
    if host_profile is not None:
        raise CimsplitError("--host-model and --host-profile both give the host latencies; pass one of them",
                            hint="--host-model predicts from a calibration, --host-profile reads a measured profile")
    return predicted_profile(loaded, HostModel.load(host_model), allow_unpredicted=allow_unpredicted, measured=profile_here)


def _stats(median_ns: float, op_type: str = "") -> dict[str, Any]:
    return {"op_type": op_type, "median_ns": median_ns, "p10_ns": median_ns, "p90_ns": median_ns, "samples": 0}

