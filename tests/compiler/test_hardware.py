"""Hardware: presets, TOML files, overrides, and the values no hardware can have."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cimsplit.cli.args import HardwareArgs
from cimsplit.compiler.hardware import PRESETS, Hardware, describe_hardware, load_hardware
from cimsplit.errors import CimsplitError


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    HardwareArgs.add_to_parser(parser)
    return parser.parse_args(list(argv))


def _toml(tmp_path: Path, text: str, name: str = "board.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_presets_are_the_papers_reference_point():
    x86, arm = load_hardware("x86"), load_hardware("arm")
    assert x86 == PRESETS["x86"]
    assert x86.cim_bandwidth_bytes_per_s == x86.bus_bandwidth_bytes_per_s == 20.48e9
    assert arm.cim_bandwidth_bytes_per_s == arm.bus_bandwidth_bytes_per_s == 10.24e9
    for hw in (x86, arm):
        assert (hw.crossbar_rows, hw.crossbar_cols, hw.crossbars) == (256, 256, 100)
        assert hw.mvm_latency_ns == 50.0 and hw.host_profile is None
        assert hw.element_bytes is None  # each moved tensor's own size (1 byte int8, 4 float32)
    assert load_hardware() == x86


def test_overrides_and_describe():
    hw = load_hardware("arm", crossbars=25, mvm_latency_ns=1000.0, crossbar_rows=None)
    assert (hw.name, hw.crossbars, hw.mvm_latency_ns, hw.crossbar_rows) == ("arm", 25, 1000.0, 256)
    line = describe_hardware(hw)
    assert "25 crossbars" in line and "1 us" in line and "10.24 GB/s" in line
    assert "b per tensor" in line and "b 2 byte(s)" in describe_hardware(load_hardware("x86", element_bytes=2))


def test_cli_flags_override_the_preset_and_bus_bandwidth_sets_both():
    hw = HardwareArgs.parse(_args("--hw", "arm", "--crossbars", "200", "--mvm-latency", "0.5us",
                                  "--bus-bandwidth", "5GB/s", "--crossbar-size", "128x64", "--host-profile", "h.json",
                                  "--element-bytes", "1"))
    assert hw == Hardware(name="arm", crossbar_rows=128, crossbar_cols=64, crossbars=200, mvm_latency_ns=500.0,
                          cim_bandwidth_bytes_per_s=5e9, bus_bandwidth_bytes_per_s=5e9, element_bytes=1,
                          host_profile="h.json")
    assert HardwareArgs.parse(_args()) == PRESETS["x86"]
    assert HardwareArgs.parse(_args("--crossbars", "0")).crossbars == 0  # zero crossbars = CPU only
    with pytest.raises(CimsplitError, match="--element-bytes must be an integer"):
        HardwareArgs.parse(_args("--element-bytes", "one"))
    with pytest.raises(CimsplitError, match="element size 0 is out of range"):
        HardwareArgs.parse(_args("--element-bytes", "0"))


def test_toml_sets_everything_and_resolves_the_profile_beside_it(tmp_path):
    path = _toml(tmp_path, """
base = "arm"
name = "edge"
crossbar_size = "128x128"
crossbars = 50
mvm_latency = "100ns"
cim_bandwidth = "40GB/s"
bus_bandwidth = "10240MB/s"
element_bytes = 2
host_profile = "profiles/host.json"
""")
    hw = load_hardware(path)
    assert hw == Hardware(name="edge", crossbar_rows=128, crossbar_cols=128, crossbars=50, mvm_latency_ns=100.0,
                          cim_bandwidth_bytes_per_s=40e9, bus_bandwidth_bytes_per_s=10.24e9, element_bytes=2,
                          host_profile=str(tmp_path / "profiles" / "host.json"))
    # The command line wins over the file.
    assert HardwareArgs.parse(_args("--hw", path, "--crossbars", "7")).crossbars == 7


def test_toml_defaults_to_x86_and_the_file_stem(tmp_path):
    hw = load_hardware(_toml(tmp_path, 'mvm_latency = 75\nbandwidth = "1GB/s"\n', "lab.toml"))
    assert hw == Hardware(name="lab", mvm_latency_ns=75.0, cim_bandwidth_bytes_per_s=1e9, bus_bandwidth_bytes_per_s=1e9)


def test_unknown_toml_key_is_named(tmp_path):
    path = _toml(tmp_path, 'crossbars = 10\nmvm_latenzy = "50ns"\n')
    with pytest.raises(CimsplitError, match="unknown key 'mvm_latenzy'"):
        load_hardware(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('bus_bandwidth = "0GB/s"', "bus bandwidth 0 B/s must be positive"),
        ('cim_bandwidth = "-1GB/s"', "CIM bandwidth -1 GB/s must be positive"),
        ('crossbar_size = "0x256"', "crossbar rows 0 is out of range"),
        ("crossbar_cols = -4", "crossbar columns -4 is out of range"),
        ("element_bytes = 0", "element size 0 is out of range"),
        ('mvm_latency = "0ns"', "MVM latency 0 ns must be positive"),
        ('mvm_latency = "-50ns"', "MVM latency -50 ns must be positive"),
        ("crossbars = -1", "crossbar count -1 is out of range"),
        ("crossbars = 1.5", "must be an integer"),
        ('bus_bandwidth = "20.48"', "cannot read bandwidth '20.48'"),
        ('mvm_latency = "fast"', "cannot read time 'fast'"),
        ('base = "riscv"', "unknown base preset 'riscv'"),
        ("crossbars = ", "not valid TOML"),
        ('bus_model = "bursty"', "bus model 'bursty' is unknown"),
        ("burst_bytes = 0", "burst size 0 is out of range"),
        ('cas_latency = "-1ns"', "CAS latency -1 ns must be zero or more"),
    ],
)
def test_bad_toml_values_are_refused(tmp_path, text, expected):
    with pytest.raises(CimsplitError, match=expected):
        load_hardware(_toml(tmp_path, text + "\n"))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--crossbars", "-1"], "crossbar count -1 is out of range"),
        (["--crossbars", "many"], "--crossbars must be an integer"),
        (["--bus-bandwidth", "0GB/s"], "bandwidth 0 B/s must be positive"),
        (["--mvm-latency=-1us"], "MVM latency -1 us must be positive"),
        (["--crossbar-size", "256x0"], "crossbar columns 0 is out of range"),
        (["--hw", "riscv"], "unknown hardware 'riscv'"),
        (["--hw", "missing.toml"], "does not exist"),
        (["--burst-bytes", "64.5"], "--burst-bytes must be an integer"),
        (["--cas-latency", "fast"], "cannot read time 'fast'"),
    ],
)
def test_bad_flags_are_refused(argv, expected):
    with pytest.raises(CimsplitError, match=expected):
        HardwareArgs.parse(_args(*argv))


def test_the_burst_bus_from_toml_and_flags(tmp_path):
    toml = _toml(tmp_path, 'bus_model = "burst"\nburst_bytes = 128\ncas_latency = "0.014us"\n')
    hardware = load_hardware(toml)
    assert (hardware.bus_model, hardware.burst_bytes, hardware.cas_latency_ns) == ("burst", 128, pytest.approx(14.0))
    assert "burst bus (128-byte bursts, CAS 14 ns)" in describe_hardware(hardware)
    flags = HardwareArgs.parse(_args("--bus-model", "burst", "--cas-latency", "20ns"))
    assert (flags.bus_model, flags.burst_bytes, flags.cas_latency_ns) == ("burst", 64, 20.0)
    assert load_hardware("x86").bus_model == "volume" and "burst" not in describe_hardware(load_hardware("x86"))
