"""Graph outputs that are constants, made by a node so that a partition can hand them out.

A model may return a constant: an initializer listed as a graph output, or a
Constant node's output that onnxslim folds into one (a PyTorch export
returning a fixed tensor, a bias a head also outputs).  onnxruntime returns it;
a plan hands out only what partitions compute, so the split model's run had
nothing to return for it.  Each such output is made by an ``Identity`` of the
constant, renamed, which its other readers read as before.
"""

from __future__ import annotations

import onnx
from onnx import helper

__all__ = ["make_constant_outputs"]


def _rename_reads(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every read of ``old`` in ``graph`` and its subgraphs (an outer-scope read is by name) reads ``new``."""
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        for attribute in node.attribute:
            for inner in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                _rename_reads(inner, old, new)


def make_constant_outputs(graph: onnx.GraphProto) -> int:
    """Make, in place, each graph output that is an initializer by an Identity of it (renamed); how many."""
    constants = {tensor.name: tensor for tensor in graph.initializer}
    taken = set(constants) | {name for node in graph.node for name in node.output} | {vi.name for vi in graph.input}
    made = 0
    for output in graph.output:
        tensor = constants.get(output.name)
        if tensor is None:
            continue
        value = f"{output.name}__constant"
        while value in taken:
            value += "_"
        taken.add(value)
        tensor.name = value
        _rename_reads(graph, output.name, value)
        graph.node.append(helper.make_node("Identity", [value], [output.name]))
        made += 1
    return made
