"""Hardware description: crossbars, MVM latency, bandwidths, element size (DESIGN §3).

Presets ``x86`` (20.48 GB/s) and ``arm`` (10.24 GB/s); a TOML file; command-line
overrides.  All times in ns, bandwidths in bytes/s (GB = 1e9 bytes).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hardware:
    name: str
    crossbar_rows: int = 256
    crossbar_cols: int = 256
    crossbars: int = 100
    mvm_latency_ns: float = 50.0
    cim_bandwidth_bytes_per_s: float = 20.48e9
    bus_bandwidth_bytes_per_s: float = 20.48e9
    element_bytes: int = 1
    host_profile: str | None = None
    """Path of a host profile JSON, or None to profile this machine."""
