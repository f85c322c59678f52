"""Operator slicing (TSO, DESIGN §8): one Conv/Gemm computed partly on the CIM and partly on the host.

A :class:`SliceOption` is one way to slice a CIM-capable operator v: a *CIM
part* (its share of the output channels, KS, or of the output rows, OFM, with
``crossbars`` crossbars), a *host part* (the rest) and a *join* (the Concat of
the two outputs).  The join runs on the host, so a sliced operator's output
lives on the host: a consumer on the CIM pays the full transfer of eq. 4, as
after a host operator.  (Joining on the CIM would need the host part's output
on the CIM and the Concat as CIM work the cost model has no latency for.)

Semantics, by expansion.  Given a choice per operator (whole, or slicing k),
:func:`expand` writes the plain :class:`PlacementProblem` whose schedule is
the sliced schedule: a sliced v becomes three operators

    v/cim  (CIM, T = option.t_cim_ns, option.crossbars)     pred u --in_cim-->  v/cim
    v/host (host-only, T = option.t_host_ns)                pred u --in_host--> v/host
    v/join (host-only, T = option.t_join_ns)                v/cim --t_back--> v/join, v/host --0--> v/join
                                                            v/join --T(v, w)--> every successor w

An edge charges its transfer when its ends sit on different devices, so u on
the host charges ``in_cim`` (what the CIM part reads crosses to the CIM) and u
on the CIM charges ``in_host``; ``t_back`` (the CIM part's output to the
host) is always charged.  The CIM part reading a graph input pays
``t_graph_in_ns``.  The expanded placement is fixed (parts on their devices),
so :func:`~cimsplit.passes.placement.simulate.simulate` re-times it with the
usual rule: host operators (parts and joins included) one at a time in the
given order, CIM operators as soon as their inputs are there.  Without any
slicing the expansion is the problem itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from cimsplit.passes.placement.problem import PlacementProblem, SliceOption
from cimsplit.passes.placement.result import Schedule

__all__ = ["KINDS", "WHOLE", "Expansion", "SliceOption", "expand", "expanded_view", "parts_schedule", "sliced_crossbars",
           "with_kinds"]

KINDS = ("ks", "ofm")
WHOLE = -1
"""``Schedule.slicing[v]`` of an operator placed whole (on the device ``on_host[v]`` says)."""


@dataclass(frozen=True)
class Expansion:
    """A problem with its sliced operators expanded into parts (see the module docstring)."""

    problem: PlacementProblem
    on_host: tuple[bool, ...]
    owner: tuple[int, ...]
    """Expanded index -> the original operator."""
    role: tuple[str, ...]
    """Expanded index -> ``whole``, ``cim``, ``host`` or ``join``."""
    output: tuple[int, ...]
    """Original operator -> the expanded operator whose finish makes its output."""


def option_of(problem: PlacementProblem, v: int, k: int) -> SliceOption:
    return problem.slicings[v][k]


def sliced_crossbars(problem: PlacementProblem, on_host: Sequence[bool], slicing: Sequence[int]) -> int:
    """Crossbars held: whole operators on the CIM plus the CIM parts of sliced ones (eq. 14)."""
    total = 0
    for v in range(problem.n):
        k = slicing[v] if slicing else WHOLE
        if k != WHOLE:
            total += problem.slicings[v][k].crossbars
        elif not on_host[v]:
            total += problem.crossbars[v]
    return total


def expand(problem: PlacementProblem, on_host: Sequence[bool], slicing: Sequence[int]) -> Expansion:
    """The plain problem and fixed placement of a sliced placement (``slicing[v]``: :data:`WHOLE` or an option).

    Raises ``ValueError`` for an option that does not exist.  Expanded operators
    keep the topological order: an operator's parts sit where it sat (cim, host, join).
    """
    n = problem.n
    slicing = tuple(slicing) if slicing else (WHOLE,) * n
    if len(slicing) != n:
        raise ValueError("slicing must have one entry per operator")
    names: list[str] = []
    t_host: list[float] = []
    t_cim: list[float | None] = []
    xbars: list[int] = []
    t_in: list[float] = []
    t_out: list[float] = []
    writes: list[bool] = []
    placed: list[bool] = []
    owner: list[int] = []
    role: list[str] = []
    first: list[int] = [0] * n
    output: list[int] = [0] * n

    def add(name: str, host_ns: float, cim_ns: float | None, crossbars: int, in_ns: float, out_ns: float,
            writer: bool, host: bool, v: int, what: str) -> int:
        names.append(name)
        t_host.append(host_ns)
        t_cim.append(cim_ns)
        xbars.append(crossbars)
        t_in.append(in_ns)
        t_out.append(out_ns)
        writes.append(writer)
        placed.append(host)
        owner.append(v)
        role.append(what)
        return len(names) - 1

    for v in range(n):
        k = slicing[v]
        name = problem.names[v]
        first[v] = len(names)
        if k == WHOLE:
            output[v] = add(name, problem.t_host_ns[v], problem.t_cim_ns[v], problem.crossbars[v], problem.t_in_ns[v],
                            problem.t_out_ns[v], problem.writes_output[v], bool(on_host[v]), v, "whole")
            continue
        if not problem.capable(v) or not 0 <= k < len(problem.slicings[v]):
            raise ValueError(f"operator {name!r} has no slicing {k}")
        opt = problem.slicings[v][k]
        add(f"{name}/cim", opt.t_cim_ns, opt.t_cim_ns, opt.crossbars, opt.t_graph_in_ns, 0.0, False, False, v, "cim")
        add(f"{name}/host", opt.t_host_ns, None, 0, 0.0, 0.0, False, True, v, "host")
        output[v] = add(f"{name}/join", opt.t_join_ns, None, 0, 0.0, 0.0, problem.writes_output[v], True, v, "join")

    edges: list[tuple[int, int, float]] = []
    for u, v, t in problem.edges:
        src = output[u]
        k = slicing[v]
        if k == WHOLE:
            edges.append((src, first[v], t))
            continue
        opt = problem.slicings[v][k]
        edges.append((src, first[v], dict(opt.in_cim_ns).get(u, t)))
        edges.append((src, first[v] + 1, dict(opt.in_host_ns).get(u, t)))
    for v in range(n):
        if slicing[v] != WHOLE:
            opt = problem.slicings[v][slicing[v]]
            edges.append((first[v], first[v] + 2, opt.t_back_ns))
            edges.append((first[v] + 1, first[v] + 2, 0.0))
    expanded = PlacementProblem(
        names=tuple(names), t_host_ns=tuple(t_host), t_cim_ns=tuple(t_cim), crossbars=tuple(xbars),
        edges=tuple(sorted(edges)), budget=problem.budget, t_in_ns=tuple(t_in), t_out_ns=tuple(t_out),
        writes_output=tuple(writes))
    return Expansion(expanded, tuple(placed), tuple(owner), tuple(role), tuple(output))


def parts_schedule(problem: PlacementProblem, expansion: Expansion, parts: Schedule, slicing: Sequence[int]) -> Schedule:
    """The operator-level schedule of an expanded one: a sliced operator starts with its first part,
    finishes with its join, and counts as on the host (its output is there)."""
    n = problem.n
    start = [float("inf")] * n
    finish = [0.0] * n
    on_host = [True] * n
    for i, v in enumerate(expansion.owner):
        start[v] = min(start[v], parts.start_ns[i])
        if expansion.role[i] == "whole":
            on_host[v] = parts.on_host[i]
    for v in range(n):
        finish[v] = parts.finish_ns[expansion.output[v]]
    sliced = tuple(slicing) if any(k != WHOLE for k in slicing) else ()
    return Schedule(on_host=tuple(on_host), start_ns=tuple(start), finish_ns=tuple(finish),
                    makespan_ns=parts.makespan_ns, slicing=sliced, parts=parts if sliced else None)


def expanded_view(problem: PlacementProblem, schedule: Schedule) -> tuple[PlacementProblem, Schedule]:
    """(problem, schedule) at the level the runtime sees: the expansion and ``schedule.parts`` when
    something is sliced, else the two unchanged (the plan's timeline and trace use this)."""
    if not schedule.slicing or schedule.parts is None:
        return problem, schedule
    return expand(problem, schedule.on_host, schedule.slicing).problem, schedule.parts


def with_kinds(problem: PlacementProblem, kinds: Sequence[str]) -> PlacementProblem:
    """``problem`` keeping only the slicing options of ``kinds`` (none: no slicing at all)."""
    if not problem.slicings:
        return problem
    keep = tuple(tuple(o for o in options if o.kind in kinds) for options in problem.slicings)
    return replace(problem, slicings=keep if any(keep) else ())
