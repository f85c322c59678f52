"""Exhaustive search over shifted-copies stream schedules of tiny problems, independent of the solver.

Nothing here is shared with :mod:`cimsplit.passes.placement.stream`: the frame's
tasks are derived again, and the bounded search uses another formulation than the
MILP (residues instead of a phase per resource) solved by another LP solver (GLOP).

Unbounded: min over every assignment of max(host busy, bus busy, slowest CIM
operator) -- the resource bound, achievable by the modulo construction.
Bounded: for every assignment, every linear order of the residues r_i = s_i mod P
on the host and on the bus, and every stage vector k (s_i = k_i P + r_i, stages
non-decreasing along precedence), an LP gives the least P; the minimum over all
of them is the optimum of the class.  Circular non-overlap of residues sorted
r_1 <= ... <= r_m is r_j + d_j <= r_{j+1} and r_m + d_m <= r_1 + P.
"""

from __future__ import annotations

import itertools
import random

from ortools.linear_solver import pywraplp

from cimsplit.passes.placement.problem import PlacementProblem, TensorTransfer


def tiny_problem(seed: int) -> PlacementProblem:
    """3-4 operators with small integer costs, random forward edges, shared tensors, graph I/O."""
    rng = random.Random(f"stream-brute:{seed}")
    n = rng.choice((3, 3, 4))
    names = tuple(f"v{i}" for i in range(n))
    t_host = tuple(float(rng.randint(0, 8)) for _ in range(n))
    capable = [rng.random() < 0.75 for _ in range(n)]
    t_cim = tuple(float(rng.randint(1, 8)) if c else None for c in capable)
    crossbars = tuple(rng.randint(1, 3) if c else 0 for c in capable)
    edges, tensors = [], []
    for u in range(n):
        readers = [v for v in range(u + 1, n) if rng.random() < 0.6]
        t = float(rng.randint(0, 3))
        if readers and rng.random() < 0.5:  # one tensor read by all of them
            tensors.append(TensorTransfer(f"t{u}", u, tuple(readers), t))
        else:
            tensors.extend(TensorTransfer(f"t{u}_{v}", u, (v,), t) for v in readers)
        edges.extend((u, v, t) for v in readers)
    consumers = {u for u, _, _ in edges}
    t_in = tuple(float(rng.randint(0, 2)) if c and rng.random() < 0.5 else 0.0 for c in capable)
    writes = tuple(v not in consumers for v in range(n))
    t_out = tuple(float(rng.randint(0, 2)) if c and writes[v] else 0.0 for v, c in enumerate(capable))
    budget = rng.randint(0, sum(crossbars))
    return PlacementProblem(names, t_host, t_cim, crossbars, tuple(edges), budget, t_in, t_out, writes,
                            tuple(tensors))


def _frame(problem: PlacementProblem, x: tuple[bool, ...]):
    """(durations, units, precedence pairs) of one frame, re-derived here."""
    dur: list[float] = []
    unit: list[str] = []
    prec: list[tuple[int, int]] = []
    op = {}
    for v in range(problem.n):
        op[v] = len(dur)
        dur.append(problem.t_host_ns[v] if x[v] else problem.t_cim_ns[v])
        unit.append("host" if x[v] else f"cim{v}")
    for u, v, _ in problem.edges:
        prec.append((op[u], op[v]))
    for v in range(problem.n):
        if not x[v] and problem.t_in_ns[v] > 0:
            dur.append(problem.t_in_ns[v])
            unit.append("bus")
            prec.append((len(dur) - 1, op[v]))
        if not x[v] and problem.writes_output[v] and problem.t_out_ns[v] > 0:
            dur.append(problem.t_out_ns[v])
            unit.append("bus")
            prec.append((op[v], len(dur) - 1))
    for t in problem.tensors:
        far = [d for d in t.dsts if x[d] != x[t.src]]
        if far and t.t_transfer_ns > 0:
            dur.append(t.t_transfer_ns)
            unit.append("bus")
            prec.append((op[t.src], len(dur) - 1))
            prec.extend((len(dur) - 1, op[d]) for d in far)
    return dur, unit, prec


def _assignments(problem: PlacementProblem):
    free = [v for v in range(problem.n) if problem.t_cim_ns[v] is not None]
    for bits in itertools.product((True, False), repeat=len(free)):
        x = [True] * problem.n
        for v, b in zip(free, bits):
            x[v] = b
        if sum(c for c, h in zip(problem.crossbars, x) if not h) <= problem.budget:
            yield tuple(x)


def _bound(dur, unit) -> float:
    host = sum(d for d, u in zip(dur, unit) if u == "host")
    bus = sum(d for d, u in zip(dur, unit) if u == "bus")
    return max([host, bus, *(d for d, u in zip(dur, unit) if u.startswith("cim"))])


def brute_unbounded(problem: PlacementProblem) -> float:
    return min(_bound(*_frame(problem, x)[:2]) for x in _assignments(problem))


def _lp(dur, unit, prec, orders, stage, max_latency, frames, cap):
    solver = pywraplp.Solver.CreateSolver("GLOP")
    inf = solver.infinity()
    p = solver.NumVar(0.0, cap, "P")
    lat = solver.NumVar(0.0, inf if max_latency is None else max_latency, "L")
    s = [solver.NumVar(0.0, inf, f"s{i}") for i in range(len(dur))]
    for i, j in prec:
        solver.Add(s[j] >= s[i] + dur[i])
    for i, d in enumerate(dur):
        solver.Add(lat >= s[i] + d)
        if unit[i].startswith("cim"):
            solver.Add(p >= d)
    if frames is not None:
        solver.Add(lat <= frames * p)
    for order in orders:
        r = {i: s[i] - stage[i] * p for i in order}
        for i in order:
            solver.Add(r[i] >= 0)
            solver.Add(r[i] <= p)
        for a, b in zip(order, order[1:]):
            solver.Add(r[a] + dur[a] <= r[b])
        solver.Add(r[order[-1]] + dur[order[-1]] <= r[order[0]] + p)
        if len(order) == 1:
            solver.Add(p >= dur[order[0]])
    solver.Minimize(p)
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    return p.solution_value()


def brute_bounded(problem: PlacementProblem, max_latency: float | None, frames: int | None,
                  limit: int = 20000) -> tuple[float | None, int]:
    """(least period over the shifted-copies class under the bounds or None, LPs solved)."""
    best: float | None = None
    solved = 0
    cap = sum(problem.t_host_ns) + sum(t or 0 for t in problem.t_cim_ns) + sum(problem.t_in_ns) \
        + sum(problem.t_out_ns) + sum(t.t_transfer_ns for t in problem.tensors) + 1.0
    for x in sorted(_assignments(problem), key=lambda x: _bound(*_frame(problem, x)[:2])):
        dur, unit, prec = _frame(problem, x)
        low = _bound(dur, unit)
        if best is not None and low >= best - 1e-9:
            continue
        if max_latency is not None and low > max_latency + 1e-9:
            continue  # one frame keeps its busiest resource busy for `low`
        serial = {r: [i for i in range(len(dur)) if unit[i] == r and dur[i] > 0] for r in ("host", "bus")}
        tasks = serial["host"] + serial["bus"]
        if low <= 0:
            return 0.0, solved
        horizon = max_latency if max_latency is not None else frames * cap  # type: ignore[operator]
        k_max = int(horizon // low) if max_latency is not None else frames
        reach = {(i, j) for i, j in prec}
        changed = True
        while changed:  # transitive closure
            changed = False
            for (a, b), (c, d) in itertools.product(list(reach), list(reach)):
                if b == c and (a, d) not in reach:
                    reach.add((a, d))
                    changed = True
        for stages in itertools.product(range(k_max + 1), repeat=len(tasks)):
            stage = dict(zip(tasks, stages))
            if any(stage[a] > stage[b] for a, b in reach if a in stage and b in stage):
                continue
            for host_order in itertools.permutations(serial["host"]):
                for bus_order in itertools.permutations(serial["bus"]):
                    orders = [o for o in (host_order, bus_order) if o]
                    solved += 1
                    if solved > limit:
                        raise RuntimeError("instance too large for the brute force")
                    value = _lp(dur, unit, prec, orders, stage, max_latency, frames,
                                best if best is not None else cap)
                    if value is not None and (best is None or value < best - 1e-9):
                        best = value
    return best, solved
