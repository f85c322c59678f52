"""Fixtures of the placement tests."""

from __future__ import annotations

import pytest

from cimsplit.passes.placement.solvers.cpsat import segments


@pytest.fixture(params=["enumerated", "solved"])
def segment_fronts(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The decomposition's small segments enumerated (the default) or solved by CP-SAT, as larger ones are."""
    if request.param == "solved":
        monkeypatch.setattr(segments, "ENUMERATED_CHOICES", 0)
    return request.param


@pytest.fixture
def solved_fronts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every segment solved by CP-SAT, none enumerated (tests of the solves themselves)."""
    monkeypatch.setattr(segments, "ENUMERATED_CHOICES", 0)
