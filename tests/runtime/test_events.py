"""The timed executor's event bookkeeping: items fire once all their events have times, chains settle, first time wins."""

from __future__ import annotations

from cimsplit.runtime.events import Events, FrameLayout


def test_layout_gives_each_key_one_id_after_admit_and_done() -> None:
    at = FrameLayout()
    assert (at(("x", "host")), at(("y", "cim")), at(("x", "host"))) == (2, 3, 2)
    assert at.size == 4 and (FrameLayout.ADMIT, FrameLayout.DONE) == (0, 1)


def test_items_fire_at_settle_once_every_event_has_a_time() -> None:
    ev = Events(5)
    fired: list[tuple[str, float]] = []

    def later(name: str, deps: list[int], made: int, duration: float) -> None:
        t = ev.latest(deps) + duration
        fired.append((name, t))
        ev.set(made, t)

    ev.add([0, 1, 1], later, "a", [0, 1], 2, 10.0)  # a repeated event counts once
    ev.add([2], later, "b", [2], 3, 5.0)  # waits for a's event
    ev.set(0, 4.0)
    ev.set(1, 7.0)
    assert fired == [] and not ev.known([2])  # nothing fires before settle
    ev.settle()
    assert fired == [("a", 17.0), ("b", 22.0)]
    assert ev.known([0, 1, 2, 3]) and not ev.known([3, 4]) and ev.latest([0, 3]) == 22.0


def test_an_item_whose_events_are_known_fires_at_the_next_settle_and_a_second_time_is_ignored() -> None:
    ev = Events(2)
    ev.set(0, 3.0)
    ev.set(0, 9.0)  # a copied node making its tensor a second time
    fired: list[float] = []
    ev.add([0], lambda: fired.append(ev.time[0]))
    ev.settle()
    assert fired == [3.0] and ev.time == [3.0, None]
