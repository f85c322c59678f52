"""The throughput objective as MILPs (solver-neutral :class:`MilpModel`, solved by the HiGHS/Gurobi back ends).

**Unbounded** (:func:`build_period_milp`): min P subject to

    P >= sum_v x_v T_host,v                    (the host runs one task at a time)
    P >= (1 - x_v) T_acc,v  for every v        (a CIM operator works on one frame at a time)
    P >= sum_g w_g T_g + sum_v (1 - x_v)(T_in,v + T_out,v)    (the bus; w_g >= |x_src - x_dst|)
    sum_v (1 - x_v) N_crossbar,v <= C           (eq. 14), x_v = 1 outside V_acc (eq. 5)

where g runs over the tensors of :attr:`PlacementProblem.tensors` (one bus
transfer per tensor and destination device).  Its optimum is the minimum
period over shifted-copies schedules: every such schedule obeys these
inequalities, and :mod:`~cimsplit.passes.placement.stream.construct` builds one
with period exactly max(...) for any placement.

**Bounded** (:func:`build_bounded_milp`, ``--max-latency T`` and/or
``--frames-in-flight K``): the shifted-copies class itself, exactly.  Every
task i has a start s_i in S; a task on the host or the bus writes
s_i = k_i P + phi_R + a_i with its stage k_i >= 0 (integer, binary-expanded;
each bit times P linearised exactly by McCormick rows, P being bounded), its
resource's phase phi_R in [0, P) and its offset a_i in [0, P - d_i]; the
offsets of two tasks on one resource do not overlap (an order binary per
pair).  With a free phase per resource no task wraps the period boundary (cut
the circle at a point no busy interval covers), so this is no restriction:
the model's feasible set is exactly the shifted-copies schedules whose frame
latency L = max_i (s_i + d_i) satisfies L <= T and L <= K P, plus precedence
(a consumer on the other device waits for its tensor's transfer) and the
constraints of the unbounded model.  Its optimum is therefore the minimum
period over that class (up to the MIP tolerances; the periodic validator
recomputes everything in floats).  Not claimed: anything outside the class (a
schedule whose frames differ from one another), and optimality when the time
limit stops the solve (the result then says ``time_limit`` with its bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.solvers.milp import MilpModel, RowBuilder
from cimsplit.passes.placement.stream.tasks import BUS, CIM, HOST

__all__ = ["BoundedMilp", "build_period_milp", "build_bounded_milp", "potential_tasks", "PotentialTask"]

_TARGET_M = 1.0e4


@dataclass(frozen=True)
class PotentialTask:
    """A task that exists under some placement: an operator, a tensor's transfer or a graph I/O transfer."""

    key: tuple[str, int]
    """("op", v), ("tensor", g), ("in", v) or ("out", v)."""
    duration_ns: float


def potential_tasks(problem: PlacementProblem) -> list[PotentialTask]:
    tasks = [PotentialTask(("op", v), 0.0) for v in range(problem.n)]
    for v in range(problem.n):
        if problem.capable(v) and problem.t_in_ns[v] > 0:
            tasks.append(PotentialTask(("in", v), float(problem.t_in_ns[v])))
        if problem.capable(v) and problem.writes_output[v] and problem.t_out_ns[v] > 0:
            tasks.append(PotentialTask(("out", v), float(problem.t_out_ns[v])))
    for g, tensor in enumerate(problem.tensors):
        can_cross = problem.capable(tensor.src) or any(problem.capable(d) for d in tensor.dsts)
        if tensor.t_transfer_ns > 0 and can_cross:
            tasks.append(PotentialTask(("tensor", g), float(tensor.t_transfer_ns)))
    return tasks


def task_name(problem: PlacementProblem, key: tuple[str, int], on_host: tuple[bool, ...]) -> str:
    """The name :func:`~cimsplit.passes.placement.stream.tasks.task_graph` gives this task under ``on_host``."""
    kind, i = key
    if kind == "op":
        return problem.names[i]
    if kind == "in":
        return f"{problem.names[i]}:input->{CIM}"
    if kind == "out":
        return f"{problem.names[i]}:output->{HOST}"
    tensor = problem.tensors[i]
    return f"{tensor.name}->{CIM if on_host[tensor.src] else HOST}"


def _x_columns(b: RowBuilder, problem: PlacementProblem) -> list[int]:
    return [b.var(f"x[{v}]", 0.0 if problem.capable(v) else 1.0, 1.0, integer=True) for v in range(problem.n)]


def _budget(b: RowBuilder, problem: PlacementProblem, x: list[int]) -> None:
    capable = [v for v in range(problem.n) if problem.capable(v) and problem.crossbars[v] > 0]
    if capable:  # sum (1 - x_v) c_v <= C  <=>  sum c_v x_v >= sum c_v - C   (eq. 14)
        b.row([(x[v], float(problem.crossbars[v])) for v in capable],
              float(sum(problem.crossbars[v] for v in capable) - problem.budget))


def _crossing(b: RowBuilder, problem: PlacementProblem, x: list[int], g: int, w: int) -> None:
    """w >= |x_src - x_d| for every reader d of tensor g."""
    src = problem.tensors[g].src
    for d in problem.tensors[g].dsts:
        b.row([(w, 1.0), (x[src], -1.0), (x[d], 1.0)], 0.0)
        b.row([(w, 1.0), (x[src], 1.0), (x[d], -1.0)], 0.0)


def _resource_rows(b: RowBuilder, problem: PlacementProblem, x: list[int], p: int, unit: float,
                   presence: dict[tuple[str, int], int]) -> None:
    """P >= host load, P >= each CIM operator, P >= bus load (times in model units)."""
    b.row([(p, 1.0)] + [(x[v], -problem.t_host_ns[v] / unit) for v in range(problem.n)], 0.0)
    for v in range(problem.n):
        if problem.capable(v):
            t_cim = problem.t_cim_ns[v] / unit  # type: ignore[operator]
            b.row([(p, 1.0), (x[v], t_cim)], t_cim)
    bus: list[tuple[int, float]] = [(p, 1.0)]
    constant = 0.0
    for task in potential_tasks(problem):
        kind, i = task.key
        if kind == "tensor":
            bus.append((presence[task.key], -task.duration_ns / unit))
        elif kind in ("in", "out"):  # (1 - x_v) T
            bus.append((x[i], task.duration_ns / unit))
            constant += task.duration_ns / unit
    b.row(bus, constant)


def _model(b: RowBuilder, x: list[int], s: list[int], t_col: int, unit: float) -> MilpModel:
    return MilpModel(
        col_names=tuple(b.names), col_lower=np.array(b.lower, dtype=float), col_upper=np.array(b.upper, dtype=float),
        col_cost=np.array(b.cost, dtype=float), col_integer=np.array(b.integer, dtype=bool),
        row_lower=np.array(b.row_lower, dtype=float), row_upper=np.array(b.row_upper, dtype=float),
        a_start=np.array(b.starts, dtype=np.int32), a_index=np.array(b.index, dtype=np.int32),
        a_value=np.array(b.value, dtype=float), x_col=tuple(x), s_col=tuple(s), t_col=t_col, z_col={}, o_col={},
        time_unit_ns=unit, plain=False, upper_bound_ns=None,
    )


def _unit(scale_ns: float) -> float:
    return max(scale_ns, 1e-9) / _TARGET_M


def build_period_milp(problem: PlacementProblem) -> MilpModel:
    """The unbounded model (module docstring); its objective column is P, ``s_col`` is empty."""
    scale = sum(problem.t_host_ns) + sum(t.t_transfer_ns for t in problem.tensors) + sum(problem.t_in_ns) \
        + sum(problem.t_out_ns) + max([0.0, *(t or 0.0 for t in problem.t_cim_ns)])
    unit = _unit(scale)
    b = RowBuilder()
    x = _x_columns(b, problem)
    p = b.var("P", 0.0, np.inf, cost=1.0)
    presence: dict[tuple[str, int], int] = {}
    for task in potential_tasks(problem):
        if task.key[0] == "tensor":
            presence[task.key] = b.var(f"w[{task.key[1]}]", 0.0, 1.0)
            _crossing(b, problem, x, task.key[1], presence[task.key])
    _resource_rows(b, problem, x, p, unit, presence)
    _budget(b, problem, x)
    return _model(b, x, [], p, unit)


@dataclass(frozen=True)
class BoundedMilp:
    model: MilpModel
    tasks: tuple[PotentialTask, ...]
    """The potential tasks, in the order of ``model.s_col`` (then L)."""


def build_bounded_milp(problem: PlacementProblem, *, period_lower_ns: float, period_upper_ns: float,
                       max_latency_ns: float | None, frames_in_flight: int | None) -> BoundedMilp:
    """The bounded model (module docstring).  ``period_lower_ns`` > 0: a proven lower bound on P
    (the unbounded optimum), ``period_upper_ns``: a period no optimum exceeds."""
    p_ub = float(period_upper_ns)
    horizon = float(max_latency_ns) if max_latency_ns is not None else frames_in_flight * p_ub  # type: ignore[operator]
    k_max = int(math.floor(horizon / period_lower_ns + 1e-9)) if period_lower_ns > 0 else 0
    n_bits = max(0, k_max.bit_length())
    d_max = max([0.0, *problem.t_host_ns, *(t or 0.0 for t in problem.t_cim_ns), *problem.t_in_ns,
                 *problem.t_out_ns, *(t.t_transfer_ns for t in problem.tensors)])
    big_link = horizon + (2 ** n_bits + 1) * p_ub + d_max
    unit = _unit(big_link)
    h, pu, m_link, m_prec, m_pair = horizon / unit, p_ub / unit, big_link / unit, (horizon + d_max) / unit, \
        (p_ub + d_max) / unit
    b = RowBuilder()
    x = _x_columns(b, problem)
    p = b.var("P", period_lower_ns / unit, pu, cost=1.0)
    latency = b.var("L", 0.0, h)
    tasks = potential_tasks(problem)
    s = {t.key: b.var(f"s[{t.key[0]}{t.key[1]}]", 0.0, h) for t in tasks}
    # presence of a task on its serial resource: (constant, [(col, coef)])
    presence: dict[tuple[str, int], int] = {}
    for t in tasks:
        if t.key[0] == "tensor":
            presence[t.key] = b.var(f"w[{t.key[1]}]", 0.0, 1.0, integer=True)
            _crossing(b, problem, x, t.key[1], presence[t.key])
    _resource_rows(b, problem, x, p, unit, presence)
    _budget(b, problem, x)

    def duration(v: int) -> tuple[list[tuple[int, float]], float]:
        """d_v = T_acc + x_v (T_host - T_acc) as (terms, constant) in model units."""
        if not problem.capable(v):
            return [], problem.t_host_ns[v] / unit
        t_cim = problem.t_cim_ns[v] / unit  # type: ignore[operator]
        return [(x[v], problem.t_host_ns[v] / unit - t_cim)], t_cim

    preds = [[] for _ in range(problem.n)]  # type: list[list[int]]
    for u, v, _ in problem.edges:
        preds[v].append(u)
    for v in range(problem.n):
        terms, const = duration(v)
        for u in preds[v]:  # s_v >= s_u + d_u
            du, cu = duration(u)
            b.row([(s[("op", v)], 1.0), (s[("op", u)], -1.0)] + [(c, -k) for c, k in du], cu)
        b.row([(latency, 1.0), (s[("op", v)], -1.0)] + [(c, -k) for c, k in terms], const)  # L >= s_v + d_v
    for t in tasks:
        kind, i = t.key
        d = t.duration_ns / unit
        if kind == "op":
            continue
        if kind == "tensor":
            tensor = problem.tensors[i]
            du, cu = duration(tensor.src)
            b.row([(s[t.key], 1.0), (s[("op", tensor.src)], -1.0)] + [(c, -k) for c, k in du], cu)
            for dst in tensor.dsts:  # a reader on the other device waits: s_d >= s_g + T_g - M (1 - z)
                z = b.var(f"z[{i},{dst}]", 0.0, 1.0)
                b.row([(z, 1.0), (x[tensor.src], -1.0), (x[dst], 1.0)], 0.0)
                b.row([(z, 1.0), (x[tensor.src], 1.0), (x[dst], -1.0)], 0.0)
                b.row([(s[("op", dst)], 1.0), (s[t.key], -1.0), (z, -m_prec)], d - m_prec)
        elif kind == "in":  # s_v >= s_in + T_in when x_v = 0
            b.row([(s[("op", i)], 1.0), (s[t.key], -1.0), (x[i], m_prec)], d)
        else:  # s_out >= s_v + d_v; L >= s_out + T_out when x_v = 0
            du, cu = duration(i)
            b.row([(s[t.key], 1.0), (s[("op", i)], -1.0)] + [(c, -k) for c, k in du], cu)
            b.row([(latency, 1.0), (s[t.key], -1.0), (x[i], m_prec)], d)
    if frames_in_flight is not None:  # L <= K P
        b.row([(p, float(frames_in_flight)), (latency, -1.0)], 0.0)

    # serial resources: s_i = k_i P + phi_R + a_i for present tasks, offsets disjoint in [0, P)
    members: dict[str, list[tuple[tuple[str, int], float, list[tuple[int, float]], float]]] = {HOST: [], BUS: []}
    for t in tasks:
        kind, i = t.key
        if kind == "op":
            if problem.t_host_ns[i] > 0:  # present iff x_v = 1
                members[HOST].append((t.key, problem.t_host_ns[i] / unit, [(x[i], 1.0)], 0.0))
        elif kind == "tensor":
            members[BUS].append((t.key, t.duration_ns / unit, [(presence[t.key], 1.0)], 0.0))
        else:  # present iff x_v = 0
            members[BUS].append((t.key, t.duration_ns / unit, [(x[i], -1.0)], 1.0))
    for resource, items in members.items():
        phase = b.var(f"phi[{resource}]", 0.0, pu)
        b.row([(p, 1.0), (phase, -1.0)], 0.0)
        offsets = []
        for key, d, pres, pres_const in items:
            a = b.var(f"a[{key[0]}{key[1]}]", 0.0, pu)
            offsets.append(a)
            absent = [(c, -k) for c, k in pres]  # (1 - p) = 1 - pres_const - sum(terms)
            absent_const = 1.0 - pres_const
            # a + d <= P + M (1 - p)
            b.row([(p, 1.0), (a, -1.0)] + [(c, m_pair * k) for c, k in absent], d - m_pair * absent_const)
            stage: list[tuple[int, float]] = []
            for bit in range(n_bits):
                beta = b.var(f"k[{key[0]}{key[1]},{bit}]", 0.0, 1.0, integer=True)
                y = b.var(f"kP[{key[0]}{key[1]},{bit}]", 0.0, pu)
                b.row([(p, 1.0), (y, -1.0)], 0.0)  # y <= P
                b.row([(y, -1.0), (beta, pu)], 0.0)  # y <= P_ub beta
                b.row([(y, 1.0), (p, -1.0), (beta, -pu)], -pu)  # y >= P - P_ub (1 - beta)
                stage.append((y, float(2 ** bit)))
            link = [(s[key], 1.0), (phase, -1.0), (a, -1.0)] + [(c, -k) for c, k in stage]
            # |s - k P - phi - a| <= M (1 - p)
            b.row(link + [(c, m_link * k) for c, k in absent], -m_link * absent_const)
            b.row([(c, -k) for c, k in link] + [(c, m_link * k) for c, k in absent], -m_link * absent_const)
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                (_, di, pi, ci), (_, dj, pj, cj) = items[i], items[j]
                o = b.var(f"o[{resource},{i},{j}]", 0.0, 1.0, integer=True)
                # relax by M (2 - p_i - p_j) = M (2 - ci - cj) - M sum(terms)
                relax = [(c, -m_pair * k) for c, k in (*pi, *pj)]
                relax_const = m_pair * (2.0 - ci - cj)
                # a_i + d_i <= a_j + M (1 - o) + relax
                b.row([(offsets[j], 1.0), (offsets[i], -1.0), (o, -m_pair)] + relax, di - m_pair - relax_const)
                # a_j + d_j <= a_i + M o + relax
                b.row([(offsets[i], 1.0), (offsets[j], -1.0), (o, m_pair)] + relax, dj - relax_const)
    s_cols = [s[t.key] for t in tasks] + [latency]
    return BoundedMilp(_model(b, x, s_cols, p, unit), tuple(tasks))
