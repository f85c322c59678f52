"""cimsplit.models: the model zoo in pure ONNX, no torch.

ResNet-18/50, MobileNetV2, YOLOv5n, YOLOv8n, GoogLeNet, EfficientNet-B0, MobileNetV3-Small, ViT-Tiny.
"""

from __future__ import annotations

from cimsplit.models.zoo import NAMES, build, default_image_size, describe, parameter_count, workload_size

__all__ = ["NAMES", "build", "describe", "default_image_size", "parameter_count", "workload_size"]
