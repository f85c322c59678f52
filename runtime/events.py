"""The timed executor's bookkeeping: events with integer ids and the items that wait for them.

An event is a moment (a tensor on a device, a frame admitted, a unit free);
an item is work that can be timed once every event it waits for has a time
(a CIM operator, a transfer, a frame's finish).  Ids are integers laid out
per frame (:class:`FrameLayout`), times live in one list, and an item is a
bound method with its arguments: the executor runs this bookkeeping on the
host's own core, between the host's pieces, so it is kept to list indexing
(no tuple keys to hash, no closures made while the clock runs).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

__all__ = ["Events", "FrameLayout"]


class FrameLayout:
    """Integer ids of one frame's events; frame f's event e is ``f * size + e``."""

    ADMIT = 0
    DONE = 1

    def __init__(self) -> None:
        self._ids: dict[Hashable, int] = {}
        self.size = 2

    def __call__(self, key: Hashable) -> int:
        """The id of ``key`` (a new one the first time it is asked for)."""
        if key not in self._ids:
            self._ids[key] = self.size
            self.size += 1
        return self._ids[key]


class Events:
    """Times of ``size`` events (None: not yet), and items that fire once all their events have a time."""

    __slots__ = ("time", "_waiting", "_ready")

    def __init__(self, size: int) -> None:
        self.time: list[float | None] = [None] * size
        self._waiting: dict[int, list[list]] = {}
        self._ready: list[list] = []

    def set(self, key: int, t: float) -> None:
        """Event ``key`` happens at ``t``; a second time is ignored (a copied node makes its tensor twice)."""
        if self.time[key] is not None:
            return
        self.time[key] = t
        for item in self._waiting.pop(key, ()):
            item[0] -= 1
            if not item[0]:
                self._ready.append(item)

    def add(self, deps: Sequence[int], fire: Callable[..., None], *args: object) -> None:
        """``fire(*args)`` once every event of ``deps`` has a time (at the next :meth:`settle`)."""
        time = self.time
        missing = [d for d in set(deps) if time[d] is None]
        item = [len(missing), fire, args]
        for d in missing:
            self._waiting.setdefault(d, []).append(item)
        if not missing:
            self._ready.append(item)

    def latest(self, deps: Sequence[int]) -> float:
        return max(map(self.time.__getitem__, deps))  # type: ignore[type-var]

    def known(self, deps: Sequence[int]) -> bool:
        time = self.time
        return all(time[d] is not None for d in deps)

    def settle(self) -> None:
        """Fire every item whose events all have times, and those they make ready in turn."""
        ready = self._ready
        while ready:
            _, fire, args = ready.pop()
            fire(*args)
