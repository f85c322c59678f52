"""The ILP of section IV-B as a solver-neutral sparse model, built once per problem.

:func:`build_milp` turns a :class:`PlacementProblem` into a :class:`MilpModel`:
columns with bounds, integrality and objective, and rows ``lower <= A x <= upper``
in CSR form.  Each backend (HiGHS, Gurobi) only translates this model, so the
formulation, and every argument that it keeps the optimum, lives here.

Variables (times are in model units of ``time_unit_ns`` nanoseconds, chosen so
that the big-M of eq. 13 is about 1e4: keeps coefficients and tolerances sane):

- ``x_v`` binary, 1 = host; fixed to 1 by its bounds outside V_acc (eq. 5),
- ``s_v >= 0`` start times; ``f_v`` is substituted out with eq. 7:
  ``f_v = s_v + T_acc,v + x_v·(T_host,v - T_acc,v)`` (``T_acc,v := 0`` outside V_acc),
- ``z_uv`` per edge (eq. 9), ``o_uv`` per incomparable pair (eq. 10-12),
- ``T`` the makespan, the only objective term.

``plain=True`` is exactly the paper's model (with graph input/output transfers,
all zero under ``--paper-exact``).  ``plain=False`` adds reductions and cuts that
keep the optimal makespan; each is argued in :func:`build_milp`'s docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cimsplit.passes.placement import dag
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import Schedule

__all__ = ["MilpModel", "RowBuilder", "build_milp", "big_m_ns"]

_TARGET_M = 1.0e4
"""Model time unit chosen so that eq. 13's M is this many units."""


@dataclass(frozen=True)
class MilpModel:
    """min c·x  s.t.  row_lower <= A x <= row_upper,  col_lower <= x <= col_upper."""

    col_names: tuple[str, ...]
    col_lower: np.ndarray
    col_upper: np.ndarray
    col_cost: np.ndarray
    col_integer: np.ndarray
    """bool per column."""
    row_lower: np.ndarray
    row_upper: np.ndarray
    a_start: np.ndarray
    """CSR row starts (length n_rows + 1)."""
    a_index: np.ndarray
    a_value: np.ndarray
    x_col: tuple[int, ...]
    s_col: tuple[int, ...]
    t_col: int
    z_col: dict[tuple[int, int], int]
    o_col: dict[tuple[int, int], int]
    time_unit_ns: float
    plain: bool
    upper_bound_ns: float | None

    @property
    def n_variables(self) -> int:
        return len(self.col_names)

    @property
    def n_constraints(self) -> int:
        return len(self.row_lower)

    @property
    def n_integer(self) -> int:
        return int(self.col_integer.sum())

    def rows(self):
        """Yield ``(lower, upper, column indices, values)`` per row (for row-wise APIs)."""
        for r in range(self.n_constraints):
            lo, hi = self.a_start[r], self.a_start[r + 1]
            yield self.row_lower[r], self.row_upper[r], self.a_index[lo:hi], self.a_value[lo:hi]

    def vector_from_schedule(self, problem: PlacementProblem, schedule: Schedule, host_order: Sequence[int]) -> np.ndarray:
        """A full column vector for ``schedule`` (a warm start): x, s, z, o and T."""
        values = np.zeros(self.n_variables)
        unit = self.time_unit_ns
        position = {v: i for i, v in enumerate(host_order)}
        for v in range(problem.n):
            values[self.x_col[v]] = 1.0 if schedule.on_host[v] else 0.0
            values[self.s_col[v]] = schedule.start_ns[v] / unit
        for (u, v), col in self.z_col.items():
            values[col] = 1.0 if schedule.on_host[u] != schedule.on_host[v] else 0.0
        for (u, v), col in self.o_col.items():
            if u in position and v in position:
                first = position[u] < position[v]
            else:
                first = schedule.start_ns[u] <= schedule.start_ns[v]
            values[col] = 1.0 if first else 0.0
        values[self.t_col] = schedule.makespan_ns / unit
        return values

    def decode(self, values: Sequence[float]) -> tuple[tuple[bool, ...], tuple[float, ...], float]:
        """(on_host, start_ns, makespan_ns) from a solver's column vector (x rounded)."""
        unit = self.time_unit_ns
        on_host = tuple(bool(values[c] > 0.5) for c in self.x_col)
        start_ns = tuple(max(0.0, float(values[c])) * unit for c in self.s_col)
        return on_host, start_ns, float(values[self.t_col]) * unit


def big_m_ns(problem: PlacementProblem) -> float:
    """Eq. 13: sum of max(T_host, T_acc) over V plus every transfer (T_acc := 0 outside V_acc).

    Graph input/output transfers are added too: they are part of our makespan.
    """
    total = 0.0
    for v in range(problem.n):
        total += max(problem.t_host_ns[v], problem.t_cim_ns[v] or 0.0)
        total += problem.t_in_ns[v] + problem.t_out_ns[v]
    total += sum(t for _, _, t in problem.edges)
    return total


class _Builder:
    """Columns and CSR rows of a :class:`MilpModel` as they are added (also the stream model's)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.cost: list[float] = []
        self.integer: list[bool] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []
        self.starts: list[int] = [0]
        self.index: list[int] = []
        self.value: list[float] = []

    def var(self, name: str, lower: float, upper: float, integer: bool = False, cost: float = 0.0) -> int:
        self.names.append(name)
        self.lower.append(lower)
        self.upper.append(upper)
        self.integer.append(integer)
        self.cost.append(cost)
        return len(self.names) - 1

    def row(self, terms: dict[int, float] | list[tuple[int, float]], lower: float, upper: float = np.inf) -> None:
        merged: dict[int, float] = {}
        for col, coef in (terms.items() if isinstance(terms, dict) else terms):
            merged[col] = merged.get(col, 0.0) + coef
        for col, coef in merged.items():
            if coef != 0.0:
                self.index.append(col)
                self.value.append(coef)
        self.starts.append(len(self.index))
        self.row_lower.append(lower)
        self.row_upper.append(upper)


RowBuilder = _Builder


def build_milp(problem: PlacementProblem, *, plain: bool = False, upper_bound_ns: float | None = None,
               lower_bound_ns: float = 0.0) -> MilpModel:
    """Build the ILP of eq. 5-14 (``plain``) or its tightened equivalent.

    Reductions with ``plain=False`` — each keeps the optimal makespan:

    - ``z_uv`` is continuous in [0, 1], and is dropped where it is fixed: it only
      appears as a lower bound on s_v (eq. 8) and in eq. 9, so for fixed x the
      least z = |x_u - x_v| (0 or 1) is always best; where both ends are forced
      onto the host z = 0, where one end w is forced, |x_u - x_v| = 1 - x_other,
      and where T_transfer = 0 the term vanishes.
    - ``upper_bound_ns`` (UB, the makespan of a feasible schedule, e.g. the best
      baseline) bounds ``T <= UB``: every optimal solution has T = OPT <= UB, so
      none is cut off.  With T <= UB every feasible point satisfies
      ``f_u <= T - tail_u`` and ``s_v >= release_v`` (see :mod:`dag`: both follow
      from eq. 6-8 with transfers >= 0 and durations >= min(T_host, T_acc)), so
      ``f_u - s_v <= UB - tail_u - release_v =: M_uv``.  Eq. 11 needs exactly
      ``s_v >= f_u - M`` when it is switched off (multiplier >= 1), so the
      per-constraint big-M ``max(0, M_uv)`` switches it off for every feasible
      point with T <= UB — all optimal solutions stay feasible.  Same for eq. 12
      with ``M_vu``.
    - ``lower_bound_ns`` (LB, a proven lower bound on the optimum from elsewhere) bounds
      ``T >= LB``: every optimal solution has T = OPT >= LB.
    - Critical-path bounds: ``release_v <= s_v <= UB - tail_v - min_dur_v`` and
      ``T >= max_v(release_v + min_dur_v + tail_v)``: implied by the constraints
      (argument above), so they remove no feasible point with T <= UB.
    - Host-load cut ``T >= sum_v x_v·T_host,v``: host operators never overlap (a
      comparable pair is ordered by eq. 8, an incomparable pair by eq. 11-12) and
      all lie in [0, T].
    - Per-operator forms: all host ancestors u of v finish before s_v (they
      precede v, whatever x_v is) and do not overlap, so
      ``s_v >= sum_{u in anc(v)} x_u·T_host,u``; all host descendants w start
      after f_v and end by T, so ``T >= f_v + sum_{w in desc(v)} x_w·T_host,w``.
      Added only where they say more than eq. 8 / eq. 6 (two or more terms).

    Reductions that look exact but are not are deliberately absent: merging a
    host-only chain u -> v into one operator forbids running an independent
    operator between u and v, which can be the only optimal order
    (tests/passes/test_ilp_exactness.py has the counterexample).
    """
    f = _Formulation.scaled(problem, plain=plain, upper_bound_ns=upper_bound_ns, lower_bound_ns=lower_bound_ns)
    f.add_precedence()
    f.add_graph_io()
    f.add_serialization()
    f.add_budget()
    if not plain:
        f.add_load_cuts()
    return f.model()


@dataclass
class _Formulation:
    """The columns of eq. 5-14 under construction, with the scaled tables the rows read (model units)."""

    problem: PlacementProblem
    plain: bool
    upper_bound_ns: float | None
    """The warm start's makespan when ``T <= UB`` is used, else ``None``."""
    unit: float
    host: list[float]
    acc: list[float]
    capable: list[bool]
    t_in: list[float]
    t_out: list[float]
    ub: float | None
    release: list[float]
    tail: list[float]
    min_dur: list[float]
    b: _Builder
    x: list[int]
    s: list[int]
    t_col: int
    z_col: dict[tuple[int, int], int]
    o_col: dict[tuple[int, int], int]

    @classmethod
    def scaled(cls, problem: PlacementProblem, *, plain: bool, upper_bound_ns: float | None,
               lower_bound_ns: float = 0.0) -> _Formulation:
        """Model units, the critical-path bounds, and the x, s, T columns."""
        n = problem.n
        unit = max(big_m_ns(problem), 1e-9) / _TARGET_M
        host = [problem.t_host_ns[v] / unit for v in range(n)]
        capable = [problem.capable(v) for v in range(n)]
        use_ub = not plain and upper_bound_ns is not None and np.isfinite(upper_bound_ns)
        # A hair of slack so that the warm start (whose makespan is UB) stays feasible in floating point.
        ub = (upper_bound_ns * (1 + 1e-9) + 1e-9) / unit if use_ub else None  # type: ignore[operator]
        release = [r / unit for r in dag.release_ns(problem)] if not plain else [0.0] * n
        tail = [t / unit for t in dag.tail_ns(problem)] if not plain else [0.0] * n
        min_dur = [dag.min_duration_ns(problem, v) / unit for v in range(n)]

        b = _Builder()
        # eq. 5: x_v binary on V_acc, fixed to 1 elsewhere.
        x = [b.var(f"x[{v}]", 0.0 if capable[v] else 1.0, 1.0, integer=True) for v in range(n)]
        s = []
        for v in range(n):
            upper = max(release[v], ub - tail[v] - min_dur[v]) if ub is not None else np.inf
            s.append(b.var(f"s[{v}]", release[v], upper))
        t_lower = 0.0
        if not plain:
            t_lower = max((release[v] + min_dur[v] + tail[v] for v in range(n)), default=0.0)
            t_lower = max(t_lower, sum(host[v] for v in range(n) if not capable[v]))
            # A hair below LB, so that a solution at exactly OPT = LB stays feasible in floating point.
            t_lower = max(t_lower, lower_bound_ns * (1 - 1e-9) / unit)
            if ub is not None:
                t_lower = min(t_lower, ub)
        t_col = b.var("T", t_lower, ub if ub is not None else np.inf, cost=1.0)
        return cls(problem=problem, plain=plain, upper_bound_ns=upper_bound_ns if use_ub else None, unit=unit,
                   host=host, acc=[(problem.t_cim_ns[v] or 0.0) / unit for v in range(n)], capable=capable,
                   t_in=[problem.t_in_ns[v] / unit for v in range(n)],
                   t_out=[problem.t_out_ns[v] / unit for v in range(n)], ub=ub, release=release, tail=tail,
                   min_dur=min_dur, b=b, x=x, s=s, t_col=t_col, z_col={}, o_col={})

    def finish(self, v: int) -> tuple[list[tuple[int, float]], float]:
        """eq. 7: f_v = s_v + x_v·T_host + (1 - x_v)·T_acc as (terms, constant)."""
        return [(self.s[v], 1.0), (self.x[v], self.host[v] - self.acc[v])], self.acc[v]

    def add_precedence(self) -> None:
        """eq. 8-9: precedence with transfers on edges whose ends sit on different devices."""
        b, x, s, capable = self.b, self.x, self.s, self.capable
        for u, v, transfer_ns in self.problem.edges:
            transfer = transfer_ns / self.unit
            f_terms, f_const = self.finish(u)
            terms = [(s[v], 1.0)] + [(c, -k) for c, k in f_terms]
            constant = f_const
            if self.plain or (capable[u] and capable[v] and transfer > 0):
                z = b.var(f"z[{u},{v}]", 0.0, 1.0, integer=self.plain)
                self.z_col[(u, v)] = z
                b.row([(z, 1.0), (x[u], -1.0), (x[v], 1.0)], 0.0)  # eq. 9: z >= x_u - x_v
                b.row([(z, 1.0), (x[u], 1.0), (x[v], -1.0)], 0.0)  # eq. 9: z >= x_v - x_u
                terms.append((z, -transfer))
            elif transfer > 0 and capable[u] != capable[v]:
                other = u if capable[u] else v  # |x_u - x_v| = 1 - x_other
                terms.append((x[other], transfer))
                constant += transfer
            b.row(terms, constant)  # eq. 8: s_v - f_u - z·T_transfer >= 0

    def add_graph_io(self) -> None:
        """Graph inputs and outputs live on the host; eq. 6 for sinks and output writers."""
        problem, b, x = self.problem, self.b, self.x
        for v in range(problem.n):  # a CIM operator reading a graph input waits for the transfer
            if self.capable[v] and self.t_in[v] > 0:
                b.row([(self.s[v], 1.0), (x[v], self.t_in[v])], self.t_in[v])  # s_v >= (1 - x_v)·t_in
        # eq. 6: T >= f_v for sinks; T >= f_v + (1 - x_v)·t_out for operators writing graph outputs.
        bounded = set(dag.sinks(problem)) | {v for v in range(problem.n) if problem.writes_output[v]}
        for v in sorted(bounded):
            f_terms, f_const = self.finish(v)
            terms = [(self.t_col, 1.0)] + [(c, -k) for c, k in f_terms]
            constant = f_const
            if problem.writes_output[v] and self.capable[v] and self.t_out[v] > 0:
                terms.append((x[v], self.t_out[v]))
                constant += self.t_out[v]
            b.row(terms, constant)

    def add_serialization(self) -> None:
        """eq. 10-12: serialize incomparable pairs when both run on the single-core host."""
        b, x, s, ub, tail, release = self.b, self.x, self.s, self.ub, self.tail, self.release
        m_plain = big_m_ns(self.problem) / self.unit
        for u, v in dag.incomparable_pairs(self.problem):
            o = b.var(f"o[{u},{v}]", 0.0, 1.0, integer=True)
            self.o_col[(u, v)] = o
            if ub is not None:
                m_uv = max(0.0, ub - tail[u] - release[v])
                m_vu = max(0.0, ub - tail[v] - release[u])
            else:
                m_uv = m_vu = m_plain
            # eq. 11: s_v >= f_u - M·(3 - x_u - x_v - o_uv)
            f_terms, f_const = self.finish(u)
            terms = [(s[v], 1.0)] + [(c, -k) for c, k in f_terms] + [(x[u], -m_uv), (x[v], -m_uv), (o, -m_uv)]
            b.row(terms, f_const - 3 * m_uv)
            # eq. 12: s_u >= f_v - M·(2 - x_u - x_v + o_uv)
            f_terms, f_const = self.finish(v)
            terms = [(s[u], 1.0)] + [(c, -k) for c, k in f_terms] + [(x[u], -m_vu), (x[v], -m_vu), (o, m_vu)]
            b.row(terms, f_const - 2 * m_vu)

    def add_budget(self) -> None:
        """eq. 14: sum over V_acc of (1 - x_v)·N_crossbar,v <= C, i.e. sum c_v·x_v >= sum c_v - C."""
        problem, capable = self.problem, self.capable
        total = sum(problem.crossbars[v] for v in range(problem.n) if capable[v])
        if self.plain or total > problem.budget:
            self.b.row([(self.x[v], float(problem.crossbars[v])) for v in range(problem.n) if capable[v]],
                       float(total - problem.budget))

    def add_load_cuts(self) -> None:
        """The host-load cut and its ancestor/descendant forms (see :func:`build_milp`)."""
        n, b, x, host = self.problem.n, self.b, self.x, self.host
        b.row([(self.t_col, 1.0)] + [(x[v], -host[v]) for v in range(n)], 0.0)  # host-load cut
        # x_u is fixed to 1 outside V_acc: those operators' host time is a constant of the row, so a
        # row has one term per CIM-capable member (a long chain of host operators made them dense).
        capable = np.array(self.capable, dtype=bool)
        forced = np.where(capable, 0.0, np.array(host, dtype=float))
        anc = dag.bit_matrix(dag.ancestors(self.problem), n)
        desc = dag.bit_matrix(dag.descendants(self.problem), n)
        for v in range(n):
            if anc[v].sum() >= 2:
                free = [(x[int(u)], -host[int(u)]) for u in np.flatnonzero(anc[v] & capable)]
                b.row([(self.s[v], 1.0)] + free, float(forced[anc[v]].sum()))
            if desc[v].sum() >= 2:
                free = [(x[int(w)], -host[int(w)]) for w in np.flatnonzero(desc[v] & capable)]
                f_terms, f_const = self.finish(v)
                b.row([(self.t_col, 1.0)] + [(c, -k) for c, k in f_terms] + free, f_const + float(forced[desc[v]].sum()))

    def model(self) -> MilpModel:
        b = self.b
        return MilpModel(
            col_names=tuple(b.names),
            col_lower=np.array(b.lower, dtype=float),
            col_upper=np.array(b.upper, dtype=float),
            col_cost=np.array(b.cost, dtype=float),
            col_integer=np.array(b.integer, dtype=bool),
            row_lower=np.array(b.row_lower, dtype=float),
            row_upper=np.array(b.row_upper, dtype=float),
            a_start=np.array(b.starts, dtype=np.int32),
            a_index=np.array(b.index, dtype=np.int32),
            a_value=np.array(b.value, dtype=float),
            x_col=tuple(self.x),
            s_col=tuple(self.s),
            t_col=self.t_col,
            z_col=self.z_col,
            o_col=self.o_col,
            time_unit_ns=self.unit,
            plain=self.plain,
            upper_bound_ns=self.upper_bound_ns,
        )
