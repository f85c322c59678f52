"""Slicing candidates and their costs, by hand, on one Conv (4x4 crossbars, 1 byte/ns buses, 10 ns MVMs).

    x[1,3,8,8] -> conv 3->8 3x3 pad 1 -> relu -> flatten -> fc: Gemm 512->12 -> y

conv: M = 8, N = 27, N_mvm = 64, 768 input bytes, 2048 output bytes (float32); host (table profile)
100 + 0.05 * 8 * 27 * 64 = 791.2 ns; 2 * 7 = 14 crossbars.
"""

from __future__ import annotations

import pytest
from _profiles import table_profile
from graphs import save
from graphs import sliceable_cnn as cnn

from cimsplit.compiler.costs import build_costs
from cimsplit.compiler.frontend import load
from cimsplit.compiler.hardware import load_hardware
from cimsplit.compiler.slicing import slice_costs


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return load(save(cnn(), tmp_path_factory.mktemp("m")), crossbar_size=(4, 4))


def _costs(loaded, **bus):
    hardware = load_hardware("x86", crossbars=100, crossbar_rows=4, crossbar_cols=4, mvm_latency_ns=10.0,
                             bus_bandwidth_bytes_per_s=1e9, cim_bandwidth_bytes_per_s=1e9, **bus)
    costs = build_costs(loaded.workload, hardware, table_profile(loaded))
    return {(s.operator, s.kind, s.split): s for s in slice_costs(loaded.model, loaded.workload, costs)}


def test_ks_and_ofm_candidates_of_the_conv(loaded):
    slices = _costs(loaded)
    conv = sorted((k, s) for (op, k, s) in slices if op == "conv")
    assert conv == [("ks", 4), ("ofm", 2), ("ofm", 4), ("ofm", 6)]  # K = 2: one KS point; H_out/4, /2, 3/4
    ks = slices[("conv", "ks", 4)]
    assert ks.crossbars == 7  # ceil(4/4) * ceil(27/4)
    assert ks.t_host_ns == pytest.approx(791.2 / 2)
    assert ks.t_cim_ns == pytest.approx(768 + 64 * 10 + 1024)  # whole input, all MVMs, half the output (eq. 2-3)
    assert ks.t_back_ns == pytest.approx(1024) and ks.t_graph_in_ns == pytest.approx(768)
    assert ks.t_join_ns == pytest.approx(2 * 2048 / 10e9 * 1e9)
    ofm = slices[("conv", "ofm", 4)]
    # rows 0..3 read input rows 0..4 (5 of 8, pad 1 on top): 3 * 5 * 8 * 4 = 480 bytes
    assert ofm.crossbars == 14 and ofm.t_in_cim_ns == pytest.approx(480) and ofm.t_in_host_ns == pytest.approx(480)
    assert ofm.t_cim_ns == pytest.approx(480 + 32 * 10 + 1024)
    assert ofm.t_host_ns == pytest.approx(791.2 / 2)


def test_slice_transfers_count_row_bursts_under_the_burst_model(loaded):
    slices = _costs(loaded, bus_model="burst", burst_bytes=64, cas_latency_ns=10.0)
    ks = slices[("conv", "ks", 4)]
    # back: (1, 4, 8, 8) float32 = 32 rows of 32 bytes, one burst each: 1024 + 32 * 10
    assert ks.t_back_ns == pytest.approx(1024 + 320)
    assert ks.t_graph_in_ns == pytest.approx(768 + 24 * 10)  # (1, 3, 8, 8): 24 rows
    ofm = slices[("conv", "ofm", 4)]
    assert ofm.t_in_cim_ns == pytest.approx(480 + 15 * 10)  # (1, 3, 5, 8): 15 rows
    fc = slices[("fc", "ks", 4)]
    assert fc.t_back_ns == pytest.approx(16 + 10)  # (1, 4) float32: one row of 16 bytes
