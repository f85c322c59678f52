"""The console script itself: --version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import cimsplit
from cimsplit.cli import main


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"cimsplit {cimsplit.__version__}\n"


def test_version_from_the_console_script() -> None:
    done = subprocess.run([str(Path(sys.executable).parent / "cimsplit"), "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"cimsplit {cimsplit.__version__}"
