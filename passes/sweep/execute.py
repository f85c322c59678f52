"""Where sweep points are solved: in this process, a local process pool, or Dask.

All three take the same picklable :class:`PointTask` list and yield
``(index, row)`` pairs as points finish (completion order, not grid order; the
store puts rows back in grid order).  Local processes are started with
``spawn``: the parent has run onnxruntime sessions (profiling) whose threads
make ``fork`` unsafe.  A worker that dies fails its point (an error row), not the
sweep.  Stopping the iteration early (an interrupt, an error in
the consumer) cancels the points not started yet.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from cimsplit.errors import CimsplitError
from cimsplit.passes.sweep.task import PointTask, error_row, run_point

__all__ = ["execute", "default_workers"]

log = logging.getLogger(__name__)


def default_workers() -> int:
    return os.cpu_count() or 1


def execute(tasks: Sequence[PointTask], workers: int | None = None, scheduler: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Solve ``tasks``; yield ``(index into tasks, row)`` as each finishes."""
    if not tasks:
        return iter(())
    if scheduler:
        return _dask(tasks, scheduler)
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise CimsplitError(f"--workers must be at least 1, got {workers}")
    if workers == 1 or len(tasks) == 1:
        return ((i, run_point(task)) for i, task in enumerate(tasks))
    return _pool(tasks, min(workers, len(tasks)))


def _row(future: Any, task: PointTask) -> dict[str, Any]:
    """The future's row; a worker that died (killed, out of memory) fails only its point."""
    try:
        return future.result()
    except Exception as exc:
        log.debug("worker failed on %s", task.point, exc_info=True)
        return error_row(task.point, f"worker failed: {type(exc).__name__}: {exc}")


def _pool(tasks: Sequence[PointTask], workers: int) -> Iterator[tuple[int, dict[str, Any]]]:
    executor = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        pending = {executor.submit(run_point, task): i for i, task in enumerate(tasks)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            # Yield finished points in task order so that equal-time finishes stay deterministic.
            for future in sorted(done, key=pending.__getitem__):
                index = pending.pop(future)
                yield index, _row(future, tasks[index])
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def _dask(tasks: Sequence[PointTask], address: str) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise CimsplitError(
            "--scheduler needs Dask distributed, which is not installed", hint="pip install 'cimsplit[sweep]'"
        ) from None
    try:
        client = Client(address, timeout="20s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise CimsplitError(f"cannot connect to the Dask scheduler at {address!r}: {exc}",
                            hint="check --scheduler ADDRESS, e.g. tcp://host:8786") from None
    futures = []
    try:
        log.info("sweep: %d points on Dask scheduler %s", len(tasks), address)
        futures = [client.submit(run_point, task, pure=False) for task in tasks]
        index = {future.key: i for i, future in enumerate(futures)}
        for future in as_completed(futures):
            i = index[future.key]
            yield i, _row(future, tasks[i])
    finally:
        client.cancel([f for f in futures if not f.done()])
        client.close()
