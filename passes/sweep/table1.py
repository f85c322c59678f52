"""The paper's Table I from sweep rows: ILP size and solver effort per model and host."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["table1_markdown"]


def _span(values: Sequence[int]) -> str:
    """One number when every point had the same size, else ``min–max``."""
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def _seconds(value: float) -> str:
    return "< 0.01" if value < 0.01 else f"{value:.2f}"


def table1_markdown(rows: Sequence[dict[str, Any]], whole_model_ns: Mapping[tuple[str, str], float | None] | None = None) -> str:
    """Markdown table, one line per (model, host) in row order.

    Columns as the paper's Table I — operators, decision variables,
    constraints, mean solving time (s), mean MIP gap (%) — plus the host, the
    points solved and how many of them stopped before proving optimality.
    Sizes can differ between points (tightenings depend on the budget), so a
    range is shown when they do.  Errors are counted, not averaged.

    A second table gives the honest CPU references (DESIGN §3): the best
    speedup against the sum of per-operator host medians (the ILP's CPU-only
    makespan) and against ``whole_model_ns[(model, host)]``, the whole model
    on onnxruntime with all optimizations, when known.
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["host"]), []).append(row)
    lines = [
        "# ILP statistics per model (paper Table I)",
        "",
        "| Model | Host | Operators | Decision variables | Constraints | Mean solving time (s) | Mean MIP gap (%) "
        "| Points | Not proven optimal | Errors |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for (model, host), group in groups.items():
        ok = [r for r in group if r["status"] != "error"]
        errors = len(group) - len(ok)
        if not ok:
            lines.append(f"| {model} | {host} | – | – | – | – | – | {len(group)} | – | {errors} |")
            continue
        operators = _span([r["ops_on_cim"] + r["ops_on_host"] for r in ok])
        variables = _span([r["n_variables"] for r in ok])
        constraints = _span([r["n_constraints"] for r in ok])
        mean_time_s = sum(r["time_s"] for r in ok) / len(ok)
        gaps = [r["gap"] for r in ok if r["gap"] is not None]  # None: no bound was proven
        mean_gap = f"{100.0 * sum(gaps) / len(gaps):.2f}" if gaps else "–"
        unproven = sum(1 for r in ok if r["status"] != "optimal")
        lines.append(
            f"| {model} | {host} | {operators} | {variables} | {constraints} | {_seconds(mean_time_s)} "
            f"| {mean_gap} | {len(group)} | {unproven} | {errors} |"
        )
    lines += ["", "Solving time is wall time per point, so it varies between runs and machines.", ""]
    lines += _references(groups, whole_model_ns or {})
    return "\n".join(lines)


def _references(groups: Mapping[tuple[str, str], list[dict[str, Any]]], whole_model_ns: Mapping[tuple[str, str], float | None]) -> list[str]:
    lines = [
        "## Best speedup against both CPU references",
        "",
        "| Model | Host | CPU-only, sum of operator medians (ms) | Whole model, ORT all optimizations (ms) | Best makespan (ms) "
        "| Best speedup vs sum | Best speedup vs ORT |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    for (model, host), group in groups.items():
        ok = [r for r in group if r["status"] != "error"]
        if not ok:
            continue
        best = min(r["makespan_ns"] for r in ok)
        whole = whole_model_ns.get((model, host))
        whole_ms, versus = ("–", "–") if not whole else (f"{whole / 1e6:.3f}", f"{whole / best:.2f}x")
        lines.append(f"| {model} | {host} | {ok[0]['cpu_only_ns'] / 1e6:.3f} | {whole_ms} | {best / 1e6:.3f} "
                     f"| {ok[0]['cpu_only_ns'] / best:.2f}x | {versus} |")
    return lines + [""]
