"""How a problem with slicing options (TSO) is cut at its bottlenecks, for :mod:`.sliced_segments`.

Bottlenecks are taken only among operators *without* slicing options that fit the budget (ResNet's
Add/Relu block outputs, MobileNetV2's residual Adds, the virtual ``<start>`` and ``<end>``).  Why the
argument of :mod:`.segments` carries over:

- A bottleneck b has one device (host or CIM, whole), so its duration and its crossbars are those of the
  whole-operator case, and it is comparable to every other operator.
- Every part of a sliced operator w (its CIM part, host part and join) starts after all of w's inputs are
  there and ends by its join (:mod:`..slicing`'s expansion links every predecessor to both parts, both parts
  to the join).  So every part of an ancestor of b ends before b starts and every part of a descendant
  starts after b ends: the host work of segment i, parts included, runs in [f_b_i, s_b_i+1], and restricted
  to one segment every sliced schedule is a feasible sliced schedule of the segment problem.  The DP's
  value over the segments' optima F_i is a lower bound, as before.
- Equality (``Segments.exact``): every skip edge u -> v must fit in the durations of the bottlenecks it
  jumps over, for the longest time it can carry: its transfer, or, when v has slicing options, the largest
  of what a part of v reads over it (``in_cim`` / ``in_host``).  Then the concatenation of optimal segment
  schedules, re-timed on the expansion, is optimal.

The augmented problem (:func:`augmented_sliced`) moves a sliced operator's graph-input read ``t_graph_in``
onto the edge from ``<start>`` (its CIM part pays it, its host part reads from the host and pays nothing)
and needs nothing for outputs: a sliced operator's output is on the host (its join), so the edge to
``<end>`` charges its ``t_out`` only when v is whole on the CIM, as before.
"""

from __future__ import annotations

import math
from dataclasses import replace

from cimsplit.passes.placement.problem import PlacementProblem, SliceOption
from cimsplit.passes.placement.solvers.cpsat.segments import Segments, _segment_problem, augment, chain_segments

__all__ = ["augmented_sliced", "sliced_segment", "split_sliced"]


def augmented_sliced(problem: PlacementProblem) -> PlacementProblem:
    """:func:`.segments.augment` keeping the slicing options (indices shifted by one, graph input on ``<start>``)."""
    aug = augment(problem)
    if not problem.slicings:
        return aug
    starts = {v for u, v, _ in aug.edges if u == 0}
    reads = {v + 1 for v, opts in enumerate(problem.slicings) if any(o.t_graph_in_ns > 0 for o in opts)}
    if reads - starts:  # a CIM part reads a graph input its whole operator does not pay for: link it too
        aug = replace(aug, edges=tuple(sorted([*aug.edges, *((0, v, 0.0) for v in reads - starts)])), tensors=())
        starts |= reads
    options: list[tuple[SliceOption, ...]] = [()]
    for v, opts in enumerate(problem.slicings):
        shifted = []
        for o in opts:
            in_cim = tuple((u + 1, t) for u, t in o.in_cim_ns)
            in_host = tuple((u + 1, t) for u, t in o.in_host_ns)
            if v + 1 in starts:  # the CIM part's graph input now crosses on the edge from <start>
                in_cim, in_host = ((0, o.t_graph_in_ns), *in_cim), ((0, 0.0), *in_host)
            shifted.append(replace(o, in_cim_ns=in_cim, in_host_ns=in_host, t_graph_in_ns=0.0))
        options.append(tuple(shifted))
    return replace(aug, slicings=(*options, ()))


def split_sliced(problem: PlacementProblem) -> Segments:
    """The bottleneck chain among operators without slicing options, and its exactness (module docstring)."""
    aug = augmented_sliced(problem)
    if not aug.slicings:
        return chain_segments(aug)
    # An option whose CIM part exceeds the budget is no option: its operator may be a bottleneck.
    usable = [[o for o in opts if o.crossbars <= problem.budget] for opts in aug.slicings]
    allowed = {v for v in range(aug.n) if not usable[v]}
    edge_ns: dict[tuple[int, int], float] = {}
    for u, v, t in aug.edges:
        reads = [dict(o.in_cim_ns).get(u, t) for o in usable[v]] + [dict(o.in_host_ns).get(u, t) for o in usable[v]]
        edge_ns[(u, v)] = max([t, *reads])
    return chain_segments(aug, allowed, edge_ns)


def sliced_segment(seg: Segments, i: int, entry_host: bool, exit_host: bool, budget: int
                   ) -> tuple[PlacementProblem, list[int]]:
    """:func:`.segments._segment_problem` with the members' slicing options (predecessors renumbered;
    what a part reads over a skip edge left out, as the skip edge is) and a "never" host time of a
    CIM bottleneck above every sliced schedule without idle padding."""
    sub, index = _segment_problem(seg, i, entry_host, exit_host, budget)
    aug = seg.augmented
    if not aug.slicings:
        return sub, index
    local = {v: k for k, v in enumerate(index)}

    def renumbered(pairs: tuple[tuple[int, float], ...]) -> tuple[tuple[int, float], ...]:
        return tuple((local[u], t) for u, t in pairs if u in local)

    slicings = [tuple(replace(o, in_cim_ns=renumbered(o.in_cim_ns), in_host_ns=renumbered(o.in_host_ns))
                      for o in aug.slicings[v]) if 0 < k < len(index) - 1 else () for k, v in enumerate(index)]
    longest = sum(max([sub.t_host_ns[k], sub.t_cim_ns[k] or 0.0,
                       *(o.t_host_ns + o.t_cim_ns + o.t_join_ns + o.t_back_ns for o in slicings[k])])
                  for k in range(1, len(index) - 1))
    reads = sum(max([t, *(dict(o.in_cim_ns).get(u, t) + dict(o.in_host_ns).get(u, t) for o in slicings[v])])
                for u, v, t in sub.edges)
    never = 2.0 ** math.ceil(math.log2(longest + reads + 2.0))
    hosts = list(sub.t_host_ns)
    for k in (0, len(index) - 1):
        if sub.capable(k):  # a bottleneck fixed on the CIM
            hosts[k] = max(hosts[k], never)
    return replace(sub, t_host_ns=tuple(hosts), slicings=tuple(slicings) if any(slicings) else ()), index
