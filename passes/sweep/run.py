"""Design-space exploration: partition every point of models x hosts x crossbars x MVM latency.

The expensive, machine-bound work happens once and here: each model goes
through the front end once (per crossbar size) and is profiled once per host
(this machine, or a profile file from the target board).  Per point only the
cheap part remains — ``build_costs`` for the point's hardware and
``problem_from_costs`` — and that yields a :class:`PlacementProblem` of plain
tables, which is what travels to the workers (:mod:`sweep_exec`).  Results go
to an append-only journal as they arrive, so rerunning an interrupted sweep
with the same folder solves only the points still missing
(:mod:`sweep_store`).

Which host is "this machine": the ``x86`` preset.  Its latencies come from
profiling here (``cached_profile``) unless ``--host-profile x86=FILE`` says
otherwise.  Any other preset (``arm``) or TOML file needs a profile measured on
that board — ``--host-profile HW=FILE`` (or ``HW=DIR`` holding ``<model>.json``
per model), or ``host_profile`` in the TOML — and without one every point of
that host records the error instead of silently using this machine's latencies.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cimsplit.errors import CimsplitError
from cimsplit.files import write_atomic
from cimsplit.passes.sweep.chain import ChainTask, budget_chains
from cimsplit.passes.sweep.execute import default_workers, execute_chains
from cimsplit.passes.sweep.grid import PAPER_CROSSBARS, PAPER_MVM_LATENCIES_NS, SweepGrid, SweepPoint
from cimsplit.passes.sweep.store import Journal, read_journal, write_results
from cimsplit.passes.sweep.task import PointTask, task_fingerprint

__all__ = ["SweepSpec", "SweepObserver", "SweepOutcome", "HostSpec", "run_sweep", "write_reports", "resolve_models", "resolve_hosts", "build_tasks"]

log = logging.getLogger(__name__)

THIS_MACHINE = "x86"
"""The preset whose host latencies are profiled on the machine running the sweep."""

MANIFEST = "sweep.json"


@dataclass(frozen=True)
class SweepSpec:
    """What to sweep and how to solve each point (everything but where it runs)."""

    models: tuple[str, ...]
    """ONNX files or zoo names (``cimsplit.models.NAMES``)."""
    hosts: tuple[str, ...] = (THIS_MACHINE,)
    crossbars: tuple[int, ...] = PAPER_CROSSBARS
    mvm_latencies_ns: tuple[float, ...] = PAPER_MVM_LATENCIES_NS
    host_profiles: Mapping[str, str] = field(default_factory=dict)
    """Host label (or spec) -> profile JSON file, or a folder of ``<model>.json``."""
    host_models: Mapping[str, str] = field(default_factory=dict)
    """Host label (or spec) -> calibration JSON (``--host-model``); excludes a profile for that host."""
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    image_size: int | None = None
    """Input side of zoo models (None: the model's default)."""
    int8: bool = False
    """Build zoo models as int8 QDQ."""
    solver: str = "auto"
    time_limit_s: float = 60.0
    mip_gap: float | None = None
    plain: bool = False
    paper_exact: bool = False
    objective: str = "latency"
    """``throughput``: every point minimizes a stream's period (``--objective``)."""
    max_latencies_ns: tuple[float, ...] = (0.0,)
    """Throughput: frame-latency bounds, one point each (0 = unbounded): the latency/throughput front."""
    frames_in_flight: int | None = None
    slicing: str = "auto"
    """``--slicing`` (:data:`cimsplit.passes.placement.options.SLICING_CHOICES`)."""
    reuse: bool = True
    """Solve the points that differ only in the crossbar budget as one chain, reusing proofs, bounds and
    schedules across budgets (:mod:`cimsplit.passes.sweep.chain`); False solves every point alone."""


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
class SweepOutcome:
    directory: Path
    rows: list[dict[str, Any]]
    computed: int
    """Points solved by this run."""
    reused: int
    """Points taken from the journal of an earlier run."""
    files: list[Path]

    @property
    def failed(self) -> int:
        return sum(1 for row in self.rows if row["status"] == "error")


class SweepObserver:
    """Progress hooks (the CLI draws a tqdm bar); the default does nothing."""

    def preparing(self, model: str, host: str) -> None:
        """About to load, profile (maybe for minutes) and cost ``model`` for ``host``."""

    def started(self, total: int, reused: Sequence[dict[str, Any]]) -> None:
        """``total`` points in the grid, ``reused`` rows already done by an earlier run."""

    def point_done(self, row: dict[str, Any]) -> None:
        """One point finished (its row is already in the journal)."""


def _zoo_bytes(name: str, image_size: int | None, int8: bool) -> bytes:
    from cimsplit.models import zoo

    return zoo.build(name, image_size=image_size, int8=int8).SerializeToString()


def resolve_models(entries: Sequence[str], out_dir: Path, image_size: int | None = None, int8: bool = False,
                   workers: int = 1) -> dict[str, Path]:
    """Model label -> ONNX file; zoo names are built into ``out_dir/models/NAME.onnx``, ``workers`` at a
    time (in processes: quantizing a zoo model is seconds of single-threaded work, the paper's four take
    10 s one after the other)."""
    from cimsplit.models import zoo

    models: dict[str, Path] = {}
    names: list[str] = []
    for entry in entries:
        path = Path(entry)
        if path.is_file():
            label = path.stem
        elif entry in zoo.NAMES:
            label, path = entry, Path(out_dir) / "models" / f"{entry}.onnx"
            names.append(entry)
        else:
            raise CimsplitError(f"model {entry!r} is neither an ONNX file nor a zoo model", hint=f"zoo models: {', '.join(zoo.NAMES)}")
        if label in models:
            raise CimsplitError(f"two models are both called {label!r}", hint="rename one file: the file stem names the model in the results")
        models[label] = path
    if len(names) > 1 and workers > 1:
        with ProcessPoolExecutor(min(workers, len(names)), mp_context=multiprocessing.get_context("spawn")) as pool:
            built = list(pool.map(_zoo_bytes, names, [image_size] * len(names), [int8] * len(names)))
    else:
        built = [_zoo_bytes(name, image_size, int8) for name in names]
    for name, data in zip(names, built):
        path = models[name]
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_bytes() != data:
            write_atomic(path, data)
    return models


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


def _host_profile(host: HostSpec, model_label: str, loaded: Any) -> Any:
    from cimsplit.compiler.host_profile import HostProfile, check_fingerprint
    from cimsplit.compiler.profile_cache import cached_profile

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


def build_tasks(
    spec: SweepSpec, models: Mapping[str, Path], hosts: Sequence[HostSpec], observer: SweepObserver | None = None
) -> tuple[list[PointTask], dict[tuple[str, str], dict[str, Any]]]:
    """One task per grid point, in grid order; a point that cannot be built carries its error.

    Also returns, per (model, host), where its host latencies come from: the
    profile's CPU and its whole-model latency with all onnxruntime
    optimizations (the honest CPU reference of DESIGN §3).
    """
    from cimsplit.compiler.frontend import ModelSpec
    from cimsplit.compiler.hardware import load_hardware
    from cimsplit.passes.pipeline import CompileOptions, cost_model, load_model
    from cimsplit.passes.placement.options import SolveOptions

    solve = {"solver": spec.solver, "time_limit_s": spec.time_limit_s, "mip_gap": spec.mip_gap, "plain": spec.plain,
             "objective": spec.objective, "frames_in_flight": spec.frames_in_flight,
             "slicing": spec.slicing}
    tasks: list[PointTask] = []
    references: dict[tuple[str, str], dict[str, Any]] = {}
    for model_label, path in models.items():
        model_spec = ModelSpec(str(path), dict(spec.input_shapes))
        loaded_by_size: dict[tuple[int, int], Any] = {}
        for host in hosts:
            points = [SweepPoint(model_label, host.label, c, t, bound) for c in spec.crossbars
                      for t in spec.mvm_latencies_ns for bound in spec.max_latencies_ns]
            if observer is not None:
                observer.preparing(model_label, host.label)
            try:
                base = load_hardware(host.spec)
                size = (base.crossbar_rows, base.crossbar_cols)
                if size not in loaded_by_size:
                    loaded_by_size[size] = load_model(model_spec, base)
                loaded = loaded_by_size[size]
                profile = _host_profile(host, model_label, loaded)
            except Exception as exc:  # the whole (model, host) block fails alike; the sweep goes on
                message = _message(exc)
                tasks.extend(PointTask(p, None, error=message, **solve) for p in points)
                continue
            references[(model_label, host.label)] = {
                "cpu": profile.cpu,
                "profile": host.profile or (f"predicted by {host.model}" if host.model else "profiled on this machine"),
                "ort_all_optimizations_ns": profile.model_median_ns.get("optimizations_all"),
            }
            options = CompileOptions(paper_exact=spec.paper_exact, host_profile=profile,
                                     solve=SolveOptions(slicing=spec.slicing))
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


def _manifest(
    spec: SweepSpec, grid: SweepGrid, models: Mapping[str, Path], hosts: Sequence[HostSpec],
    references: Mapping[tuple[str, str], dict[str, Any]],
) -> str:
    settings = asdict(spec)
    settings["models"] = {label: str(path) for label, path in models.items()}
    settings["hosts"] = {h.label: {"spec": h.spec, "profile": h.profile or ("this machine" if h.this_machine else None)} for h in hosts}
    settings["input_shapes"] = {k: list(v) for k, v in sorted(spec.input_shapes.items())}
    settings["host_profiles"] = dict(sorted(spec.host_profiles.items()))
    settings["host_models"] = dict(sorted(spec.host_models.items()))
    settings["grid"] = {"points": len(grid), **{k: list(v) for k, v in asdict(grid).items()}}
    settings["host_references"] = {f"{model}@{host}": ref for (model, host), ref in references.items()}
    return json.dumps(settings, indent=1) + "\n"


def write_reports(
    out_dir: Path, rows: Sequence[dict[str, Any]], references: Mapping[tuple[str, str], dict[str, Any]] | None = None
) -> list[Path]:
    """Table I (``table1.md``) and the figures (``sweep_plots``) for ``rows``."""
    from cimsplit.passes.sweep.plots import write_figures
    from cimsplit.passes.sweep.table1 import table1_markdown

    whole = {key: ref.get("ort_all_optimizations_ns") for key, ref in (references or {}).items()}
    write_atomic(out_dir / "table1.md", table1_markdown([r for r in rows if not r.get("max_latency_ns")], whole))
    return [out_dir / "table1.md", *write_figures(out_dir, rows)]


def run_sweep(
    spec: SweepSpec,
    out_dir: str | Path,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    observer: SweepObserver | None = None,
    reports: bool = True,
) -> SweepOutcome:
    """Run (or finish) the sweep into ``out_dir``; see the module docstring."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    observer = observer or SweepObserver()
    if not spec.models:
        raise CimsplitError("no model to sweep", hint="pass ONNX files or zoo names, or --paper")
    models = resolve_models(spec.models, out_dir, spec.image_size, spec.int8,
                            workers=default_workers() if workers is None else max(1, workers))
    hosts = resolve_hosts(spec.hosts, spec.host_profiles, spec.host_models)
    grid = SweepGrid(tuple(models), tuple(h.label for h in hosts), tuple(spec.crossbars), tuple(spec.mvm_latencies_ns),
                     tuple(spec.max_latencies_ns))
    if not len(grid):
        raise CimsplitError("the sweep grid is empty", hint="give at least one crossbar count and one MVM latency")
    tasks, references = build_tasks(spec, models, hosts, observer)
    write_atomic(out_dir / MANIFEST, _manifest(spec, grid, models, hosts, references))

    previous = read_journal(out_dir)
    rows_by_key: dict[tuple, dict[str, Any]] = {}
    units: list[ChainTask] = []
    todo = 0
    for chain in budget_chains(tasks, spec.reuse):
        members, known = [], []
        for i in chain:
            task = tasks[i]
            record = previous.get(task.point.key)
            if record and task.fingerprint and record.get("fingerprint") == task.fingerprint \
                    and record["row"].get("status") != "error":
                rows_by_key[task.point.key] = record["row"]
                if record.get("carry") is None:
                    continue  # done, and nothing to hand to the rest of its chain
                members.append(task)
                known.append(record["carry"])
            else:
                members.append(task)
                known.append(None)
                todo += 1
        if any(carry is None for carry in known):
            units.append(ChainTask(tuple(members), tuple(known)))
    log.info("sweep: %d points, %d from an earlier run, %d to solve in %d chains", len(tasks), len(rows_by_key),
             todo, len(units))
    reused = len(rows_by_key)
    observer.started(len(tasks), list(rows_by_key.values()))

    solved: set[tuple] = set()
    try:
        with Journal(out_dir) as journal:
            for index, position, row, carry in execute_chains(units, workers=workers, scheduler=scheduler):
                task = units[index].tasks[position]
                journal.append(task.fingerprint, row, carry)
                rows_by_key[task.point.key] = row
                if units[index].carry(position) is None and task.point.key not in solved:
                    solved.add(task.point.key)
                    observer.point_done(row)
    finally:
        # Also after an interrupt: the tables show every point finished so far.
        rows = write_results(out_dir, grid.points(), rows_by_key)
    files = [out_dir / "results.csv", out_dir / "results.json", out_dir / MANIFEST]
    if reports:
        files += write_reports(out_dir, rows, references)
    return SweepOutcome(out_dir, rows, len(solved), reused, files)
