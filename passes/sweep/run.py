"""Design-space exploration: partition every point of models x hosts x crossbars x MVM latency.

The expensive, machine-bound work happens once per model (:mod:`.prepare`, the
models side by side in the sweep's process pool): it is built if it is a zoo
name, goes through the front end once (per crossbar size) and is profiled once
per host (this machine, or a profile file from the target board).  Per point
only the cheap part remains — ``build_costs`` for the point's hardware and
``problem_from_costs`` — and that yields a :class:`PlacementProblem` of plain
tables, which is what travels to the workers (:mod:`.execute`).  Results go
to an append-only journal as they arrive, so rerunning an interrupted sweep
with the same folder solves only the points still missing (:mod:`.store`).

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
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cimsplit.errors import CimsplitError
from cimsplit.files import write_atomic
from cimsplit.passes.sweep.chain import ChainTask, budget_chains
from cimsplit.passes.sweep.execute import default_workers, execute_chains, process_pool
from cimsplit.passes.sweep.grid import SweepGrid
from cimsplit.passes.sweep.prepare import HostSpec, ModelSource, prepare_tasks, resolve_hosts, resolve_models
from cimsplit.passes.sweep.spec import SweepObserver, SweepSpec
from cimsplit.passes.sweep.store import Journal, read_journal, write_results
from cimsplit.passes.sweep.task import PointTask

__all__ = ["SweepSpec", "SweepObserver", "SweepOutcome", "run_sweep", "write_reports"]

log = logging.getLogger(__name__)

MANIFEST = "sweep.json"


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


def _manifest(
    spec: SweepSpec, grid: SweepGrid, models: Sequence[ModelSource], hosts: Sequence[HostSpec],
    references: Mapping[tuple[str, str], dict[str, Any]],
) -> str:
    settings = asdict(spec)
    settings["models"] = {source.label: str(source.path) for source in models}
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
    models = resolve_models(spec.models, out_dir)
    hosts = resolve_hosts(spec.hosts, spec.host_profiles, spec.host_models)
    grid = SweepGrid(tuple(m.label for m in models), tuple(h.label for h in hosts), tuple(spec.crossbars),
                     tuple(spec.mvm_latencies_ns), tuple(spec.max_latencies_ns))
    if not len(grid):
        raise CimsplitError("the sweep grid is empty", hint="give at least one crossbar count and one MVM latency")
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise CimsplitError(f"--workers must be at least 1, got {workers}")
    # One pool prepares the models (builds, front end, costs), then solves the chains unless Dask does.
    local = default_workers() if scheduler else workers
    with process_pool(local) if local > 1 else nullcontext() as pool:
        tasks, references = prepare_tasks(spec, models, hosts, observer, pool)
        write_atomic(out_dir / MANIFEST, _manifest(spec, grid, models, hosts, references))
        units, rows_by_key = _unsolved_chains(tasks, read_journal(out_dir), spec.reuse)
        reused = len(rows_by_key)
        observer.started(len(tasks), list(rows_by_key.values()))
        solved: set[tuple] = set()
        try:
            with Journal(out_dir) as journal:
                for index, position, row, carry in execute_chains(units, workers=workers, scheduler=scheduler, pool=pool):
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


def _unsolved_chains(tasks: Sequence[PointTask], previous: Mapping[tuple, dict[str, Any]], reuse: bool
                     ) -> tuple[list[ChainTask], dict[tuple, dict[str, Any]]]:
    """The chains still to solve, and the rows an earlier run's journal (``previous``) already has."""
    rows_by_key: dict[tuple, dict[str, Any]] = {}
    units: list[ChainTask] = []
    todo = 0
    for chain in budget_chains(tasks, reuse):
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
    return units, rows_by_key
