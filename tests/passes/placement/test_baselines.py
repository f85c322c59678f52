"""CPU-only, greedy and single-split baselines on hand-worked graphs."""

from __future__ import annotations

import pytest

from cimsplit.passes import PlacementProblem, cpu_only, greedy, list_schedule, single_split


def test_cpu_only_is_the_sum_of_host_latencies():
    p = PlacementProblem(names=("a", "b", "c"), t_host_ns=(10.0, 20.0, 30.0), t_cim_ns=(1.0, None, 1.0),
                         crossbars=(1, 0, 1), edges=((0, 2, 3.0),), budget=5)
    schedule = cpu_only(p)
    assert schedule.makespan_ns == 60.0
    assert all(schedule.on_host)


def test_greedy_skips_operators_that_do_not_save_time():
    # b is slower on the CIM (30 > 20): it stays on the host even though it fits.
    p = PlacementProblem(names=("a", "b"), t_host_ns=(100.0, 20.0), t_cim_ns=(10.0, 30.0), crossbars=(1, 1),
                         edges=(), budget=5)
    schedule = greedy(p)
    assert schedule.on_host == (False, True)
    assert schedule.makespan_ns == pytest.approx(20)  # max(CIM a 10, host b 20)


#   h1 -> c1 -> g1      host-only h*, g* 10 ns; c* CIM 30 ns; no transfer cost
#   h2 -> c2 -> g2
def test_list_scheduling_interleaves_branches():
    p = PlacementProblem(names=("h1", "c1", "g1", "h2", "c2", "g2"), t_host_ns=(10.0, 1000.0, 10.0, 10.0, 1000.0, 10.0),
                         t_cim_ns=(None, 30.0, None, None, 30.0, None), crossbars=(0, 1, 0, 0, 1, 0),
                         edges=((0, 1, 0.0), (1, 2, 0.0), (3, 4, 0.0), (4, 5, 0.0)), budget=2)
    schedule = list_schedule(p, (True, False, True, True, False, True))
    # h1 [0,10], h2 [10,20] (ready before g1 at 40), c1 [10,40], c2 [20,50], g1 [40,50], g2 [50,60]
    assert schedule.makespan_ns == pytest.approx(60)
    assert greedy(p).makespan_ns == pytest.approx(60)


#   c0 -> c1 -> c2 -> c3   all capable: host 100, 100, 50, 50; CIM 10 each; 1 crossbar each; transfers 5 ns.
def test_single_split_picks_the_best_prefix_or_suffix():
    p = PlacementProblem(names=("c0", "c1", "c2", "c3"), t_host_ns=(100.0, 100.0, 50.0, 50.0), t_cim_ns=(10.0,) * 4,
                         crossbars=(1, 1, 1, 1), edges=((0, 1, 5.0), (1, 2, 5.0), (2, 3, 5.0)), budget=2)
    schedule = single_split(p)
    # CIM prefix {c0, c1}: 10 + 10 + 5 + 50 + 50 = 125; CIM suffix {c2, c3}: 100 + 100 + 5 + 10 + 10 = 225;
    # three or more on the CIM do not fit the budget of 2.
    assert schedule.on_host == (False, False, True, True)
    assert schedule.makespan_ns == pytest.approx(125)


def test_single_split_keeps_incapable_operators_on_the_host():
    # c0 -> n1 -> c2, n1 not capable: CIM prefix of length 3 puts c0 and c2 on the CIM, n1 on the host.
    p = PlacementProblem(names=("c0", "n1", "c2"), t_host_ns=(100.0, 10.0, 100.0), t_cim_ns=(10.0, None, 10.0),
                         crossbars=(1, 0, 1), edges=((0, 1, 1.0), (1, 2, 1.0)), budget=2)
    schedule = single_split(p)
    assert schedule.on_host == (False, True, False)
    assert schedule.makespan_ns == pytest.approx(10 + 1 + 10 + 1 + 10)
