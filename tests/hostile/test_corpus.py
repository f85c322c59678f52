"""The hostile-input corpus: every case through the CLI in-process, each with its stated expectation.

See ``_harness`` for the contract every case is held to, ``_cases_model`` and
``_cases_env`` for the cases.  Compiles use a host profile of one recorded
run, so no case profiles for long.
"""

from __future__ import annotations

import pytest
from _cases_env import CASES as ENV_CASES
from _cases_model import CASES as MODEL_CASES
from _harness import Workspace, check_case

CASES = MODEL_CASES + ENV_CASES


def test_corpus_is_large_and_names_are_unique() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 80
    assert {case.kind for case in CASES} == {
        "file", "protobuf", "graph", "names", "shapes", "dtypes", "opsets", "external", "control", "custom",
        "hardware", "profile", "outdir", "flags", "damaged",
    }


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_case(case, tmp_path, capfd) -> None:
    check_case(case, Workspace(tmp_path, capfd))
