"""Seeded random partitioning problems: branchy DAGs for solver tests and Table I benches.

Three styles, all returning a :class:`PlacementProblem` of exactly ``n`` operators:

``"detector"``
    A YOLOv5-like graph: a strided backbone of C3 blocks (two parallel 1x1 convs,
    a chain of residual bottlenecks with skip Adds, a Concat), an SPPF block, an
    FPN/PAN neck with upsampling and long skip Concats back into the backbone,
    and one detection head per level made of many small host-only operators
    (Reshape, Transpose, Sigmoid, Mul/Add on parallel xy/wh branches, Concat).
``"inception"``
    A CNN of Inception-style blocks: four parallel branches of 1-3 convs (one
    through a MaxPool) joined by a Concat.
``"layered"``
    A generic random layered DAG: each operator reads 1-3 operators of the few
    previous layers; half of them CIM-capable.  Small ``n`` (down to 1) works.

Costs follow the paper's models on a tensor-shape walk (C, H, W), int8 (b = 1):
T_host of a conv is its MAC count times a per-MAC latency with log-normal noise
(a Cortex-A72-like single core, about 0.5 ns/MAC); T_acc is eq. 2-3
(b*N_in/B + N_mvm*T_mvm + b*N_out/B); crossbars from eq. 1 with 256x256
crossbars; every edge carries b*N_out,u/B (eq. 4).  Graph input reads and output
writes of CIM operators pay the bus too (``t_in_ns`` / ``t_out_ns``).  The
crossbar budget is ``budget_fraction`` of what offloading every capable operator
would need, so that it binds.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from cimsplit.passes.placement.problem import PlacementProblem

__all__ = ["STYLES", "random_problem", "with_zero_length_host_operators"]

STYLES = ("detector", "inception", "layered")

_XBAR = 256
_BANDWIDTH_BYTES_PER_NS = 10.24  # 10.24 GB/s, the paper's ARM bus
_MVM_NS = 50.0
_HOST_NS_PER_MAC = 0.5
_HOST_NS_PER_ELEMENT = 1.0
_HOST_OVERHEAD_NS = 2_000.0


@dataclass
class _Op:
    name: str
    inputs: list[int]
    out_elems: int
    t_host_ns: float
    t_cim_ns: float | None = None
    crossbars: int = 0
    in_elems: int = 0
    """Elements of the graph input it reads (0 unless it reads one)."""


@dataclass
class _Builder:
    """Collects operators in topological order with their shapes and costs."""

    rng: random.Random
    ops: list[_Op] = field(default_factory=list)
    shapes: list[tuple[int, int, int]] = field(default_factory=list)

    def _noise(self) -> float:
        return math.exp(self.rng.gauss(0.0, 0.25))

    def conv(self, src: int | None, c_out: int, k: int = 1, stride: int = 1, groups: int = 1,
             shape: tuple[int, int, int] | None = None) -> int:
        """A 2-D conv: GEMM lowering of eq. 1, T_acc of eq. 2-3, T_host from MACs."""
        c_in, h, w = shape if src is None else self.shapes[src]
        h_out, w_out = max(1, h // stride), max(1, w // stride)
        m_v, n_v = c_out, (c_in // groups) * k * k
        n_mvm = h_out * w_out * groups
        n_in, n_out = c_in * h * w, c_out * h_out * w_out
        macs = m_v * n_v * h_out * w_out
        t_host = macs * _HOST_NS_PER_MAC * self._noise() + _HOST_OVERHEAD_NS
        t_cim = n_in / _BANDWIDTH_BYTES_PER_NS + n_mvm * _MVM_NS + n_out / _BANDWIDTH_BYTES_PER_NS  # eq. 2-3
        xbars = math.ceil(m_v / _XBAR) * math.ceil(n_v / _XBAR)  # eq. 1
        return self._add(f"conv{len(self.ops)}", [] if src is None else [src], (c_out, h_out, w_out),
                         t_host, t_cim, xbars, in_elems=n_in if src is None else 0)

    def host(self, kind: str, srcs: list[int], shape: tuple[int, int, int] | None = None,
             work: float = 1.0) -> int:
        """A host-only operator whose latency grows with the elements it touches."""
        out = shape or self.shapes[srcs[0]]
        elems = sum(_elems(self.shapes[s]) for s in srcs)
        t_host = elems * _HOST_NS_PER_ELEMENT * work * self._noise() + _HOST_OVERHEAD_NS
        return self._add(f"{kind}{len(self.ops)}", srcs, out, t_host, None, 0)

    def _add(self, name: str, srcs: list[int], shape: tuple[int, int, int], t_host: float,
             t_cim: float | None, xbars: int, in_elems: int = 0) -> int:
        self.ops.append(_Op(name, list(srcs), _elems(shape), t_host, t_cim, xbars, in_elems))
        self.shapes.append(shape)
        return len(self.ops) - 1

    # -- blocks ---------------------------------------------------------------------------
    def c3(self, src: int, c_out: int, bottlenecks: int, shortcut: bool) -> int:
        hidden = max(8, c_out // 2)
        a = self.conv(src, hidden)
        b = self.conv(src, hidden)
        for _ in range(bottlenecks):
            t = self.conv(self.conv(a, hidden), hidden, k=3)
            a = self.host("add", [a, t]) if shortcut else t
        cat = self.host("concat", [a, b], shape=(2 * hidden, *self.shapes[a][1:]), work=0.5)
        return self.conv(cat, c_out)

    def sppf(self, src: int, c_out: int) -> int:
        a = self.conv(src, max(8, c_out // 2))
        p1 = self.host("maxpool", [a], work=5.0)
        p2 = self.host("maxpool", [p1], work=5.0)
        p3 = self.host("maxpool", [p2], work=5.0)
        c, h, w = self.shapes[a]
        cat = self.host("concat", [a, p1, p2, p3], shape=(4 * c, h, w), work=0.5)
        return self.conv(cat, c_out)

    def upsample(self, src: int) -> int:
        c, h, w = self.shapes[src]
        return self.host("resize", [src], shape=(c, 2 * h, 2 * w), work=4.0)

    def concat(self, srcs: list[int]) -> int:
        c = sum(self.shapes[s][0] for s in srcs)
        return self.host("concat", srcs, shape=(c, *self.shapes[srcs[0]][1:]), work=0.5)

    def detect(self, src: int, extra: int) -> int:
        """One YOLO head level: conv, then parallel xy / wh / conf post-processing on the host."""
        c, h, w = 255, *self.shapes[src][1:]
        p = self.conv(src, c)
        r = self.host("reshape", [p], work=0.2)
        t = self.host("transpose", [r], work=1.0)
        s = self.host("sigmoid", [t], work=3.0)
        part = (c // 3, h, w)
        xy = self.host("mul", [self.host("slice", [s], shape=part, work=0.3)], shape=part)
        xy = self.host("add", [xy], shape=part)
        wh = self.host("mul", [self.host("slice", [s], shape=part, work=0.3)], shape=part)
        wh = self.host("pow", [wh], shape=part, work=2.0)
        conf = self.host("slice", [s], shape=part, work=0.3)
        for _ in range(extra):  # more parallel post-processing where the operator count asks
            conf = self.host("mul", [conf], shape=part)
        cat = self.host("concat", [xy, wh, conf], shape=(c, h, w), work=0.5)
        return self.host("reshape", [cat], work=0.2)


def _elems(shape: tuple[int, int, int]) -> int:
    return shape[0] * shape[1] * shape[2]


def _split(rng: random.Random, total: int, parts: int) -> list[int]:
    """``total`` units spread at random over ``parts`` bins (deterministic for the rng)."""
    counts = [0] * parts
    for _ in range(total):
        counts[rng.randrange(parts)] += 1
    return counts


def _detector(b: _Builder, n: int) -> None:
    """YOLOv5-like backbone + SPPF + PAN neck + heads, sized to exactly ``n`` operators."""
    levels = 3 if n < 300 else 4
    # Fixed operators: stem 2; stage 0 its C3 skeleton (2 convs, concat, conv = 4), later
    # stages a strided conv + C3 skeleton (5); SPPF 6; top-down levels conv + resize +
    # concat + C3 (7); bottom-up conv + concat + C3 (6); heads 13 per level; final concat.
    stages = levels + 1
    fixed = 2 + 4 + 5 * (stages - 1) + 6 + 7 * (levels - 1) + 6 * (levels - 1) + 13 * levels + 1
    if n < fixed:
        raise ValueError(f"the detector style needs at least {fixed} operators")
    spare = n - fixed
    backbone_units, neck_units = spare // 2 // 3, 0
    spare -= 3 * backbone_units
    neck_units = spare // 2
    spare -= 2 * neck_units
    bb = _split(b.rng, backbone_units, stages)
    nk = _split(b.rng, neck_units, 2 * (levels - 1))
    head_extra = _split(b.rng, spare, levels)

    width = b.rng.choice((16, 24, 32))
    x = b.conv(None, width, k=6, stride=2, shape=(3, 320, 320))
    x = b.conv(x, 2 * width, k=3, stride=2)
    taps = []
    for i in range(stages):
        c = min(1024, width * 2 ** (i + 1))
        if i:
            x = b.conv(x, c, k=3, stride=2)
        x = b.c3(x, c, bb[i], shortcut=True)
        taps.append(x)
    x = b.sppf(x, b.shapes[x][0])
    # Top-down FPN: 1x1 conv, upsample, concat with the backbone tap, C3.
    laterals = [x]
    for j in range(levels - 1):
        lat = b.conv(x, b.shapes[taps[-2 - j]][0])
        laterals.append(lat)
        x = b.c3(b.concat([b.upsample(lat), taps[-2 - j]]), b.shapes[lat][0], nk[j], shortcut=False)
    outs = [x]
    # Bottom-up PAN: strided conv, concat with the lateral, C3.
    for j in range(levels - 1):
        down = b.conv(x, b.shapes[x][0], k=3, stride=2)
        lat = laterals[levels - 1 - j]
        x = b.c3(b.concat([down, lat]), 2 * b.shapes[x][0], nk[levels - 1 + j], shortcut=False)
        outs.append(x)
    heads = [b.detect(o, head_extra[i]) for i, o in enumerate(outs)]
    b.concat(heads)


def _inception(b: _Builder, n: int) -> None:
    """Stem convs, then Inception blocks (4 branches + concat), padded with a conv chain."""
    x = b.conv(None, 32, k=3, stride=2, shape=(3, 224, 224))
    count = 1
    c = 64
    while n - count >= 9:
        branches = [b.conv(x, c // 4)]
        t = b.conv(b.conv(x, c // 4), c // 4, k=3)
        branches.append(t)
        t = b.conv(b.conv(b.conv(x, c // 8), c // 4, k=3), c // 4, k=3)
        branches.append(t)
        branches.append(b.conv(b.host("maxpool", [x], work=3.0), c // 4))
        x = b.concat(branches)
        count += 9
        if b.rng.random() < 0.2 and n - count >= 10:
            x = b.host("maxpool", [x], shape=(b.shapes[x][0], max(1, b.shapes[x][1] // 2),
                                              max(1, b.shapes[x][2] // 2)), work=3.0)
            count += 1
            c = min(1024, c * 2)
    while count < n:
        x = b.conv(x, c, k=b.rng.choice((1, 3))) if b.rng.random() < 0.5 else b.host("relu", [x])
        count += 1


def _layered(b: _Builder, n: int) -> None:
    """A random layered DAG: each operator reads 1-3 operators of the last three layers."""
    layers: list[list[int]] = []
    count = 0
    while count < n:
        width = min(n - count, b.rng.randint(1, 4))
        layer = []
        for _ in range(width):
            pool = [v for lay in layers[-3:] for v in lay]
            srcs = sorted(set(b.rng.sample(pool, min(len(pool), b.rng.randint(1, 3))))) if pool else []
            c = b.rng.choice((16, 32, 64, 128, 256))
            size = b.rng.choice((7, 14, 28))
            if b.rng.random() < 0.5:
                v = b.conv(srcs[0] if srcs else None, c, k=b.rng.choice((1, 3)), shape=(c, size, size))
                b.ops[v].inputs = list(srcs)
            else:
                v = b.host("op", srcs, shape=(c, size, size), work=b.rng.choice((1.0, 5.0, 20.0)))
            layer.append(v)
            count += 1
        layers.append(layer)


def random_problem(n: int, seed: int = 0, style: str = "detector", budget_fraction: float = 0.5) -> PlacementProblem:
    """A seeded random partitioning problem of exactly ``n`` operators (same seed, same problem)."""
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; expected one of {STYLES}")
    if n < 1:
        raise ValueError("n must be positive")
    b = _Builder(random.Random(f"{style}:{n}:{seed}"))
    {"detector": _detector, "inception": _inception, "layered": _layered}[style](b, n)
    assert len(b.ops) == n, (style, n, len(b.ops))
    consumers = [0] * n
    edges = []
    for v, op in enumerate(b.ops):
        for u in op.inputs:
            consumers[u] += 1
            edges.append((u, v, b.ops[u].out_elems / _BANDWIDTH_BYTES_PER_NS))  # eq. 4, b = 1 byte
    capable_xbars = sum(op.crossbars for op in b.ops if op.t_cim_ns is not None)
    return PlacementProblem(
        names=tuple(op.name for op in b.ops),
        t_host_ns=tuple(op.t_host_ns for op in b.ops),
        t_cim_ns=tuple(op.t_cim_ns for op in b.ops),
        crossbars=tuple(op.crossbars for op in b.ops),
        edges=tuple(edges),
        budget=max(1, int(capable_xbars * budget_fraction)),
        t_in_ns=tuple(op.in_elems / _BANDWIDTH_BYTES_PER_NS if op.t_cim_ns is not None else 0.0 for op in b.ops),
        t_out_ns=tuple(b.ops[v].out_elems / _BANDWIDTH_BYTES_PER_NS if consumers[v] == 0 and b.ops[v].t_cim_ns is not None
                       else 0.0 for v in range(n)),
        writes_output=tuple(consumers[v] == 0 for v in range(n)),
    )


def with_zero_length_host_operators(problem: PlacementProblem, fraction: float, seed: int = 0) -> PlacementProblem:
    """``problem`` with a host-only 0 ns operator in front of ``fraction`` of its CIM-capable operators.

    A Reshape, Flatten or Identity before a Conv or Gemm profiles at 0 ns on the host.  The new
    operator z takes over the inputs of the capable operator c (same transfer times) and feeds it
    alone, over an edge carrying their sum (the same tensor crosses if c runs on the CIM); z sits
    just before c in the index order, so it comes after the operators of earlier branches.  A
    zero-length host operator can start at the same instant as a longer host operator of another
    branch and still have to run first: the host order is then not the order of (start, index),
    which once made the CP-SAT back end hand back an order 51.2 ns slower than its schedule.
    """
    rng = random.Random(f"zero-length:{seed}")
    chosen = [problem.capable(v) and rng.random() < fraction for v in range(problem.n)]
    index: list[int] = []  # old index -> new index
    for v in range(problem.n):
        index.append(v + sum(chosen[: v + 1]))
    m = problem.n + sum(chosen)
    names, t_host, crossbars = [""] * m, [0.0] * m, [0] * m
    t_cim: list[float | None] = [None] * m
    t_in, t_out, writes = [0.0] * m, [0.0] * m, [False] * m
    for v, w in enumerate(index):
        names[w], t_host[w], t_cim[w] = problem.names[v], problem.t_host_ns[v], problem.t_cim_ns[v]
        crossbars[w], t_in[w], t_out[w], writes[w] = (problem.crossbars[v], problem.t_in_ns[v], problem.t_out_ns[v],
                                                      problem.writes_output[v])
        if chosen[v]:
            names[w - 1] = f"zero{w - 1}"
    edges, into = [], [0.0] * problem.n
    for u, v, t in problem.edges:
        edges.append((index[u], index[v] - 1 if chosen[v] else index[v], t))
        into[v] += t
    edges += [(index[v] - 1, index[v], into[v]) for v in range(problem.n) if chosen[v]]
    return PlacementProblem(names=tuple(names), t_host_ns=tuple(t_host), t_cim_ns=tuple(t_cim),
                            crossbars=tuple(crossbars), edges=tuple(sorted(edges)), budget=problem.budget,
                            t_in_ns=tuple(t_in), t_out_ns=tuple(t_out), writes_output=tuple(writes))
