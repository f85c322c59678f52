"""Cuts of the CP-SAT model: host idle time the host-load rows do not see (each keeps the optimum).

Each function takes the :class:`~cimsplit.passes.placement.solvers.cpsat.model.CpSatModel`
record, adds its rows and variables, and returns (variable, value) pairs that
complete the warm start's hint.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from cimsplit.passes.placement.solvers.cpsat.model import CpSatModel

__all__ = ["CHAINS", "add_cim_idle_cuts", "add_idle_chain_cut", "host_chains"]

CHAINS = 1
"""Chains of host-only operators that get an idle-time cut (more did not help on detector graphs)."""


def _cim_pads(model: CpSatModel) -> list[tuple[int, int]]:
    """(before, after) bus time every CIM placement of v surely pays next to its run, in units.

    Before: the smallest transfer from a predecessor when every predecessor is
    host-only (so each edge is crossed once v is on the CIM: ``s_v >= f_u +
    T_transfer,uv``), or the graph-input time when v has no predecessor.  After:
    the same for successors, or the output time of an output writer without
    successors.  So ``[s_v - before, f_v + after]`` holds no ancestor and no
    descendant of v on the host, and the windows of a chain of capable operators
    stay disjoint (a nonzero pad needs a host-only operator between two of them).
    """
    n, capable = model.n, model.capable
    preds: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    succs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for u, v, tr in model.edges:
        preds[v].append((u, tr))
        succs[u].append((v, tr))

    def pad(links: list[tuple[int, int]], alone: int) -> int:
        if not links:
            return alone
        return min(tr for _, tr in links) if all(not capable[w] for w, _ in links) else 0

    writes = model.problem.writes_output
    return [(pad(preds[v], model.t_in[v]), pad(succs[v], model.t_out[v] if writes[v] else 0)) if capable[v] else (0, 0)
            for v in range(n)]


def add_cim_idle_cuts(model: CpSatModel) -> list:
    """The rows of :func:`_cim_idle_rows` along the heaviest CIM chain, and along the chain of
    the warm start's CIM operators when there is a hint."""
    pads = _cim_pads(model)
    padded = [model.acc[v] + pads[v][0] + pads[v][1] for v in range(model.n)]
    before = [b for b, _ in pads]
    hints = _cim_idle_rows(model, padded, before, list(model.acc), "a")
    if model.hint is not None:  # the same rows along the chain of the warm start's CIM operators
        weight = [model.acc[v] if not model.hint.on_host[v] else 0 for v in range(model.n)]
        hints += _cim_idle_rows(model, padded, before, weight, "h")
    return hints


def _chain_weights(model: CpSatModel, members: list[int], weights: list[int]
                   ) -> tuple[dict[int, int], dict[int, int | None]]:
    """Heaviest chain (each an ancestor of the next) of ``members`` ending at each member: its
    total weight and the member before the end (``members`` in index order, a topological order)."""
    anc = model.ancestors
    weight: dict[int, int] = {}
    prev: dict[int, int | None] = {}
    for v in members:
        best, arg = 0, None
        for u in members:
            if u >= v:
                break
            if (anc[v] >> u) & 1 and weight[u] > best:
                best, arg = weight[u], u
        weight[v], prev[v] = best + weights[v], arg
    return weight, prev


def _walk_back(prev: dict[int, int | None], end: int) -> list[int]:
    chain: list[int] = []
    v: int | None = end
    while v is not None:
        chain.append(v)
        v = prev[v]
    return chain[::-1]


def _heaviest_chain(model: CpSatModel, members: list[int], weights: list[int]) -> list[int]:
    """The chain (each an ancestor of the next) of ``members`` with the largest total weight."""
    weight, prev = _chain_weights(model, members, weights)
    if not weight:
        return []
    return _walk_back(prev, max(members, key=lambda w: (weight[w], -w)))


def _cim_idle_rows(model: CpSatModel, acc: list[int], pad_before: list[int], weights: list[int], tag: str) -> list:
    """Host idle time forced while CIM operators of one chain run (keeps the optimum).

    ``acc`` here is the CIM time plus the pads of :func:`_cim_pads`: the window
    is ``[s_v - before, f_v + after]`` instead of ``[s_v, f_v]``, the argument below
    unchanged (only incomparable host operators can overlap it; the windows of a
    chain are disjoint and inside [0, T]).

    Take CIM-capable operators v_1, ..., v_k, each an ancestor of the next (the
    chain of largest total ``weights``; any chain is valid).  If v_i runs on the CIM, the host can work
    during [s_i, f_i] only on operators incomparable to v_i (ancestors finish
    before s_i, descendants start after f_i).  With ``y_wi`` the time host
    operator w overlaps [s_i, f_i]: ``sum_i y_wi <= x_w·T_host,w`` and the host
    idles at least ``idle_i >= (1 - x_i)·T_acc,i - sum_w y_wi`` (>= 0) there.  The
    intervals of a chain are disjoint (v_i finishes before v_{i+1} starts) and lie
    in [0, T], so ``T >= sum_v x_v·T_host,v + sum_i idle_i``.  Every schedule
    satisfies the rows with its own overlaps (idle_i = its real idle time in
    [s_i, f_i], or 0 when v_i is on the host), so no solution is lost.
    """
    m, n, x, host, hint = model.m, model.n, model.x, model.host, model.hint
    cands = [v for v in range(n) if model.capable[v] and acc[v] > 0 and weights[v] > 0]
    chain = _heaviest_chain(model, cands, weights)
    if not chain:
        return []
    everything = (1 << n) - 1
    fill: dict[int, list] = {}
    idles, hints = [], []
    for i, v in enumerate(chain):
        free = everything & ~(model.ancestors[v] | model.descendants[v] | (1 << v))
        members = [w for w in range(n) if (free >> w) & 1 and host[w] > 0]
        ys = []
        for w in members:
            y = m.NewIntVar(0, min(host[w], acc[v]), f"c{tag}_{w}_{i}")
            fill.setdefault(w, []).append(y)
            ys.append(y)
        idle = m.NewIntVar(0, acc[v], f"cidle{tag}_{i}")
        m.Add(idle >= acc[v] - acc[v] * x[v] - cp_model.LinearExpr.Sum(ys))
        idles.append(idle)
        if hint is not None:
            busy = 0
            for w, y in zip(members, ys):
                overlap = 0
                if hint.on_host[w] and not hint.on_host[v]:
                    overlap = int(round(max(0.0, min(hint.finish_ns[w], hint.start_ns[v] + acc[v] - pad_before[v])
                                            - max(hint.start_ns[w], hint.start_ns[v] - pad_before[v]))))
                hints.append((y, overlap))
                busy += overlap
            hints.append((idle, 0 if hint.on_host[v] else max(0, acc[v] - busy)))
    for w, ys in fill.items():
        m.Add(cp_model.LinearExpr.Sum(ys) <= host[w] * x[w])
    m.Add(model.T >= model.load(range(n)) + cp_model.LinearExpr.Sum(idles))
    return hints


def host_chains(model: CpSatModel, limit: int) -> list[list[int]]:
    """Longest chains (by count) of host-only operators, each an ancestor of the next.

    One chain per maximal end (a host-only operator without host-only descendants),
    the ``limit`` longest, so that branches other than the longest get their own cut.
    """
    fixed = [v for v in range(model.n) if not model.capable[v]]
    fixed_mask = sum(1 << v for v in fixed)
    length, prev = _chain_weights(model, fixed, [1] * model.n)
    ends = sorted((v for v in fixed if not model.descendants[v] & fixed_mask), key=lambda w: (-length[w], w))
    return [_walk_back(prev, end) for end in ends[:limit]]


def add_idle_chain_cut(model: CpSatModel, whole: bool = False) -> list:
    """Host idle time forced along chains of host-only operators (keeps the optimum).

    Take host-only operators v_1, ..., v_k, each an ancestor of the next.  The
    windows W_0 = [0, s_1] and W_i = [f_i, s_{i+1}] are disjoint and inside [0, T].
    Only operators that are neither ancestors of v_i (nor v_i) nor descendants of
    v_{i+1} (nor v_{i+1}) can run on the host inside W_i (call them F_i).  With
    ``y_wi`` the time operator w runs inside W_i: ``sum_i y_wi <= x_w·T_host,w``
    (the windows are disjoint) and the host idles ``idle_i = |W_i| - sum_{w in
    F_i} y_wi >= 0`` there.  Host operators do not overlap, so
    ``T >= sum_v x_v·T_host,v + sum_i idle_i``.  Every schedule satisfies these rows
    with its own overlaps y and idle times, so no solution is lost.  The
    host-load rows alone see the work or the waiting (for CIM operators on the
    chain); this one adds the waiting to the work.  (Its LP relaxation lets an
    operator fill several windows, as if preempted: it is weakest when a long
    operator runs beside a chain of short waits.)

    ``whole=True`` closes that hole: a host operator w off the chain sits, in
    the host order, between two consecutive chain operators (or before the
    first, or after the last), so it lies entirely inside one window or after
    the chain (with a zero-length chain operator in between, w still ends
    before it starts or starts after it ends: the host runs one at a time).
    So ``y_wi = T_host,w·b_wi`` with Booleans ``sum_i b_wi <= x_w``: every
    schedule satisfies these rows with b = "w lies in W_i", the idle rows are
    unchanged, and no solution is lost.
    """
    chains = [c for c in host_chains(model, CHAINS) if len(c) >= 2]
    hints: list = []
    for k, chain in enumerate(chains):
        hints += _chain_rows(model, chain, k, whole)
    return hints


def _chain_rows(model: CpSatModel, chain: list[int], k: int, whole: bool) -> list:
    """The rows of :func:`add_idle_chain_cut` for one chain (variables tagged ``k``)."""
    m, n, s, x, host, hint = model.m, model.n, model.s, model.x, model.host, model.hint
    anc, desc = model.ancestors, model.descendants
    ub = max(model.t_lower, model.ub)
    everything = (1 << n) - 1
    windows = [(None, chain[0])] + list(zip(chain, chain[1:]))
    fill: dict[int, list] = {}
    idles, hints = [], []
    for i, (a, b) in enumerate(windows):
        blocked = (desc[b] | (1 << b)) | (0 if a is None else (anc[a] | (1 << a)))
        free = everything & ~blocked
        members = [w for w in range(n) if (free >> w) & 1 and host[w] > 0]
        opens = 0 if a is None else s[a] + host[a]
        ys, own = [], []
        for w in members:
            if whole:  # y_wi = T_host,w·b_wi: w lies wholly inside W_i or not at all
                inside = m.NewBoolVar(f"b{k}_{w}_{i}")
                ys.append(inside * host[w])
            else:
                inside = m.NewIntVar(0, host[w], f"y{k}_{w}_{i}")
                ys.append(inside)
            fill.setdefault(w, []).append(inside)
            own.append(inside)
        idle = m.NewIntVar(0, max(0, ub), f"idle{k}_{i}")
        m.Add(idle == s[b] - opens - cp_model.LinearExpr.Sum(ys))
        idles.append(idle)
        if hint is not None:
            w_open = 0.0 if a is None else hint.finish_ns[a]
            w_close = hint.start_ns[b]
            busy = 0
            for w, inside in zip(members, own):
                overlap = 0
                if hint.on_host[w]:
                    overlap = int(round(max(0.0, min(hint.finish_ns[w], w_close) - max(hint.start_ns[w], w_open))))
                if whole:
                    overlap = host[w] if overlap > 0 else 0
                hints.append((inside, int(overlap > 0) if whole else overlap))
                busy += overlap
            hints.append((idle, int(round(w_close - w_open)) - busy))
    for w, ys in fill.items():
        if whole:
            m.Add(cp_model.LinearExpr.Sum(ys) <= x[w])
        else:
            m.Add(cp_model.LinearExpr.Sum(ys) <= host[w] * x[w])
    m.Add(model.T >= model.load(range(n)) + cp_model.LinearExpr.Sum(idles))
    return hints
