"""A sweep's budget chains: the points that differ only in the crossbar budget, solved together.

Points with the same model, host, MVM latency, latency bound and solver
settings whose problems are equal except for ``budget`` form a chain; one
worker solves it with :func:`cimsplit.passes.placement.budget_chain.solve_chain`
(larger budgets first, proofs, bounds and schedules carried to the others).
Throughput points and sweeps with ``SweepSpec.reuse = False`` are chains of
one point, solved by :func:`~cimsplit.passes.sweep.task.run_point`.

Each settled point comes back as ``(position in the chain, row, carry)``: the
row (with ``reused_from``) and the carry, the point's
:class:`~cimsplit.passes.placement.budget_chain.ChainPoint` as JSON, which the
journal keeps so that a resumed sweep hands the finished points of a chain cut
short to the rest of it (:attr:`ChainTask.known`) instead of losing their facts.
A point may come back twice (fact 4 replaced its result); the last row counts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from cimsplit.errors import CimsplitError
from cimsplit.passes.placement.dag import incomparable_pairs
from cimsplit.passes.sweep.task import PointTask, error_row, row_from_result, run_point, solve_options, task_fingerprint

__all__ = ["ChainTask", "Settled", "budget_chains", "run_chain", "run_chain_list"]

log = logging.getLogger(__name__)

Settled = tuple[int, dict[str, Any], dict[str, Any] | None]
"""(position in the chain, row, carry or None)."""


@dataclass(frozen=True)
class ChainTask:
    tasks: tuple[PointTask, ...]
    known: tuple[dict[str, Any] | None, ...] = ()
    """Per task: the carry of a point finished by an earlier run (not solved again), or None."""

    def carry(self, position: int) -> dict[str, Any] | None:
        return self.known[position] if self.known else None

    @property
    def work(self) -> int:
        """A size estimate for ordering chains: operators plus incomparable operator pairs of each point
        still to solve (the pairs are what the host order must decide; YOLOv5n has 883 for 122
        operators, ResNet-50 far fewer)."""
        return sum(task.problem.n + len(incomparable_pairs(task.problem)) for i, task in enumerate(self.tasks)
                   if task.problem is not None and self.carry(i) is None)

    @property
    def contested_ns(self) -> float:
        """Between chains of equal :attr:`work`: the time both devices could spend on the same operators,
        sum of min(host, CIM) over the points left.  The closer the two, the more the placement must weigh
        (the paper's sweep: YOLOv5n int8's chain at 1000 ns took 44 s, at 50 ns 10 s; it started third of
        the four, after 16 s, and ran alone at the end)."""
        return sum(min(host, cim) for i, task in enumerate(self.tasks) if task.problem is not None and self.carry(i) is None
                   for host, cim in zip(task.problem.t_host_ns, task.problem.t_cim_ns) if cim is not None)


def _chain_key(task: PointTask) -> tuple | None:
    if task.problem is None or task.objective != "latency":
        return None
    p = task.point
    return (p.model, p.host, p.mvm_latency_ns, p.max_latency_ns,
            task_fingerprint(replace(task.problem, budget=0), task.solver, task.time_limit_s, task.mip_gap,
                             task.plain, slicing=task.slicing))


def budget_chains(tasks: Sequence[PointTask], reuse: bool = True) -> list[list[int]]:
    """Indices into ``tasks`` grouped into chains (each in ``tasks`` order; chains by their first task)."""
    groups: dict[tuple, list[int]] = {}
    alone: list[list[int]] = []
    for i, task in enumerate(tasks):
        key = _chain_key(task) if reuse else None
        if key is None:
            alone.append([i])
        else:
            groups.setdefault(key, []).append(i)
    return sorted([*groups.values(), *alone], key=lambda c: c[0])


def run_chain(chain: ChainTask) -> Iterator[Settled]:
    """Solve the chain's unfinished points; yield each settled point (never raises)."""
    from cimsplit.passes.placement.budget_chain import ChainError, ChainPoint, solve_chain

    todo = [i for i in range(len(chain.tasks)) if chain.carry(i) is None]
    if len(chain.tasks) == 1 and todo:
        yield 0, run_point(chain.tasks[0]), None
        return
    settled: set[int] = set()
    try:
        known = {}
        for i in range(len(chain.tasks)):
            try:
                if chain.carry(i) is not None:
                    known[i] = ChainPoint.from_json(chain.carry(i))  # type: ignore[arg-type]
            except (KeyError, TypeError, ValueError):  # a journal of another version: solve it again
                log.debug("unreadable carry of %s", chain.tasks[i].point, exc_info=True)
        options = solve_options(chain.tasks[0])
        problems = [t.problem for t in chain.tasks]
        for i, point, result in solve_chain(problems, options, known):
            row = row_from_result(chain.tasks[i].point, result)
            row["reused_from"] = point.reused_from
            settled.add(i)
            yield i, row, asdict(point)
    except ChainError as exc:
        for i, error in exc.failures:
            yield i, _error_row(chain.tasks[i], error), None
    except Exception as exc:  # a bug must not end a long sweep: the unsettled points get the message
        log.debug("budget chain failed", exc_info=True)
        for i in todo:
            if i not in settled:
                yield i, _error_row(chain.tasks[i], exc), None


def _error_row(task: PointTask, exc: Exception) -> dict[str, Any]:
    if isinstance(exc, CimsplitError):
        return error_row(task.point, exc.one_line())
    log.debug("sweep point %s failed", task.point, exc_info=exc)
    return error_row(task.point, f"{type(exc).__name__}: {exc}")


def run_chain_list(chain: ChainTask) -> list[Settled]:
    """:func:`run_chain` as a list (what a pool or Dask worker sends back)."""
    return list(run_chain(chain))
