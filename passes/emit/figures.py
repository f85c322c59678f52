"""What every figure cimsplit draws shares: matplotlib (lazily, Agg, fixed style) and time units.

Files are deterministic for the same data and matplotlib version (SVG hash
salt fixed, no date or software stamp) and written atomically.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cimsplit.errors import CimsplitError
from cimsplit.files import write_atomic

__all__ = ["RC", "pyplot", "save_figure", "time_unit"]

RC = {"svg.hashsalt": "cimsplit", "svg.fonttype": "none", "font.size": 9, "axes.grid": True, "grid.alpha": 0.3}


@contextmanager
def pyplot(what: str = "sweep plots") -> Iterator[Any]:
    """``matplotlib.pyplot`` with the Agg backend and :data:`RC`; a missing matplotlib names the extra."""
    try:
        import matplotlib
    except ImportError:
        raise CimsplitError(f"{what} need matplotlib, which is not installed", hint="pip install 'cimsplit[sweep]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    with matplotlib.rc_context(RC):
        yield plt


def save_figure(fig: Any, path: Path, fmt: str) -> Path:
    """``fig`` as ``fmt`` (png, svg) at 150 dpi, cropped to its content, without date or software stamps."""
    buffer = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else {"Software": None}
    fig.savefig(buffer, format=fmt, dpi=150, bbox_inches="tight", metadata=metadata)
    write_atomic(path, buffer.getvalue())
    return path


def time_unit(max_ns: float) -> tuple[str, float]:
    """The unit (and its size in ns) in which ``max_ns`` reads best on an axis."""
    if max_ns >= 1e6:
        return "ms", 1e6
    if max_ns >= 1e3:
        return "µs", 1e3
    return "ns", 1.0
