"""Cost model numbers computed by hand: T_acc (eq. 2-3), T_transfer (eq. 4), io transfers."""

from __future__ import annotations

import pytest

from cimsplit.compiler.costs import build_costs, costs_to_dict
from cimsplit.compiler.hardware import load_hardware
from cimsplit.compiler.host_profile import FORMAT_VERSION, HostProfile
from cimsplit.compiler.workload import Edge, Operator, Workload
from cimsplit.errors import CimsplitError


def conv_flatten_gemm(b: int | None = 1) -> Workload:
    """
      x[1,3,8,8] -> conv (4 ch, 3x3, pad 1) + relu -> flatten -> gemm (256 -> 10) -> y[1,10]

    ``b``: bytes per element of every moved tensor as the front end records them (1: an
    int8 model, 4: float32), None: no byte counts (costed as float32).

    conv: M = C_out = 4, N = C_in*kH*kW = 3*3*3 = 27, N_mvm = H_out*W_out = 8*8 = 64,
          N_in = 1*3*8*8 = 192, N_out = 1*4*8*8 = 256, reads the graph input (192 elements)
    gemm: M = 10, N = 256, N_mvm = 1 (one row of the activation), N_in = 256, N_out = 10,
          writes the graph output (10 elements)
    """
    def size(elements: int) -> int | None:
        return None if b is None else b * elements

    conv = Operator(name="conv", op_type="Conv", nodes=("conv", "relu"), cim_capable=True, reason=None,
                    m=4, n=27, n_mvm=64, crossbars=1, n_in=192, n_out=256, graph_input_elements=192,
                    in_bytes=size(192), out_bytes=size(256), graph_input_bytes=size(192), graph_output_bytes=size(0))
    flatten = Operator(name="flatten", op_type="Flatten", nodes=("flatten",), cim_capable=False, reason="no weight",
                       m=None, n=None, n_mvm=None, crossbars=None, n_in=256, n_out=256,
                       in_bytes=size(256), out_bytes=size(256))
    gemm = Operator(name="gemm", op_type="Gemm", nodes=("gemm",), cim_capable=True, reason=None,
                    m=10, n=256, n_mvm=1, crossbars=1, n_in=256, n_out=10, graph_output_elements=10,
                    in_bytes=size(256), out_bytes=size(10), graph_input_bytes=size(0), graph_output_bytes=size(10))
    return Workload(
        operators=(conv, flatten, gemm),
        edges=(Edge("conv", "flatten", 256, bytes=size(256)), Edge("flatten", "gemm", 256, bytes=size(256))),
        inputs={"x": (1, 3, 8, 8)}, outputs={"y": (1, 10)},
    )


def hand_profile(fingerprint: str = "fp") -> HostProfile:
    medians = {"conv": 20_000.0, "relu": 1_000.0, "flatten": 500.0, "gemm": 3_000.0}
    return HostProfile(
        format_version=FORMAT_VERSION, fingerprint=fingerprint, ort_version="1.0", cpu="hand", threads=1,
        runs=3, warmup=1,
        nodes={name: {"median_ns": ns, "p10_ns": ns, "p90_ns": ns} for name, ns in medians.items()},
        model_median_ns={"optimizations_off": 25_000.0, "optimizations_all": 20_000.0},
        source="hand.json",
    )


def test_conv_and_gemm_at_the_x86_preset():
    costs = build_costs(conv_flatten_gemm(), load_hardware("x86"), hand_profile())
    conv, flatten, gemm = costs.operators
    # int8 tensors: b = 1 byte, B_cim = B_shared = 20.48 GB/s = 20.48 bytes/ns, T_mvm = 50 ns.
    # conv: T_acc = b*N_in/B_cim + N_mvm*T_mvm + b*N_out/B_cim = 192/20.48 + 64*50 + 256/20.48
    #             = 9.375 + 3200 + 12.5 = 3221.875 ns
    assert conv.t_cim_ns == pytest.approx(192 / 20.48 + 64 * 50 + 256 / 20.48)
    assert conv.t_cim_ns == pytest.approx(3221.875)
    # gemm: T_acc = 256/20.48 + 1*50 + 10/20.48 = 12.5 + 50 + 0.48828125 = 62.98828125 ns
    assert gemm.t_cim_ns == pytest.approx(62.98828125)
    assert flatten.t_cim_ns is None and flatten.crossbars == 0
    # crossbars: ceil(4/256)*ceil(27/256) = 1, ceil(10/256)*ceil(256/256) = 1 (eq. 1)
    assert (conv.crossbars, gemm.crossbars) == (1, 1)
    # T_host: sum of the medians of the operator's nodes; the fused relu adds to conv.
    assert (conv.t_host_ns, flatten.t_host_ns, gemm.t_host_ns) == (21_000.0, 500.0, 3_000.0)
    assert costs.cpu_only_ns == 24_500.0
    # T_transfer = b*elements/B_shared (eq. 4): 256/20.48 = 12.5 ns on both edges.
    assert [(e.src, e.dst, e.bytes, e.t_transfer_ns) for e in costs.edges] == [
        ("conv", "flatten", 256, pytest.approx(12.5)), ("flatten", "gemm", 256, pytest.approx(12.5))]
    # Graph input 192 elements into conv: 192/20.48 = 9.375 ns; output 10 of gemm: 10/20.48 = 0.48828125 ns.
    assert [(io.operator, io.direction, io.bytes, io.t_transfer_ns) for io in costs.io_transfers] == [
        ("conv", "in", 192, pytest.approx(9.375)), ("gemm", "out", 10, pytest.approx(0.48828125))]
    assert costs.host_profile == {"source": "hand.json", "fingerprint": "fp", "cpu": "hand", "ort_version": "1.0",
                                  "threads": 1, "runs": 3, "warmup": 1, "level": "all", "sum_over_model": 1.225,
                                  "load_average_before": None, "load_average_after": None,
                                  "model_median_ns": {"optimizations_off": 25_000.0, "optimizations_all": 20_000.0}}


def test_arm_preset_and_paper_exact():
    costs = build_costs(conv_flatten_gemm(), load_hardware("arm"), hand_profile(), paper_exact=True)
    # B = 10.24 bytes/ns: conv T_acc = 192/10.24 + 64*50 + 256/10.24 = 18.75 + 3200 + 25 = 3243.75 ns
    assert costs.operators[0].t_cim_ns == pytest.approx(3243.75)
    assert costs.edges[0].t_transfer_ns == pytest.approx(25.0)  # 256/10.24
    assert costs.io_transfers == ()  # the paper charges no graph input/output transfers


def test_other_crossbar_size_element_size_and_bandwidths():
    hardware = load_hardware("x86", crossbar_rows=128, crossbar_cols=128, element_bytes=2, mvm_latency_ns=100.0,
                             cim_bandwidth_bytes_per_s=40e9, bus_bandwidth_bytes_per_s=10e9)
    costs = build_costs(conv_flatten_gemm(b=1), hardware, hand_profile())  # element_bytes = 2 wins over b = 1
    conv, _, gemm = costs.operators
    # gemm: ceil(10/128)*ceil(256/128) = 1*2 = 2 crossbars (eq. 1, recomputed for 128x128)
    assert gemm.crossbars == 2
    # conv: b*N_in/B_cim + N_mvm*T_mvm + b*N_out/B_cim = 2*192/40 + 64*100 + 2*256/40 = 9.6 + 6400 + 12.8 ns
    assert conv.t_cim_ns == pytest.approx(6422.4)
    # Transfers use B_shared = 10 bytes/ns: 2*256/10 = 51.2 ns, 512 bytes.
    assert (costs.edges[0].bytes, costs.edges[0].t_transfer_ns) == (512, pytest.approx(51.2))


@pytest.mark.parametrize("b", [4, None])
def test_float32_tensors_cost_four_bytes_per_element(b):
    """b is the moved tensors' own size: 4 bytes for float32, also when the workload gives no sizes."""
    costs = build_costs(conv_flatten_gemm(b), load_hardware("x86"), hand_profile())
    conv, _, gemm = costs.operators
    # conv: 4*192/20.48 + 64*50 + 4*256/20.48 = 37.5 + 3200 + 50 = 3287.5 ns
    assert conv.t_cim_ns == pytest.approx(3287.5)
    # gemm: 4*256/20.48 + 50 + 4*10/20.48 = 50 + 50 + 1.953125 ns
    assert gemm.t_cim_ns == pytest.approx(101.953125)
    # edges: 4*256 = 1024 bytes, 1024/20.48 = 50 ns; graph input 768 bytes = 37.5 ns, output 40 bytes
    assert [(e.bytes, e.t_transfer_ns) for e in costs.edges] == [(1024, pytest.approx(50.0))] * 2
    assert [(io.bytes, io.t_transfer_ns) for io in costs.io_transfers] == [
        (768, pytest.approx(37.5)), (40, pytest.approx(1.953125))]


def test_element_bytes_overrides_the_tensors_own_size():
    """element_bytes = 1 on a float32 workload charges 1 byte per element, as the paper does."""
    costs = build_costs(conv_flatten_gemm(4), load_hardware("x86", element_bytes=1), hand_profile())
    assert costs.operators[0].t_cim_ns == pytest.approx(3221.875)  # as the int8 workload at the preset
    assert [e.bytes for e in costs.edges] == [256, 256]


def test_edge_transfer_uses_the_elements_the_consumer_reads():
    """A Split's consumers each receive only their half: b*elements, not b*N_out,u."""
    split = Operator(name="split", op_type="Split", nodes=("split",), cim_capable=False, reason="no weight",
                     m=None, n=None, n_mvm=None, crossbars=None, n_in=512, n_out=512)
    heads = [Operator(name=f"h{i}", op_type="Relu", nodes=(f"h{i}",), cim_capable=False, reason="no weight",
                      m=None, n=None, n_mvm=None, crossbars=None, n_in=256, n_out=256) for i in (0, 1)]
    workload = Workload(operators=(split, *heads),
                        edges=(Edge("split", "h0", 256, bytes=256), Edge("split", "h1", 256, bytes=256)))
    profile = HostProfile(format_version=FORMAT_VERSION, fingerprint="fp", ort_version="1", cpu="c", threads=1, runs=1,
                          warmup=0, nodes={n: {"median_ns": 1.0, "p10_ns": 1.0, "p90_ns": 1.0} for n in ("split", "h0", "h1")},
                          model_median_ns={"optimizations_off": 3.0, "optimizations_all": 3.0})
    costs = build_costs(workload, load_hardware("x86"), profile)
    assert [e.t_transfer_ns for e in costs.edges] == [pytest.approx(12.5), pytest.approx(12.5)]  # 256/20.48 each


def test_missing_node_in_the_profile_is_an_error():
    profile = hand_profile()
    del profile.nodes["gemm"]
    with pytest.raises(CimsplitError, match="node 'gemm'"):
        build_costs(conv_flatten_gemm(), load_hardware("x86"), profile)


def test_json_shape():
    workload = conv_flatten_gemm()
    data = costs_to_dict(build_costs(workload, load_hardware("x86"), hand_profile()), workload)
    assert sorted(data) == ["cpu_only_ns", "edges", "hardware", "host_profile", "io_transfers", "operators"]
    assert data["operators"][0] == {"name": "conv", "op_type": "Conv", "nodes": ["conv", "relu"], "cim_capable": True,
                                    "crossbars": 1, "t_host_ns": 21_000.0, "t_cim_ns": pytest.approx(3221.875)}
    assert data["edges"][1] == {"src": "flatten", "dst": "gemm", "bytes": 256, "t_transfer_ns": pytest.approx(12.5)}
    assert data["io_transfers"][0] == {"operator": "conv", "direction": "in", "bytes": 192, "t_transfer_ns": pytest.approx(9.375)}
    assert data["hardware"]["bus_bandwidth_bytes_per_s"] == 20.48e9 and data["cpu_only_ns"] == 24_500.0
