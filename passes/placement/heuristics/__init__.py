"""Primal heuristics: good schedules fast, as warm starts for every exact back end.

Two layers: sequencing a fixed assignment (:mod:`.sequencing`: list scheduling
of the host under several priority rules) and choosing the assignment
(:mod:`.assignment` for greedy and knapsack starts, :mod:`.search` for the
iterated local search over them, :mod:`.shrink` for fitting a placement into a
budget and putting the crossbars it leaves to use).

Every schedule returned is re-timed by :func:`cimsplit.passes.placement.simulate.simulate`,
so it is valid by construction; its makespan is an upper bound on the optimum.
"""

from __future__ import annotations

from cimsplit.passes.placement.heuristics.assignment import greedy_assignment, knapsack_assignment
from cimsplit.passes.placement.heuristics.search import best_heuristic, heuristic_budget_s, local_search
from cimsplit.passes.placement.heuristics.sequencing import RULES, Sequencer, best_list_schedule
from cimsplit.passes.placement.heuristics.shrink import shrink_to_budget

__all__ = ["RULES", "Sequencer", "best_heuristic", "best_list_schedule", "greedy_assignment", "heuristic_budget_s",
           "knapsack_assignment", "local_search", "shrink_to_budget"]
