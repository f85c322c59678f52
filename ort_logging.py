"""onnxruntime's native logger: quiet unless cimsplit logs at debug level (``--debug``)."""

from __future__ import annotations

import logging

__all__ = ["ort_log_severity"]


def ort_log_severity() -> int:
    """``SessionOptions.log_severity_level`` for every onnxruntime session cimsplit creates.

    4 (fatal only) keeps onnxruntime's own lines (e.g. ``[E:onnxruntime:...
    EndProfiling]`` from a session that failed to load) off the terminal, where
    the CLI prints its one error line; with debug logging on (``--debug``) its
    warnings and errors show (2).
    """
    return 2 if logging.getLogger("cimsplit").isEnabledFor(logging.DEBUG) else 4
