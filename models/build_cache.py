"""Zoo builds kept on disk (``cache_dir()/zoo``): quantizing a zoo model is seconds of work, done once.

A sweep builds its zoo models every run (ResNet-50 int8: 4 s, the paper's four:
8 s of the 11 s before its first solve).  An entry is keyed by everything its
bytes depend on: the build's arguments, the source of ``cimsplit.models`` (the
builders and the quantization recipe) and the versions of onnx, onnxruntime
and numpy (the quantizer, the seeded weights).  A build is deterministic for
one key (tested), so an entry is the build; one that does not parse is built
again, and an edited zoo or an upgrade replaces the entries it makes stale.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from cimsplit.files import cache_dir, write_atomic

__all__ = ["cached_build", "build_key"]

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def build_key(name: str, **arguments: Any) -> str:
    """The cache entry's name for ``zoo.build(name, **arguments)`` with this install:
    ``NAME-<arguments' hash>-<install's hash>``."""
    import onnxruntime

    def digest(value: object) -> str:
        return hashlib.sha256(json.dumps(value, default=str).encode()).hexdigest()[:12]

    install = [_source_digest(), onnx.__version__, onnxruntime.__version__, np.__version__]
    return f"{name}-{digest(sorted(arguments.items()))}-{digest(install)}"


def cached_build(name: str, **arguments: Any) -> bytes:
    """``zoo.build(name, **arguments).SerializeToString()``, from the cache when it has it.  Writing an
    entry removes those of the same build made by another install (one entry per build)."""
    from cimsplit.models import zoo

    key = build_key(name, **arguments)
    path = cache_dir() / "zoo" / f"{key}.onnx"
    if path.is_file():
        data = path.read_bytes()
        try:
            onnx.load_from_string(data)
        except Exception:  # noqa: BLE001 (protobuf raises its own DecodeError): build it again
            log.warning("ignoring the unreadable cached zoo model %s", path)
        else:
            return data
    data = zoo.build(name, **arguments).SerializeToString()
    try:
        write_atomic(path, data)
        for stale in path.parent.glob(f"{key.rsplit('-', 1)[0]}-*.onnx"):
            if stale != path:
                stale.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("cannot cache the zoo model in %s: %s", path, exc)
    return data
