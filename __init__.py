"""cimsplit: compile ONNX models for a host CPU plus an RRAM computing-in-memory accelerator.

The repository root is this package (``pyproject.toml`` maps it): ``cli`` over
``compiler`` (ONNX -> workload -> costs), ``passes`` (placement, rewrite, emit,
sweep), ``runtime`` (executes a written plan) and ``models`` (the zoo).
"""

from __future__ import annotations

from cimsplit.errors import CimsplitError

__version__ = "0.2.0"

__all__ = ["CimsplitError", "__version__"]
