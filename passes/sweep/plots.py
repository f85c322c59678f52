"""Figures of a sweep, after the paper's section V, as PNG and SVG.

- ``fig3_<model>``: speedup vs MVM latency, one line per crossbar count, one
  panel per host (paper Fig. 3).
- ``fig4``: speedup of every model at the lowest MVM latency swept, grouped
  bars per crossbar count, one panel per host (paper Fig. 4).
- ``fig5_<model>``: per configuration, the makespan split into the time the
  host CPU computes (dark) and the time it waits for the CIM and the bus
  (light) — an exact split, as the single-core host is either busy or waiting —
  with the operator count of each device written on its part (paper Fig. 5).
- ``front_<model>`` (throughput sweeps): the latency/throughput front over the
  ``--max-latency`` bounds (:mod:`cimsplit.passes.sweep.front`); the other
  figures use the unbounded points only.
- ``budget_<model>`` (when >= 5 crossbar counts were swept): makespan vs
  crossbars, one line per MVM latency, each step annotated with its marginal
  gain (makespan saved per added crossbar).

matplotlib is imported lazily with the Agg backend (:mod:`cimsplit.passes.emit.figures`).
Files are deterministic for the same rows and matplotlib version (SVG hash salt
fixed, no date) and written atomically.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cimsplit.passes.emit.figures import pyplot, save_figure, time_unit

__all__ = ["write_figures", "FORMATS"]

FORMATS = ("png", "svg")
_DARK, _LIGHT = "#1f4e79", "#9dc3e6"
_MAX_LABELLED_BARS = 48
_MAX_ANNOTATED_LINES = 4

Row = dict[str, Any]


def _save(fig: Any, out_dir: Path, stem: str) -> list[Path]:
    return [save_figure(fig, out_dir / f"{stem}.{fmt}", fmt) for fmt in FORMATS]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _ordered(values: Sequence[Any]) -> list[Any]:
    """First-seen order (rows come in grid order)."""
    return list(dict.fromkeys(values))


def _latency_label(ns: float) -> str:
    return f"{ns / 1e3:g} µs" if ns >= 1e3 and ns % 1e3 == 0 else f"{ns:g} ns"


def write_figures(out_dir: str | Path, rows: Sequence[Row]) -> list[Path]:
    """Write every figure the rows allow into ``out_dir``; returns the files written."""
    from cimsplit.passes.sweep.front import write_front

    out_dir = Path(out_dir)
    done = [r for r in rows if r["status"] != "error" and r["speedup"] is not None]
    ok = [r for r in done if not r.get("max_latency_ns")]  # one row per configuration: the unbounded one
    if not done:
        return []
    files: list[Path] = []
    with pyplot() as plt:
        for model in _ordered([r["model"] for r in done if r.get("objective") == "throughput"]):
            mine = [r for r in done if r["model"] == model and r.get("objective") == "throughput"]
            files += write_front(plt, out_dir, model, mine, f"front_{_safe(model)}")
        if not ok:
            return files
        for model in _ordered([r["model"] for r in ok]):
            mine = [r for r in ok if r["model"] == model]
            files += _fig3(plt, out_dir, model, mine)
            files += _fig5(plt, out_dir, model, mine)
            if len(_ordered([r["crossbars"] for r in mine])) >= 5:
                files += _budget(plt, out_dir, model, mine)
        files += _fig4(plt, out_dir, ok)
    return files


def _panels(plt: Any, hosts: list[str], width: float, height: float) -> tuple[Any, list[Any]]:
    fig, axes = plt.subplots(1, len(hosts), figsize=(width * len(hosts), height), squeeze=False)
    return fig, list(axes[0])


def _fig3(plt: Any, out_dir: Path, model: str, rows: list[Row]) -> list[Path]:
    hosts = _ordered([r["host"] for r in rows])
    fig, axes = _panels(plt, hosts, 4.6, 3.4)
    cmap = plt.get_cmap("viridis")
    for ax, host in zip(axes, hosts):
        mine = [r for r in rows if r["host"] == host]
        budgets = _ordered([r["crossbars"] for r in mine])
        latencies = sorted(_ordered([r["mvm_latency_ns"] for r in mine]))
        for i, crossbars in enumerate(budgets):
            line = sorted((r["mvm_latency_ns"], r["speedup"]) for r in mine if r["crossbars"] == crossbars)
            color = cmap(i / max(1, len(budgets) - 1) * 0.9)
            ax.plot([x for x, _ in line], [y for _, y in line], marker="o", ms=4, color=color, label=f"{crossbars} crossbars")
        ax.axhline(1.0, color="grey", ls="--", lw=1, label="CPU only")
        if latencies[-1] >= 10 * latencies[0]:
            ax.set_xscale("log")
        if len(latencies) <= 8:
            ax.set_xticks(latencies, [f"{x:g}" for x in latencies])
            ax.minorticks_off()
        ax.set_xlabel("MVM latency (ns)")
        ax.set_ylabel("speedup over CPU-only (×)")
        ax.set_title(f"{model} on {host}")
        ax.legend(fontsize=7, ncol=1 if len(budgets) <= 6 else 2)
    fig.tight_layout()
    paths = _save(fig, out_dir, f"fig3_{_safe(model)}")
    plt.close(fig)
    return paths


def _fig4(plt: Any, out_dir: Path, rows: list[Row]) -> list[Path]:
    hosts = _ordered([r["host"] for r in rows])
    models = _ordered([r["model"] for r in rows])
    fig, axes = _panels(plt, hosts, max(4.6, 1.3 * len(models) + 1.5), 3.4)
    cmap = plt.get_cmap("viridis")
    for ax, host in zip(axes, hosts):
        mine = [r for r in rows if r["host"] == host]
        lowest = min(r["mvm_latency_ns"] for r in mine)
        at = {(r["model"], r["crossbars"]): r["speedup"] for r in mine if r["mvm_latency_ns"] == lowest}
        budgets = _ordered([r["crossbars"] for r in mine])
        width = 0.8 / len(budgets)
        labelled = len(models) * len(budgets) <= _MAX_LABELLED_BARS
        for i, crossbars in enumerate(budgets):
            xs = [m + (i - (len(budgets) - 1) / 2) * width for m in range(len(models))]
            ys = [at.get((model, crossbars), float("nan")) for model in models]
            bars = ax.bar(xs, ys, width, color=cmap(i / max(1, len(budgets) - 1) * 0.9), label=f"{crossbars} crossbars")
            if labelled:
                ax.bar_label(bars, fmt="%.1f", fontsize=6, padding=1)
        ax.axhline(1.0, color="grey", ls="--", lw=1)
        ax.set_xticks(range(len(models)), models)
        ax.set_ylabel("speedup over CPU-only (×)")
        ax.set_xlabel("model")
        ax.set_title(f"{host}, MVM latency {_latency_label(lowest)}")
        ax.grid(axis="x", visible=False)
        ax.legend(fontsize=7, ncol=1 if len(budgets) <= 6 else 2)
    fig.tight_layout()
    paths = _save(fig, out_dir, "fig4")
    plt.close(fig)
    return paths


def _fig5(plt: Any, out_dir: Path, model: str, rows: list[Row]) -> list[Path]:
    hosts = _ordered([r["host"] for r in rows])
    configs = max(len([r for r in rows if r["host"] == h]) for h in hosts)
    fig, axes = _panels(plt, hosts, max(4.6, 0.42 * configs + 1.5), 3.8)
    unit, scale = time_unit(max(r["cpu_only_ns"] for r in rows))
    for ax, host in zip(axes, hosts):
        # Grouped by MVM latency, then crossbars, as the configurations are read in the paper.
        mine = sorted((r for r in rows if r["host"] == host), key=lambda r: (r["mvm_latency_ns"], r["crossbars"]))
        xs = list(range(len(mine)))
        busy = [r["host_busy_ns"] / scale for r in mine]
        waiting = [max(0.0, r["makespan_ns"] - r["host_busy_ns"]) / scale for r in mine]
        ax.bar(xs, busy, 0.7, color=_DARK, label="host CPU computing (operators on host)")
        ax.bar(xs, waiting, 0.7, bottom=busy, color=_LIGHT, label="waiting for CIM and bus (operators on CIM)")
        ax.axhline(mine[0]["cpu_only_ns"] / scale, color="grey", ls=":", lw=1, label="CPU-only latency")
        top = max(max(b + w for b, w in zip(busy, waiting)), mine[0]["cpu_only_ns"] / scale)  # keep CPU-only in view
        if len(mine) <= _MAX_LABELLED_BARS:
            for x, b, w, r in zip(xs, busy, waiting, mine):
                _count_labels(ax, x, b, w, r["ops_on_host"], r["ops_on_cim"], top)
        ax.set_ylim(0, top * 1.15)  # room for counts written above the bars
        ax.set_xticks(xs, [f"{r['crossbars']}\n{r['mvm_latency_ns']:g}" for r in mine], fontsize=6)
        ax.set_xlabel("crossbars / MVM latency (ns)")
        ax.set_ylabel(f"latency ({unit})")
        ax.set_title(f"{model} on {host}: latency share and operators per device")
        ax.grid(axis="x", visible=False)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    fig.tight_layout()
    paths = _save(fig, out_dir, f"fig5_{_safe(model)}")
    plt.close(fig)
    return paths


def _count_labels(ax: Any, x: float, busy: float, waiting: float, on_host: int, on_cim: int, top: float) -> None:
    """Operator counts on their parts of the bar; a part too thin for text gets its count above the bar."""
    room = 0.06 * top
    above = busy + waiting + 0.01 * top
    for count, low, height, inside_color in ((on_host, 0.0, busy, "white"), (on_cim, busy, waiting, "black")):
        if height >= room:
            ax.text(x, low + height / 2, str(count), ha="center", va="center", color=inside_color, fontsize=6)
        else:
            color = _DARK if inside_color == "white" else "#4a7fb0"
            ax.text(x, above, str(count), ha="center", va="bottom", color=color, fontsize=6, fontweight="bold")
            above += 0.045 * top


def _budget(plt: Any, out_dir: Path, model: str, rows: list[Row]) -> list[Path]:
    hosts = _ordered([r["host"] for r in rows])
    fig, axes = _panels(plt, hosts, 6.0, 4.0)
    cmap = plt.get_cmap("plasma")
    unit, scale = time_unit(max(r["cpu_only_ns"] for r in rows))
    lines = {
        (host, latency): sorted((r["crossbars"], r["makespan_ns"]) for r in rows if r["host"] == host and r["mvm_latency_ns"] == latency)
        for host in hosts for latency in sorted(_ordered([r["mvm_latency_ns"] for r in rows if r["host"] == host]))
    }
    # Marginal gain of a step: makespan saved per added crossbar, in its own unit.
    gains_ns = [(m0 - m1) / (c1 - c0) for line in lines.values() for (c0, m0), (c1, m1) in zip(line, line[1:])]
    gain_unit, gain_scale = time_unit(max([g for g in gains_ns if g > 0], default=1.0))
    for ax, host in zip(axes, hosts):
        latencies = [t for h, t in lines if h == host]
        # Many lines: annotate only the lowest MVM latency, where the gains are largest.
        annotated = latencies if len(latencies) <= _MAX_ANNOTATED_LINES else latencies[:1]
        for i, latency in enumerate(latencies):
            line = lines[(host, latency)]
            color = cmap(i / max(1, len(latencies) - 1) * 0.85)
            ax.plot([c for c, _ in line], [m / scale for _, m in line], marker="o", ms=3, color=color,
                    label=f"MVM {_latency_label(latency)}")
            if latency not in annotated:
                continue
            for (c0, m0), (c1, m1) in zip(line, line[1:]):
                gain_ns = (m0 - m1) / (c1 - c0)
                if gain_ns > 0:
                    ax.annotate(f"{gain_ns / gain_scale:.3g}", ((c0 + c1) / 2, (m0 + m1) / 2 / scale), textcoords="offset points",
                                xytext=(0, 4), ha="center", fontsize=5.5, color=color)
        ax.set_xlabel("crossbar budget C")
        ax.set_ylabel(f"makespan ({unit})")
        ax.set_title(f"{model} on {host}: makespan vs budget\n(numbers: {gain_unit} saved per added crossbar)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    paths = _save(fig, out_dir, f"budget_{_safe(model)}")
    plt.close(fig)
    return paths
