"""``explain.json`` (``cimsplit explain --json``) and the budget-curve plot.

The document holds, for every operator, its device, reason (one of
:data:`~cimsplit.passes.placement.explain.REASONS`), a sentence with the numbers,
and the forced move (``forced_makespan_ns``: the plan's makespan with the
operator forced to the other device, ``null`` where impossible, with the forced
solve's bound, gap and status); and the budget curve, one point per budget from
0 to saturation with its marginal value (what one more crossbar saves).
No times: the same plan gives the same file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cimsplit.passes.placement.explain import Explanation, OperatorExplanation

__all__ = ["EXPLAIN_VERSION", "explanation_to_json", "plot_budget_curve"]

EXPLAIN_VERSION = 1


def _operator(e: OperatorExplanation, t_host_ns: float, t_cim_ns: float | None) -> dict[str, Any]:
    move = e.forced
    return {
        "name": e.name,
        "device": e.device,
        "reason": e.reason,
        "detail": e.detail,
        "crossbars": e.crossbars,
        "critical": e.critical,
        "t_host_ns": float(t_host_ns),
        "t_cim_ns": None if t_cim_ns is None else float(t_cim_ns),
        "solo_cim_ns": e.solo_cim_ns,
        "forced_device": None if move is None else move.device,
        "forced_makespan_ns": e.forced_makespan_ns,
        "forced_bound_ns": None if move is None else move.bound_ns,
        "forced_gap": None if move is None else move.gap,
        "forced_status": None if move is None else move.status,
        "saving_ns": e.saving_ns,
        "displaced": list(e.displaced),
    }


def explanation_to_json(explanation: Explanation) -> dict[str, Any]:
    """The JSON-ready document of an explanation (keys are stable; more may be added)."""
    plan = explanation.plan
    problem, stats = plan.problem, plan.solver
    index = {name: v for v, name in enumerate(problem.names)}
    document: dict[str, Any] = {
        "version": EXPLAIN_VERSION,
        "makespan_ns": float(plan.schedule.makespan_ns),
        "bound_ns": float(stats.bound_ns),
        "status": stats.status,
        "crossbar_budget": int(problem.budget),
        "crossbars_used": int(plan.crossbars_used),
        "operators": [_operator(e, problem.t_host_ns[index[e.name]], problem.t_cim_ns[index[e.name]])
                      for e in explanation.operators],
        "solves": explanation.solves,
    }
    curve = explanation.curve
    if curve is not None:
        points = curve.points
        document["budget_curve"] = [
            {
                "crossbars": p.crossbars,
                "makespan_ns": float(p.makespan_ns),
                "bound_ns": float(p.bound_ns),
                "marginal_ns": curve.marginal_ns(p.crossbars),
                "placement_changed": i > 0 and p.cim_operators != points[i - 1].cim_operators,
                "operators_on_cim": len(p.cim_operators),
            }
            for i, p in enumerate(points)
        ]
        document["saturation_crossbars"] = curve.saturation
        document["placement_changes"] = list(curve.placement_changes)
        document["makespan_changes"] = list(curve.makespan_changes)
    return document


def plot_budget_curve(document: dict[str, Any], path: str | Path, title: str) -> Path:
    """Step plot of the budget curve in ``document`` (makespan vs crossbars), the plan's budget marked."""
    from cimsplit.passes.emit.figures import pyplot, time_unit

    points = document["budget_curve"]
    unit, scale = time_unit(max(p["makespan_ns"] for p in points))
    path = Path(path)
    with pyplot() as plt:
        fig, ax = plt.subplots(figsize=(6.0, 3.6))
        xs = [p["crossbars"] for p in points]
        ax.step(xs, [p["makespan_ns"] / scale for p in points], where="post", color="#1f4e79")
        changes = [p for p in points if p["placement_changed"]]
        ax.plot([p["crossbars"] for p in changes], [p["makespan_ns"] / scale for p in changes], "o", ms=3,
                color="#1f4e79", label="placement changes")
        budget = document["crossbar_budget"]
        ax.axvline(min(budget, xs[-1]), color="#c00000", lw=0.8, ls="--", label=f"plan: {budget} crossbars")
        ax.set_xlabel("crossbar budget C")
        ax.set_ylabel(f"makespan ({unit})")
        ax.set_title(title)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=150, metadata={"Software": None} if path.suffix == ".png" else None)
        plt.close(fig)
    return path
