"""Deterministic host profiles for tests: no measurement, the same problem on every machine."""

from __future__ import annotations

import numpy as np

from cimsplit.compiler.host_profile import FORMAT_VERSION, HostProfile


def table_profile(loaded, perturb_seed: int | None = None) -> HostProfile:
    """A host table on each operator's first node (its other nodes cost 0).

    An operator that can run on the CIM costs 100 ns + 0.05 ns per multiply-accumulate
    (M·N·N_mvm, about 20 GMAC/s), any other 300 ns + 0.25 ns per element it sends on its
    out-edges.  ``perturb_seed`` multiplies each operator's time by a seeded factor in
    [0.25, 4), so that one model compiles under profiles as different as two machines'.
    """
    rng = None if perturb_seed is None else np.random.default_rng(perturb_seed)
    out_elements: dict[str, int] = {}
    for edge in loaded.workload.edges:
        out_elements[edge.src] = out_elements.get(edge.src, 0) + edge.elements
    nodes = {}
    for op in loaded.workload.operators:
        if op.cim_capable:
            t_ns = 100.0 + 0.05 * op.m * op.n * op.n_mvm
        else:
            t_ns = 300.0 + 0.25 * out_elements.get(op.name, 0)
        if rng is not None:
            t_ns *= float(4.0 ** rng.uniform(-1.0, 1.0))
        for i, node in enumerate(op.nodes):
            median = t_ns if i == 0 else 0.0
            nodes[node] = {"median_ns": median, "p10_ns": median, "p90_ns": median, "op_type": op.op_type, "samples": 1}
    total_ns = sum(stats["median_ns"] for stats in nodes.values())
    return HostProfile(format_version=FORMAT_VERSION, fingerprint=loaded.fingerprint, ort_version="table",
                       cpu="table", threads=1, runs=1, warmup=0, nodes=nodes,
                       model_median_ns={"optimizations_off": total_ns, "optimizations_all": total_ns})
