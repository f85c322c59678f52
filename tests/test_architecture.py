"""The layout holds: layering contracts, no import cycles, small modules, a clean lint (DESIGN §1, STYLE.md).

The contracts live in pyproject.toml (``[tool.importlinter]``) so that
``lint-imports`` on the command line checks the same thing.  The graph is
grimp's (import-linter's own), which counts imports inside function bodies
too: an import hidden in a function still ties two modules together.
"""

from __future__ import annotations

import graphlib
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ("cli", "compiler", "passes", "runtime", "models")
MAX_MODULE_LINES = 420
"""STYLE.md's "a module past about 400 lines is usually two", with a little slack."""


def test_layering_contracts_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True) == 0


def test_no_import_cycles_between_modules() -> None:
    graph = grimp.build_graph("cimsplit", cache_dir=None)
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    try:
        graphlib.TopologicalSorter(imports).prepare()
    except graphlib.CycleError as exc:
        pytest.fail("import cycle: " + " -> ".join(exc.args[1]))


def test_every_module_is_small() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for folder in PACKAGE_DIRS
        for path in (ROOT / folder).rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_lint_is_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    result = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:]


def test_a_static_analyser_resolves_the_installed_package(tmp_path: Path) -> None:
    """mypy, run outside the checkout, follows ``cimsplit.*`` imports to their definitions (no import hook)."""
    probe = tmp_path / "probe.py"
    probe.write_text("from cimsplit.passes.placement import PlacementProblem\nreveal_type(PlacementProblem)\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"), str(probe)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout
    assert 'Revealed type is "def (' in result.stdout and "cimsplit.passes.placement.problem.PlacementProblem" in result.stdout
