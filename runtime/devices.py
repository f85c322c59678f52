"""Device back ends: where a partition runs (DESIGN §6).

A device loads a partition model once and returns a :class:`Kernel` that runs
it on feeds.  The host is onnxruntime's CPU provider.  The CIM is behind the
same small interface (:class:`CimDevice`); the default back end simulates it
functionally with onnxruntime (the crossbars compute the same GEMMs), and a
crossbar-level numeric model (quantized conductances, ADC resolution) or a
real driver plugs in by implementing ``load``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import onnx
import onnxruntime as ort

from cimsplit.errors import CimsplitError
from cimsplit.ort_logging import ort_log_severity

__all__ = ["Kernel", "Device", "CimDevice", "OrtCpuDevice", "FunctionalCimSimulator", "session_options"]

log = logging.getLogger(__name__)


@runtime_checkable
class Kernel(Protocol):
    """A loaded partition: feeds by input name in, outputs by name out.

    Returned arrays may be buffers of the kernel that its next ``run`` refills;
    a kernel whose outputs are new arrays every run says so with a
    ``fresh_outputs = True`` attribute, which spares the copy of graph outputs
    handed to the caller.
    """

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...


@runtime_checkable
class Device(Protocol):
    """A place partitions run: ``load`` once per partition, then ``run`` the kernel per inference."""

    name: str

    def load(self, model: onnx.ModelProto) -> Kernel: ...


CimDevice = Device
"""The CIM back-end interface: the same protocol as any device (name ``"cim"``)."""


_arena_lock = threading.Lock()
_arena_registered = False


def _register_shared_arena() -> None:
    """Register one CPU arena allocator with onnxruntime's environment (once per process).

    Partition sessions that opt in (``session.use_env_allocators``) all draw
    from it, so a partition's intermediates reuse memory that the previous
    partition just freed and that is still in cache, as they would inside one
    monolithic session; with an arena per session every partition touches
    memory of its own, cold since the last inference (about 3% of ResNet-50's
    wall time, bench/split_overhead.py).
    """
    global _arena_registered
    with _arena_lock:
        if _arena_registered:
            return
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        try:
            ort.create_and_register_allocator(info, None)
        except Exception:  # noqa: BLE001 - already registered by someone else in this process: use it
            log.debug("onnxruntime already has a shared CPU allocator", exc_info=True)
        _arena_registered = True


def session_options(threads: int = 1, *, shared_arena: bool = False,
                    custom_op_libraries: Sequence[str] = ()) -> ort.SessionOptions:
    """onnxruntime options used for every session: ``threads`` intra-op threads, sequential, all optimizations.

    ``shared_arena`` makes the session allocate from the process-wide arena
    (:func:`_register_shared_arena`) instead of an arena of its own, tensor
    by tensor (no memory pattern).  ``custom_op_libraries`` are shared libraries
    registering custom operators (``run --custom-op-library``).

    These are onnxruntime's defaults, as a user's own session has them: on
    x86 onnxruntime converts int8 QDQ pairs to uint8 and runs U8S8 kernels
    (five times faster than S8S8 ones here), and the split converts the pairs
    it cuts the same way (:mod:`cimsplit.passes.rewrite.unsigned_cuts`), so
    the partitions run the whole model's kernels and agree with it bit for bit.
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = ort_log_severity()
    for library in custom_op_libraries:
        try:
            options.register_custom_ops_library(str(library))
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise CimsplitError(f"onnxruntime cannot load the custom-op library {str(library)!r}: {_first_line(exc)}",
                                hint="give the path of a shared library built against this onnxruntime") from None
    if shared_arena:
        _register_shared_arena()
        options.add_session_config_entry("session.use_env_allocators", "1")
        # Without the memory pattern each intermediate is taken from the shared arena when it is
        # made and returned when it dies, so the next one reuses warm memory (about 1% of ResNet-50).
        options.enable_mem_pattern = False
    return options


class _OrtKernel:
    """One onnxruntime session on the shared arena; ``run`` releases the GIL inside onnxruntime.

    Outputs are the arrays onnxruntime returns (fresh each run, from the
    shared arena): binding preallocated output buffers instead measured about
    1% slower, as those buffers are cold when the next inference writes them.
    """

    fresh_outputs = True

    def __init__(self, model: onnx.ModelProto, threads: int, custom_op_libraries: Sequence[str] = ()) -> None:
        options = session_options(threads, shared_arena=True, custom_op_libraries=custom_op_libraries)
        try:
            self._session = ort.InferenceSession(model.SerializeToString(), sess_options=options,
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            custom = sorted({f"{n.domain}:{n.op_type}" for n in model.graph.node if n.domain not in _ORT_DOMAINS})
            if not custom:
                raise
            raise CimsplitError(
                f"onnxruntime cannot load partition {model.graph.name!r}: it uses {', '.join(custom)}, "
                f"which no registered library provides ({_first_line(exc)})",
                hint="pass --custom-op-library PATH, a shared library that registers it",
            ) from None
        self._outputs = [o.name for o in self._session.get_outputs()]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self._outputs, self._session.run(self._outputs, dict(feeds))))


class OrtCpuDevice:
    """The host: onnxruntime's CPU execution provider, with the custom-op libraries given."""

    def __init__(self, threads: int = 1, name: str = "host", custom_op_libraries: Sequence[str] = ()) -> None:
        self.name = name
        self.threads = threads
        self.custom_op_libraries = tuple(custom_op_libraries)

    def load(self, model: onnx.ModelProto) -> Kernel:
        return _OrtKernel(model, self.threads, self.custom_op_libraries)


class FunctionalCimSimulator(OrtCpuDevice):
    """The default CIM back end: computes a partition's exact function with onnxruntime.

    Timing is not simulated here; the modeled timeline comes from the plan
    (:mod:`cimsplit.runtime.timeline`).
    """

    def __init__(self, threads: int = 1, custom_op_libraries: Sequence[str] = ()) -> None:
        super().__init__(threads=threads, name="cim", custom_op_libraries=custom_op_libraries)


_ORT_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "ai.onnx.preview.training"})
"""Operator domains onnxruntime's CPU provider implements without a custom-op library."""


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
