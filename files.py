"""The one atomic file writer: readers see the old file or the new one, never half of one.

The data goes to a uniquely named temporary file in the destination's folder,
is flushed to disk, gets the mode a plain ``open()`` would give it
(``0o666 & ~umask``; ``mkstemp`` makes 0600), and is renamed over the
destination.  On any failure the temporary file is removed and the destination
is left as it was.  Whole output directories are written by
:func:`cimsplit.passes.emit.directory.write_directory_atomically`.

:func:`cache_dir` is where what is measured or built once is kept (host
profiles, zoo builds).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic", "cache_dir"]


def cache_dir() -> Path:
    """Where cimsplit keeps what it measured or built once: ``$CIMSPLIT_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/cimsplit``, else ``~/.cache/cimsplit``."""
    if os.environ.get("CIMSPLIT_CACHE_DIR"):
        return Path(os.environ["CIMSPLIT_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "cimsplit"
    return Path.home() / ".cache" / "cimsplit"


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: str | Path, data: str | bytes) -> int:
    """Write ``data`` (text as UTF-8) to ``path``, creating its folder; returns the bytes written.

    Raises ``OSError`` when the folder or the file cannot be written.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _default_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(payload)
