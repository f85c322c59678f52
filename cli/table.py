"""Plain-text tables for the CLI: left-aligned text, right-aligned numbers."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["format_table"]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None, indent: str = "  ") -> str:
    """Columns padded to their widest cell; ``right[i]`` right-aligns column i."""
    right = list(right) if right is not None else [False] * len(headers)
    widths = [max([len(headers[i]), *(len(row[i]) for row in rows)]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        parts = [cell.rjust(widths[i]) if right[i] else cell.ljust(widths[i]) for i, cell in enumerate(cells)]
        return (indent + "  ".join(parts)).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])
