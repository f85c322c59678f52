"""onnxruntime quantizer configurations real int8 exports come from, by name.

Shared by the fuzz harness (``bench/fuzz.py --quantizer``) and ``bench/quantizer_matrix.py``: the
format (QDQ or QOperator), activation and weight types, per-channel weights, symmetric ranges, kept
or dedicated Q/DQ pairs, float biases, weights with their own Q/DQ pair, percentile calibration,
int16 activations, Conv only, and the ``com.microsoft`` Q/DQ ops.
"""

from __future__ import annotations

from typing import Any

from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType

S8, U8 = QuantType.QInt8, QuantType.QUInt8
QDQ = {"quant_format": QuantFormat.QDQ}

STATIC: dict[str, dict[str, Any]] = {
    "s8s8-per-channel": {**QDQ, "activation_type": S8, "weight_type": S8, "per_channel": True},
    "u8s8-per-tensor": {**QDQ, "activation_type": U8, "weight_type": S8},
    "u8u8": {**QDQ, "activation_type": U8, "weight_type": U8},
    "symmetric": {**QDQ, "activation_type": S8, "weight_type": S8, "per_channel": True,
                  "extra_options": {"ActivationSymmetric": True, "WeightSymmetric": True}},
    "keep-removable": {**QDQ, "activation_type": S8, "weight_type": S8, "per_channel": True,
                       "extra_options": {"QDQKeepRemovableActivations": True}},
    "dedicated-pairs": {**QDQ, "activation_type": S8, "weight_type": S8, "extra_options": {"DedicatedQDQPair": True}},
    "float-bias": {**QDQ, "activation_type": S8, "weight_type": S8, "extra_options": {"QuantizeBias": False}},
    "weight-qdq": {**QDQ, "activation_type": S8, "weight_type": S8, "extra_options": {"AddQDQPairToWeight": True}},
    "percentile": {**QDQ, "activation_type": U8, "weight_type": S8, "calibrate_method": CalibrationMethod.Percentile},
    "int16-activations": {**QDQ, "activation_type": QuantType.QInt16, "weight_type": S8},
    "conv-only": {**QDQ, "activation_type": S8, "weight_type": S8, "op_types_to_quantize": ["Conv"]},
    "contrib-ops": {**QDQ, "activation_type": S8, "weight_type": S8, "per_channel": True,
                    "extra_options": {"UseQDQContribOps": True}},
    "qoperator": {"quant_format": QuantFormat.QOperator, "activation_type": U8, "weight_type": S8, "per_channel": True},
}
"""``quantize_static`` keyword arguments by configuration name; the first is the fuzz harness's default."""
