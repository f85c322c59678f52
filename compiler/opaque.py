"""Operators onnxruntime cannot load (custom domains): profile the rest, cost them from elsewhere.

A model with ``com.example:MyOp`` cannot be loaded into onnxruntime as a
whole, so it cannot be profiled as a whole.  :func:`profilable_part` drops
the opaque nodes and everything whose input shapes they make unknown; their
outputs that other nodes read become graph inputs (with the static shapes
the front end found, e.g. declared ``value_info``), and tensors only they
read become graph outputs, so every supported node stays in one loadable
model with its own name and is measured as usual.

An opaque operator's host latency then comes, in this order, from
``--op-latency NAME=DURATION`` (node name or op type), from a host profile
file that measured it (profiled on the target board with its custom-op
library), else it is 0 ns and plan.json says so (:func:`opaque_latencies`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping

import onnx

from cimsplit.compiler.constants import STANDARD_DOMAINS
from cimsplit.compiler.units import format_time_ns, parse_time_ns
from cimsplit.errors import CimsplitError

__all__ = ["ORT_DOMAINS", "opaque_nodes", "profilable_part", "parse_op_latencies", "opaque_latencies"]

log = logging.getLogger(__name__)

ORT_DOMAINS = STANDARD_DOMAINS | {"ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc"}
"""Domains onnxruntime's CPU provider implements without a custom-op library (its NCHWc one on x86 only)."""


def opaque_nodes(model: onnx.ModelProto) -> dict[str, str]:
    """Node name -> ``domain:op_type`` of the main-graph nodes onnxruntime cannot load."""
    return {n.name: f"{n.domain}:{n.op_type}" for n in model.graph.node if n.domain not in ORT_DOMAINS}


def _static_type(vi: onnx.ValueInfoProto) -> bool:
    tensor = vi.type.tensor_type
    return (vi.type.HasField("tensor_type") and tensor.elem_type != 0 and tensor.HasField("shape")
            and all(d.HasField("dim_value") for d in tensor.shape.dim))


def profilable_part(model: onnx.ModelProto) -> tuple[onnx.ModelProto, set[str]]:
    """``model`` without its opaque nodes (and nodes fed by tensors of unknown shape), and the names dropped.

    The same model is returned (no copy) when nothing is opaque.
    """
    opaque = opaque_nodes(model)
    if not opaque:
        return model, set()
    graph = model.graph
    types = {vi.name: vi for vi in [*graph.input, *graph.value_info, *graph.output] if _static_type(vi)}
    known = {t.name for t in graph.initializer} | {vi.name for vi in graph.input}
    dropped: set[str] = set()
    kept: list[onnx.NodeProto] = []
    new_inputs: list[onnx.ValueInfoProto] = []
    for node in graph.node:
        missing = [name for name in node.input if name and name not in known]
        cut = [name for name in missing if name in types]
        if node.name in opaque or len(cut) != len(missing):
            dropped.add(node.name)
            continue
        for name in cut:  # an opaque node's output: fed as an input of the profiled model
            new_inputs.append(types[name])
            known.add(name)
        kept.append(node)
        known.update(o for o in node.output if o)
    produced = {o for n in kept for o in n.output}
    read = {i for n in kept for i in n.input}
    dropped_reads = {i for n in graph.node if n.name in dropped for i in n.input}
    outputs = [vi for vi in graph.output if vi.name in produced]
    outputs += [types[name] for name in sorted((dropped_reads & produced) - read - {vi.name for vi in outputs}) if name in types]
    part = onnx.ModelProto()
    part.CopyFrom(model)
    del part.graph.node[:]
    part.graph.node.extend(kept)
    part.graph.input.extend(new_inputs)
    del part.graph.output[:]
    part.graph.output.extend(outputs)
    used = read | {vi.name for vi in outputs}
    inits = [t for t in part.graph.initializer if t.name in used]
    del part.graph.initializer[:]
    part.graph.initializer.extend(inits)
    log.info("profiling %d of %d nodes: %d onnxruntime cannot load (%s) or that follow them", len(kept),
             len(graph.node), len(dropped), ", ".join(sorted(set(opaque.values()))))
    return part, dropped


def parse_op_latencies(specs: Iterable[str] | None) -> dict[str, float]:
    """``["MyOp=2us", "my_node=500ns"]`` -> ``{"MyOp": 2000.0, "my_node": 500.0}`` (``--op-latency``)."""
    latencies: dict[str, float] = {}
    for spec in specs or ():
        name, sep, text = spec.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise CimsplitError(f"--op-latency {spec!r} is not NAME=DURATION", hint="e.g. --op-latency MyOp=2us")
        latencies[name.strip()] = parse_time_ns(text.strip())
    return latencies


def opaque_latencies(profile, model: onnx.ModelProto, overrides: Mapping[str, float]):  # noqa: ANN001, ANN201
    """``profile`` (a ``HostProfile``) with a latency for every opaque node of ``model``, and the warnings to record.

    ``overrides`` are ``--op-latency`` values by node name or op type (``MyOp`` or
    ``com.example:MyOp``); a node the profile measured keeps its measurement unless
    overridden; a node with neither counts 0 ns, with a warning.
    """
    by_node = {n.name: n for n in model.graph.node}
    opaque = opaque_nodes(model)
    unknown = [name for name in overrides if name not in by_node
               and not any(name in (n.op_type, f"{n.domain}:{n.op_type}") for n in model.graph.node)]
    if unknown:
        raise CimsplitError(f"--op-latency names {unknown[0]!r}, which is neither a node nor an op type of the model",
                            hint="use a node name or op type shown by `cimsplit inspect`")
    nodes = dict(profile.nodes)
    warnings: list[str] = []
    for name, node in by_node.items():
        value = _override(node, overrides)
        if value is not None:
            nodes[name] = {"op_type": node.op_type, "samples": 0, **nodes.get(name, {}),
                           "median_ns": value, "p10_ns": value, "p90_ns": value, "source": "--op-latency", "opaque": False}
    unmeasured = {name: kind for name, kind in opaque.items() if nodes.get(name, {"opaque": True}).get("opaque")}
    unmeasured |= {name: f"after {', '.join(sorted(set(opaque.values())))}" for name, stats in nodes.items()
                   if stats.get("opaque") and name in by_node and name not in opaque}
    for name, kind in sorted(unmeasured.items()):
        if _override(by_node[name], overrides) is not None:
            continue
        nodes[name] = {"op_type": by_node[name].op_type, "median_ns": 0.0, "p10_ns": 0.0, "p90_ns": 0.0, "samples": 0,
                       "opaque": True}
        warnings.append(f"operator {name} ({kind}) could not be profiled (onnxruntime cannot load it) and the host "
                        f"profile has no latency for it: it counts {format_time_ns(0.0)} on the host; "
                        f"give it with --op-latency {by_node[name].op_type}=DURATION")
    for warning in warnings:
        log.info("%s", warning)  # the caller records and shows them
    return dataclasses.replace(profile, nodes=nodes), tuple(warnings)


def _override(node: onnx.NodeProto, overrides: Mapping[str, float]) -> float | None:
    for key in (node.name, f"{node.domain}:{node.op_type}", node.op_type):
        if key in overrides:
            return overrides[key]
    return None
