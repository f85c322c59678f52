"""The small interface every partitioning solver backend implements, and the registry.

A backend turns a :class:`PlacementProblem` (plain cost tables) into a placement
and a schedule.  MILP backends (HiGHS, Gurobi) translate the solver-neutral
:class:`~cimsplit.passes.placement.solvers.milp.MilpModel` built once by :func:`cimsplit.passes.placement.solvers.milp.build_milp`;
other backends (CP-SAT) may ignore it and build their own model from the problem.

Contract of ``Backend.solve(problem, formulation, options, warm_start)``:

- ``formulation`` is the MILP built by the driver (``None`` is allowed for
  backends that do not need it; MILP backends build it themselves then).
- ``warm_start`` is a feasible :class:`Schedule` (the better of the best baseline
  and the heuristics' schedule) or ``None``; backends that can take one use it
  as their starting incumbent or hint.
- It returns a :class:`BackendOutcome`.  ``on_host`` is ``None`` when the solver
  found no solution.  When a solution exists, ``start_ns`` gives each operator's
  start time in the solver's schedule (the validator re-times it with the host
  operators in that order), or ``host_order`` gives the host order directly.
  ``objective_ns`` is the solver's makespan of that solution and ``bound_ns`` a
  proven lower bound on the optimum (``0.0`` if none).
- A backend that cannot run raises :class:`BackendMissing` (its package is not
  installed: an error when the user asked for it by name) or
  :class:`BackendUnavailable` (no licence, model too large for the licence):
  the driver then falls back to HiGHS and records why.  It never prints: solver
  output appears only with ``options.verbose``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from cimsplit.errors import CimsplitError
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule

if TYPE_CHECKING:
    from cimsplit.passes.placement.solvers.milp import MilpModel

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendOutcome",
    "BackendMissing",
    "BackendUnavailable",
    "get_backend",
    "STATUS_OPTIMAL",
    "STATUS_TIME_LIMIT",
    "STATUS_GAP_LIMIT",
    "STATUS_NO_SOLUTION",
    "STATUS_INFEASIBLE",
]

STATUS_OPTIMAL = "optimal"
"""Proven optimal (within the solver's default or the requested MIP gap)."""
STATUS_GAP_LIMIT = "gap_limit"
"""Stopped because the requested ``mip_gap`` was reached."""
STATUS_TIME_LIMIT = "time_limit"
"""Stopped at the time limit; the solution (if any) is the incumbent."""
STATUS_NO_SOLUTION = "no_solution"
"""Stopped without any feasible solution (time limit or other interruption)."""
STATUS_INFEASIBLE = "infeasible"
"""The model was proven infeasible (a bug: CPU-only is always feasible)."""


@dataclass(frozen=True)
class BackendOutcome:
    """What a backend hands back; the driver validates and re-times it."""

    solver: str
    status: str
    on_host: tuple[bool, ...] | None
    start_ns: tuple[float, ...] | None
    host_order: tuple[int, ...] | None
    objective_ns: float
    """Makespan of the returned solution (``inf`` when there is none)."""
    bound_ns: float
    """Proven lower bound on the optimal makespan."""
    time_s: float
    n_variables: int
    n_constraints: int
    detail: str = ""
    """How the back end solved it, when it has more than one way (added to the result's reason)."""

    @property
    def has_solution(self) -> bool:
        return self.on_host is not None

    @property
    def gap(self) -> float:
        """Relative MIP gap (z_inc - z_bound) / |z_inc| as in the paper (section II-B)."""
        if not self.has_solution or self.objective_ns == float("inf"):
            return float("inf")
        if self.objective_ns <= 0:
            return 0.0
        return max(0.0, (self.objective_ns - self.bound_ns) / abs(self.objective_ns))


class BackendUnavailable(CimsplitError):
    """The backend cannot run here (no licence, model too large for the licence, ...).

    The driver degrades to HiGHS and says so, also when the solver was requested by name.
    """


class BackendMissing(BackendUnavailable):
    """The backend's package is not installed: an error when the solver was requested by name."""


@runtime_checkable
class Backend(Protocol):
    name: str

    def solve(
        self,
        problem: PlacementProblem,
        formulation: MilpModel | None,
        options: SolveOptions,
        warm_start: Schedule | None,
    ) -> BackendOutcome: ...


BACKENDS: dict[str, str] = {
    "highs": "cimsplit.passes.placement.solvers.highs:HighsBackend",
    "gurobi": "cimsplit.passes.placement.solvers.gurobi:GurobiBackend",
    "cpsat": "cimsplit.passes.placement.solvers.cpsat.staged:CpSatBackend",
}
"""Solver name -> ``module:class``; classes are imported lazily (gurobipy is optional)."""

_EXTRAS = {"gurobi": "pip install 'cimsplit[gurobi]'", "cpsat": "pip install ortools", "highs": "pip install highspy"}


def get_backend(name: str) -> Backend:
    """Instantiate the backend registered as ``name``.

    Raises :class:`CimsplitError` for an unknown name and :class:`BackendUnavailable`
    when its module cannot be imported (the hint names what to install).
    """
    if name not in BACKENDS:
        raise CimsplitError(
            f"unknown solver {name!r}", hint=f"choose one of auto, {', '.join(sorted(BACKENDS))}"
        )
    module_name, class_name = BACKENDS[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendMissing(f"solver {name!r} is not available ({exc})", hint=_EXTRAS.get(name)) from exc
    return getattr(module, class_name)()
