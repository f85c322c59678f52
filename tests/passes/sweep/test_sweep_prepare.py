"""Preparing a sweep's models side by side: a pool worker never measures this machine's latencies, and a model
whose worker died is prepared in the main process."""

from __future__ import annotations

from concurrent.futures import Executor, Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pytest

from cimsplit.compiler import profile_cache
from cimsplit.passes.sweep.prepare import prepare_tasks, resolve_hosts, resolve_models
from cimsplit.passes.sweep.run import SweepObserver, SweepSpec
from tests.passes.sweep.test_sweep_cli import residual_model


class InlinePool(Executor):
    """Runs each job at once in this process, marking the time spent inside a job."""

    def __init__(self) -> None:
        self.inside = False
        self.jobs = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        self.inside, self.jobs = True, self.jobs + 1
        try:
            future.set_result(fn(*args, **kwargs))
        finally:
            self.inside = False
        return future


class DeadPool(Executor):
    """Every job's worker dies."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        future.set_exception(BrokenProcessPool("a worker died"))
        return future


class Announced(SweepObserver):
    def __init__(self) -> None:
        self.models: list[str] = []

    def preparing(self, model: str, host: str) -> None:
        self.models.append(model)


def test_a_worker_never_measures_and_a_dead_worker_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CIMSPLIT_CACHE_DIR", str(tmp_path / "cache"))
    pool = InlinePool()
    measured: list[bool] = []
    real = profile_cache.profile_model

    def profile_model(*args: Any, **kwargs: Any) -> Any:
        measured.append(pool.inside)
        return real(*args, **{**kwargs, "runs": 3, "warmup": 1})

    monkeypatch.setattr(profile_cache, "profile_model", profile_model)
    spec = SweepSpec(models=(str(residual_model(tmp_path / "tiny.onnx")),), crossbars=(3, 100), mvm_latencies_ns=(50.0,))
    models, hosts = resolve_models(spec.models, tmp_path), resolve_hosts(spec.hosts, {}, {})

    observer = Announced()
    tasks, references = prepare_tasks(spec, models, hosts, observer, pool)
    # The job came back unprepared (no cached profile); this process measured it with the pool idle.
    assert pool.jobs == 1 and measured and not any(measured)
    assert observer.models == ["tiny", "tiny"]  # announced for the pool, then for measuring here
    assert [(t.point.crossbars, t.point.mvm_latency_ns) for t in tasks] == [(3, 50.0), (100, 50.0)]
    assert all(t.problem is not None and t.error is None for t in tasks)
    assert references[("tiny", "x86")]["profile"] == "profiled on this machine"

    count = len(measured)
    observer = Announced()
    again, _ = prepare_tasks(spec, models, hosts, observer, pool)
    assert len(measured) == count and pool.jobs == 2 and observer.models == ["tiny"]  # the cached profile, in the pool
    assert [t.fingerprint for t in again] == [t.fingerprint for t in tasks]

    observer = Announced()
    alone, _ = prepare_tasks(spec, models, hosts, observer, DeadPool())  # prepared here instead
    assert observer.models == ["tiny", "tiny"] and len(measured) == count
    assert [t.fingerprint for t in alone] == [t.fingerprint for t in tasks]
