"""cimsplit.models: the model zoo (ResNet-18/50, MobileNetV2, YOLOv5n) in pure ONNX, no torch."""

from __future__ import annotations

from cimsplit.models.zoo import NAMES, build, default_image_size, describe, parameter_count

__all__ = ["NAMES", "build", "describe", "default_image_size", "parameter_count"]
