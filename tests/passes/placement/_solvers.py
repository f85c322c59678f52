"""Which real solvers run here; Gurobi tests skip with the reason when it cannot."""

from __future__ import annotations

import functools

import pytest

from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.solvers.backend import BackendUnavailable


@functools.lru_cache(maxsize=1)
def gurobi_unavailable_reason() -> str | None:
    try:
        from cimsplit.passes.placement.solvers.gurobi import GurobiBackend

        tiny = PlacementProblem(names=("a",), t_host_ns=(1.0,), t_cim_ns=(None,), crossbars=(0,), edges=(), budget=0)
        GurobiBackend().solve(tiny, None, SolveOptions(time_limit_s=5), None)
    except BackendUnavailable as exc:
        return exc.one_line()
    return None


def solvers() -> list:
    """``highs`` always; ``gurobi`` as a param that skips with the reason when unavailable."""
    reason = gurobi_unavailable_reason()
    marks = [pytest.mark.skip(reason=f"Gurobi unavailable: {reason}")] if reason else []
    return ["highs", pytest.param("gurobi", marks=marks)]
