"""Run one hostile case through the CLI in-process and check the bad-input contract.

A case states what must happen:

* ``OK``: exit status 0;
* ``ERROR``: exit status 2 and exactly one ``error:`` line on stderr (other
  stderr lines may only be warnings), never a traceback and never the
  internal-error line;
* ``HANDLED``: one of the two above (used where the contract allows either,
  e.g. an operator onnxruntime cannot load: compiled around it, or refused).

Always: no traceback, no onnxruntime native log line (``[E:onnxruntime``), the
input files unchanged (every file present before the run has the same bytes
after it, except the output directory a case asks to replace), and after a
failure no output directory (nor a temporary sibling) left behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cimsplit.cli import main

OK, ERROR, HANDLED = "ok", "error", "handled"


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    """file, protobuf, graph, names, shapes, dtypes, opsets, external, control, custom, hardware, profile, outdir, flags, damaged."""
    expect: str
    build: Callable[[Workspace], list[str]]
    """Writes the inputs into the workspace and returns the argv (without ``cimsplit``)."""
    message: str = ""
    """A substring the error line must contain (ERROR cases)."""
    after: Callable[[Workspace], None] | None = None
    """Further checks once the command succeeded (OK cases)."""


@dataclass
class Workspace:
    root: Path
    capfd: object
    mutable: list[Path] = field(default_factory=list)
    """Paths the command may legitimately change (the output directory it replaces)."""

    def path(self, *parts: str) -> Path:
        path = self.root.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def cli(self, argv: list[str]) -> int:
        """Run a preparatory command (its output is discarded); it must succeed."""
        status = run_main(argv)
        out, err = self.capfd.readouterr()
        assert status == 0, f"preparation {argv} failed: {err}"
        return status

    def profile(self, model: Path, *extra: str) -> Path:
        """A host profile of ``model`` from one recorded run (fast), next to it."""
        out = model.with_name(model.stem + ".profile.json")
        if not out.exists():
            self.cli(["profile", str(model), "--runs", "1", "--warmup", "0", "--no-progress", "-o", str(out), *extra])
        return out

    def compile_args(self, model: Path, out: Path, *extra: str, shape_args: tuple[str, ...] = ()) -> list[str]:
        """``compile MODEL -o OUT`` with a fast host profile and a short time limit."""
        profile = self.profile(model, *shape_args)
        return ["compile", str(model), "-o", str(out), "--host-profile", str(profile), "--time-limit", "5",
                *shape_args, *extra]

    def compiled(self, model: Path, name: str = "out", *extra: str) -> Path:
        out = self.root / name
        self.cli(self.compile_args(model, out, *extra))
        return out


def run_main(argv: list[str]) -> int:
    try:
        return int(main(argv))
    except SystemExit as exc:  # argparse
        return int(exc.code or 0)


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every regular file (and the target of every symlink) under ``root``."""
    files: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                files[rel] = "link:" + os.readlink(full)
            elif os.path.isfile(full):
                with open(full, "rb") as handle:
                    files[rel] = hashlib.sha256(handle.read()).hexdigest()
    return files


def output_dir(argv: list[str]) -> Path | None:
    for flag in ("-o", "--output"):
        if flag in argv[:-1]:
            return Path(argv[argv.index(flag) + 1])
    return None


def check_case(case: Case, ws: Workspace) -> None:
    argv = case.build(ws)
    ws.capfd.readouterr()
    out_dir = output_dir(argv) if argv and argv[0] == "compile" else None
    out_existed = out_dir is not None and out_dir.exists()
    if out_dir is not None and out_existed and out_dir.resolve().is_relative_to(ws.root.resolve()):
        ws.mutable.append(out_dir)
    before = snapshot(ws.root)
    siblings_before = _siblings(out_dir)
    status = run_main(argv)
    out, err = ws.capfd.readouterr()
    where = f"case {case.id}: cimsplit {' '.join(argv)}\n--- stdout\n{out}\n--- stderr\n{err}"

    assert "Traceback" not in err and "Traceback" not in out, where
    assert "onnxruntime:" not in err, f"onnxruntime's native log reached the terminal\n{where}"
    assert "internal error" not in err, where
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    if status == 0:
        assert case.expect in (OK, HANDLED), f"expected exit 2, got 0\n{where}"
        assert not errors, where
        if case.after is not None:
            case.after(ws)
    else:
        assert case.expect in (ERROR, HANDLED), f"expected success, got exit {status}\n{where}"
        assert status == 2, where
        assert len(errors) == 1, f"want exactly one error line\n{where}"
        assert all(line.startswith(("error:", "warning:", "WARNING:")) for line in lines), where
        assert case.message.lower() in errors[0].lower(), f"want {case.message!r} in the error line\n{where}"
        if out_dir is not None and not out_existed:
            assert not out_dir.exists(), f"a failed compile left {out_dir}\n{where}"
        assert _siblings(out_dir) == siblings_before, f"a failed compile left temporary folders\n{where}"

    after = snapshot(ws.root)
    changed = sorted(rel for rel, digest in before.items() if after.get(rel) != digest
                     and not any(Path(ws.root, rel).is_relative_to(m) for m in ws.mutable))
    assert not changed, f"input files changed or vanished: {changed}\n{where}"


def _siblings(out_dir: Path | None) -> set[str]:
    if out_dir is None:
        return set()
    parent = out_dir.absolute().parent
    try:
        return {p.name for p in parent.iterdir() if p.name.startswith(f".{out_dir.name}.")}
    except OSError:
        return set()


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
