"""Before any solve: every model's file, front end, host latencies and per-point problems.

:func:`prepare_tasks` gives one :class:`PointTask` per grid point.  Each model
is one job (:func:`prepare_model`): build it if it is a zoo name (quantizing
one is seconds of single-threaded work, done once per install:
:mod:`cimsplit.models.build_cache`), load it through the front end once per
crossbar size, take each host's latencies, and cost every point.  The jobs run
side by side in the sweep's process pool when it has one — the paper's four
int8 models took 11 s one after the other before the first solve.

Host latencies measured here must be measured on a quiet machine, so a worker
never profiles: a model whose profile on this machine is not cached yet comes
back unprepared and is prepared again in this process once every job is done,
while the pool is idle (:func:`find_cached_profile`).  So is a model whose job
died with its worker.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cimsplit.errors import CimsplitError
from cimsplit.files import write_atomic
from cimsplit.passes.sweep.grid import SweepPoint
from cimsplit.passes.sweep.spec import THIS_MACHINE, SweepObserver, SweepSpec
from cimsplit.passes.sweep.task import PointTask, task_fingerprint

__all__ = ["HostSpec", "ModelSource", "resolve_models", "resolve_hosts", "prepare_model", "prepare_tasks"]

log = logging.getLogger(__name__)

References = dict[tuple[str, str], dict[str, Any]]
"""(model, host) -> where its host latencies come from (the ``host_references`` of sweep.json)."""


@dataclass(frozen=True)
class HostSpec:
    label: str
    """The ``host`` column: the preset name, or the TOML file's stem."""
    spec: str
    profile: str | None
    """Profile file or folder; None with ``this_machine`` means profile here."""
    this_machine: bool
    model: str | None = None
    """Calibration (`cimsplit calibrate`) to predict host latencies from, instead of a profile."""


@dataclass(frozen=True)
class ModelSource:
    label: str
    path: Path
    zoo: str | None = None
    """The zoo model to build into ``path``; None for the user's file."""


class _NotProfiled(Exception):
    """This machine's profile of the model is not cached, and a worker must not measure it."""


def resolve_models(entries: Sequence[str], out_dir: Path) -> list[ModelSource]:
    """Each entry's label and file; zoo names are built (later) into ``out_dir/models/NAME.onnx``."""
    from cimsplit.models import zoo

    models: dict[str, ModelSource] = {}
    for entry in entries:
        path = Path(entry)
        if path.is_file():
            source = ModelSource(path.stem, path)
        elif entry in zoo.NAMES:
            source = ModelSource(entry, Path(out_dir) / "models" / f"{entry}.onnx", entry)
        else:
            raise CimsplitError(f"model {entry!r} is neither an ONNX file nor a zoo model", hint=f"zoo models: {', '.join(zoo.NAMES)}")
        if source.label in models:
            raise CimsplitError(f"two models are both called {source.label!r}", hint="rename one file: the file stem names the model in the results")
        models[source.label] = source
    return list(models.values())


def resolve_hosts(specs: Sequence[str], host_profiles: Mapping[str, str],
                  host_models: Mapping[str, str] | None = None) -> list[HostSpec]:
    """Check every ``--hw`` value now (a typo fails before any work) and find its profile."""
    from cimsplit.compiler.hardware import PRESETS, load_hardware

    hosts: list[HostSpec] = []
    known: set[str] = set()
    for spec in specs:
        base = load_hardware(spec)
        label = spec if spec in PRESETS else Path(spec).stem
        if label in {h.label for h in hosts}:
            raise CimsplitError(f"host {label!r} is given twice", hint="list every --hw value once")
        given = host_profiles.get(label) or host_profiles.get(spec)
        model = (host_models or {}).get(label) or (host_models or {}).get(spec)
        if given and model:
            raise CimsplitError(f"host {label!r} has both --host-model and --host-profile; pass one of them")
        profile = given or (None if model else base.host_profile)
        model = model or (None if given else base.host_model)
        hosts.append(HostSpec(label, spec, str(profile) if profile else None,
                              profile is None and model is None and spec == THIS_MACHINE, str(model) if model else None))
        known.update((label, spec))
    stray = sorted((set(host_profiles) | set(host_models or {})) - known)
    if stray:
        raise CimsplitError(f"--host-profile names host {stray[0]!r}, which is not in --hw", hint=f"hosts: {', '.join(h.label for h in hosts)}")
    return hosts


def _build_zoo(source: ModelSource, image_size: int | None, int8: bool) -> None:
    """Write the zoo model into its file (left alone if it already holds the same bytes: a resumed sweep)."""
    from cimsplit.models.build_cache import cached_build

    data = cached_build(source.zoo, image_size=image_size, int8=int8)
    source.path.parent.mkdir(parents=True, exist_ok=True)
    if not source.path.is_file() or source.path.read_bytes() != data:
        write_atomic(source.path, data)


def _host_profile(host: HostSpec, model_label: str, loaded: Any, measure: bool) -> Any:
    from cimsplit.compiler.host_profile import HostProfile, check_fingerprint
    from cimsplit.compiler.profile_cache import cached_profile, find_cached_profile

    if host.model is not None:
        from cimsplit.compiler.host_model import HostModel
        from cimsplit.compiler.host_prediction import predicted_profile

        return predicted_profile(loaded, HostModel.load(host.model))
    if host.profile is not None:
        path = Path(host.profile)
        profile = HostProfile.load(path / f"{model_label}.json" if path.is_dir() else path)
        check_fingerprint(profile, loaded.fingerprint)
        return profile
    if host.this_machine:
        if not measure:
            profile = find_cached_profile(loaded)
            if profile is None:
                raise _NotProfiled
            return profile
        log.info("profiling %s on this machine (cached per model fingerprint)", model_label)
        return cached_profile(loaded)
    raise CimsplitError(
        f"no host profile for {host.label}: profile on the board with `cimsplit profile` and pass --host-profile {host.label}=FILE"
    )


def _message(exc: Exception) -> str:
    if isinstance(exc, CimsplitError):
        return exc.one_line()
    log.debug("sweep setup failed", exc_info=True)
    return f"{type(exc).__name__}: {exc}"


def prepare_model(spec: SweepSpec, source: ModelSource, hosts: Sequence[HostSpec], measure: bool = True,
                  build: bool = True) -> tuple[list[PointTask], References] | None:
    """The tasks of one model's points, in grid order (a point that cannot be built carries its error), and
    per host where its latencies come from: the profile's CPU and its whole-model latency with all onnxruntime
    optimizations (the honest CPU reference of DESIGN §3).  ``measure=False``: None if this machine's profile
    would have to be measured."""
    from cimsplit.compiler.frontend import ModelSpec
    from cimsplit.compiler.hardware import load_hardware
    from cimsplit.passes.pipeline import CompileOptions, cost_model, load_model
    from cimsplit.passes.placement.options import SolveOptions

    solve = {"solver": spec.solver, "time_limit_s": spec.time_limit_s, "mip_gap": spec.mip_gap, "plain": spec.plain,
             "objective": spec.objective, "frames_in_flight": spec.frames_in_flight, "slicing": spec.slicing}
    tasks: list[PointTask] = []
    references: References = {}
    build_error = None
    try:
        if build and source.zoo is not None:
            _build_zoo(source, spec.image_size, spec.int8)
    except Exception as exc:  # every point of the model fails alike; the sweep goes on
        build_error = _message(exc)
    model_spec = ModelSpec(str(source.path), dict(spec.input_shapes))
    loaded_by_size: dict[tuple[int, int], Any] = {}
    for host in hosts:
        points = [SweepPoint(source.label, host.label, c, t, bound) for c in spec.crossbars
                  for t in spec.mvm_latencies_ns for bound in spec.max_latencies_ns]
        try:
            if build_error is not None:
                raise CimsplitError(build_error)
            base = load_hardware(host.spec)
            size = (base.crossbar_rows, base.crossbar_cols)
            if size not in loaded_by_size:
                loaded_by_size[size] = load_model(model_spec, base)
            loaded = loaded_by_size[size]
            profile = _host_profile(host, source.label, loaded, measure)
        except _NotProfiled:
            return None
        except Exception as exc:  # the whole (model, host) block fails alike; the sweep goes on
            tasks.extend(PointTask(p, None, error=_message(exc), **solve) for p in points)
            continue
        references[(source.label, host.label)] = {
            "cpu": profile.cpu,
            "profile": host.profile or (f"predicted by {host.model}" if host.model else "profiled on this machine"),
            "ort_all_optimizations_ns": profile.model_median_ns.get("optimizations_all"),
        }
        options = CompileOptions(paper_exact=spec.paper_exact, host_profile=profile, solve=SolveOptions(slicing=spec.slicing))
        for point in points:
            try:
                hardware = load_hardware(host.spec, crossbars=point.crossbars, mvm_latency_ns=point.mvm_latency_ns)
                problem = cost_model(model_spec, hardware, options, loaded=loaded).problem
            except Exception as exc:
                tasks.append(PointTask(point, None, error=_message(exc), **solve))
                continue
            fingerprint = task_fingerprint(problem, **solve, max_latency_ns=point.max_latency_ns, reuse=spec.reuse)
            tasks.append(PointTask(point, problem, fingerprint=fingerprint, **solve))
    return tasks, references


def prepare_tasks(spec: SweepSpec, models: Sequence[ModelSource], hosts: Sequence[HostSpec],
                  observer: SweepObserver, pool: Executor | None = None) -> tuple[list[PointTask], References]:
    """Every point's task in grid order (models, then hosts, crossbars, latencies), and the host references.

    With a ``pool`` the models are prepared side by side without measuring; those that need this
    machine's profile are then prepared here, one at a time, with the pool idle."""
    def announce(source: ModelSource) -> None:
        for host in hosts:
            observer.preparing(source.label, host.label)

    prepared: list[tuple[list[PointTask], References] | None] = [None] * len(models)
    built: set[int] = set()  # models whose job ran to the end (built, if from the zoo)
    if pool is not None:
        for source in models:
            announce(source)
        futures = [pool.submit(prepare_model, spec, source, hosts, False) for source in models]
        for i, future in enumerate(futures):
            try:
                prepared[i] = future.result()
                built.add(i)
            except Exception:  # noqa: BLE001 (its worker died): prepare it here
                log.debug("preparing %s in a worker failed", models[i].label, exc_info=True)
    for i, source in enumerate(models):
        if prepared[i] is None:
            announce(source)
            prepared[i] = prepare_model(spec, source, hosts, build=i not in built)
    tasks: list[PointTask] = []
    references: References = {}
    for result in prepared:
        assert result is not None
        tasks.extend(result[0])
        references.update(result[1])
    return tasks, references
