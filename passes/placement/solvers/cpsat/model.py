"""OR-Tools CP-SAT backend (``--solver cpsat``): the scheduling model, exact in real time.

The model is the problem of :func:`cimsplit.passes.placement.simulate.simulate`, written as a
constraint-programming schedule instead of the big-M ILP of eq. 5-14 (their
optima coincide):

- ``x_v`` Boolean, 1 = host, fixed to 1 outside V_acc (eq. 5) and where the
  operator alone needs more crossbars than the budget;
- ``s_v`` integer start; ``f_v = s_v + T_acc,v + x_v·(T_host,v - T_acc,v)`` (eq. 7);
- the host as an optional interval per operator (present iff ``x_v``) in one
  ``AddNoOverlap``: the single-core host of eq. 10-12 without any order
  variable or big-M;
- ``z_uv >= |x_u - x_v|`` and ``s_v >= f_u + z_uv·T_transfer`` on every edge
  (eq. 8-9), ``s_v >= (1 - x_v)·t_in``, ``T >= f_v (+ (1 - x_v)·t_out)`` for sinks
  and output writers (eq. 6), the crossbar budget as one linear row (eq. 14),
  minimize ``T``.

``plain=False`` adds what keeps the optimum and helps the search (each implied
by the constraints above for every solution with ``T <= UB``; same arguments as
in :func:`cimsplit.passes.placement.solvers.milp.build_milp`): ``T <= UB`` from the warm start,
release/tail domains ``release_v <= s_v <= UB - tail_v - min_dur_v``, the
host-load row ``T >= sum x_v·T_host,v`` and its ancestor/descendant forms
``s_v >= sum_{u in anc(v)} x_u·T_host,u`` and ``T >= f_v + sum_{w in desc(v)}
x_w·T_host,w`` (host operators never overlap and respect precedence), the
host idle time along the longest chain of host-only operators added to the host
load (:func:`~.cuts.add_idle_chain_cut`), the host idle time forced while a chain of
CIM operators runs (:func:`~.cuts.add_cim_idle_cut`, ``cim_idle_cut=True``, the default),
and a complete solution hint (assignment,
starts, z, T, idle fills) from the heuristics.  The cuts live in
:mod:`~cimsplit.passes.placement.solvers.cpsat.cuts`; each takes the
:class:`CpSatModel` record built here.  Intermediate solutions may carry
a T above their real makespan (the idle rows let y be small); the optimum never
does, and every reported objective is the re-timed real makespan.

Exactness in real time.  CP-SAT needs integers.  Every duration, transfer and
input/output time d is replaced by ``floor(d / r)`` in units of ``r`` ns.  If
all inputs are integer multiples of ``r`` (checked exactly), nothing is rounded.
Otherwise two facts keep the answer exact:

1. *The bound is a true lower bound.*  For any placement and host order the
   earliest-start makespan is a longest path whose lengths are sums of the
   times; flooring every time can only shorten each path, so the floored
   problem's optimum is <= the real optimum, and CP-SAT's proven bound (in
   units) times ``r`` is a lower bound on the real optimum.
2. *The objective is real.*  The solution's placement and host order (by start,
   ties by finish, then by index: a zero-length host operator that shares its
   start with a longer one ran first; this respects precedence because floored
   times are >= 0 and every edge goes from a lower to a higher index) are re-timed with the real
   times by ``simulate``; that makespan is what is reported.  It exceeds the
   floored makespan by less than ``r`` per term on the critical path (at most
   ``2n + 1`` terms), so ``r`` is chosen to make this error far below the MIP
   gap (the horizon is about 2**32 units: the error is at most (2n + 1)·2**-32
   of it).  The gap reported is between the real makespan and the real lower
   bound, rounding included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ortools.sat.python import cp_model

from cimsplit.passes.placement import dag
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule
from cimsplit.passes.placement.simulate import host_order_by_start, simulate

__all__ = ["CpSatModel", "build_model", "floor_units", "time_unit_ns", "unit_for"]

_HORIZON_UNITS = 2.0**32
"""Target size of the horizon in model units when times must be rounded.  Larger
values make CP-SAT 9.15's presolve declare feasible models infeasible (a
detector-250 segment at 2**36 units; google/or-tools#3168 reports the same
with no-overlap and large values, fixed there by scaling down)."""
_EXACT_UNITS_MAX = 2.0**32
"""Largest horizon accepted when an exact (rounding-free) unit exists (same reason)."""


def _horizon_ns(problem: PlacementProblem) -> float:
    """eq. 13's M: no schedule without idle-time padding is longer."""
    total = sum(max(problem.t_host_ns[v], problem.t_cim_ns[v] or 0.0) + problem.t_in_ns[v] + problem.t_out_ns[v]
                for v in range(problem.n))
    return total + sum(t for _, _, t in problem.edges)


def _all_times(problem: PlacementProblem) -> list[float]:
    times = list(problem.t_host_ns) + [t for t in problem.t_cim_ns if t is not None]
    return times + list(problem.t_in_ns) + list(problem.t_out_ns) + [t for _, _, t in problem.edges]


def time_unit_ns(problem: PlacementProblem) -> tuple[float, bool]:
    """The model's time unit r in ns and whether every time is an exact multiple of it.

    Tries r = 2**-k ns (k = 0..20) first: profiles in whole ns and bus times of
    bytes / (n·10.24 GB/s) are exact in such units.  Falls back to a rounding
    unit that makes the horizon about 2**32 units.
    """
    return unit_for(_all_times(problem), _horizon_ns(problem))


def unit_for(all_times: list[float], horizon_ns: float) -> tuple[float, bool]:
    """:func:`time_unit_ns` for any list of times and horizon (the sliced model has more times)."""
    horizon = max(horizon_ns, 1e-9)
    times = [Fraction(t) for t in all_times if t > 0]
    for k in range(21):
        unit = Fraction(1, 2**k)
        if horizon / float(unit) > _EXACT_UNITS_MAX:
            break
        if all((t / unit).denominator == 1 for t in times):
            return float(unit), True
    return horizon / _HORIZON_UNITS, False


def floor_units(t_ns: float, unit_ns: float) -> int:
    """floor(t / r) in exact rational arithmetic: never above the real time, not even by an ulp.

    Floats first: dividing by a power of two (every exact unit of :func:`unit_for`) only shifts the exponent;
    otherwise the division rounds to nearest, which is monotone, so a quotient q strictly between the
    integers f and f + 1 (both floats below 2^53) comes from a real quotient in [f, f + 1).  Only a quotient
    that lands on an integer needs the rationals."""
    q = t_ns / unit_ns
    f = math.floor(q)
    if math.frexp(unit_ns)[0] == 0.5 or (f != q and abs(q) < 2.0**53):
        return max(0, f)
    return max(0, int(Fraction(t_ns) // Fraction(unit_ns)))


@dataclass(frozen=True)
class _Tables:
    """The problem in integer model units (host-only operators: ``acc = host``, no bus times)."""

    capable: list[bool]
    host: list[int]
    acc: list[int]
    t_in: list[int]
    t_out: list[int]
    edges: list[tuple[int, int, int]]


def _tables(problem: PlacementProblem, unit_ns: float) -> _Tables:
    n = problem.n

    def units(t_ns: float) -> int:
        return floor_units(t_ns, unit_ns)

    capable = [problem.capable(v) and problem.crossbars[v] <= problem.budget for v in range(n)]
    host = [units(problem.t_host_ns[v]) for v in range(n)]
    acc = [units(problem.t_cim_ns[v]) if capable[v] else host[v] for v in range(n)]  # type: ignore[arg-type]
    t_in = [units(problem.t_in_ns[v]) if capable[v] else 0 for v in range(n)]
    t_out = [units(problem.t_out_ns[v]) if capable[v] and problem.writes_output[v] else 0 for v in range(n)]
    edges = [(u, v, units(t)) for u, v, t in problem.edges]
    return _Tables(capable, host, acc, t_in, t_out, edges)


def _floored(problem: PlacementProblem, tables: _Tables) -> PlacementProblem:
    """The same problem with every time floored to units, to time the warm start in units."""
    capable, acc = tables.capable, tables.acc
    return PlacementProblem(
        names=problem.names, t_host_ns=tuple(float(h) for h in tables.host),
        t_cim_ns=tuple(float(acc[v]) if capable[v] else None for v in range(problem.n)),
        crossbars=problem.crossbars, edges=tuple((u, v, float(t)) for u, v, t in tables.edges), budget=problem.budget,
        t_in_ns=tuple(float(t) for t in tables.t_in), t_out_ns=tuple(float(t) for t in tables.t_out),
        writes_output=problem.writes_output)


@dataclass(frozen=True)
class CpSatModel(_Tables):
    """One problem's CP-SAT model: its variables and the tables every cut reads (times in units).

    ``x[v]`` is 1 when v runs on the host, ``s[v]`` its start, ``T`` the makespan,
    ``intervals[v]`` its (optional) host interval, ``z[(u, v)]`` 1 when edge u -> v
    crosses the bus.  ``hint`` is the warm start timed in units (``None``: no hint).
    """

    problem: PlacementProblem
    m: cp_model.CpModel
    unit_ns: float
    exact: bool
    ub: int
    """The upper end of T's domain (the warm start's makespan unless ``plain``)."""
    t_lower: int
    """The lower end of T's domain."""
    x: list
    s: list
    T: cp_model.IntVar  # noqa: N815 - the paper's T
    intervals: list
    z: dict
    ancestors: list[int]
    descendants: list[int]
    hint: Schedule | None

    @property
    def n(self) -> int:
        return self.problem.n

    def load(self, members) -> cp_model.LinearExprT:
        """sum_{u in members} x_u·T_host,u as one flat expression (forced-host terms are constants)."""
        free = [u for u in members if self.capable[u] and self.host[u] > 0]
        fixed = sum(self.host[u] for u in members if not self.capable[u])
        return cp_model.LinearExpr.WeightedSum([self.x[u] for u in free], [self.host[u] for u in free]) + fixed

    def finish(self, v: int) -> cp_model.LinearExprT:
        """f_v = s_v + T_acc,v + x_v·(T_host,v - T_acc,v) (eq. 7)."""
        if not self.capable[v]:
            return self.s[v] + self.host[v]
        return self.s[v] + self.acc[v] + (self.host[v] - self.acc[v]) * self.x[v]


def _hint(problem: PlacementProblem, tables: _Tables, warm_start: Schedule | None) -> Schedule | None:
    """The warm start timed in units, if it is a placement the model allows."""
    if warm_start is None:
        return None
    if not all(h or tables.capable[v] for v, h in enumerate(warm_start.on_host)):
        return None
    if sum(problem.crossbars[v] for v in range(problem.n) if not warm_start.on_host[v]) > problem.budget:
        return None
    return simulate(_floored(problem, tables), warm_start.on_host, host_order_by_start(warm_start))


def build_model(problem: PlacementProblem, *, plain: bool, warm_start: Schedule | None,
                cumulative_host: bool = False, lower_bound_ns: float = 0.0) -> CpSatModel:
    """The model of eq. 5-14 above with its domains (``plain=False``: release/tail, ``T <= UB``,
    ``T >= LB``); the tightening rows and cuts are added by :func:`add_tightenings` and
    :mod:`~cimsplit.passes.placement.solvers.cpsat.cuts`.

    ``lower_bound_ns``: a proven lower bound on the optimum from elsewhere (the
    bottleneck segments).  It enters as ``T >= floor(LB / r) - e`` with e = 0 in
    exact units, else 2n + 1: the floored optimum is at least the real one less
    one unit per term of the critical path (the rounding argument above), so
    the row keeps the floored optimum.
    """
    n = problem.n
    unit, exact = time_unit_ns(problem)
    tables = _tables(problem, unit)
    capable, host, acc, edges = tables.capable, tables.host, tables.acc, tables.edges
    hint = _hint(problem, tables, warm_start)
    horizon = int(sum(max(host[v], acc[v]) + tables.t_in[v] + tables.t_out[v] for v in range(n))
                  + sum(t for _, _, t in edges))
    ub = horizon if hint is None or plain else min(horizon, int(round(hint.makespan_ns)))

    m = cp_model.CpModel()
    min_dur = [min(host[v], acc[v]) for v in range(n)]
    release = [0] * n
    tail = [0] * n
    if not plain:
        for u, v, _ in sorted(edges, key=lambda e: e[1]):
            release[v] = max(release[v], release[u] + min_dur[u])
        for u, v, _ in sorted(edges, key=lambda e: -e[0]):
            tail[u] = max(tail[u], tail[v] + min_dur[v])
    x = [m.NewBoolVar(f"x{v}") if capable[v] else m.NewConstant(1) for v in range(n)]
    s = [m.NewIntVar(release[v], max(release[v], ub - tail[v] - min_dur[v]), f"s{v}") for v in range(n)]
    t_lower = max((release[v] + min_dur[v] + tail[v] for v in range(n)), default=0) if not plain else 0
    if lower_bound_ns > 0 and not plain:
        t_lower = max(t_lower, floor_units(lower_bound_ns, unit) - (0 if exact else 2 * n + 1))
    makespan = m.NewIntVar(t_lower, max(t_lower, ub), "T")
    intervals = []
    for v in range(n):
        if capable[v]:
            intervals.append(m.NewOptionalFixedSizeIntervalVar(s[v], host[v], x[v], f"h{v}"))
        else:
            intervals.append(m.NewFixedSizeIntervalVar(s[v], host[v], f"h{v}"))
    model = CpSatModel(**vars(tables), problem=problem, m=m, unit_ns=unit, exact=exact, ub=ub, t_lower=t_lower, x=x,
                       s=s, T=makespan, intervals=intervals, z={}, ancestors=dag.ancestors(problem),
                       descendants=dag.descendants(problem), hint=hint)
    m.AddNoOverlap(intervals)  # the single-core host (eq. 10-12)
    if cumulative_host and not plain:
        m.AddCumulative(intervals, [1] * n, 1)  # the same host again, for the cumulative propagators
    _add_precedence(model)
    _add_budget(model)
    return model


def _add_precedence(model: CpSatModel) -> None:
    """Edges with their transfers (eq. 8-9), graph inputs, and T after every sink and output (eq. 6)."""
    m, x, s, capable = model.m, model.x, model.s, model.capable
    for u, v, tr in model.edges:
        if tr > 0 and (capable[u] or capable[v]):
            if capable[u] and capable[v]:
                zuv = m.NewBoolVar(f"z{u}_{v}")
                m.Add(zuv >= x[u] - x[v])  # eq. 9
                m.Add(zuv >= x[v] - x[u])
                model.z[(u, v)] = zuv
                m.Add(s[v] >= model.finish(u) + tr * zuv)  # eq. 8
            else:
                other = x[u] if capable[u] else x[v]  # |x_u - x_v| = 1 - x_other
                m.Add(s[v] >= model.finish(u) + tr - tr * other)
        else:
            m.Add(s[v] >= model.finish(u))  # eq. 8 with no transfer
    for v in range(model.n):
        if model.t_in[v] > 0:
            m.Add(s[v] >= model.t_in[v] - model.t_in[v] * x[v])
    bounded = set(dag.sinks(model.problem)) | {v for v in range(model.n) if model.problem.writes_output[v]}
    for v in sorted(bounded):
        if model.t_out[v] > 0:
            m.Add(model.T >= model.finish(v) + model.t_out[v] - model.t_out[v] * x[v])  # eq. 6 + output transfer
        else:
            m.Add(model.T >= model.finish(v))  # eq. 6


def _add_budget(model: CpSatModel) -> None:
    """The crossbar budget as one row (eq. 14), when offloading everything would exceed it."""
    problem, x = model.problem, model.x
    cim_able = [v for v in range(model.n) if model.capable[v]]
    if sum(problem.crossbars[v] for v in cim_able) > problem.budget:
        on_cim = cp_model.LinearExpr.WeightedSum([x[v] for v in cim_able], [-problem.crossbars[v] for v in cim_able])
        model.m.Add(on_cim + sum(problem.crossbars[v] for v in cim_able) <= problem.budget)  # eq. 14


def add_load_cuts(model: CpSatModel) -> None:
    """The host-load row and its ancestor/descendant forms (host operators never overlap)."""
    m, n, anc, desc = model.m, model.n, model.ancestors, model.descendants
    m.Add(model.T >= model.load(range(n)))  # host-load cut
    for v in range(n):
        members = [u for u in range(v) if (anc[v] >> u) & 1]
        if len(members) >= 2:
            m.Add(model.s[v] >= model.load(members))
        members = [w for w in range(v + 1, n) if (desc[v] >> w) & 1]
        if len(members) >= 2:
            m.Add(model.T >= model.finish(v) + model.load(members))


def add_hints(model: CpSatModel, extra: list) -> None:
    """The complete hint: assignment, starts, z and T of the warm start, plus the cuts' fills."""
    hint, m = model.hint, model.m
    if hint is None:
        return
    for var, value in extra:
        m.AddHint(var, value)
    for v in range(model.n):
        if model.capable[v]:
            m.AddHint(model.x[v], int(hint.on_host[v]))
        m.AddHint(model.s[v], int(round(hint.start_ns[v])))
    for (u, v), zuv in model.z.items():
        m.AddHint(zuv, int(hint.on_host[u] != hint.on_host[v]))
    m.AddHint(model.T, int(round(hint.makespan_ns)))
