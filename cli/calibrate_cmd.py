"""`cimsplit calibrate`: measure this board once, then compile any model for it with ``--host-model``.

    cimsplit calibrate -o board.json [--threads 1] [--int8] [--budget-s 300] [--runs 5] [--warmup 2] [--force]
    cimsplit calibrate -o new.json --refit board.json
    cimsplit calibrate -o new.json --extend board.json [--budget-s 300]
    cimsplit calibrate --check board.json [--points 24] [-o rescaled.json]

``--refit`` measures nothing: it fits the samples an earlier calibration
recorded with this cimsplit's predictors and writes them with that
calibration's machine and campaign.  ``--extend`` keeps an earlier
calibration's samples (of this machine, onnxruntime and thread count) and
measures only what it lacks: kinds it has none of, GEMM points its grid or
budget did not reach, and the kinds whose points this cimsplit measures otherwise
(calibration's ``POINTS_VERSION``); its samples of points the grid no longer has, and of
those kinds, are dropped.  ``--check`` measures some of a calibration's points
again here (:mod:`cimsplit.compiler.calibration_check`) and says how much faster or
slower this machine runs than the calibration says; with ``-o`` it also writes the
calibration rescaled to that speed (seconds of measuring, where a campaign takes an hour).

Runs the micro-benchmark grid of :mod:`cimsplit.compiler.calibration` (one
operator per model, profiled as ``cimsplit profile`` profiles) until the time
budget is spent, fits one predictor per operator kind
(:mod:`cimsplit.compiler.host_model`) and writes the fits, their error
statistics, the samples, the onnxruntime version and the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from cimsplit.errors import CimsplitError

if TYPE_CHECKING:
    from cimsplit.compiler.host_model import HostModel

LOG_EVERY_S = 60.0
"""How often a campaign whose stderr is not a terminal says where it is."""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "calibrate", help="micro-benchmark this machine and fit host latency predictors (for --host-model)",
        description="Measure one-operator models over a fixed grid of GEMM shapes and element counts with "
                    "onnxruntime, as host profiling measures, and fit a latency predictor per operator kind.",
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="calibration JSON to write")
    parser.add_argument("--threads", type=int, default=1, metavar="N", help="ORT intra-op threads (default 1)")
    parser.add_argument("--int8", action="store_true", help="also calibrate int8 QDQ operators, with their kernel variants (most of the budget)")
    parser.add_argument("--budget-s", type=float, default=300.0, metavar="SECONDS", help="time budget (default 300)")
    parser.add_argument("--runs", type=int, default=5, metavar="N", help="recorded runs per point (default 5)")
    parser.add_argument("--warmup", type=int, default=2, metavar="N", help="warm-up runs per point (default 2)")
    parser.add_argument("--refit", metavar="CALIBRATION", default=None,
                        help="fit the samples of an earlier calibration again with this cimsplit's predictors (no measuring)")
    parser.add_argument("--extend", metavar="CALIBRATION", default=None,
                        help="keep an earlier calibration's samples and measure only the kinds and GEMM points it lacks")
    parser.add_argument("--check", metavar="CALIBRATION", default=None,
                        help="measure some of a calibration's points again and compare this machine's speed with it "
                             "(with -o: write it rescaled to this speed)")
    parser.add_argument("--points", type=int, default=24, metavar="N", help="points --check measures (default 24)")
    parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (or, in a log, no progress lines)")
    parser.set_defaults(func=run)


class CampaignProgress:
    """The campaign's progress: a bar on a terminal; where stderr is a log, one line every :data:`LOG_EVERY_S`
    seconds (a campaign runs for an hour or more); nothing when ``quiet``."""

    def __init__(self, budget_s: float, quiet: bool = False) -> None:
        from tqdm import tqdm

        self.budget_s, self.quiet, self.logged_s = budget_s, quiet, -LOG_EVERY_S
        self.bar = tqdm(total=int(budget_s), desc="calibrating", unit="s", disable=quiet or None, leave=False)

    def __call__(self, done: int, total: int, elapsed_s: float) -> None:
        if not self.bar.disable:
            self.bar.n = min(int(elapsed_s), self.bar.total)
            self.bar.set_postfix_str(f"point {done}/{total}")
            self.bar.refresh()
        elif not self.quiet and (elapsed_s - self.logged_s >= LOG_EVERY_S or done == total):
            self.logged_s = elapsed_s
            print(f"calibrating: point {done}/{total}, {elapsed_s:.0f} s of the {self.budget_s:g} s budget",
                  file=sys.stderr, flush=True)

    def __enter__(self) -> CampaignProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()


def run(args: argparse.Namespace) -> int:
    from cimsplit.compiler.calibration import calibrate

    if args.check is not None and (args.refit is not None or args.extend is not None):
        raise CimsplitError("--check measures a calibration as it is: pass it without --refit or --extend")
    if args.output is None and args.check is None:
        raise CimsplitError("calibrate needs -o FILE, the calibration to write (or --check CALIBRATION)")
    output = None if args.output is None else Path(args.output)
    if output is not None and output.is_dir():
        raise CimsplitError(f"{output} is a directory", hint="pass -o with a file name")
    if output is not None and output.exists() and not args.force:
        raise CimsplitError(f"{output} already exists", hint="pass --force to overwrite it")
    if args.check is not None:
        return check(args.check, args.points, output)
    if args.runs < 1 or args.warmup < 0:
        raise CimsplitError("--runs must be at least 1 and --warmup zero or more")
    if args.refit is not None and args.extend is not None:
        raise CimsplitError("--refit and --extend are two ways of starting from a calibration: pass one")
    before = after = None  # this machine's speed against the board extended, and against the campaign at its end
    if args.refit is not None:
        from cimsplit.compiler.host_model import HostModel

        model = HostModel.load(args.refit).refit()
    else:
        from cimsplit.compiler.host_model import HostModel

        extend = HostModel.load(args.extend) if args.extend is not None else None
        checked = args.runs >= CHECK_MIN_RUNS  # (fewer runs a point: its times are too noisy to compare)
        before = speed_ratio(extend) if extend is not None and checked else None  # (a machine that moved since mixes two speeds)
        with CampaignProgress(args.budget_s, quiet=args.no_progress) as progress:
            model = calibrate(threads=args.threads, int8=args.int8, budget_s=args.budget_s, runs=args.runs,
                              warmup=args.warmup, progress=progress, extend=extend)
        after = speed_ratio(model) if checked else None  # its points measured again at the end: did the speed hold?
        model = dataclasses.replace(model, campaign={**model.campaign, "speed_before": before, "speed_after": after})
    _save(model, output)
    campaign = model.campaign
    if args.refit is not None:
        print(f"refitted the {len(model.samples)} samples of {args.refit}")
    if args.extend is not None:
        dropped = (f" (dropped {campaign['dropped']}: points the grid no longer has, or measures otherwise now)"
                   if campaign.get("dropped") else "")
        print(f"kept the {campaign['kept']} samples of {args.extend}{dropped}")
    print(f"calibrated {campaign['measured']} of {campaign['grid_points']} points in {campaign['elapsed_s']:.0f} s "
          f"and fitted them in {campaign.get('fit_s', 0.0):.0f} s (budget {args.budget_s:g} s); cpu {model.cpu}, "
          f"onnxruntime {model.ort_version}, {model.threads} thread(s), level {model.level}")
    if model.context:
        hidden = ", ".join(f"{key} {'none' if math.isinf(reuse) else f'{reuse:g} output pixels'}" for key, reuse in model.reuse.items())
        print(f"weights' fetch hidden by the compute over (from {len(model.context)} convs in context networks): {hidden}")
    for kind, fit in sorted(model.fits.items()):
        cv = fit.held_out_mape
        baseline = fit.cv_mape.get("pipeit")
        print(f"  {kind:24s} {fit.samples:4d} samples  {fit.label:22s} fit {100 * fit.fit_mape:5.1f}%"
              + (f"  held-out {100 * cv:5.1f}%" if cv is not None else "")
              + (f"  (Pipe-it linear {100 * baseline:5.1f}%)" if baseline is not None else ""))
    for note in speed_notes(before, after, args.extend):
        print(note)
    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1) / 2:
        print(f"note: load average {load:.1f} while calibrating; latencies measured on a busy machine are noisy")
    print(f"wrote {output}")
    return 0


SPEED_TOLERANCE = 0.10
"""How far this machine's speed may be from a calibration's before ``--check`` says its predictions are off, and a
campaign that its machine's speed moved."""
CAMPAIGN_CHECK_POINTS = 16
"""Points a campaign measures again at its end (and an extension at its start): a few seconds."""
CHECK_MIN_RUNS = 3
"""The fewest recorded runs a point for which a campaign checks its machine's speed."""


def speed_notes(before: float | None, after: float | None, extended: str | None) -> list[str]:
    """What a campaign says of its machine's speed: against the board it extends (``before``, a ratio of now to its
    times) and against its own points at its end (``after``), where either is off by more than :data:`SPEED_TOLERANCE`."""
    notes = []
    if before is not None and abs(before - 1) > SPEED_TOLERANCE:
        notes.append(f"note: before measuring, {extended}'s points took {before:.2f}x their recorded times here: the "
                     "samples this extension adds are of another speed than the ones it keeps")
    if after is not None and abs(after - 1) > SPEED_TOLERANCE:
        notes.append(f"note: at the end, {CAMPAIGN_CHECK_POINTS} of the campaign's points took {after:.2f}x the times it "
                     "recorded: the machine's speed moved while it measured (a busy or shared machine; `calibrate --check` "
                     "tells how it runs later)")
    return notes


def speed_ratio(board: HostModel) -> float | None:
    """The median ratio of now to ``board``'s times over :data:`CAMPAIGN_CHECK_POINTS` of its points, None without any."""
    from cimsplit.compiler.calibration_check import reference_points, speed_check

    result = speed_check(board, reference_points(board, count=CAMPAIGN_CHECK_POINTS))
    return result.ratio if result.references else None


def _save(model: HostModel, output: Path) -> None:
    try:
        model.save(output)
    except OSError as exc:
        raise CimsplitError(f"cannot write {output}: {exc.strerror or exc}") from None


def speed_verdict(ratios: dict[str, float], counted: Counter[str]) -> str:
    """Whether each kernel class measured (``counted``: its references) runs within :data:`SPEED_TOLERANCE` of the
    calibration (``ratios``: now / then), and by how much those that do not are off."""
    from cimsplit.compiler.calibration_check import DRIFT_CLASSES

    off = [name for name in DRIFT_CLASSES if counted[name] and abs(ratios[name] - 1) > SPEED_TOLERANCE]
    if not off:
        return f"this machine runs as calibrated (within {100 * SPEED_TOLERANCE:.0f} % in each kernel class)"
    drift = ", ".join(f"{name} kernels {100 * abs(ratios[name] - 1):.0f} % {'slower' if ratios[name] > 1 else 'faster'} "
                      f"(predicted {100 * abs(ratios[name] - 1) / ratios[name]:.0f} % {'low' if ratios[name] > 1 else 'high'})"
                      for name in off)
    return (f"this machine does not run as calibrated: {drift} (`calibrate --check` with -o rescales the calibration to "
            "this speed; or calibrate it anew, or measure when it is quiet)")


def check(source: str, count: int, output: Path | None = None) -> int:
    """``--check``: measure up to ``count`` of the calibration's points here and print how the times compare; with
    ``output``, write the calibration rescaled to them."""
    import onnxruntime as ort

    from cimsplit.compiler.calibration_check import DRIFT_CLASSES, drift_class, reference_points, rescaled, speed_check
    from cimsplit.compiler.host_model import HostModel
    from cimsplit.compiler.host_profile import cpu_model

    if count < 1:
        raise CimsplitError(f"--points must be at least 1, not {count}")
    board = HostModel.load(source)
    references = reference_points(board, count=count)
    if not references:
        raise CimsplitError(f"none of the samples of {source} is a point this cimsplit can measure again",
                            hint="calibrate the board anew")
    print(f"{source}: calibrated {board.campaign.get('created', 'at an unrecorded time')} on {board.cpu}, "
          f"onnxruntime {board.ort_version}, {board.threads} thread(s)")
    for what, there, here in (("cpu", board.cpu, cpu_model()), ("onnxruntime", board.ort_version, ort.__version__)):
        if there != here:
            print(f"note: this machine's {what} is {here}, not the calibration's")
    result = speed_check(board, references)
    if not result.references:
        raise CimsplitError(f"none of the {len(references)} points of {source} tried could be measured here as its kind")
    low, high = result.quartiles()
    ratios = result.ratios()
    counted = Counter(drift_class(r.kind) for r in result.references)
    by_class = ", ".join(f"{name} {ratios[name]:.3f} ({counted[name]})" for name in DRIFT_CLASSES if counted[name])
    print(f"measured {len(result.references)} of its points again: time now / then, median {result.ratio:.3f} "
          f"(quartiles {low:.3f}-{high:.3f}); by kernel class (points): {by_class}")
    print(speed_verdict(ratios, counted))
    if output is not None:
        _save(rescaled(board, result), output)
        print(f"wrote {output}: {source} rescaled to this machine's speed now "
              f"({', '.join(f'{name} x{ratios[name]:.3f}' for name in DRIFT_CLASSES)})")
    return 0
