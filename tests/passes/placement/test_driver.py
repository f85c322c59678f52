"""The partition driver: solver choice and fallbacks, bad arguments, problem_from_costs, JSON report."""

from __future__ import annotations

import sys

import pytest
from _solvers import gurobi_unavailable_reason

from cimsplit.compiler.costs import Costs, EdgeCost, IoTransfer, OperatorCost
from cimsplit.compiler.hardware import Hardware
from cimsplit.compiler.workload import Edge, Operator, Workload
from cimsplit.errors import CimsplitError
from cimsplit.passes import PlacementProblem, SolveOptions, place, problem_from_costs
from cimsplit.passes.emit.report import result_to_json
from cimsplit.passes.placement import dag
from cimsplit.passes.placement.driver import auto_candidates
from cimsplit.passes.placement.heuristics import best_heuristic
from cimsplit.passes.placement.solvers.backend import BackendMissing
from cimsplit.passes.placement.testing import random_problem

#   a -> b -> c    a, c host-only 10 ns; b host 100 / CIM 20 ns, 4 crossbars; transfers 5 ns.
CHAIN = PlacementProblem(names=("a", "b", "c"), t_host_ns=(10.0, 100.0, 10.0), t_cim_ns=(None, 20.0, None),
                         crossbars=(0, 4, 0), edges=((0, 1, 5.0), (1, 2, 5.0)), budget=4)


@pytest.fixture
def no_gurobipy(monkeypatch):
    """gurobipy cannot be uninstalled here; a None entry in sys.modules makes `import gurobipy` fail."""
    monkeypatch.setitem(sys.modules, "gurobipy", None)


def test_unknown_solver_is_a_user_error():
    with pytest.raises(CimsplitError, match="unknown solver 'cplex'"):
        place(CHAIN, SolveOptions(solver="cplex"))


@pytest.mark.parametrize("limit", [0, -1.0, float("nan"), float("inf")])
def test_time_limit_must_be_positive_and_finite(limit):
    with pytest.raises(CimsplitError, match="time limit"):
        place(CHAIN, SolveOptions(time_limit_s=limit))


def test_negative_budget_is_a_user_error():
    bad = PlacementProblem(names=("a",), t_host_ns=(1.0,), t_cim_ns=(1.0,), crossbars=(1,), edges=(), budget=-1)
    with pytest.raises(CimsplitError, match="budget"):
        place(bad)


def test_gurobi_requested_without_gurobipy_names_the_extra(no_gurobipy):
    with pytest.raises(BackendMissing) as info:
        place(CHAIN, SolveOptions(solver="gurobi"))
    assert "pip install 'cimsplit[gurobi]'" in info.value.one_line()


def _chain(n: int) -> PlacementProblem:
    """o0 -> o1 -> ... -> o(n-1): each host 100 ns / CIM 10 ns, 1 crossbar, transfers 5 ns; budget n // 2."""
    return PlacementProblem(names=tuple(f"o{i}" for i in range(n)), t_host_ns=(100.0,) * n, t_cim_ns=(10.0,) * n,
                            crossbars=(1,) * n, edges=tuple((i, i + 1, 5.0) for i in range(n - 1)), budget=n // 2)


def test_auto_without_gurobipy_runs_highs_and_says_why(no_gurobipy):
    result = place(CHAIN, SolveOptions(solver="auto"))
    assert result.solver.name == "highs"
    # one line: the graph's shape (a chain: 0 incomparable pairs), then why Gurobi did not run
    assert result.solver.reason.startswith(
        "auto chose highs: nearly linear graph (0 incomparable operator pairs for 3 operators, < 1 per operator); "
        "gurobi skipped:")
    assert "not installed" in result.solver.reason and "\n" not in result.solver.reason
    assert result.schedule.makespan_ns == pytest.approx(50)


def test_auto_on_a_chain_runs_gurobi_when_licensed_else_highs():
    result = place(CHAIN, SolveOptions(solver="auto"))
    expected = "highs" if gurobi_unavailable_reason() else "gurobi"
    assert result.solver.name == expected
    assert "nearly linear graph" in result.solver.reason
    if expected == "gurobi":
        assert "licensed" in result.solver.reason


def test_auto_on_a_branchy_dag_runs_cpsat():
    # 40-operator layered DAG: 332 incomparable pairs, 8.3 per operator >= 1.
    problem = random_problem(40, seed=0, style="layered")
    assert len(dag.incomparable_pairs(problem)) == 332
    result = place(problem, SolveOptions(solver="auto", time_limit_s=20))
    assert result.solver.name == "cpsat"
    assert result.solver.reason == ("auto chose cpsat: branchy graph (332 incomparable operator pairs for 40 "
                                    "operators, >= 1 per operator)")
    assert result.solver.status == "optimal"


def test_auto_threshold_is_pairs_per_operator():
    #   a -> b, a -> c, b -> d, c -> d   (diamond: 1 incomparable pair {b, c}, 4 operators: linear)
    diamond = PlacementProblem(names=tuple("abcd"), t_host_ns=(10.0,) * 4, t_cim_ns=(1.0,) * 4, crossbars=(1,) * 4,
                               edges=((0, 1, 0.0), (0, 2, 0.0), (1, 3, 0.0), (2, 3, 0.0)), budget=2)
    assert auto_candidates(diamond)[0][0] != "cpsat"
    #   a, b, c with no edges: 3 pairs for 3 operators, 1 per operator: branchy
    loose = PlacementProblem(names=tuple("abc"), t_host_ns=(10.0,) * 3, t_cim_ns=(1.0,) * 3, crossbars=(1,) * 3,
                             edges=(), budget=1)
    assert auto_candidates(loose)[0][0] == "cpsat"


def test_auto_sends_a_nearly_linear_graph_that_splits_at_bottlenecks_to_cpsat():
    #   a -> {b, c} -> d -> {e, f} -> g: 2 incomparable pairs for 7 operators (nearly linear);
    #   bottlenecks a, d, g; segments {b, c} and {e, f}: CP-SAT solves them one by one.
    edges = ((0, 1, 0.0), (0, 2, 0.0), (1, 3, 0.0), (2, 3, 0.0), (3, 4, 0.0), (3, 5, 0.0), (4, 6, 0.0), (5, 6, 0.0))
    chain = PlacementProblem(names=tuple("abcdefg"), t_host_ns=(10.0,) * 7, t_cim_ns=(1.0,) * 7,
                             crossbars=(1,) * 7, edges=edges, budget=2)
    assert auto_candidates(chain) == (["cpsat", "gurobi", "highs"], (
        "nearly linear graph (2 incomparable operator pairs for 7 operators, < 1 per operator) that splits at "
        "3 bottlenecks into 2 segments (largest 2 operators)"))
    result = place(chain, SolveOptions(solver="auto", time_limit_s=20))
    # Budget 2: the host keeps 5 operators, 50 ns, busy throughout with one branch of each diamond on the
    # CIM (a, c, d, f, g on the host; b and e on the CIM in parallel with c and f).
    assert result.solver.name == "cpsat" and result.solver.status == "optimal"
    assert result.schedule.makespan_ns == 50.0


@pytest.mark.parametrize("solver", ["gurobi", "highs", "cpsat"])
def test_named_solver_runs_that_solver(solver):
    if solver == "gurobi" and gurobi_unavailable_reason():
        pytest.skip(f"Gurobi unavailable: {gurobi_unavailable_reason()}")
    result = place(random_problem(40, seed=0, style="layered"), SolveOptions(solver=solver, time_limit_s=20))
    assert result.solver.name == solver
    assert result.solver.reason == f"requested with --solver {solver}"


def test_model_too_large_for_the_gurobi_licence_falls_back_to_highs():
    if gurobi_unavailable_reason():
        pytest.skip(f"Gurobi unavailable: {gurobi_unavailable_reason()}")
    # A linear chain (auto's MILP branch); the plain model has x, s, z per operator/edge:
    # 700 + 700 + 699 + 1 (T) = 2,100 variables > the pip licence's 2,000.
    first = place(_chain(700), SolveOptions(solver="auto", time_limit_s=5.0, plain=True))
    if first.solver.name == "gurobi":
        pytest.skip("this Gurobi licence is not size-limited")
    assert first.solver.name == "highs"
    assert "nearly linear graph" in first.solver.reason and "size-limited" in first.solver.reason
    problem = random_problem(120, seed=0, style="detector")  # about 1,300 variables and 2,400 rows
    named = place(problem, SolveOptions(solver="gurobi", time_limit_s=2.0))  # a named solver degrades too, with a warning
    assert named.solver.name == "highs"
    assert any("solved with HiGHS instead" in w for w in named.warnings)


def test_no_incumbent_returns_the_best_baseline_with_a_warning():
    # A cold solve (no warm start) of a branchy 120-operator graph with a microsecond limit finds nothing.
    problem = random_problem(120, seed=0, style="detector")
    result = place(problem, SolveOptions(solver="highs", time_limit_s=1e-6, plain=True, warm_start=False))
    best = min(s.makespan_ns for s in result.baselines.values())
    assert result.solver.status == "no_solution"
    assert result.schedule.makespan_ns == best
    assert any("no solution" in w and "baseline" in w for w in result.warnings)
    assert not all(result.schedule.on_host) or best == result.cpu_only_ns  # never an all-zero "solution"
    assert result.solver.gap == pytest.approx(1.0)  # bound 0: nothing proven


def test_result_never_worse_than_any_baseline():
    for seed in range(5):
        problem = random_problem(40, seed=seed, style="layered")
        result = place(problem, SolveOptions(solver="highs", time_limit_s=5))
        assert result.schedule.makespan_ns <= min(s.makespan_ns for s in result.baselines.values()) + 1e-6
        assert result.solver.bound_ns <= result.schedule.makespan_ns + 1e-6


def _tiny_workload_and_costs() -> tuple[Workload, Costs]:
    """conv -> flatten -> matmul, with the conv reading the graph input and the matmul writing the output."""
    def op(name, capable, crossbars, gin=0, gout=0):
        return Operator(name=name, op_type="X", nodes=(name,), cim_capable=capable, reason=None, m=None, n=None,
                        n_mvm=None, crossbars=crossbars, n_in=1, n_out=1, graph_input_elements=gin,
                        graph_output_elements=gout)

    workload = Workload(operators=(op("conv", True, 1, gin=192), op("flatten", False, None), op("matmul", True, 1, gout=10)),
                        edges=(Edge("conv", "flatten", 256), Edge("flatten", "matmul", 256)))
    costs = Costs(
        hardware=Hardware(name="x86", crossbars=7),
        operators=(OperatorCost("conv", 11000.0, 3221.875, 1), OperatorCost("flatten", 500.0, None, 0),
                   OperatorCost("matmul", 2000.0, 62.98828125, 1)),
        edges=(EdgeCost("conv", "flatten", 256, 12.5), EdgeCost("flatten", "matmul", 256, 12.5)),
        io_transfers=(IoTransfer("conv", "in", 192, 9.375), IoTransfer("matmul", "out", 10, 0.48828125)),
        host_profile={},
    )
    return workload, costs


def test_problem_from_costs_copies_the_tables():
    workload, costs = _tiny_workload_and_costs()
    problem = problem_from_costs(workload, costs)
    assert problem.names == ("conv", "flatten", "matmul")
    assert problem.t_cim_ns == (3221.875, None, 62.98828125)
    assert problem.edges == ((0, 1, 12.5), (1, 2, 12.5))
    assert problem.budget == 7
    assert problem.t_in_ns == (9.375, 0.0, 0.0)
    assert problem.t_out_ns == (0.0, 0.0, 0.48828125)
    assert problem.writes_output == (False, False, True)


def test_result_to_json_shape():
    workload, costs = _tiny_workload_and_costs()
    result = place(problem_from_costs(workload, costs), SolveOptions(solver="highs"))
    doc = result_to_json(result, workload, costs, model_latency_ns=9000.0)
    # both on the CIM: 9.375 + 3221.875 + 12.5 + 500 + 12.5 + 62.98828125 + 0.48828125
    makespan = 9.375 + 3221.875 + 12.5 + 500 + 12.5 + 62.98828125 + 0.48828125
    assert doc["makespan_ns"] == pytest.approx(makespan)
    assert doc["cpu_only_ns"] == 13500.0
    assert doc["speedup"] == pytest.approx(13500.0 / makespan)
    assert doc["speedup_vs_ort_all"] == pytest.approx(9000.0 / makespan)
    assert [o["device"] for o in doc["operators"]] == ["cim", "host", "cim"]
    assert doc["crossbars_used"] == 2
    assert doc["edges"][0] == {"src": "conv", "dst": "flatten", "t_transfer_ns": 12.5, "crosses": True}
    assert set(doc["baselines"]) == {"cpu_only", "greedy", "single_split"}
    assert doc["baselines"]["cpu_only"]["makespan_ns"] == 13500.0
    assert doc["solver"]["name"] == "highs" and doc["solver"]["n_operators"] == 3
    assert doc["hardware"]["crossbars"] == 7


def test_highs_with_changing_thread_counts_in_one_process():
    # HiGHS keeps one thread scheduler per process: a second thread count used to make run() fail.
    for threads in (None, 1, 2, 1):
        result = place(CHAIN, SolveOptions(solver="highs", threads=threads))
        assert result.solver.status == "optimal", threads
        assert result.schedule.makespan_ns == pytest.approx(50)


def test_plain_reaches_cpsat():
    # CP-SAT builds its own model: plain drops the host-load, ancestor/descendant and idle-chain rows.
    problem = random_problem(30, seed=1, style="layered")
    plain = place(problem, SolveOptions(solver="cpsat", plain=True, time_limit_s=20))
    improved = place(problem, SolveOptions(solver="cpsat", plain=False, time_limit_s=20))
    assert plain.solver.n_constraints < improved.solver.n_constraints
    assert plain.solver.status == improved.solver.status == "optimal"
    assert plain.schedule.makespan_ns == pytest.approx(improved.schedule.makespan_ns, rel=1e-9)


def test_heuristic_warm_start_is_never_lost():
    # 50 ms for a branchy 120-operator graph: whatever HiGHS does, the heuristic's schedule
    # (heuristic_budget_s: min(1 s, 5 % of the limit, 4 ms x 120) = 2.5 ms of work, deterministic) is the floor.
    problem = random_problem(120, seed=0, style="detector")
    result = place(problem, SolveOptions(solver="highs", time_limit_s=0.05))
    floor = min(best_heuristic(problem, 0.05 * 0.05, seed=0).makespan_ns,
                min(s.makespan_ns for s in result.baselines.values()))
    assert result.schedule.makespan_ns <= floor * (1 + 1e-12)
    assert result.solver.bound_ns <= result.schedule.makespan_ns
