"""Hardware description: crossbars, MVM latency, bandwidths, element size (DESIGN §3).

Presets ``x86`` (20.48 GB/s) and ``arm`` (10.24 GB/s); a TOML file; command-line
overrides.  All times in ns, bandwidths in bytes/s (GB = 1e9 bytes).

The defaults are the paper's reference point (section V): 256x256 crossbars,
C = 100 crossbars, T_mvm = 50 ns and an internal CIM bandwidth equal to the
shared CPU-CIM bus bandwidth (B_cim = B_shared).  The element size b of eq. 3
and 4 is by default that of each tensor actually moved (1 byte for the
int8/uint8 tensors of a QDQ model, 4 for float32); ``element_bytes`` (TOML or
``--element-bytes``) forces one size for every tensor.

A TOML file holds any subset of these keys (unknown keys are an error)::

    base = "x86"                   # preset to start from (default x86)
    name = "my-board"              # default: the file's stem
    crossbar_size = "256x256"      # or crossbar_rows = 256 / crossbar_cols = 256
    crossbars = 100
    mvm_latency = "50ns"           # a bare number is ns
    bandwidth = "20.48GB/s"        # sets both B_cim and B_shared ...
    cim_bandwidth = "20.48GB/s"    # ... or set them one by one
    bus_bandwidth = "20.48GB/s"
    element_bytes = 1              # default: each moved tensor's own size
    bus_model = "burst"            # "volume" (default, eq. 4) or "burst" (TSO-burst)
    burst_bytes = 64               # with bus_model = "burst": bytes per DRAM burst ...
    cas_latency = "13.75ns"        # ... and the CAS latency each burst pays
    host_profile = "host.json"     # relative to the TOML file's folder
    host_model = "board.json"      # or: latencies predicted from `cimsplit calibrate` (not both)
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cimsplit.compiler.units import format_bandwidth, format_time_ns, parse_bandwidth, parse_crossbar_size, parse_time_ns
from cimsplit.errors import CimsplitError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["Hardware", "PRESETS", "load_hardware", "hardware_from_flags", "validate_hardware", "describe_hardware"]


@dataclass(frozen=True)
class Hardware:
    name: str
    crossbar_rows: int = 256
    crossbar_cols: int = 256
    crossbars: int = 100
    mvm_latency_ns: float = 50.0
    cim_bandwidth_bytes_per_s: float = 20.48e9
    bus_bandwidth_bytes_per_s: float = 20.48e9
    element_bytes: int | None = None
    """Bytes per element of every moved tensor; None: each tensor's own (1 int8, 4 float32)."""
    host_profile: str | None = None
    """Path of a host profile JSON, or None to profile this machine."""
    host_model: str | None = None
    """Path of a calibration (`cimsplit calibrate`) that predicts host latencies; excludes ``host_profile``."""
    bus_model: str = "volume"
    """How a CPU-CIM transfer is priced: ``volume`` (eq. 4) or ``burst`` (bursts x CAS + bytes / B_shared)."""
    burst_bytes: int = 64
    """Bytes per DRAM burst (``burst`` bus model)."""
    cas_latency_ns: float = 13.75
    """CAS latency paid once per burst (``burst`` bus model)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict; keys carry their units."""
        return dataclasses.asdict(self)


PRESETS: dict[str, Hardware] = {
    # AMD Ryzen 9 3900X host, 20.48 GB/s CPU-CIM bus (paper, section V).
    "x86": Hardware(name="x86", cim_bandwidth_bytes_per_s=20.48e9, bus_bandwidth_bytes_per_s=20.48e9),
    # ARM Cortex-A72 host, 10.24 GB/s CPU-CIM bus (paper, section V).
    "arm": Hardware(name="arm", cim_bandwidth_bytes_per_s=10.24e9, bus_bandwidth_bytes_per_s=10.24e9),
}

_TOML_KEYS = (
    "base", "name", "crossbar_size", "crossbar_rows", "crossbar_cols", "crossbars", "mvm_latency",
    "bandwidth", "cim_bandwidth", "bus_bandwidth", "element_bytes", "host_profile",
    "host_model", "bus_model", "burst_bytes", "cas_latency",
)
BUS_MODELS = ("volume", "burst")


def load_hardware(spec: str = "x86", **overrides: Any) -> Hardware:
    """A preset name (``x86``, ``arm``) or a TOML file, then ``overrides`` by field name.

    Overrides take ``Hardware`` field names (``crossbars=50``,
    ``mvm_latency_ns=100.0``); ``None`` values are ignored so that unset CLI
    flags can be passed straight through.  The result is validated.
    """
    hardware = _from_spec(spec)
    fields = {f.name for f in dataclasses.fields(Hardware)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise TypeError(f"unknown Hardware field(s): {', '.join(unknown)}")
    changes = {key: value for key, value in overrides.items() if value is not None}
    hardware = dataclasses.replace(hardware, **changes)
    validate_hardware(hardware)
    return hardware


def hardware_from_flags(
    spec: str = "x86",
    *,
    crossbars: str | int | None = None,
    mvm_latency: str | float | None = None,
    bus_bandwidth: str | None = None,
    crossbar_size: str | None = None,
    element_bytes: str | int | None = None,
    host_profile: str | None = None,
    host_model: str | None = None,
    bus_model: str | None = None,
    burst_bytes: str | int | None = None,
    cas_latency: str | float | None = None,
) -> Hardware:
    """``spec`` (``--hw``) then the command-line overrides as written (``"100"``, ``"50ns"``, ``"20.48GB/s"``, ``"256x256"``).

    ``bus_bandwidth`` (``--bus-bandwidth``) sets both B_cim and B_shared, as the
    paper assumes them equal; a TOML file can set them separately.  ``element_bytes``
    (``--element-bytes``) forces b for every moved tensor.  ``bus_model``, ``burst_bytes`` and
    ``cas_latency`` (``--bus-model``, ``--burst-bytes``, ``--cas-latency``) choose the transfer
    model.  ``None`` leaves a figure as ``spec`` has it.
    """
    overrides: dict[str, Any] = {}
    if crossbars is not None:
        overrides["crossbars"] = _int_value(crossbars, "--crossbars")
    if mvm_latency is not None:
        overrides["mvm_latency_ns"] = parse_time_ns(mvm_latency)
    if bus_bandwidth is not None:
        bandwidth = parse_bandwidth(bus_bandwidth)
        overrides["cim_bandwidth_bytes_per_s"] = bandwidth
        overrides["bus_bandwidth_bytes_per_s"] = bandwidth
    if crossbar_size is not None:
        overrides["crossbar_rows"], overrides["crossbar_cols"] = parse_crossbar_size(crossbar_size)
    if element_bytes is not None:
        overrides["element_bytes"] = _int_value(element_bytes, "--element-bytes")
    if bus_model is not None:
        overrides["bus_model"] = bus_model
    if burst_bytes is not None:
        overrides["burst_bytes"] = _int_value(burst_bytes, "--burst-bytes")
    if cas_latency is not None:
        overrides["cas_latency_ns"] = parse_time_ns(cas_latency)
    if host_profile is not None and host_model is not None:
        raise CimsplitError("--host-model and --host-profile both give the host latencies; pass one of them",
                            hint="--host-model predicts from a calibration, --host-profile reads a measured profile")
    if host_profile is not None:
        overrides["host_profile"] = str(host_profile)
    if host_model is not None:
        overrides["host_model"] = str(host_model)
    hardware = load_hardware(spec or "x86", **overrides)
    # A flag replaces the TOML file's choice of host latencies, whichever of the two keys the file used.
    if host_model is not None:
        hardware = dataclasses.replace(hardware, host_profile=None)
    elif host_profile is not None:
        hardware = dataclasses.replace(hardware, host_model=None)
    return hardware


def validate_hardware(hardware: Hardware) -> None:
    """Refuse values no hardware can have: zero/negative sizes, bandwidths, latencies."""
    checks = [
        (hardware.crossbar_rows, "crossbar rows", "a positive integer, e.g. --crossbar-size 256x256", True),
        (hardware.crossbar_cols, "crossbar columns", "a positive integer, e.g. --crossbar-size 256x256", True),
        (hardware.crossbars, "crossbar count", "zero or a positive integer, e.g. --crossbars 100", False),
    ]
    if hardware.element_bytes is not None:
        checks.append((hardware.element_bytes, "element size", "a positive number of bytes, e.g. --element-bytes 1", True))
    checks.append((hardware.burst_bytes, "burst size", "a positive number of bytes, e.g. --burst-bytes 64", True))
    if hardware.bus_model not in BUS_MODELS:
        raise CimsplitError(f"bus model {hardware.bus_model!r} is unknown", hint="use --bus-model volume or --bus-model burst")
    cas = hardware.cas_latency_ns
    if isinstance(cas, bool) or not isinstance(cas, (int, float)):
        raise CimsplitError(f"CAS latency {cas!r} is not a number", hint="use e.g. --cas-latency 13.75ns")
    if not cas >= 0:
        raise CimsplitError(f"CAS latency {format_time_ns(cas)} must be zero or more", hint="use e.g. --cas-latency 13.75ns")
    for value, what, expected, strictly_positive in checks:
        if isinstance(value, bool) or not isinstance(value, int):
            raise CimsplitError(f"{what} {value!r} is not an integer", hint=f"use {expected}")
        if value < 0 or (strictly_positive and value == 0):
            raise CimsplitError(f"{what} {value} is out of range", hint=f"use {expected}")
    for value, what, example, fmt in (
        (hardware.mvm_latency_ns, "MVM latency", "--mvm-latency 50ns", format_time_ns),
        (hardware.cim_bandwidth_bytes_per_s, "CIM bandwidth", "--bus-bandwidth 20.48GB/s", format_bandwidth),
        (hardware.bus_bandwidth_bytes_per_s, "bus bandwidth", "--bus-bandwidth 20.48GB/s", format_bandwidth),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CimsplitError(f"{what} {value!r} is not a number", hint=f"use e.g. {example}")
        if not value > 0:
            raise CimsplitError(f"{what} {fmt(value)} must be positive", hint=f"use e.g. {example}")


def describe_hardware(hardware: Hardware) -> str:
    """One line with every figure and its unit."""
    return (
        f"{hardware.name}: {hardware.crossbars} crossbars of {hardware.crossbar_rows}x{hardware.crossbar_cols}, "
        f"T_mvm {format_time_ns(hardware.mvm_latency_ns)}, B_cim {format_bandwidth(hardware.cim_bandwidth_bytes_per_s)}, "
        f"B_shared {format_bandwidth(hardware.bus_bandwidth_bytes_per_s)}, "
        + ("b per tensor (1 byte int8, 4 float32)" if hardware.element_bytes is None else f"b {hardware.element_bytes} byte(s)")
        + ("" if hardware.bus_model == "volume" else
           f", burst bus ({hardware.burst_bytes}-byte bursts, CAS {format_time_ns(hardware.cas_latency_ns)})")
    )


def _from_spec(spec: str) -> Hardware:
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if path.suffix.lower() == ".toml" or path.exists():
        return _from_toml(path)
    raise CimsplitError(
        f"unknown hardware {spec!r}",
        hint=f"use a preset ({', '.join(sorted(PRESETS))}) or a .toml file",
    )


def _from_toml(path: Path) -> Hardware:
    try:
        with path.open("rb") as handle:
            table = tomllib.load(handle)
    except FileNotFoundError:
        raise CimsplitError(f"hardware file {str(path)!r} does not exist") from None
    except OSError as exc:
        raise CimsplitError(f"cannot read hardware file {str(path)!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CimsplitError(f"hardware file {str(path)!r} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise CimsplitError(f"hardware file {str(path)!r} is not UTF-8 text", hint="TOML files are UTF-8") from None
    for key, value in table.items():
        if key not in _TOML_KEYS:
            raise CimsplitError(
                f"unknown key {key!r} in hardware file {str(path)!r}",
                hint=f"known keys: {', '.join(_TOML_KEYS)}",
            )
        if isinstance(value, dict):
            raise CimsplitError(f"key {key!r} in hardware file {str(path)!r} must be a value, not a table")

    base = table.get("base", "x86")
    if base not in PRESETS:
        raise CimsplitError(
            f"unknown base preset {base!r} in hardware file {str(path)!r}",
            hint=f"use one of {', '.join(sorted(PRESETS))}",
        )
    changes: dict[str, Any] = {"name": str(table.get("name", path.stem))}
    where = f" in hardware file {str(path)!r}"
    if "crossbar_size" in table:
        changes["crossbar_rows"], changes["crossbar_cols"] = parse_crossbar_size(table["crossbar_size"])
    for key in ("crossbar_rows", "crossbar_cols", "crossbars", "element_bytes", "burst_bytes"):
        if key in table:
            changes[key] = _int_value(table[key], f"{key}{where}")
    if "mvm_latency" in table:
        changes["mvm_latency_ns"] = parse_time_ns(table["mvm_latency"])
    if "cas_latency" in table:
        changes["cas_latency_ns"] = parse_time_ns(table["cas_latency"])
    if "bus_model" in table:
        changes["bus_model"] = str(table["bus_model"])
    if "bandwidth" in table:
        changes["cim_bandwidth_bytes_per_s"] = changes["bus_bandwidth_bytes_per_s"] = parse_bandwidth(table["bandwidth"])
    if "cim_bandwidth" in table:
        changes["cim_bandwidth_bytes_per_s"] = parse_bandwidth(table["cim_bandwidth"])
    if "bus_bandwidth" in table:
        changes["bus_bandwidth_bytes_per_s"] = parse_bandwidth(table["bus_bandwidth"])
    if "host_profile" in table and "host_model" in table:
        raise CimsplitError(f"hardware file {str(path)!r} sets both host_profile and host_model",
                            hint="keep one: a measured profile or a calibration to predict from")
    for key in ("host_profile", "host_model"):
        if key in table:
            file = Path(str(table[key]))
            changes[key] = str(file if file.is_absolute() else path.parent / file)
    return dataclasses.replace(PRESETS[base], **changes)


def _int_value(value: Any, what: str) -> int:
    """An integer from a TOML value or a CLI string; ``1.5``, ``"ten"`` are errors."""
    if isinstance(value, bool):
        raise CimsplitError(f"{what} must be an integer, not {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise CimsplitError(f"{what} must be an integer, not {value!r}") from None
