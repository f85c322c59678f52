"""The burst-aware bus (TSO-burst): bursts x CAS + bytes / B_shared, bursts row by row."""

from __future__ import annotations

import dataclasses

import onnx
import pytest
from graphs import clean_cnn

from cimsplit.compiler.costs import build_costs, row_bursts, transfer_ns
from cimsplit.compiler.hardware import load_hardware
from cimsplit.compiler.host_profile import FORMAT_VERSION, HostProfile
from cimsplit.compiler.workload import Edge, MovedTensor, Operator, Workload
from cimsplit.passes.fixed_placement import fixed_placement
from cimsplit.passes.pipeline import build_artifacts

BURST = load_hardware("x86", bus_model="burst", burst_bytes=64, cas_latency_ns=10.0)


@pytest.mark.parametrize(
    ("shape", "itemsize", "bursts"),
    [
        ((1, 3, 4, 20), 1, 12),    # 12 rows of 20 bytes: one burst each
        ((1, 3, 4, 20), 4, 24),    # 12 rows of 80 bytes: two bursts each
        ((1, 8, 7, 7), 1, 56),     # 56 rows of 7 bytes: the narrow map pays a CAS per row
        ((1, 64), 4, 4),           # a Gemm row of 256 bytes: four bursts
        ((), 4, 1),                # a scalar is one row of one element
        ((1, 0, 8), 4, 0),         # nothing to move
    ],
)
def test_bursts_follow_the_row_major_rows(shape, itemsize, bursts):
    assert row_bursts(shape, itemsize, 64) == bursts


def test_volume_is_eq_4_and_burst_adds_a_cas_per_burst():
    volume = load_hardware("x86")
    assert volume.bus_model == "volume"
    # 2048 bytes at 20.48 GB/s = 100 ns; bursts are ignored by the volume model.
    assert transfer_ns(2048, volume, bursts=32) == pytest.approx(100.0)
    assert transfer_ns(2048, BURST, bursts=32) == pytest.approx(100.0 + 32 * 10.0)


def _two_operators(bus_hardware) -> tuple[float, float]:
    """a: Conv (CIM) reads x[1,2,4,16] int8 -> b: Relu writes y; the edge carries [1,2,4,16] int8."""
    tensor = MovedTensor((1, 2, 4, 16), 1)
    a = Operator("a", "Conv", ("a",), True, None, 2, 18, 64, 1, 128, 128, graph_input_elements=128,
                 in_bytes=128, out_bytes=128, graph_input_bytes=128, graph_inputs_moved=(tensor,))
    b = Operator("b", "Relu", ("b",), False, "no weight", None, None, None, None, 128, 128, in_bytes=128, out_bytes=128)
    workload = Workload((a, b), (Edge("a", "b", 128, ("t",), 128, (tensor,)),))
    profile = HostProfile(FORMAT_VERSION, "fp", "1.0", "hand", 1, 1, 1,
                          {n: {"median_ns": 1000.0, "p10_ns": 1000.0, "p90_ns": 1000.0} for n in "ab"},
                          {"optimizations_off": 2000.0, "optimizations_all": 2000.0}, "hand.json")
    costs = build_costs(workload, bus_hardware, profile)
    return costs.edges[0].t_transfer_ns, costs.io_transfers[0].t_transfer_ns


def test_costs_charge_the_bursts_of_every_crossing_tensor():
    # 128 bytes = 6.25 ns at 20.48 GB/s; 8 rows of 16 bytes = 8 bursts of 10 ns under the burst model.
    assert _two_operators(load_hardware("x86")) == pytest.approx((6.25, 6.25))
    assert _two_operators(BURST) == pytest.approx((86.25, 86.25))
    # Forcing b = 4 bytes: 512 bytes = 25 ns, rows of 64 bytes are still one burst each.
    assert _two_operators(dataclasses.replace(BURST, element_bytes=4)) == pytest.approx((105.0, 105.0))


def test_the_split_prices_transfers_as_the_cost_model_does():
    """clean_cnn: x[1,3,8,8] -> Conv (on the CIM) -> r[1,4,8,8] -> Relu ... all float32.

    x: 768 bytes = 37.5 ns, 24 rows of 32 bytes = 24 bursts = 240 ns -> 277.5 ns;
    c and r: 1024 bytes = 50 ns, 32 rows of 32 bytes = 320 ns -> 370 ns;
    f[1,256]: 1024 bytes = 50 ns, one row of 1024 bytes = 16 bursts = 160 ns -> 210 ns.
    """
    model = onnx.shape_inference.infer_shapes(clean_cnn())
    for i, node in enumerate(model.graph.node):
        node.name = f"n{i}"
    workload, result = fixed_placement(model, {"n0": "cim"}, BURST)
    assert result.problem.t_in_ns[0] == pytest.approx(277.5)
    assert [t for _, _, t in result.problem.edges] == pytest.approx([370.0, 370.0, 50.0 + 16 * 10.0])
    built = build_artifacts(model, workload, result, BURST, model_path="m.onnx", fingerprint="f")
    assert [(t.tensor, t.bytes, t.latency_ns) for t in built.plan.transfers] == [
        ("x", 768, pytest.approx(277.5)), ("c", 1024, pytest.approx(370.0))]
