"""The one atomic writer: whole files or nothing, the usual mode, no temporary file left behind."""

from __future__ import annotations

import os
import stat

import pytest

import cimsplit.files as files
from cimsplit.files import write_atomic


def test_writes_text_and_bytes_and_makes_the_folder(tmp_path) -> None:
    path = tmp_path / "a" / "b" / "x.json"
    assert write_atomic(path, "héllo\n") == len("héllo\n".encode())
    assert path.read_text(encoding="utf-8") == "héllo\n"
    assert write_atomic(path, b"\x00\x01") == 2 and path.read_bytes() == b"\x00\x01"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch) -> None:
    path = tmp_path / "x.txt"
    path.write_text("old")

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "new")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]
