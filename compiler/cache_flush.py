"""The cache flush of a calibration point: how much to read on this machine, the model that reads it, its caches.

:func:`flushed` reads a last-level cache's worth of memory before a point runs, so a GEMM point's weights come from
memory, as a network's layer finds them after the other layers ran (:mod:`.weight_fetch` mixes the two times), and a
copy or glue point's outputs are cold (:mod:`.cold_outputs` mixes them by the L2, :func:`l2_cache_bytes`).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["FLUSH_PREFIX", "FLUSH_CAP_BYTES", "flush_bytes_for", "last_level_cache_bytes", "l2_cache_bytes", "flushed", "flush_buffer"]

FLUSH_PREFIX = "calibration_flush"
"""The graph input :func:`flushed` reads; its nodes' names start with it."""

SYSFS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
"""Where Linux lists this machine's caches (one ``index*`` folder each, with its ``size``)."""

FLUSH_CAP_BYTES = 128 << 20
"""The most the flush reads, whatever cache size the machine reports.  An Intel Xeon VM reports a 480 MiB L3
(shared with its host's other tenants); there, after a 128 MiB read, 1x1 convs on one pixel (the most
flush-sensitive points: 12->320 up to 1360->344 channels) took what they took after 480 MiB (within the
run-to-run noise: 31.5-34 us for 576->144, 131-132 for 1360->344), while 32 MiB left them at half that.  Reading
480 MiB before every run of every weighted point let a 4,800 s campaign measure only half the grid.  A
network evicts at most what it touches between two uses of a layer's weights, less than this for the zoo's."""


def flush_bytes_for(caches: Path = SYSFS_CACHES) -> int:
    """What the flush reads on this machine: its largest cache (:func:`last_level_cache_bytes`), at most
    :data:`FLUSH_CAP_BYTES`."""
    return min(last_level_cache_bytes(caches), FLUSH_CAP_BYTES)


def last_level_cache_bytes(caches: Path = SYSFS_CACHES) -> int:
    """The largest CPU cache of this machine (Linux sysfs), 32 MiB where it cannot be read."""
    return max((size for _, size in _caches(caches)), default=32 << 20)


def l2_cache_bytes(caches: Path = SYSFS_CACHES) -> int:
    """One core's level-2 cache (Linux sysfs), 1 MiB where it cannot be read."""
    return max((size for level, size in _caches(caches) if level == "2"), default=1 << 20)


def _caches(caches: Path) -> list[tuple[str, int]]:
    """(level, bytes) of each cache sysfs lists (its level ``""`` where unreadable)."""
    found = []
    for index in caches.glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        try:
            level = (index / "level").read_text().strip()
        except OSError:
            level = ""
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        number, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
        if number.isdigit():
            found.append((level, int(number) * unit))
    return found


def flushed(model: onnx.ModelProto, flush_bytes: int) -> onnx.ModelProto:
    """``model`` reading a graph input of ``flush_bytes`` (:data:`FLUSH_PREFIX`) before its input ``x`` reaches its nodes.

    The read's maximum, times zero, is added to ``x``: the point's nodes then run after the read, on an input
    just written (in cache, as its producer leaves it in a network) and with weights the read evicted (a
    network's other layers evict them between two inferences).  On Zen 4, with 32 MiB: a 1152 -> 48 1x1 conv
    at 1 x 1, 5.5 us alone, 15 us so, 13-16 us in EfficientNet-B0; a 64 -> 64 3x3 conv at 56 x 56 within 2 %
    (its weights are a small part of what it reads).  The buffer is fed, not generated (:func:`flush_buffer`).
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph, x, name = model.graph, "x", FLUSH_PREFIX
    for node in graph.node:
        node.input[:] = [f"{name}_x" if value == x else value for value in node.input]
    graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [max(1, flush_bytes // 4)]))
    graph.initializer.append(numpy_helper.from_array(np.array(0.0, np.float32), f"{name}_zero"))
    make = helper.make_node
    nodes = [
        make("ReduceMax", [name], [f"{name}_max"], name=f"{name}_read", keepdims=0),
        make("Mul", [f"{name}_max", f"{name}_zero"], [f"{name}_nothing"], name=f"{name}_mul"),
        make("Add", [x, f"{name}_nothing"], [f"{name}_x"], name=f"{name}_add"),
    ]
    x_type = next(vi.type.tensor_type.elem_type for vi in graph.input if vi.name == x)
    if x_type != TensorProto.FLOAT:  # (a glue point's uint8 input: the zero in its type)
        nodes.insert(2, make("Cast", [f"{name}_nothing"], [f"{name}_typed"], name=f"{name}_cast", to=x_type))
        nodes[-1].input[1] = f"{name}_typed"
    nodes.extend(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    return onnx.shape_inference.infer_shapes(model)


@functools.lru_cache(maxsize=1)
def flush_buffer(flush_bytes: int) -> np.ndarray:
    """The input :func:`flushed` reads, written once (ones: pages of their own, not the shared zero page)."""
    return np.ones(max(1, flush_bytes // 4), np.float32)
