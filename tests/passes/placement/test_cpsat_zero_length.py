"""CP-SAT with 0 ns host operators: the host order is (start, finish, index), not (start, index).

A zero-length host operator z can start at the same instant as a longer host
operator u of another branch and still have to run first.  Ordered by (start,
index) with u before z, the re-timed schedule makes z wait for u; before the
fix CP-SAT handed back that order with the makespan of the schedule it came
from, and the validator refused the compile (issue 13, "re-timed makespan
93051.2 ns exceeds the reported objective 93000 ns").
"""

from __future__ import annotations

from cimsplit.passes.placement.driver import place
from cimsplit.passes.placement.options import SolveOptions
from cimsplit.passes.placement.problem import PlacementProblem
from cimsplit.passes.placement.simulate import simulate
from cimsplit.passes.placement.solvers.cpsat import CpSatOptions, solve_cpsat


def test_zero_length_source_before_a_longer_one_of_lower_index():
    r"""
        u            u: host-only, 10 ns (index 0)
        z -> c       z: host-only, 0 ns (index 1); c: host 100 / CIM 50 ns, 1 crossbar; budget 1
    Optimum: z at 0, c on the CIM 0..50, u on the host 0..10: makespan 50.
    Host order (u, z) instead: z waits for u, c runs 10..60: 60.
    """
    p = PlacementProblem(names=("u", "z", "c"), t_host_ns=(10.0, 0.0, 100.0), t_cim_ns=(None, None, 50.0),
                         crossbars=(0, 0, 1), edges=((1, 2, 0.0),), budget=1)
    assert simulate(p, (True, True, False), [0, 1]).makespan_ns == 60.0
    out = solve_cpsat(p, CpSatOptions(time_limit_s=10.0, threads=1)).outcome
    assert out.status == "optimal"
    assert (out.objective_ns, out.bound_ns) == (50.0, 50.0)
    assert simulate(p, out.on_host, out.host_order).makespan_ns == 50.0


#  The tables of ../shared/repro/cpsat_objective_model.onnx at 2 crossbars with its host profile
#  (costs.json of that compile).  Two branches off the inputs:
#
#     Conv_3 (CIM 6262.7) --> BatchNorm_9 --> MatMul_12 (CIM 18064.1, writes an output)
#            \--> Split_16 (writes an output)
#     Sigmoid_18 -> Mul_20 -> Add_23 -> Add_26 -> GlobalAveragePool_28 -> HardSwish_30 (0 ns)
#         -> Conv_34 (CIM 50.6) -> Split_38 -> Conv_41 (CIM 51.4) -> Tanh_43 -> Concat_45 -> Split_49
#
#  In the optimal schedule (93000 ns) HardSwish_30 (index 9, 0 ns) and BatchNorm_9 (index 2,
#  9000 ns) both start at 34500 ns; HardSwish must run first, or Conv_34 on the CIM and the two
#  transfers around it (50.5859375 + 0.1953125 + 0.390625 = 51.171875 ns) land on the critical
#  path: 93051.171875 ns.
REPRO = PlacementProblem(
    names=("n_Conv_3", "n_Sigmoid_18", "n_BatchNormalization_9", "n_Split_16", "n_Mul_20", "n_MatMul_12", "n_Add_23",
           "n_Add_26", "n_GlobalAveragePool_28", "n_HardSwish_30", "n_Conv_34", "n_Split_38", "n_Conv_41", "n_Tanh_43",
           "n_Concat_45", "n_Split_49"),
    t_host_ns=(16000.0, 10000.0, 9000.0, 8500.0, 6500.0, 9000.0, 6000.0, 6000.0, 6000.0, 0.0, 9500.0, 7000.0, 6000.0,
               5000.0, 6000.0, 8000.0),
    t_cim_ns=(6262.6953125, None, None, None, None, 18064.0625, None, None, None, None, 50.5859375, None,
              51.416015625, None, None, None),
    crossbars=(1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0),
    edges=((0, 2, 189.0625), (0, 3, 189.0625), (1, 4, 23.6328125), (2, 5, 189.0625), (4, 6, 23.6328125),
           (6, 7, 23.6328125), (7, 8, 23.6328125), (8, 9, 0.1953125), (9, 10, 0.1953125), (10, 11, 0.390625),
           (11, 12, 0.244140625), (12, 13, 1.171875), (12, 14, 1.171875), (13, 14, 1.171875), (14, 15, 2.34375)),
    budget=2,
    t_in_ns=(23.6328125,) + (0.0,) * 15,
    t_out_ns=(0.0,) * 5 + (275.0,) + (0.0,) * 10,
    writes_output=(False, False, False, True, False, True, False, False, False, False, False, False, False, False,
                   False, True),
)


def test_issue_13_repro_compiles_with_its_optimum():
    result = place(REPRO, SolveOptions(solver="cpsat", time_limit_s=5.0))  # validated inside
    assert result.solver.status == "optimal"
    # Host: Sigmoid, Mul, Add, Add, GAP (10000 + 6500 + 3 x 6000 = 34500), HardSwish (0), BatchNorm,
    # Split_38, Conv_41, Tanh, Concat, MatMul, Split_16, Split_49 back to back:
    # 34500 + 9000 + 7000 + 6000 + 5000 + 6000 + 9000 + 8500 + 8000 = 93000 ns.
    assert result.solver.objective_ns == 93000.0
    assert result.solver.bound_ns == 93000.0
    assert result.schedule.makespan_ns == 93000.0


def test_issue_13_repro_host_order_times_to_the_objective():
    out = solve_cpsat(REPRO, CpSatOptions(time_limit_s=5.0, threads=1)).outcome
    assert out.objective_ns == 93000.0
    assert simulate(REPRO, out.on_host, out.host_order).makespan_ns == 93000.0
