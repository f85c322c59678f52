"""The deterministic topological order shared by the workload builder and the split pass."""

from __future__ import annotations

from cimsplit.compiler.toposort import stable_topological_order


#   a(3) -> c(0)      b(1) -> c     d(2) alone
# ready first: a(3), b(1), d(2) -> b, d, a; then c once a and b are done
def test_lowest_priority_first_among_ready_keys() -> None:
    priority = {"a": 3, "b": 1, "c": 0, "d": 2}
    assert stable_topological_order(priority, {"a": ["c"], "b": ["c"]}) == ["b", "d", "a", "c"]


def test_a_cycle_gives_none() -> None:
    assert stable_topological_order({1: 0, 2: 1}, {1: [2], 2: [1]}) is None
