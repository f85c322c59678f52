"""plan.json's schema: a document survives from_json -> to_json unchanged; damaged ones are user errors."""

from __future__ import annotations

import json

import pytest

from cimsplit.errors import CimsplitError
from cimsplit.runtime.plan import PartitionRecord, Plan, TransferRecord, dumps, read_plan


def _document() -> dict:
    """x -> a [cim] -> y: one CIM partition, the graph input in and the output back (8 ns each)."""
    return {
        "version": 1,
        "model": {"path": "/m.onnx", "fingerprint": "f", "inputs": [{"name": "x", "dtype": "float32", "shape": [1, "n"]}],
                  "outputs": [{"name": "y", "dtype": "float32", "shape": [1, None]}]},
        "partitions": [{"name": "cim_0", "device": "cim", "file": "cim_0.onnx", "nodes": ["a"], "inputs": ["x"], "outputs": ["y"]}],
        "transfers": [{"name": "t0", "tensor": "x", "src_device": "host", "dst_device": "cim", "bytes": 8, "latency_ns": 8.0},
                      {"name": "t1", "tensor": "y", "src_device": "cim", "dst_device": "host", "bytes": 8, "latency_ns": 8.0}],
        "timeline": {"operators": [{"name": "a", "device": "cim", "start_ns": 8.0, "finish_ns": 108.0, "duration_ns": 100.0,
                                    "input_transfer_ns": 8.0, "output_transfer_ns": 8.0}],
                     "edges": [], "makespan_ns": 116.0},
        "makespan_ns": 116.0,
        "solver": {"name": "highs", "time_s": 0.25},
        "speedup_vs_ort_all": None,
    }


def test_round_trip_keeps_every_byte() -> None:
    document = _document()
    plan = Plan.from_json(document)
    assert plan.partitions == (PartitionRecord("cim_0", "cim", "cim_0.onnx", ("a",), ("x",), ("y",)),)
    assert plan.transfers[1] == TransferRecord("t1", "y", "cim", "host", 8, 8.0)
    assert plan.model.inputs[0].shape == (1, "n") and plan.timeline.makespan_ns == 116.0
    assert plan.report == {"solver": {"name": "highs", "time_s": 0.25}, "speedup_vs_ort_all": None}
    assert plan.speedup_vs_ort_all is None and plan.model_latency_ort_all_ns is None
    assert dumps(plan.to_json()) == dumps(document)


def test_damaged_or_wrong_version_plans_are_user_errors(tmp_path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(dumps(_document()))
    assert read_plan(path).makespan_ns == 116.0
    for broken, message in (
        ({**_document(), "version": 7}, "unsupported version 7"),
        ({k: v for k, v in _document().items() if k != "transfers"}, "not a valid cimsplit plan"),
        ([1, 2], "not a valid cimsplit plan"),
    ):
        path.write_text(json.dumps(broken))
        with pytest.raises(CimsplitError, match=message):
            read_plan(path)
    path.write_text("{not json")
    with pytest.raises(CimsplitError, match="cannot read"):
        read_plan(path)
