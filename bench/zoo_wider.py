"""Table I for the wider zoo: each model at a few grid points, with ``--solver cpsat`` as it is.

    .venv/bin/python bench/zoo_wider.py [--models yolov8n,googlenet,efficientnet_b0,mobilenet_v3_small,vit_tiny]
        [--points 25/50,25/1000,100/50,100/1000] [--hw x86] [--time-limit 30] [--seed 0] [--json FILE]

Each model is built once (int8 QDQ at its default image size, as
``table1_scale.py`` builds the zoo), loaded and profiled once on this machine
(``cached_profile``), then costed for every CROSSBARS/MVM_NS point. Each
point is solved by :func:`table1_scale.run_cpsat` (the staged CP-SAT that
``--solver cpsat`` runs) with one time limit for every size. Columns as in
``table1_scale.py``: operators, incomparable pairs, time to the first
solution within 1 % of the final one, time to proof (or to the limit), status,
gap at the limit, final makespan, the stages that ran. Nothing here is an
assertion: times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

from table1_scale import run_cpsat  # bench/ is on sys.path when this script runs

from cimsplit.passes.placement.dag import incomparable_pairs
from cimsplit.passes.placement.problem import PlacementProblem

NEW_MODELS = "yolov8n,googlenet,efficientnet_b0,mobilenet_v3_small,vit_tiny"


def zoo_problems(name: str, hw: str, points: list[tuple[int, float]]) -> list[tuple[str, PlacementProblem]]:
    """One problem per (crossbars, MVM ns) point, from one int8 build, load and profile of ``name``."""
    import onnx

    from cimsplit.compiler.costs import build_costs
    from cimsplit.compiler.frontend import load
    from cimsplit.compiler.hardware import load_hardware
    from cimsplit.compiler.profile_cache import cached_profile
    from cimsplit.models import zoo
    from cimsplit.passes.placement.driver import problem_from_costs

    base = load_hardware(hw)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        onnx.save(zoo.build(name, int8=True), path)
        loaded = load(path, crossbar_size=(base.crossbar_rows, base.crossbar_cols))
    profile = cached_profile(loaded, progress=False)
    problems = []
    for crossbars, mvm_ns in points:
        hardware = load_hardware(hw, crossbars=crossbars, mvm_latency_ns=mvm_ns)
        problems.append((f"{name}@{crossbars}/{mvm_ns:g}ns", problem_from_costs(loaded.workload, build_costs(loaded.workload, hardware, profile))))
    return problems


def summary(records: list[dict]) -> str:
    """One line: how many points were proven (optimal, or within the solver's relative gap limit), how fast."""
    proven = [r for r in records if r["status"] in ("optimal", "gap_limit")]
    open_ = [f"{r['instance']} {100 * r['gap']:.1f}%" for r in records if r not in proven]
    return (f"# proven: {len(proven)} of {len(records)} (optimal or within the gap limit), at most "
            f"{max((r['time'] for r in proven), default=math.nan):.2f} s among them; first solution within 1 % at most "
            f"{max((r['t1'] for r in records if r['t1'] is not None), default=math.nan):.2f} s; "
            f"not proven at the limit: {', '.join(open_) or 'none'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=NEW_MODELS)
    parser.add_argument("--points", default="25/50,25/1000,100/50,100/1000", help="CROSSBARS/MVM_NS, comma-separated")
    parser.add_argument("--hw", default="x86")
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    points = [(int(x), float(t)) for x, t in (p.split("/") for p in args.points.split(","))]

    header = ["instance", "ops", "pairs", "t<=1% s", "time s", "status", "gap %", "makespan ms", "prep s", "stages"]
    print("  ".join(header), flush=True)
    records = []
    for name in filter(None, args.models.split(",")):
        begin = time.perf_counter()
        problems = zoo_problems(name, args.hw, points)
        prep_s = time.perf_counter() - begin  # build, quantize, load, profile (once per model)
        for label, problem in problems:
            pairs = len(incomparable_pairs(problem))
            r = run_cpsat(problem, plain=False, limit_s=args.time_limit, seed=args.seed)
            row = [label, str(problem.n), str(pairs), "-" if math.isnan(r["t1"]) else f"{r['t1']:.2f}", f"{r['time']:.2f}",
                   r["status"], f"{100 * r['gap']:.3f}", f"{r['makespan'] / 1e6:.4f}", f"{prep_s:.0f}", r["stages"]]
            print("  ".join(row), flush=True)
            records.append(dict(instance=label, ops=problem.n, pairs=pairs, limit_s=args.time_limit, prep_s=prep_s,
                                **{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}))
    print()
    print(f"# {args.hw}, points {args.points}; time limit {args.time_limit:g} s for every size; seed {args.seed}")
    print(summary(records))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
