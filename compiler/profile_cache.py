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
import os
from pathlib import Path

import onnxruntime as ort

from cimsplit.compiler.host_profile import PROFILED_HERE, HostProfile, _Loaded, check_fingerprint, cpu_model, profile_model
from cimsplit.compiler.kernel_attribution import ATTRIBUTION_VERSION
from cimsplit.errors import CimsplitError

__all__ = ["cache_dir", "cached_profile", "host_profile_for"]

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """``$CIMSPLIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/cimsplit``, else ``~/.cache/cimsplit``."""
    if os.environ.get("CIMSPLIT_CACHE_DIR"):
        return Path(os.environ["CIMSPLIT_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "cimsplit"
    return Path.home() / ".cache" / "cimsplit"


def cached_profile(loaded: _Loaded, threads: int = 1, progress: bool | None = None, level: str = "all") -> HostProfile:
    """This machine's profile of ``loaded``: measured once per (fingerprint, level, threads, CPU, ORT version, attribution version).

    A fresh profile outside ``SUM_OVER_MODEL`` is measured once more and the one
    nearer 1 is kept; it is cached either way, and its :attr:`~HostProfile.warnings`
    (recomputed from the saved figures) go with it every time it is used.  The
    cache key is the name-blind fingerprint, so the profile is re-keyed to
    ``loaded``'s node names (:meth:`HostProfile.for_model`).
    """
    cpu, version = cpu_model(), ort.__version__
    identity = [loaded.fingerprint, threads, cpu, version] + ([level, f"attribution {ATTRIBUTION_VERSION}"] if level != "off" else [])
    key = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]
    path = cache_dir() / "profiles" / f"{key}.json"
    if path.exists():
        try:
            profile = HostProfile.load(path)
        except CimsplitError as exc:
            log.warning("ignoring the unreadable cached host profile %s: %s", path, exc.one_line())
        else:
            if (profile.fingerprint, profile.threads, profile.cpu, profile.ort_version, profile.level) == (
                loaded.fingerprint, threads, cpu, version, level
            ):
                log.info("using the cached host profile %s", path)
                return dataclasses.replace(profile, source=PROFILED_HERE, cache_file=str(path)).for_model(loaded.model)
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
