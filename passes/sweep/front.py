"""The latency/throughput front of a throughput sweep (issue 14), PNG and SVG like the other figures.

``front_<model>``: one panel per host; per (crossbars, MVM latency) configuration
the points of every ``--max-latency`` bound (x: one frame's latency in the
stream, y: frames per second = 1e9 / period), joined in the order of the bound.
A bound that is looser than another can only allow a shorter period; where a
time-limited solve found a longer one, the front keeps the tighter bound's
schedule (it meets the looser bound too) and the raw point is drawn hollow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cimsplit.passes.emit.figures import save_figure

__all__ = ["front_points", "write_front"]

Row = dict[str, Any]


def front_points(rows: list[Row]) -> list[tuple[float, float, float, bool]]:
    """(bound_ns, frame latency_ns, period_ns, raw) per bound, in ascending bound (0 = none last).

    ``raw`` is False where the point is carried from a tighter bound's better schedule.
    """
    def order(row: Row) -> float:
        bound = row.get("max_latency_ns") or 0.0
        return bound if bound > 0 else float("inf")

    points = []
    best: tuple[float, float] | None = None
    for row in sorted(rows, key=order):
        latency, period = row["stream_latency_ns"], row["period_ns"]
        if best is not None and best[1] < period:
            points.append((row.get("max_latency_ns") or 0.0, best[0], best[1], False))
            continue
        best = (latency, period)
        points.append((row.get("max_latency_ns") or 0.0, latency, period, True))
    return points


def write_front(plt: Any, out_dir: Path, model: str, rows: list[Row], stem: str) -> list[Path]:
    rows = [r for r in rows if r.get("period_ns") and r.get("stream_latency_ns") is not None]
    if not rows:
        return []
    hosts = list(dict.fromkeys(r["host"] for r in rows))
    fig, axes = plt.subplots(1, len(hosts), figsize=(5.0 * len(hosts), 3.6), squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, host in zip(axes[0], hosts):
        mine = [r for r in rows if r["host"] == host]
        configs = list(dict.fromkeys((r["crossbars"], r["mvm_latency_ns"]) for r in mine))
        for i, (crossbars, mvm) in enumerate(configs):
            points = front_points([r for r in mine if (r["crossbars"], r["mvm_latency_ns"]) == (crossbars, mvm)])
            color = cmap(i / max(1, len(configs) - 1) * 0.9)
            xs = [latency / 1e6 for _, latency, _, _ in points]
            ys = [1e9 / period for _, _, period, _ in points]
            ax.plot(xs, ys, color=color, marker="o", ms=4, label=f"{crossbars} crossbars, {mvm:g} ns MVM")
            raw = [r for r in mine if (r["crossbars"], r["mvm_latency_ns"]) == (crossbars, mvm)]
            carried = {p[0] for p in points if not p[3]}
            for r in raw:
                if (r.get("max_latency_ns") or 0.0) in carried:
                    ax.plot(r["stream_latency_ns"] / 1e6, 1e9 / r["period_ns"], marker="o", ms=5, mfc="none",
                            color=color, ls="none")
        latencies = [r["stream_latency_ns"] for r in mine if r["stream_latency_ns"] > 0]
        if latencies and max(latencies) >= 10 * min(latencies):  # the unbounded point can lie far right
            ax.set_xscale("log")
        ax.set_xlabel("one frame's latency in the stream (ms)")
        ax.set_ylabel("throughput (frames/s)")
        ax.set_title(f"{model} on {host}: latency/throughput front")
        ax.legend(fontsize=7)
    fig.tight_layout()
    paths = [save_figure(fig, out_dir / f"{stem}.{fmt}", fmt) for fmt in ("png", "svg")]
    plt.close(fig)
    return paths
