"""This machine's host profiles, measured once per model and cached (``$CIMSPLIT_CACHE_DIR``).

``host_profile_for`` is what the pipeline asks: the profile a user gave, checked
against the model, else this machine's cached one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
from pathlib import Path

import onnxruntime as ort

from cimsplit.compiler.host_profile import PROFILED_HERE, HostProfile, _Loaded, check_fingerprint, cpu_model, profile_model
from cimsplit.compiler.kernel_attribution import ATTRIBUTION_VERSION
from cimsplit.compiler.ort_profiler import TURN_RUNS
from cimsplit.errors import CimsplitError
from cimsplit.files import cache_dir

__all__ = ["cache_dir", "cached_profile", "find_cached_profile", "host_profile_for"]

log = logging.getLogger(__name__)


def _cache_file(loaded: _Loaded, threads: int, level: str) -> Path:
    attribution = [level, f"attribution {ATTRIBUTION_VERSION}"] if level != "off" else []
    identity = [loaded.fingerprint, threads, cpu_model(), ort.__version__, *attribution, f"turns of {TURN_RUNS}"]
    return cache_dir() / "profiles" / f"{hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]}.json"


def find_cached_profile(loaded: _Loaded, threads: int = 1, level: str = "all") -> HostProfile | None:
    """This machine's cached profile of ``loaded`` (see :func:`cached_profile`), or None if there is none yet."""
    path = _cache_file(loaded, threads, level)
    if not path.exists():
        return None
    try:
        profile = HostProfile.load(path)
    except CimsplitError as exc:
        log.warning("ignoring the unreadable cached host profile %s: %s", path, exc.one_line())
        return None
    if (profile.fingerprint, profile.threads, profile.cpu, profile.ort_version, profile.level) != (
        loaded.fingerprint, threads, cpu_model(), ort.__version__, level
    ):
        return None
    log.info("using the cached host profile %s", path)
    return dataclasses.replace(profile, source=PROFILED_HERE, cache_file=str(path)).for_model(loaded.model)


def cached_profile(loaded: _Loaded, threads: int = 1, progress: bool | None = None, level: str = "all") -> HostProfile:
    """This machine's profile of ``loaded``: measured once per (fingerprint, level, threads, CPU, ORT version, attribution version, turn length).

    A fresh profile outside ``SUM_OVER_MODEL`` is measured once more and the one
    nearer 1 is kept; it is cached either way, and its :attr:`~HostProfile.warnings`
    (recomputed from the saved figures) go with it every time it is used.  The
    cache key is the name-blind fingerprint, so the profile is re-keyed to
    ``loaded``'s node names (:meth:`HostProfile.for_model`).
    """
    cached = find_cached_profile(loaded, threads, level)
    if cached is not None:
        return cached
    path = _cache_file(loaded, threads, level)
    log.info("profiling the model on this machine (%d thread(s), level %s); cached in %s", threads, level, path)
    profile = profile_model(loaded, threads=threads, progress=progress, level=level)
    if profile.warnings:
        log.info("%s; measuring once more", profile.warnings[0])
        again = profile_model(loaded, threads=threads, progress=progress, level=level)
        profile = min((profile, again), key=lambda p: abs(math.log(p.sum_over_model or 1e-9)))
        profile = dataclasses.replace(profile, remeasured=True)
    try:
        profile.save(path)
    except OSError as exc:
        log.warning("cannot cache the host profile in %s: %s", path, exc)
        return profile
    return dataclasses.replace(profile, cache_file=str(path))


def host_profile_for(loaded: _Loaded, path: str | Path | None = None, threads: int = 1) -> HostProfile:
    """The profile in ``path`` (``--host-profile FILE`` or the hardware TOML's ``host_profile``,
    i.e. ``Hardware.host_profile``), checked against the model; else this machine's cached profile.

    The profile's ``describe()`` is the one line the CLI prints about it; its
    ``warnings`` belong in plan.json.
    """
    if path:
        profile = HostProfile.load(path)
        check_fingerprint(profile, loaded.fingerprint)
        return profile.for_model(loaded.model)
    return cached_profile(loaded, threads=threads)
