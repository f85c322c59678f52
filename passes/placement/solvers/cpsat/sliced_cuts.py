"""Rows of the sliced CP-SAT model implied by every schedule with ``T <= UB`` (each keeps the optimum).

Each function takes the :class:`SlicedModel` record :func:`.sliced.solve_sliced` builds.  Times
are in model units (floored, so every row below holds in the floored problem, whose optimum is
<= the real one: the bound stays a true lower bound).  Notation: ``load_v`` is v's host time as a
linear expression of its mode (``T_host`` if whole on the host, 0 on the CIM, ``host_k + join_k``
if sliced by option k); ``d_v`` its shortest time from its last input to its output in its mode
(``T_host``, ``T_acc``, ``join_k + max(host_k, cim_k + back_k)``), ``dmin_v`` the least ``d_v``
over v's modes that fit the budget.  Every part of a sliced operator starts after all its inputs
are there and ends by its join (:mod:`...slicing`), so an operator's host tasks all lie in
[latest input, f_v].

:func:`add_load_rows` (host tasks never overlap and respect precedence):

- ``T >= sum_v load_v``;
- ``f_v >= sum_{u in anc(v)} load_u + load_v``: every host task of an ancestor ends before
  v's inputs are there, v's own ones before f_v;
- ``T >= f_v + sum_{w in desc(v)} load_w``: every host task of a descendant starts after f_v;
- ``f_v >= f_u + d_v`` on every edge u -> v and ``f_v >= d_v`` (transfers >= 0).

:func:`add_path_rows` (release and tail of shortest modes, as :mod:`.model`'s domains):

- ``f_v >= rel_v`` with ``rel_v = dmin_v + max(0, max_{u -> v} rel_u)``: by induction on the
  rows above, ``f_v >= f_u + d_v >= rel_u + dmin_v``;
- ``T >= f_v + tail_v`` with ``tail_v = max_{v -> w} (dmin_w + tail_w)`` (0 at sinks): along
  any path v -> w_1 -> ... -> w_k, ``f_{w_i} >= f_{w_i-1} + dmin_{w_i}``, and T >= f of every
  operator (each reaches a sink or an output, and T >= those); hence ``f_v <= UB - tail_v``
  for every schedule in the model's domain ``T <= UB``;
- every start variable of v (the whole operator's ``s_v``, its parts' ``sc/sh/sj``) >=
  ``max_{u -> v} rel_u``: in v's mode that variable starts after every input's output;
  in the other modes it is unconstrained (absent tasks carry no time), so the row only
  narrows a free variable's domain, which stays non-empty (``rel_u <= f_u <= UB``).

These rows are implied by the linear rows of the model once the modes are chosen; written out
they give CP-SAT's presolve the domains directly (YOLOv5n's 56-operator sliced head segment at
25 crossbars / 500 ns: proven in about half the work).
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from cimsplit.passes.placement.problem import PlacementProblem

__all__ = ["SlicedModel", "add_load_rows", "add_path_rows", "releases_and_tails"]


@dataclass(frozen=True)
class SlicedModel:
    """The sliced model's variables and tables a row needs (times in units; see :mod:`.sliced`)."""

    problem: PlacementProblem
    m: cp_model.CpModel
    ub: int
    """The upper end of T's domain."""
    T: cp_model.IntVar  # noqa: N815 - the paper's T
    f: list
    starts: list[list]
    """Per operator, every start variable it has (``s_v``, and ``sc_v, sh_v, sj_v`` when it has options)."""
    load: list
    duration: list
    shortest: list[int]
    """``dmin_v`` in units."""
    ancestors: list[int]
    descendants: list[int]

    @property
    def n(self) -> int:
        return self.problem.n


def add_load_rows(model: SlicedModel) -> None:
    """The host-load rows and the shortest-duration edge rows of the module docstring."""
    m, n, load, f = model.m, model.n, model.load, model.f
    anc, desc = model.ancestors, model.descendants
    m.Add(model.T >= sum(load))  # host tasks never overlap
    for u, v, _ in model.problem.edges:  # v's output is at least its shortest duration after u's
        m.Add(f[v] >= f[u] + model.duration[v])
    for v in range(n):
        m.Add(f[v] >= model.duration[v])
        before = [load[u] for u in range(v) if (anc[v] >> u) & 1]
        if before:  # every host task of an ancestor ends before v's output (and before v's own host tasks)
            m.Add(f[v] >= sum(before) + load[v])
        after = [load[w] for w in range(v + 1, n) if (desc[v] >> w) & 1]
        if after:  # every host task of a descendant starts after v's output
            m.Add(model.T >= f[v] + sum(after))


def releases_and_tails(problem: PlacementProblem, shortest: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(rel_v, latest input rel, tail_v) of the module docstring, from ``shortest`` (dmin per operator)."""
    n = problem.n
    ready = [0] * n
    rel = list(shortest)
    for u, v, _ in sorted(problem.edges, key=lambda e: e[1]):
        ready[v] = max(ready[v], rel[u])
        rel[v] = max(rel[v], rel[u] + shortest[v])
    tail = [0] * n
    for u, v, _ in sorted(problem.edges, key=lambda e: -e[0]):
        tail[u] = max(tail[u], tail[v] + shortest[v])
    return rel, ready, tail


def add_path_rows(model: SlicedModel) -> None:
    """Release and tail rows of the module docstring."""
    m, f = model.m, model.f
    rel, ready, tail = releases_and_tails(model.problem, model.shortest)
    for v in range(model.n):
        if rel[v] > 0:
            m.Add(f[v] >= rel[v])
        if tail[v] > 0:
            m.Add(model.T >= f[v] + tail[v])
            m.Add(f[v] <= max(rel[v], model.ub - tail[v]))
        if ready[v] > 0:
            for start in model.starts[v]:
                m.Add(start >= ready[v])
