"""Deterministic topological order of a small DAG (Kahn's algorithm with a priority)."""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

__all__ = ["stable_topological_order"]


def stable_topological_order(priority: Mapping[K, int], successors: Mapping[K, Iterable[K]]) -> list[K] | None:
    """Every key of ``priority`` in a topological order; among ready ones the lowest priority first.

    ``successors`` may omit keys without successors.  Returns ``None`` when the graph has a cycle.
    """
    indegree = {k: 0 for k in priority}
    for k in priority:
        for s in successors.get(k, ()):
            indegree[s] += 1
    heap = [(priority[k], i, k) for i, k in enumerate(priority) if indegree[k] == 0]
    heapq.heapify(heap)
    index = {k: i for i, k in enumerate(priority)}
    order: list[K] = []
    while heap:
        _, _, k = heapq.heappop(heap)
        order.append(k)
        for s in successors.get(k, ()):
            indegree[s] -= 1
            if indegree[s] == 0:
                heapq.heappush(heap, (priority[s], index[s], s))
    return order if len(order) == len(priority) else None
