"""Where sweep points are solved: in this process, a local process pool, or Dask.

The unit of work is a budget chain (:class:`~cimsplit.passes.sweep.chain.ChainTask`,
one point or several that differ only in the crossbar budget); :func:`execute_chains`
yields ``(chain index, position, row, carry)`` as points settle: point by point in
this process, a chain at a time from a pool or Dask worker.  :func:`execute` is the
same for single points (``(index, row)``).  Local processes are started with
``spawn``: the parent has run onnxruntime sessions (profiling) whose threads
make ``fork`` unsafe.  A worker that dies fails its chain's unsettled points (error
rows), not the sweep.  Stopping the iteration early (an interrupt, an error in
the consumer) cancels the chains not started yet.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from contextlib import contextmanager
from typing import Any

from cimsplit.errors import CimsplitError
from cimsplit.passes.sweep.chain import ChainTask, Settled, run_chain, run_chain_list
from cimsplit.passes.sweep.task import PointTask, error_row

__all__ = ["execute", "execute_chains", "default_workers", "process_pool", "start_order"]

log = logging.getLogger(__name__)


def default_workers() -> int:
    return os.cpu_count() or 1


@contextmanager
def process_pool(workers: int) -> Iterator[Executor]:
    """``workers`` spawned processes; leaving the block cancels what has not started and waits for the rest."""
    executor = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield executor
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def execute(tasks: Sequence[PointTask], workers: int | None = None, scheduler: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Solve ``tasks`` one by one (no chains); yield ``(index into tasks, row)`` as each finishes."""
    chains = [ChainTask((task,)) for task in tasks]
    return ((i, row) for i, _, row, _ in execute_chains(chains, workers, scheduler))


def execute_chains(chains: Sequence[ChainTask], workers: int | None = None, scheduler: str | None = None,
                   pool: Executor | None = None) -> Iterator[tuple[int, int, dict[str, Any], dict[str, Any] | None]]:
    """Solve ``chains``; yield ``(index into chains, position in the chain, row, carry)`` per settled point.

    ``pool``: the local processes to use (:func:`process_pool`, ``workers`` of them) instead of new ones."""
    if not chains:
        return iter(())
    if scheduler:
        return _flat(_dask(chains, scheduler))
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise CimsplitError(f"--workers must be at least 1, got {workers}")
    if workers == 1 or len(chains) == 1:
        return ((i, *settled) for i, chain in enumerate(chains) for settled in run_chain(chain))
    if pool is not None:
        return _flat(_pool(chains, pool))
    return _flat(_in_new_pool(chains, min(workers, len(chains))))


def _flat(results: Iterator[tuple[int, list[Settled]]]) -> Iterator[tuple[int, int, dict[str, Any], dict[str, Any] | None]]:
    for i, settled in results:
        for position, row, carry in settled:
            yield i, position, row, carry


def _settled(future: Any, chain: ChainTask) -> list[Settled]:
    """The future's points; a worker that died (killed, out of memory) fails its unsettled points only."""
    try:
        return future.result()
    except Exception as exc:
        log.debug("worker failed on a chain of %d points", len(chain.tasks), exc_info=True)
        return [(i, error_row(task.point, f"worker failed: {type(exc).__name__}: {exc}"), None)
                for i, task in enumerate(chain.tasks) if chain.carry(i) is None]


def _in_new_pool(chains: Sequence[ChainTask], workers: int) -> Iterator[tuple[int, list[Settled]]]:
    with process_pool(workers) as pool:
        yield from _pool(chains, pool)


def start_order(chains: Sequence[ChainTask]) -> list[int]:
    """Largest chains first (:attr:`ChainTask.work`, then :attr:`ChainTask.contested_ns`), so that a long
    chain does not start last and run alone (the paper's sweep: YOLOv5n's four chains, 88 % of its solve
    time, came last)."""
    return sorted(range(len(chains)), key=lambda i: (-chains[i].work, -chains[i].contested_ns, i))


def _pool(chains: Sequence[ChainTask], executor: Executor) -> Iterator[tuple[int, list[Settled]]]:
    pending = {executor.submit(run_chain_list, chains[i]): i for i in start_order(chains)}
    try:
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            # Yield finished chains in chain order so that equal-time finishes stay deterministic.
            for future in sorted(done, key=pending.__getitem__):
                index = pending.pop(future)
                yield index, _settled(future, chains[index])
    finally:
        for future in pending:  # stopped early: what has not started never will
            future.cancel()


def _dask(chains: Sequence[ChainTask], address: str) -> Iterator[tuple[int, list[Settled]]]:
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
        log.info("sweep: %d chains on Dask scheduler %s", len(chains), address)
        futures = [client.submit(run_chain_list, chain, pure=False, priority=chain.work) for chain in chains]
        index = {future.key: i for i, future in enumerate(futures)}
        for future in as_completed(futures):
            i = index[future.key]
            yield i, _settled(future, chains[i])
    finally:
        client.cancel([f for f in futures if not f.done()])
        client.close()
