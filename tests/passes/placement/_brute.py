"""Brute-force optimum of a PlacementProblem: every placement, every host order.

Independent of the ILP and of ``simulate``: the DFS below times operators itself.
For a fixed placement and host order the earliest-start schedule is optimal
(delaying an operator never helps), so the minimum over all placements within
budget and all precedence-respecting host orders is the optimal makespan.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping

from cimsplit.passes.placement.problem import PlacementProblem


def brute_force_optimum(problem: PlacementProblem, fixed: Mapping[int, bool] | None = None) -> float:
    """The optimal makespan; ``fixed`` maps operators to a forced x_v (True = host).

    ``inf`` when no placement within the budget respects ``fixed``.
    """
    fixed = fixed or {}
    n = problem.n
    preds: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for u, v, t in problem.edges:
        preds[v].append((u, t))
    anc = [0] * n
    for u, v, _ in sorted(problem.edges, key=lambda e: e[1]):
        anc[v] |= anc[u] | (1 << u)
    capable = [v for v in range(n) if problem.capable(v)]
    best = float("inf")
    for bits in itertools.product((True, False), repeat=len(capable)):
        on_host = [True] * n
        for v, h in zip(capable, bits):
            on_host[v] = h
        if sum(problem.crossbars[v] for v in range(n) if not on_host[v]) > problem.budget:
            continue
        if any(on_host[v] != h for v, h in fixed.items()):
            continue
        best = min(best, _best_order(problem, on_host, preds, anc, best))
    return best


def _best_order(problem, on_host, preds, anc, incumbent: float) -> float:
    n = problem.n
    host_mask = sum(1 << v for v in range(n) if on_host[v])
    dur = [problem.t_host_ns[v] if on_host[v] else problem.t_cim_ns[v] for v in range(n)]
    best = incumbent

    def finish_of(v: int, fin: dict[int, float]) -> float:
        """Finish of v once every host ancestor of v is timed (CIM ops recursively)."""
        if v in fin:
            return fin[v]
        assert not on_host[v]
        start = problem.t_in_ns[v]
        for u, t in preds[v]:
            start = max(start, finish_of(u, fin) + (t if on_host[u] != on_host[v] else 0.0))
        fin[v] = start + dur[v]
        return fin[v]

    def makespan(fin: dict[int, float]) -> float:
        end = 0.0
        for v in range(n):
            f = finish_of(v, fin)
            if not on_host[v] and problem.writes_output[v]:
                f += problem.t_out_ns[v]
            end = max(end, f)
        return end

    def dfs(placed: int, host_free: float, fin: dict[int, float], left: float) -> None:
        nonlocal best
        if host_free + left >= best:
            return
        if placed == host_mask:
            best = min(best, makespan(dict(fin)))
            return
        for v in range(n):
            if on_host[v] and not (placed >> v) & 1 and anc[v] & host_mask & ~placed == 0:
                local = dict(fin)
                start = host_free
                for u, t in preds[v]:
                    start = max(start, finish_of(u, local) + (t if not on_host[u] else 0.0))
                local[v] = start + dur[v]
                dfs(placed | (1 << v), local[v], local, left - dur[v])

    dfs(0, 0.0, {}, sum(dur[v] for v in range(n) if on_host[v]))
    return best


def random_problem(rng: random.Random, max_ops: int = 8) -> PlacementProblem:
    """A random DAG with integer costs (exact arithmetic) and a random budget."""
    n = rng.randint(2, max_ops)
    density = rng.uniform(0.1, 0.6)
    edges = tuple((u, v, float(rng.choice((0, rng.randint(1, 30)))))
                  for v in range(n) for u in range(v) if rng.random() < density)
    capable = [rng.random() < 0.7 for _ in range(n)]
    t_host = tuple(float(rng.randint(1, 100)) for _ in range(n))
    t_cim = tuple(float(rng.randint(1, 100)) if c else None for c in capable)
    crossbars = tuple(rng.randint(1, 6) if c else 0 for c in capable)
    has_pred = {v for _, v, _ in edges}
    has_succ = {u for u, _, _ in edges}
    t_in = tuple(float(rng.randint(0, 20)) if v not in has_pred and capable[v] else 0.0 for v in range(n))
    writes = tuple(v not in has_succ or rng.random() < 0.2 for v in range(n))
    t_out = tuple(float(rng.randint(0, 20)) if writes[v] and capable[v] else 0.0 for v in range(n))
    budget = rng.randint(0, max(1, sum(crossbars)))
    return PlacementProblem(names=tuple(f"op{v}" for v in range(n)), t_host_ns=t_host, t_cim_ns=t_cim,
                            crossbars=crossbars, edges=edges, budget=budget, t_in_ns=t_in, t_out_ns=t_out,
                            writes_output=writes)


def brute_force_sliced(problem: PlacementProblem) -> float:
    """The optimal makespan with slicing: every mode per operator (host, CIM, each slicing option)
    within the budget, each expanded (:func:`~cimsplit.passes.placement.slicing.expand`) and solved
    by the DFS above with its placement fixed."""
    from cimsplit.passes.placement.slicing import WHOLE, expand, sliced_crossbars

    modes = []
    for v in range(problem.n):
        options = [(True, WHOLE)]
        if problem.capable(v):
            options.append((False, WHOLE))
            options += [(True, k) for k in range(len(problem.slicings[v]) if problem.slicings else 0)]
        modes.append(options)
    best = float("inf")
    for choice in itertools.product(*modes):
        on_host = [h for h, _ in choice]
        slicing = [k for _, k in choice]
        if sliced_crossbars(problem, on_host, slicing) > problem.budget:
            continue
        expansion = expand(problem, on_host, slicing)
        fixed = dict(enumerate(expansion.on_host))
        best = min(best, brute_force_optimum(expansion.problem, fixed))
    return best


def random_sliced_problem(rng: random.Random, max_ops: int = 6, max_options: int = 2) -> PlacementProblem:
    """:func:`random_problem` with 1-``max_options`` random slicing options on about half the capable
    operators (integer costs: parts cheaper than the whole, CIM parts on fewer or as many crossbars)."""
    from dataclasses import replace

    from cimsplit.passes.placement.problem import SliceOption

    base = random_problem(rng, max_ops)
    preds: list[list[tuple[int, float]]] = [[] for _ in range(base.n)]
    for u, v, t in base.edges:
        preds[v].append((u, t))
    slicings = []
    for v in range(base.n):
        options = []
        if base.capable(v) and rng.random() < 0.6:
            for _ in range(rng.randint(1, max_options)):
                kind = rng.choice(("ks", "ofm"))
                xbars = rng.randint(1, base.crossbars[v]) if kind == "ks" else base.crossbars[v]
                options.append(SliceOption(
                    kind=kind, split=rng.randint(1, 8), t_host_ns=float(rng.randint(1, max(1, int(base.t_host_ns[v])))),
                    t_cim_ns=float(rng.randint(1, max(1, int(base.t_cim_ns[v])))), crossbars=xbars,
                    t_join_ns=float(rng.randint(0, 10)), t_back_ns=float(rng.randint(0, 20)),
                    in_cim_ns=tuple((u, float(rng.randint(0, int(t)))) for u, t in preds[v]),
                    in_host_ns=tuple((u, float(rng.randint(0, int(t)))) for u, t in preds[v]),
                    t_graph_in_ns=float(rng.randint(0, int(base.t_in_ns[v])))))
        slicings.append(tuple(options))
    return replace(base, slicings=tuple(slicings))


def random_chained_sliced_problem(rng: random.Random, blocks: int = 2, max_block_ops: int = 3) -> PlacementProblem:
    r"""Random sliced blocks between host-only joins, so that the bottleneck chain has several segments::

        j0 -> [block 1: 1-3 operators, random edges] -> j1 -> [block 2] -> j2

    Every source of a block reads the join before it and every sink feeds the join after it
    (transfers 0-20 ns, integer costs); sometimes a skip edge jumps from a block to the last join,
    with a transfer that may exceed the joins it jumps (then the decomposition is only a bound).
    The first join reads the graph input.
    """
    from cimsplit.passes.placement.problem import SliceOption

    names: list[str] = []
    t_host: list[float] = []
    t_cim: list[float | None] = []
    xbars: list[int] = []
    edges: list[tuple[int, int, float]] = []

    def add(name: str, host: float, cim: float | None, crossbars: int) -> int:
        names.append(name)
        t_host.append(host)
        t_cim.append(cim)
        xbars.append(crossbars)
        return len(names) - 1

    join = add("j0", float(rng.randint(1, 30)), None, 0)
    members: list[int] = []
    for b in range(blocks):
        block = []
        for k in range(rng.randint(1, max_block_ops)):
            capable = rng.random() < 0.8
            v = add(f"b{b}_{k}", float(rng.randint(1, 100)), float(rng.randint(1, 100)) if capable else None,
                    rng.randint(1, 4) if capable else 0)
            for u in block:
                if rng.random() < 0.5:
                    edges.append((u, v, float(rng.randint(0, 20))))
            block.append(v)
        has_pred = {v for _, v, _ in edges}
        has_succ = {u for u, _, _ in edges}
        edges += [(join, v, float(rng.randint(0, 20))) for v in block if v not in has_pred]
        nxt = add(f"j{b + 1}", float(rng.randint(1, 30)), None, 0)
        edges += [(v, nxt, float(rng.randint(0, 20))) for v in block if v not in has_succ]
        members += block
        join = nxt
    if rng.random() < 0.3:  # a skip edge over at least one join
        u = rng.choice([v for v in members if v < join - max_block_ops - 1] or members[:1])
        if (u, join) not in {(a, b) for a, b, _ in edges}:
            edges.append((u, join, float(rng.randint(0, 60))))
    n = len(names)
    preds: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for u, v, t in edges:
        preds[v].append((u, t))
    slicings = []
    for v in range(n):
        options = []
        if t_cim[v] is not None and rng.random() < 0.6:
            for _ in range(rng.randint(1, 2)):
                kind = rng.choice(("ks", "ofm"))
                options.append(SliceOption(
                    kind=kind, split=rng.randint(1, 8), t_host_ns=float(rng.randint(1, int(t_host[v]))),
                    t_cim_ns=float(rng.randint(1, int(t_cim[v]))),  # type: ignore[arg-type]
                    crossbars=rng.randint(1, xbars[v]) if kind == "ks" else xbars[v],
                    t_join_ns=float(rng.randint(0, 10)), t_back_ns=float(rng.randint(0, 20)),
                    in_cim_ns=tuple((u, float(rng.randint(0, int(t)))) for u, t in preds[v]),
                    in_host_ns=tuple((u, float(rng.randint(0, int(t)))) for u, t in preds[v])))
        slicings.append(tuple(options))
    writes = tuple(v == n - 1 for v in range(n))
    return PlacementProblem(names=tuple(names), t_host_ns=tuple(t_host), t_cim_ns=tuple(t_cim), crossbars=tuple(xbars),
                            edges=tuple(sorted(edges)), budget=rng.randint(0, max(1, sum(xbars))),
                            writes_output=writes, slicings=tuple(slicings))
