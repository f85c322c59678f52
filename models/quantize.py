"""Static int8 QDQ quantization of a zoo model with onnxruntime's quantizer.

The recipe is the one onnxruntime documents for CPU inference:

1. ``quant_pre_process`` (ONNX shape inference + onnxruntime's basic
   graph optimizations, which fold BatchNormalization into the Conv weights
   and constants into their consumers), as a user quantizing an exported
   model would run it;
2. ``quantize_static`` in QDQ format with MinMax calibration, weights QInt8
   per output channel (the CIM stores one signed 8-bit scale per column)
   and activations QInt8 ("S8S8": quantize_static's default activation
   type and the combination onnxruntime's quantization guide suggests
   trying first for QDQ; it also matches a crossbar driven with signed
   inputs) by default; ``activations="uint8"`` gives U8S8 (uint8
   activations, the other layout onnxruntime's CPU kernels take) and
   ``per_channel=False`` one weight scale per tensor. ``QDQKeepRemovableActivations`` keeps the Relu/Clip nodes that the
   quantizer would otherwise fold into the quantized range, so an int8 graph
   has the same operators as its float original.

Calibration uses a few seeded Gaussian images: the weights are random, so
real images would calibrate nothing better. All temporary files live in a
``tempfile.TemporaryDirectory``; the result is returned as a ModelProto.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from cimsplit.models.graph_builder import IR_VERSION

__all__ = ["quantize_qdq", "SeededImageReader", "CALIBRATION_SAMPLES", "ACTIVATION_TYPES", "quantization_label"]

log = logging.getLogger(__name__)

CALIBRATION_SAMPLES = 4
ACTIVATION_TYPES = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
"""Activation type name -> onnxruntime's QuantType (weights are always QInt8)."""


def quantization_label(activations: str = "int8", per_channel: bool = True) -> str:
    """``S8S8 per-channel``, ``U8S8 per-tensor``, ...: activations then weights, then the weight scales."""
    return f"{'U8' if activations == 'uint8' else 'S8'}S8 {'per-channel' if per_channel else 'per-tensor'}"


def _input_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Name -> concrete shape of every graph input (a symbolic batch becomes 1), in graph order."""
    weights = {t.name for t in model.graph.initializer}
    return {value.name: tuple(d.dim_value if d.HasField("dim_value") else 1 for d in value.type.tensor_type.shape.dim)
            for value in model.graph.input if value.name not in weights}


class SeededImageReader(CalibrationDataReader):
    """Yields ``samples`` seeded N(0, 1) feeds (one array per input of ``shapes``), then None; ``rewind`` restarts."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], samples: int = CALIBRATION_SAMPLES, seed: int = 0) -> None:
        self.shapes = shapes
        self.samples = samples
        self.seed = seed
        self.rewind()

    def rewind(self) -> None:
        self._rng = np.random.default_rng(self.seed)
        self._left = self.samples

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._left <= 0:
            return None
        self._left -= 1
        return {name: self._rng.standard_normal(shape).astype(np.float32) for name, shape in self.shapes.items()}


class _AxisFallbackToDebug(logging.Filter):
    """Moves the quantizer's "Axis 1 is out-of-range for weight 'gamma' with rank 1" to cimsplit's debug log.

    The quantizer says it (through the root logger) for every rank-1 weight it is asked to
    quantize per channel, a LayerNormalization's or a lone BatchNormalization's scale, and
    quantizes that weight per tensor, as intended; its other warnings (a bias beyond int32) stay.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if "is out-of-range for weight" not in record.getMessage():
            return True
        log.debug("onnxruntime quantizer: %s (quantized per tensor)", record.getMessage())
        return False


@contextlib.contextmanager
def _quantizer_log() -> Iterator[None]:
    root = logging.getLogger()
    quiet = _AxisFallbackToDebug()
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)


def quantize_qdq(model: onnx.ModelProto, seed: int = 0, samples: int = CALIBRATION_SAMPLES,
                 activations: str = "int8", per_channel: bool = True, reduce_range: bool = False) -> onnx.ModelProto:
    """Return the int8 QDQ version of a float ``model`` (see the module docstring).

    ``activations``: ``"int8"`` (S8S8) or ``"uint8"`` (U8S8); ``per_channel``: one weight
    scale per output channel, else one per tensor; ``reduce_range``: 7-bit weights
    (onnxruntime's advice for x86 hosts without VNNI, whose U8S8 kernels saturate int16
    sums of two full-range products, so that results depend on the kernel's shape).
    """
    if activations not in ACTIVATION_TYPES:
        raise ValueError(f"activations must be one of {sorted(ACTIVATION_TYPES)}, not {activations!r}")
    shapes = _input_shapes(model)
    with tempfile.TemporaryDirectory(prefix="cimsplit-quant-") as tmp:
        float_path = Path(tmp) / "float.onnx"
        prep_path = Path(tmp) / "prep.onnx"
        int8_path = Path(tmp) / "int8.onnx"
        onnx.save(model, float_path)
        log.debug("quant_pre_process %s", model.graph.name)
        # ONNX's own shape inference covers these CNNs. onnxruntime's symbolic
        # one gives up on Resize(scales) over a symbolic batch (YOLO), and when
        # it gives up it dumps sym_shape_infer_temp.onnx into the current folder.
        quant_pre_process(str(float_path), str(prep_path), skip_symbolic_shape=True)
        log.debug("quantize_static %s with %d calibration samples", model.graph.name, samples)
        with _quantizer_log():
            quantize_static(
                str(prep_path),
                str(int8_path),
                SeededImageReader(shapes, samples, seed),
                quant_format=QuantFormat.QDQ,
                per_channel=per_channel,
                reduce_range=reduce_range,
                weight_type=QuantType.QInt8,
                activation_type=ACTIVATION_TYPES[activations],
                # Keep Relu/Clip before a QuantizeLinear (by default the quantizer folds them
                # into the quantized range): the int8 workload then has the same operators as
                # the float one, each activation fused into its producer by the front end.
                extra_options={"QDQKeepRemovableActivations": True},
            )
        quantized = onnx.load(str(int8_path))
    quantized.ir_version = IR_VERSION
    quantized.producer_name = model.producer_name
    quantized.producer_version = model.producer_version
    quantized.doc_string = (model.doc_string + " — int8 QDQ (onnxruntime quantize_static, "
                            + quantization_label(activations, per_channel) + " weights)")
    return quantized
