"""Replay of the modeled schedule: host serialized in plan order, CIM in parallel, transfers on crossings."""

from __future__ import annotations

from cimsplit.runtime.timeline import replay


def _op(name, device, start, duration, t_in=0.0, t_out=0.0):
    return {"name": name, "device": device, "start_ns": start, "finish_ns": start + duration,
            "duration_ns": duration, "input_transfer_ns": t_in, "output_transfer_ns": t_out}


def test_replay_by_hand() -> None:
    """
        h1 [host, 100] --(5 ns)--> c [cim, 30, writes output: 7 ns back]
        h2 [host, 50]   (independent; the plan ran h2 first, so the host runs h2 then h1)
    """
    section = {
        "operators": [_op("h1", "host", 50.0, 100.0), _op("h2", "host", 0.0, 50.0), _op("c", "cim", 155.0, 30.0, t_out=7.0)],
        "edges": [{"src": "h1", "dst": "c", "latency_ns": 5.0}],
        "makespan_ns": 192.0,
    }
    tl = replay(section)
    # h2: 0..50; h1: 50..150; c: 150 + 5 = 155 .. 185; output back: 185 + 7 = 192.
    assert tl.start_ns == {"h1": 50.0, "h2": 0.0, "c": 155.0}
    assert tl.makespan_ns == 192.0 == section["makespan_ns"]
    assert tl.busy_ns == {"host": 150.0, "cim": 30.0}
    assert (tl.bus_ns, tl.crossings) == (12.0, 2)


def test_same_device_edges_cost_nothing_and_cim_operators_overlap() -> None:
    """c1 [cim, 40, reads input: 3 ns] and c2 [cim, 60] in parallel, both -> h [host, 10] (crossings of 2 ns)."""
    section = {
        "operators": [_op("c1", "cim", 3.0, 40.0, t_in=3.0), _op("c2", "cim", 0.0, 60.0), _op("h", "host", 62.0, 10.0)],
        "edges": [{"src": "c1", "dst": "h", "latency_ns": 2.0}, {"src": "c2", "dst": "h", "latency_ns": 2.0}],
        "makespan_ns": 72.0,
    }
    tl = replay(section)
    # h waits for max(3 + 40 + 2, 60 + 2) = 62, ends at 72.
    assert tl.makespan_ns == 72.0
    assert tl.busy_ns == {"host": 10.0, "cim": 100.0}
