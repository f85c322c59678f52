"""Annotate pass: the explanation's reason and forced-move makespan on every node of an operator."""

from __future__ import annotations

from test_annotate import chain_with_constant

from cimsplit.passes.rewrite.annotate import KEY_FORCED, KEY_REASON, NodePlacement, annotate


def _props(model) -> dict[str, dict[str, str]]:
    return {n.name: {p.key: p.value for p in n.metadata_props} for n in model.graph.node}


def test_reasons_go_on_every_node_of_the_operator_and_are_replaced_on_restamping():
    model = chain_with_constant()  # operator "mm" = MatMul mm + fused Relu relu; "rs" on the host
    placements = {"mm": NodePlacement("cim", "mm", 0.0, 5.0), "relu": NodePlacement("cim", "mm", 0.0, 5.0),
                  "rs": NodePlacement("host", "rs", 6.0, 7.0)}
    reasons = {"mm": ("on_cim: saves 93 ns: forced to the host 100 ns", 100.0),
               "rs": ("not_cim_capable: Reshape runs on the host", None)}
    props = _props(annotate(model, placements, reasons))
    for node in ("mm", "relu"):
        assert props[node][KEY_REASON] == "on_cim: saves 93 ns: forced to the host 100 ns"
        assert props[node][KEY_FORCED] == "100.0"
    assert props["rs"][KEY_FORCED] == "none"
    assert KEY_REASON not in props["k"]  # the leftover Constant belongs to no operator
    again = _props(annotate(annotate(model, placements, reasons), placements))
    assert all(KEY_REASON not in p and KEY_FORCED not in p for p in again.values())
