"""Write a whole output directory atomically (DESIGN §5, §9).

Everything goes into a temporary sibling folder first; only when every file
is written is it renamed into place.  A failure at any point removes the
temporary folder and leaves the destination as it was (absent, or the old
directory under ``--force``).  An existing non-empty destination is refused
unless ``force``; a destination that holds a protected path (the input model)
is always refused, since replacing it would delete that file.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from cimsplit.errors import CimsplitError

__all__ = ["check_destination", "write_directory_atomically"]

log = logging.getLogger(__name__)


def check_destination(out_dir: Path, force: bool, protect: Iterable[Path] = ()) -> None:
    """Refuse a destination that is a file, non-empty without ``force``, or holds a protected path."""
    out_dir = Path(out_dir)
    target = out_dir.resolve()
    for path in protect:
        resolved = Path(path).resolve()
        if resolved == target or target in resolved.parents:
            raise CimsplitError(
                f"output directory {out_dir} contains the input {path}; it would be deleted",
                hint="choose another -o DIR",
            )
    if out_dir.exists() and not out_dir.is_dir():
        raise CimsplitError(f"output path {out_dir} exists and is not a directory", hint="choose another -o DIR")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise CimsplitError(f"output directory {out_dir} exists and is not empty", hint="pass --force to replace it")
    _check_parent_writable(out_dir)


def _check_parent_writable(out_dir: Path) -> None:
    """Refuse a destination whose nearest existing ancestor is a file or cannot be written (read-only, /proc)."""
    ancestor = out_dir.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise CimsplitError(f"output directory {out_dir} would be below {ancestor}, which is a file",
                            hint="choose another -o DIR")
    if not os.access(ancestor, os.W_OK | os.X_OK) or _is_pseudo_fs(ancestor):
        raise CimsplitError(f"output directory {out_dir} cannot be created: {ancestor} is not writable",
                            hint="choose another -o DIR")


def _is_pseudo_fs(path: Path) -> bool:
    """/proc and /sys accept no new folders, though root passes ``os.access``."""
    resolved = path.resolve()
    return any(resolved == Path(p) or Path(p) in resolved.parents for p in ("/proc", "/sys"))


def write_directory_atomically(
    out_dir: Path,
    write: Callable[[Path], None],
    force: bool = False,
    protect: Iterable[Path] = (),
) -> Path:
    """Call ``write(tmp_dir)`` on a fresh sibling folder, then move it to ``out_dir``.

    With ``force`` an existing ``out_dir`` is replaced only after the new one is
    complete: it is renamed aside, the new folder renamed in, then the old one
    deleted.  Returns ``out_dir``.
    """
    out_dir = Path(out_dir)
    protect = list(protect)
    check_destination(out_dir, force, protect)
    parent = out_dir.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=parent))
    except OSError as exc:
        raise CimsplitError(f"cannot create output directory {out_dir}: {exc.strerror or exc}",
                            hint="choose another -o DIR") from None
    try:
        try:
            write(tmp)
        except OSError as exc:
            raise CimsplitError(f"cannot write output directory {out_dir}: {exc.strerror or exc}") from None
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; a plain mkdir would not
        check_destination(out_dir, force, protect)  # it may have changed while we wrote
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=parent))
            os.rmdir(old)
            try:
                os.rename(out_dir, old)
            except OSError as exc:  # a mount point or a busy folder cannot be moved aside
                raise CimsplitError(f"cannot replace output directory {out_dir}: {exc.strerror or exc}",
                                    hint="choose another -o DIR") from None
            try:
                os.rename(tmp, out_dir)
            except BaseException:
                os.rename(old, out_dir)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("wrote %s", out_dir)
    return out_dir
