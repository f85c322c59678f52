"""Device back ends: where a partition runs (DESIGN §6).

A device loads a partition model once and returns a :class:`Kernel` that runs
it on feeds.  The host is onnxruntime's CPU provider.  The CIM is behind the
same small interface (:class:`CimDevice`); the default back end simulates it
functionally with onnxruntime (the crossbars compute the same GEMMs), and a
crossbar-level numeric model (quantized conductances, ADC resolution) or a
real driver plugs in by implementing ``load``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np
import onnx
import onnxruntime as ort

__all__ = ["Kernel", "Device", "CimDevice", "OrtCpuDevice", "FunctionalCimSimulator", "session_options"]


@runtime_checkable
class Kernel(Protocol):
    """A loaded partition: feeds by input name in, outputs by name out.

    Returned arrays may be buffers of the kernel that its next ``run`` refills.
    """

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...


@runtime_checkable
class Device(Protocol):
    """A place partitions run: ``load`` once per partition, then ``run`` the kernel per inference."""

    name: str

    def load(self, model: onnx.ModelProto) -> Kernel: ...


CimDevice = Device
"""The CIM back-end interface: the same protocol as any device (name ``"cim"``)."""


def session_options(threads: int = 1) -> ort.SessionOptions:
    """onnxruntime options used for every session: ``threads`` intra-op threads, sequential, all optimizations."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return options


class _OrtKernel:
    """One onnxruntime session; ``run`` releases the GIL inside onnxruntime.

    When every output has a static shape, outputs are written through an I/O
    binding straight into arrays allocated once, so an inference allocates no
    output memory; those arrays are refilled by the next ``run``.
    """

    def __init__(self, model: onnx.ModelProto, threads: int) -> None:
        self._session = ort.InferenceSession(
            model.SerializeToString(), sess_options=session_options(threads), providers=["CPUExecutionProvider"],
        )
        self._outputs = [o.name for o in self._session.get_outputs()]
        self._buffers: dict[str, np.ndarray] | None = {}
        for out in model.graph.output:
            tensor = out.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
            if not tensor.HasField("shape") or min(dims, default=0) < 0 or out.name not in self._outputs:
                self._buffers = None
                break
            self._buffers[out.name] = np.empty(dims, dtype=onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._buffers is None:
            values = self._session.run(self._outputs, dict(feeds))
            return dict(zip(self._outputs, values))
        binding = self._session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(value))
        for name, buffer in self._buffers.items():
            binding.bind_output(name, "cpu", 0, buffer.dtype, buffer.shape, buffer.ctypes.data)
        self._session.run_with_iobinding(binding)
        return dict(self._buffers)


class OrtCpuDevice:
    """The host: onnxruntime's CPU execution provider."""

    def __init__(self, threads: int = 1, name: str = "host") -> None:
        self.name = name
        self.threads = threads

    def load(self, model: onnx.ModelProto) -> Kernel:
        return _OrtKernel(model, self.threads)


class FunctionalCimSimulator(OrtCpuDevice):
    """The default CIM back end: computes a partition's exact function with onnxruntime.

    Timing is not simulated here; the modeled timeline comes from the plan
    (:mod:`cimsplit.runtime.timeline`).
    """

    def __init__(self, threads: int = 1) -> None:
        super().__init__(threads=threads, name="cim")
