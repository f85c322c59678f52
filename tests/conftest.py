"""Suite-wide fixtures."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_profile_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep cached host profiles out of the user's cache folder.

    One folder per test session (per xdist worker): tests that do not set their own
    ``CIMSPLIT_CACHE_DIR`` share the profiles they take, and nothing is left behind.
    """
    os.environ["CIMSPLIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("profile-cache"))
