"""A partition result for a placement fixed by hand, timed by the re-timer.

The split and the runtime only read a decision; this builds one without a
solver: one operator per ONNX node, the given device per node, latencies
given per node (or one figure for all), transfers from the hardware's bus
(eq. 4, or the burst model), graph inputs/outputs on the host (DESIGN §3).  The schedule is
:func:`cimsplit.passes.placement.simulate.simulate`'s, so plan.json and the runtime see
the same kind of validated result as from the ILP.  Used to pin placements and
to test the split on hand-built graphs.
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from cimsplit.compiler.costs import moved_bytes, tensor_bursts, transfer_ns
from cimsplit.compiler.hardware import Hardware
from cimsplit.compiler.workload import Edge, MovedTensor, Operator, Workload
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.result import PlacementResult, SolverStats
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.rewrite.graph_utils import element_bytes_of, elements, node_inputs, shape_of, value_infos

__all__ = ["fixed_placement", "fixed_assignment"]


def _per_node(value: Mapping[str, float] | float, name: str) -> float:
    return float(value[name]) if isinstance(value, Mapping) else float(value)


def fixed_assignment(problem: PlacementProblem, on_host: list[bool] | tuple[bool, ...]) -> PlacementResult:
    """The result of placing operator v on the host exactly when ``on_host[v]``, timed by the re-timer.

    For a costed workload (``problem_from_costs``): the operators keep the front
    end's grouping, so each QuantizeLinear stays with its producer.
    """
    if len(on_host) != len(problem.names):
        raise ValueError("on_host must have one entry per operator")
    if any(not host and t is None for host, t in zip(on_host, problem.t_cim_ns)):
        raise ValueError("an operator that cannot run on the CIM is placed there")
    schedule = simulate(problem, list(on_host))
    stats = SolverStats("fixed", "fixed", schedule.makespan_ns, schedule.makespan_ns, 0.0, 0.0, len(problem.names), 0, 0,
                        "placement fixed by hand")
    return PlacementResult(problem, schedule, stats)


def fixed_placement(
    model: onnx.ModelProto,
    devices: Mapping[str, str],
    hardware: Hardware,
    t_host_ns: Mapping[str, float] | float = 1000.0,
    t_cim_ns: Mapping[str, float] | float = 100.0,
) -> tuple[Workload, PlacementResult]:
    """(workload, result) placing node ``n`` on ``devices[n]`` (``host`` when absent)."""
    graph = model.graph
    infos = value_infos(model)
    weights = {t.name for t in graph.initializer}
    graph_inputs = {i.name for i in graph.input if i.name not in weights}
    graph_outputs = {o.name for o in graph.output}
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}

    def size(tensors: list[str]) -> tuple[int, int, float]:
        """(elements, bytes as moved, bus ns) of ``tensors``: eq. 4's b is each tensor's own element size."""
        known = [infos[t] for t in tensors if t in infos]
        count = sum(elements(i) for i in known)
        size_bytes = moved_bytes(count, sum(elements(i) * element_bytes_of(i) for i in known), hardware)
        moved = [MovedTensor(shape_of(i), element_bytes_of(i)) for i in known]
        return count, size_bytes, transfer_ns(size_bytes, hardware, tensor_bursts(moved, hardware))

    operators, edges = [], []
    names, host, cim, crossbars, edge_table, t_in, t_out, writes = [], [], [], [], [], [], [], []
    for v, node in enumerate(graph.node):
        reads = [t for t in node_inputs(node) if t not in weights]
        n_in, in_bytes, _ = size(reads)
        n_out, out_bytes, _ = size(list(node.output))
        in_elems, in_io_bytes, in_io_ns = size([t for t in reads if t in graph_inputs])
        out_elems, out_io_bytes, out_io_ns = size([t for t in node.output if t in graph_outputs])
        on_cim = devices.get(node.name, "host") == "cim"
        operators.append(Operator(
            node.name, node.op_type, (node.name,), on_cim, None if on_cim else "placed on the host by hand",
            None, None, None, 1 if on_cim else None, n_in, n_out, in_elems, out_elems,
            in_bytes=in_bytes, out_bytes=out_bytes, graph_input_bytes=in_io_bytes, graph_output_bytes=out_io_bytes,
        ))
        names.append(node.name)
        host.append(_per_node(t_host_ns, node.name))
        cim.append(_per_node(t_cim_ns, node.name) if on_cim else None)
        crossbars.append(1 if on_cim else 0)
        t_in.append(in_io_ns)
        t_out.append(out_io_ns)
        writes.append(out_elems > 0)
        for u in sorted({producer[t] for t in reads if t in producer}):
            count, count_bytes, count_ns = size([t for t in graph.node[u].output if t in reads])
            edges.append(Edge(graph.node[u].name, node.name, count, bytes=count_bytes))
            edge_table.append((u, v, count_ns))
    workload = Workload(tuple(operators), tuple(edges), hardware.crossbar_rows, hardware.crossbar_cols)
    problem = PlacementProblem(
        tuple(names), tuple(host), tuple(cim), tuple(crossbars), tuple(edge_table), sum(crossbars),
        tuple(t_in), tuple(t_out), tuple(writes),
    )
    return workload, fixed_assignment(problem, [devices.get(name, "host") != "cim" for name in names])
