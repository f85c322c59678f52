"""Results of a sweep on disk: an append-only journal plus CSV/JSON tables.

``journal.jsonl`` gets one line per finished point, flushed and fsynced as it
arrives, so a sweep that is killed keeps every point it finished.  A rerun
with the same output folder reads the journal and reuses a point's row when its
fingerprint (the point's cost tables and solver settings, see
:func:`~cimsplit.passes.sweep.task.task_fingerprint`) still matches; error
rows are never reused (they are retried).  A torn last line (killed while
writing) is ignored.

``results.csv`` and ``results.json`` are rewritten from the journal in the
grid's deterministic order, atomically (temporary file + rename).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cimsplit.files import write_atomic
from cimsplit.passes.sweep.grid import SweepPoint
from cimsplit.passes.sweep.task import COLUMNS

__all__ = ["JOURNAL", "RESULTS_CSV", "RESULTS_JSON", "Journal", "read_journal", "write_results", "read_results"]

JOURNAL = "journal.jsonl"
RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"

Key = tuple


def _key(row: dict[str, Any]) -> Key:
    """The row's point key, as :attr:`SweepPoint.key` (a latency bound only when there is one)."""
    base = (str(row["model"]), str(row["host"]), int(row["crossbars"]), float(row["mvm_latency_ns"]))
    bound = float(row.get("max_latency_ns") or 0.0)
    return (*base, bound) if bound else base


def read_journal(directory: Path) -> dict[Key, dict[str, Any]]:
    """Latest journal record per point key: ``{"fingerprint": ..., "row": {...}}`` (and ``"carry"``)."""
    path = Path(directory) / JOURNAL
    records: dict[Key, dict[str, Any]] = {}
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
            records[_key(record["row"])] = record
        except (ValueError, KeyError, TypeError):
            continue  # a torn line from a killed run
    return records


class Journal:
    """Appends one JSON line per finished point; each line is on disk when ``append`` returns."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / JOURNAL
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def append(self, fingerprint: str | None, row: dict[str, Any], carry: dict[str, Any] | None = None) -> None:
        """``carry``: what the point's budget chain hands on (:mod:`~cimsplit.passes.sweep.chain`)."""
        record = {"fingerprint": fingerprint, "row": row}
        if carry is not None:
            record["carry"] = carry
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def write_results(directory: Path, points: Sequence[SweepPoint], rows_by_key: dict[Key, dict[str, Any]]) -> list[dict[str, Any]]:
    """Write results.csv and results.json for ``points`` (in their order); returns the rows."""
    rows = [{column: rows_by_key[p.key].get(column) for column in COLUMNS} for p in points if p.key in rows_by_key]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([_csv_cell(row[column]) for column in COLUMNS])
    directory = Path(directory)
    write_atomic(directory / RESULTS_CSV, buffer.getvalue())
    write_atomic(directory / RESULTS_JSON, json.dumps(rows, indent=1) + "\n")
    return rows


def read_results(directory: Path) -> list[dict[str, Any]]:
    """The rows of ``results.json`` (the typed twin of results.csv)."""
    return json.loads((Path(directory) / RESULTS_JSON).read_text(encoding="utf-8"))

