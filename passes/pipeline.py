"""The compile pipeline: one place that runs the stages in order (DESIGN §1).

    load -> costs -> placement [-> explain] -> annotate -> split -> plan

A :class:`Stage` has a name, a function from one frozen value to the next and
an optional check that runs on its result (the independent validator after
placement, ``onnx.checker`` after split); explain runs only when asked for
(``CompileOptions.explain``: one re-solve per forced move and budget step).  :func:`run_stages` runs them; a
stage that fails with anything but a user error (:class:`CimsplitError`, which
passes unchanged so that users see the same one-line message) raises
:class:`StageError` naming the stage and the ones run before it, as onnx-ir's
``PassManager`` does.

Entry points, each the pipeline up to a stage: :func:`load_model`,
:func:`cost_model` (load, costs), :func:`place_model` (+ placement), :func:`compile_model` (all); and
:func:`build_artifacts`, the rewrite and emit stages for a placement made
elsewhere (a fixed placement in tests).  Writing the files is
:func:`cimsplit.passes.emit.artifacts.write_artifacts`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx

from cimsplit.compiler.costs import Costs, build_costs
from cimsplit.compiler.frontend import LoadedModel, ModelSpec, load
from cimsplit.compiler.hardware import Hardware
from cimsplit.compiler.host_prediction import host_costs
from cimsplit.compiler.host_profile import HostProfile
from cimsplit.compiler.opaque import opaque_latencies
from cimsplit.compiler.profile_cache import host_profile_for
from cimsplit.compiler.slicing import slice_costs
from cimsplit.compiler.workload import Workload
from cimsplit.errors import CimsplitError
from cimsplit.passes.emit.artifacts import CompileArtifacts
from cimsplit.passes.emit.explanation import explanation_to_json
from cimsplit.passes.emit.plan import build_plan, build_trace
from cimsplit.passes.emit.report import result_to_json
from cimsplit.passes.placement.driver import place, problem_from_costs
from cimsplit.passes.placement.explain import Explanation, critical_operators, explain_plan
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import PlacementResult
from cimsplit.passes.placement.sliced_place import slicing_kinds
from cimsplit.passes.placement.slicing import expanded_view
from cimsplit.passes.placement.stream.compact import compact_stream
from cimsplit.passes.placement.validate import validate
from cimsplit.passes.rewrite.annotate import annotate, complete_placements, placements_from_schedule
from cimsplit.passes.rewrite.slicing import slice_model
from cimsplit.passes.rewrite.split import SplitResult, split

__all__ = [
    "STAGES",
    "Stage",
    "StageError",
    "run_stages",
    "CompileOptions",
    "CostedModel",
    "PlacedModel",
    "CompileResult",
    "load_model",
    "cost_model",
    "place_model",
    "compile_model",
    "build_artifacts",
    "explain_placement",
]

log = logging.getLogger(__name__)

STAGES = ("load", "costs", "placement", "explain", "annotate", "split", "plan")
"""The stages of a compile, in order (explain only with ``CompileOptions.explain``)."""


@dataclass(frozen=True)
class Stage:
    """A named step from one frozen value to the next, with an optional check of its result."""

    name: str
    run: Callable[[Any], Any]
    check: Callable[[Any], None] | None = None


class StageError(RuntimeError):
    """A stage failed for a reason that is not the user's (a bug, or a check that did not hold)."""

    def __init__(self, stage: str, done: Sequence[str], cause: BaseException) -> None:
        self.stage = stage
        self.done = tuple(done)
        after = f" after: {', '.join(self.done)}" if self.done else " (the first stage)"
        super().__init__(f"error running the {stage} stage{after}: {type(cause).__name__}: {cause}")


def run_stages(stages: Sequence[Stage], value: Any, done: Sequence[str] = ()) -> Any:
    """Run ``stages`` in order on ``value``; ``done`` names the stages already run (for messages)."""
    done = list(done)
    for stage in stages:
        try:
            value = stage.run(value)
            if stage.check is not None:
                stage.check(value)
        except CimsplitError:
            raise
        except Exception as exc:
            raise StageError(stage.name, done, exc) from exc
        log.debug("stage %s done", stage.name)
        done.append(stage.name)
    return value


@dataclass(frozen=True)
class CompileOptions:
    """How to compile, beside the model and the hardware."""

    solve: SolveOptions = field(default_factory=SolveOptions)
    paper_exact: bool = False
    """No graph input/output transfers (the paper's model)."""
    host_profile: HostProfile | None = None
    """Host latencies to use; None reads ``hardware.host_profile`` or profiles this machine (cached)."""
    op_latencies: Mapping[str, float] = field(default_factory=dict)
    allow_unpredicted: bool = False
    """With ``hardware.host_model``: profile here the operator kinds the calibration lacks (else an error)."""
    """``--op-latency``: host latency in ns of operators onnxruntime cannot profile, by node name or op type."""
    explain: bool = False
    """Run the explain stage: explain.json and each node's reason on annotated.onnx."""


@dataclass(frozen=True)
class CostedModel:
    """After the costs stage: the simplified model, its host latencies, costs and placement problem."""

    spec: ModelSpec
    hardware: Hardware
    loaded: LoadedModel
    profile: HostProfile
    """With the latencies of operators onnxruntime cannot profile filled in (:mod:`cimsplit.compiler.opaque`)."""
    costs: Costs
    problem: PlacementProblem
    warnings: tuple[str, ...] = ()
    """A suspect host profile, operators whose host latency is unknown; the placement's warnings start with these."""


@dataclass(frozen=True)
class PlacedModel:
    """A placement decision over a model's workload: what the rewrite stages read."""

    model: onnx.ModelProto = field(repr=False)
    workload: Workload = field(repr=False)
    result: PlacementResult
    hardware: Hardware
    model_path: str
    fingerprint: str
    report: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """The placement report (``partition --json``) that plan.json carries."""
    explanation: Explanation | None = field(default=None, repr=False)
    """Why each operator sits where it does (the explain stage), when asked for."""


@dataclass(frozen=True)
class _Annotated:
    placed: PlacedModel
    annotated: onnx.ModelProto = field(repr=False)
    devices: Mapping[str, str]


@dataclass(frozen=True)
class _Split:
    annotated: _Annotated
    split: SplitResult


@dataclass(frozen=True)
class CompileResult:
    """Everything a compile made, in memory: the costed model, the placement and the files' contents."""

    costed: CostedModel
    placed: PlacedModel
    artifacts: CompileArtifacts

    @property
    def result(self) -> PlacementResult:
        return self.placed.result


# ---------------------------------------------------------------- the stages
def _load(hardware: Hardware) -> Stage:
    def run(spec: ModelSpec) -> LoadedModel:
        return load(spec.path, dict(spec.input_shapes), crossbar_size=(hardware.crossbar_rows, hardware.crossbar_cols),
                    frozen_inputs=dict(spec.frozen_inputs))

    return Stage("load", run)


def _costs(spec: ModelSpec, hardware: Hardware, options: CompileOptions) -> Stage:
    def run(loaded: LoadedModel) -> CostedModel:
        profile = options.host_profile or host_costs(loaded, host_model=hardware.host_model,
                                                     host_profile=hardware.host_profile,
                                                     allow_unpredicted=options.allow_unpredicted)
        profile = profile or host_profile_for(loaded, hardware.host_profile)
        # kinds the calibration lacks, profiled here; a suspect measured profile (outside SUM_OVER_MODEL)
        predicted_warnings = tuple(getattr(profile, "warnings", ()))
        profile, warnings = opaque_latencies(profile, loaded.model, options.op_latencies)
        warnings = (*predicted_warnings, *warnings)
        costs = build_costs(loaded.workload, hardware, profile, paper_exact=options.paper_exact)
        slices = slice_costs(loaded.model, loaded.workload, costs, slicing_kinds(options.solve.slicing),
                             paper_exact=options.paper_exact)
        problem = problem_from_costs(loaded.workload, costs, slices)
        return CostedModel(spec, hardware, loaded, profile, costs, problem, warnings)

    return Stage("costs", run)


def _placement(options: CompileOptions) -> Stage:
    # Explanations are of whole-operator placements: --explain compiles without slicing.
    solve = replace(options.solve, slicing="off") if options.explain else options.solve

    def run(costed: CostedModel) -> PlacedModel:
        result = place(costed.problem, solve)
        if result.objective == "latency" and result.stream is not None:  # the frame `run --stream` executes
            result = replace(result, stream=compact_stream(result.problem, result.stream))
        if costed.warnings:  # operators without a host latency: plan.json says so
            result = replace(result, warnings=(*costed.warnings, *result.warnings))
        loaded = costed.loaded
        report = result_to_json(result, loaded.workload, costed.costs, profile=costed.profile)
        if costed.spec.frozen_inputs:  # so that `run --check` feeds them to the original model
            report["frozen_inputs"] = dict(costed.spec.frozen_inputs)
        return PlacedModel(
            loaded.model, loaded.workload, result, costed.hardware,
            model_path=str(Path(loaded.path).resolve()), fingerprint=loaded.fingerprint, report=report,
        )

    def check(placed: PlacedModel) -> None:
        """The independent validator: budget, forced host placement, re-timed makespan (DESIGN §4)."""
        schedule = placed.result.schedule
        validate(placed.result.problem, schedule.on_host, start_ns=(schedule.parts or schedule).start_ns,
                 objective_ns=schedule.makespan_ns, source="placement", slicing=schedule.slicing)

    return Stage("placement", run, check)


def explain_placement(workload: Workload, result: PlacementResult, options: SolveOptions,
                      operators: Sequence[str] | None = None) -> Explanation:
    """Every forced move and the budget curve of ``result``, solved with ``options`` (``operators``: only those)."""
    if result.sliced:
        raise CimsplitError("explain covers whole-operator placements only; this one slices operators",
                            hint="pass --slicing off")
    not_capable = {op.name: op.reason or "not CIM-capable" for op in workload.operators if not op.cim_capable}
    return explain_plan(result, lambda problem: place(problem, options), operators=operators, not_capable=not_capable)


def _explain(options: CompileOptions) -> Stage:
    def run(placed: PlacedModel) -> PlacedModel:
        return replace(placed, explanation=explain_placement(placed.workload, placed.result, options.solve))

    return Stage("explain", run)


def _annotate(placed: PlacedModel) -> _Annotated:
    if list(placed.result.problem.names) != [op.name for op in placed.workload.operators]:
        raise ValueError("the placement must list the workload's operators in workload order")
    if placed.result.sliced:  # TSO: sliced operators become their two parts and a Concat
        model, placements = slice_model(placed.model, placed.workload, placed.result)
    else:
        model = placed.model
        placements = complete_placements(model, placements_from_schedule(placed.workload, placed.result.schedule))
    devices = {name: p.device for name, p in placements.items()}
    reasons = None if placed.explanation is None else {
        e.name: (f"{e.reason}: {e.detail}", e.forced_makespan_ns) for e in placed.explanation.operators}
    return _Annotated(placed, annotate(model, placements, reasons), devices)


def _split(annotated: _Annotated) -> _Split:
    return _Split(annotated, split(annotated.annotated, annotated.devices, annotated.placed.hardware,
                                   whole=annotated.placed.model))


_ONNX_DOMAINS = frozenset({"", "ai.onnx", *(schema.domain for schema in onnx.defs.get_all_schemas())})


def _has_unknown_ops(model: onnx.ModelProto) -> bool:
    """Whether a node calls an operator neither onnx nor the model's own functions define (a custom op)."""
    local = {(f.domain, f.name) for f in model.functions}
    nodes = [*model.graph.node, *(n for f in model.functions for n in f.node)]
    return any(n.domain not in _ONNX_DOMAINS and (n.domain, n.op_type) not in local for n in nodes)


def _check_split(value: _Split) -> None:
    """Every partition and the top level pass ``onnx.checker``'s full check (with strict shape inference).

    A model with custom operators gets the structural check only: onnx cannot infer through
    an operator it has no schema for, so the full check cannot pass however valid the model is.
    """
    for model in (*value.split.partitions.values(), value.split.partitioned):
        onnx.checker.check_model(model, full_check=not _has_unknown_ops(model))


def _plan(value: _Split) -> CompileArtifacts:
    placed, result = value.annotated.placed, value.split
    plan = build_plan(placed.report, placed.model, placed.model_path, placed.fingerprint, result.plan, placed.result)
    problem, schedule = expanded_view(placed.result.problem, placed.result.schedule)
    critical = [problem.names[v] for v in sorted(critical_operators(problem, schedule))]
    trace = build_trace(plan.timeline, Path(placed.model_path).stem, critical)
    log.info("split into %d partitions with %d transfers", len(result.plan.partitions), len(result.plan.transfers))
    explain = None if placed.explanation is None else explanation_to_json(placed.explanation)
    return CompileArtifacts(value.annotated.annotated, result, plan, trace, explain)


_REWRITE = (Stage("annotate", _annotate), Stage("split", _split, _check_split), Stage("plan", _plan))


# ------------------------------------------------------------ entry points
def load_model(spec: ModelSpec, hardware: Hardware) -> LoadedModel:
    """The load stage alone (the sweep loads once per crossbar size and costs many points)."""
    return run_stages([_load(hardware)], spec)


def cost_model(spec: ModelSpec, hardware: Hardware, options: CompileOptions | None = None,
               loaded: LoadedModel | None = None) -> CostedModel:
    """Stages load and costs (``loaded``: a model already through the load stage for ``hardware``)."""
    options = options or CompileOptions()
    if loaded is not None:
        return run_stages([_costs(spec, hardware, options)], loaded, done=["load"])
    return run_stages([_load(hardware), _costs(spec, hardware, options)], spec)


def place_model(costed: CostedModel, options: CompileOptions | None = None) -> PlacedModel:
    """The placement stage, on the result of :func:`cost_model`."""
    return run_stages([_placement(options or CompileOptions())], costed, done=["load", "costs"])


def compile_model(spec: ModelSpec, hardware: Hardware, options: CompileOptions | None = None) -> CompileResult:
    """Every stage: load, costs, placement, annotate, split, plan."""
    options = options or CompileOptions()
    costed = cost_model(spec, hardware, options)
    placed = place_model(costed, options)
    done = ["load", "costs", "placement"]
    if options.explain:
        placed = run_stages([_explain(options)], placed, done=done)
        done.append("explain")
    artifacts = run_stages(_REWRITE, placed, done=done)
    return CompileResult(costed, placed, artifacts)


def build_artifacts(
    model: onnx.ModelProto,
    workload: Workload,
    result: PlacementResult,
    hardware: Hardware,
    *,
    model_path: str,
    fingerprint: str,
    report: Mapping[str, Any] | None = None,
    explanation: Explanation | None = None,
) -> CompileArtifacts:
    """The annotate, split and plan stages for a placement made elsewhere (e.g. fixed by hand).

    ``explanation`` (of ``result``) stamps each node's reason and becomes explain.json.
    """
    placed = PlacedModel(model, workload, result, hardware, model_path, fingerprint, dict(report or {}), explanation)
    return run_stages(_REWRITE, placed, done=["placement"])
