"""Rewrite: stamp the placement on the ONNX model, then split it into partitions joined by transfers."""

from __future__ import annotations

from cimsplit.passes.rewrite.annotate import annotate
from cimsplit.passes.rewrite.split import SplitResult, split

__all__ = ["SplitResult", "annotate", "split"]
