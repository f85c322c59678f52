"""Hostile surroundings of a good model: hardware files, host profiles, output directories, flags,
and damaged compile outputs fed to `cimsplit run`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import _models as m
import numpy as np
import onnx
from _harness import ERROR, OK, Case, Workspace


def _model(ws: Workspace) -> Path:
    path = ws.root / "model.onnx"
    if not path.exists():
        m.cnn_file(ws.root)
    return path


def _compile_with(*extra: str, hw_text: str | bytes | None = None):
    """compile the CNN with its fast profile and ``extra`` flags; ``hw_text`` becomes ``hw.toml`` (``--hw``)."""
    def build(ws: Workspace) -> list[str]:
        args = list(extra)
        if hw_text is not None:
            hw = ws.path("hw.toml")
            hw.write_bytes(hw_text if isinstance(hw_text, bytes) else hw_text.encode())
            args += ["--hw", str(hw)]
        return ws.compile_args(_model(ws), ws.root / "out", *args)
    return build


def _with_profile(edit):
    """compile with a host profile JSON edited by ``edit(dict) -> dict | str | bytes``."""
    def build(ws: Workspace) -> list[str]:
        model = _model(ws)
        good = json.loads(ws.profile(model).read_text())
        bad = edit(good)
        path = ws.path("bad_profile.json")
        if isinstance(bad, bytes):
            path.write_bytes(bad)
        else:
            path.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        return ["compile", str(model), "-o", str(ws.root / "out"), "--host-profile", str(path), "--time-limit", "5"]
    return build


def _set(key, value):
    def edit(profile):
        profile[key] = value
        return profile
    return edit


def _first_node(key, value):
    def edit(profile):
        first = sorted(profile["nodes"])[0]
        profile["nodes"][first][key] = value
        return profile
    return edit


def _other_models_profile(ws: Workspace) -> list[str]:
    other = m.save(m.matmul(), ws.root, "other.onnx")
    return ["compile", str(_model(ws)), "-o", str(ws.root / "out"), "--host-profile", str(ws.profile(other))]


def _out(setup):
    """compile into the output path that ``setup(ws) -> Path`` prepares."""
    def build(ws: Workspace) -> list[str]:
        model = _model(ws)
        ws.profile(model)
        out = setup(ws)
        return ws.compile_args(model, out)
    return build


def _out_force(setup):
    def build(ws: Workspace) -> list[str]:
        return [*_out(setup)(ws), "--force"]
    return build


def _nonempty(ws: Workspace) -> Path:
    out = ws.path("out", "keep.txt")
    out.write_text("mine")
    return out.parent


def _below_file(ws: Workspace) -> Path:
    ws.path("afile").write_text("x")
    return ws.root / "afile" / "out"


def _is_file(ws: Workspace) -> Path:
    path = ws.path("out")
    path.write_text("x")
    return path


def _model_folder(ws: Workspace) -> Path:
    return ws.root


def _model_itself(ws: Workspace) -> Path:
    return _model(ws)


# ---- run on a compiled directory -----------------------------------------------------------------------------------

def _run(damage, *extra: str):
    """compile the CNN, ``damage(ws, out)`` its output, then ``run`` it."""
    def build(ws: Workspace) -> list[str]:
        out = ws.compiled(_model(ws))
        damage(ws, out)
        return ["run", str(out), *extra]
    return build


def _no_damage(ws, out):
    pass


def _partition(out: Path) -> Path:
    plan = json.loads((out / "plan.json").read_text())
    return out / plan["partitions"][0]["file"]


def _truncate_partition(ws, out):
    part = _partition(out)
    data = part.read_bytes()
    part.write_bytes(data[: len(data) // 2])


def _garbage_partition(ws, out):
    _partition(out).write_bytes(b"\x08\x07garbage" * 50)


def _delete_partition(ws, out):
    _partition(out).unlink()


def _edit_plan(edit):
    def damage(ws, out):
        path = out / "plan.json"
        plan = json.loads(path.read_text())
        result = edit(plan)
        path.write_text(result if isinstance(result, str) else json.dumps(result))
    return damage


def _plan_key(key):
    def edit(plan):
        del plan[key]
        return plan
    return edit


def _plan_file(value):
    def edit(plan):
        plan["partitions"][0]["file"] = value
        return plan
    return edit


def _plan_device(plan):
    plan["partitions"][0]["device"] = "gpu"
    return plan


def _delete_plan(ws, out):
    (out / "plan.json").unlink()


def _input_file(array, name="x"):
    def damage(ws, out):
        np.save(ws.root / "in.npy", array)
    return damage


def _run_input(array, spec: str = "x={}"):
    def build(ws: Workspace) -> list[str]:
        out = ws.compiled(_model(ws))
        np.save(ws.root / "in.npy", array)
        return ["run", str(out), "--input", spec.format(ws.root / "in.npy")]
    return build


def _run_outputs(where: str):
    def build(ws: Workspace) -> list[str]:
        out = ws.compiled(_model(ws))
        return ["run", str(out), "--save-outputs", str(ws.root / where)]
    return build


def _saved_outputs(ws: Workspace) -> None:
    saved = np.load(ws.root / "y.npz")
    assert saved["y"].shape == (1, 10)


def _run_compiled(ws: Workspace) -> None:
    """After an OK compile: the directory runs, and every file written passes the full checker."""
    out = ws.root / "out"
    for file in out.glob("*.onnx"):
        onnx.checker.check_model(onnx.load(str(file)), full_check=True)


GOOD_X = np.zeros((1, 3, 8, 8), np.float32)

CASES = [
    # hardware files and values
    Case("hw-missing-file", "hardware", ERROR, _compile_with("--hw", "nope.toml"), "does not exist"),
    Case("hw-unknown-preset", "hardware", ERROR, _compile_with("--hw", "riscv"), "unknown hardware"),
    Case("hw-not-toml", "hardware", ERROR, _compile_with(hw_text="crossbars = = 3"), "not valid TOML"),
    Case("hw-not-utf8", "hardware", ERROR, _compile_with(hw_text=b"name = \"\xff\xfe\"\n"), "UTF-8"),
    Case("hw-unknown-key", "hardware", ERROR, _compile_with(hw_text="warp = 9\n"), "unknown key"),
    Case("hw-table-value", "hardware", ERROR, _compile_with(hw_text="[crossbars]\nn = 1\n"), "table"),
    Case("hw-negative-crossbars", "hardware", ERROR, _compile_with(hw_text="crossbars = -4\n")),
    Case("hw-float-crossbars", "hardware", ERROR, _compile_with(hw_text="crossbars = 1.5\n"), "integer"),
    Case("hw-bad-latency-unit", "hardware", ERROR, _compile_with(hw_text='mvm_latency = "5 parsecs"\n')),
    Case("hw-good-file", "hardware", OK, _compile_with(hw_text='base = "arm"\ncrossbars = 3\nmvm_latency = "50ns"\n')),
    Case("hw-directory", "hardware", ERROR, lambda ws: [*_compile_with()(ws), "--hw", str(ws.path("d.toml", "x").parent)]),
    Case("flag-crossbars-zero", "flags", OK, _compile_with("--crossbars", "0")),
    Case("flag-crossbars-negative", "flags", ERROR, _compile_with("--crossbars", "-3")),
    Case("flag-crossbars-text", "flags", ERROR, _compile_with("--crossbars", "many"), "integer"),
    Case("flag-mvm-latency-bad", "flags", ERROR, _compile_with("--mvm-latency", "fast")),
    Case("flag-mvm-latency-negative", "flags", ERROR, _compile_with("--mvm-latency", "-5ns")),
    Case("flag-bandwidth-zero", "flags", ERROR, _compile_with("--bus-bandwidth", "0GB/s")),
    Case("flag-crossbar-size-zero", "flags", ERROR, _compile_with("--crossbar-size", "0x256")),
    Case("flag-crossbar-size-text", "flags", ERROR, _compile_with("--crossbar-size", "big")),
    # host profiles
    Case("profile-missing", "profile", ERROR, _compile_with("--host-profile", "nope.json"), "does not exist"),
    Case("profile-not-json", "profile", ERROR, _with_profile(lambda p: "{nope"), "not JSON"),
    Case("profile-not-utf8", "profile", ERROR, _with_profile(lambda p: b"\xff\xfe{}")),
    Case("profile-array", "profile", ERROR, _with_profile(lambda p: [1, 2]), "not a JSON object"),
    Case("profile-threads-many", "profile", ERROR, _with_profile(_set("threads", "many")), "threads"),
    Case("profile-runs-null", "profile", ERROR, _with_profile(_set("runs", None)), "runs"),
    Case("profile-warmup-bool", "profile", ERROR, _with_profile(_set("warmup", True)), "warmup"),
    Case("profile-no-nodes", "profile", ERROR, _with_profile(lambda p: {k: v for k, v in p.items() if k != "nodes"}), "nodes"),
    Case("profile-nodes-list", "profile", ERROR, _with_profile(_set("nodes", [])), "nodes"),
    Case("profile-latency-text", "profile", ERROR, _with_profile(_first_node("median_ns", "fast")), "numeric"),
    Case("profile-format-version", "profile", ERROR, _with_profile(_set("format_version", 99)), "format version"),
    Case("profile-other-model", "profile", ERROR, _other_models_profile),
    # output directories
    Case("outdir-nonempty", "outdir", ERROR, _out(_nonempty), "not empty"),
    Case("outdir-nonempty-force", "outdir", OK, _out_force(_nonempty), after=_run_compiled),
    Case("outdir-is-file", "outdir", ERROR, _out(_is_file), "not a directory"),
    Case("outdir-below-file", "outdir", ERROR, _out(_below_file), "which is a file"),
    Case("outdir-under-proc", "outdir", ERROR, _out(lambda ws: Path("/proc/cimsplit-hostile/out")), "not writable"),
    Case("outdir-under-proc-self", "outdir", ERROR, _out(lambda ws: Path("/proc/self/cimsplit-out")), "not writable"),
    Case("outdir-model-folder-force", "outdir", ERROR, _out_force(_model_folder), "contains the input"),
    Case("outdir-model-file", "outdir", ERROR, _out_force(_model_itself)),
    Case("outdir-nested-missing-parents", "outdir", OK, _out(lambda ws: ws.root / "a" / "b" / "out")),
    # flags
    Case("flag-time-limit-zero", "flags", ERROR, _compile_with("--time-limit", "0"), "time-limit"),
    Case("flag-time-limit-nan", "flags", ERROR, _compile_with("--time-limit", "nan"), "time-limit"),
    Case("flag-time-limit-text", "flags", ERROR, _compile_with("--time-limit", "soon")),
    Case("flag-solver-unknown", "flags", ERROR, _compile_with("--solver", "magic"), "unknown solver"),
    Case("flag-mip-gap-big", "flags", ERROR, _compile_with("--mip-gap", "1.5"), "mip-gap"),
    Case("flag-unknown", "flags", ERROR, _compile_with("--warp-speed")),
    Case("flag-missing-output", "flags", ERROR, lambda ws: ["compile", str(_model(ws))]),
    Case("flag-no-subcommand", "flags", ERROR, lambda ws: []),
    Case("flag-unknown-subcommand", "flags", ERROR, lambda ws: ["transmogrify"]),
    Case("flag-run-repeat-negative", "flags", ERROR, _run(_no_damage, "--repeat", "-1")),
    Case("flag-run-threads-zero", "flags", ERROR, _run(_no_damage, "--threads", "0")),
    Case("flag-run-input-malformed", "flags", ERROR, _run(_no_damage, "--input", "x"), "bad --input"),
    Case("flag-run-input-missing-file", "flags", ERROR, _run(_no_damage, "--input", "x=/nonexistent.npy")),
    Case("flag-run-input-wrong-shape", "flags", ERROR, _run_input(np.zeros((1, 3, 9, 9), np.float32))),
    Case("flag-run-input-wrong-dtype", "flags", ERROR, _run_input(np.zeros((1, 3, 8, 8), np.int32))),
    Case("flag-run-input-unknown-name", "flags", ERROR, _run_input(GOOD_X, "nope={}")),
    Case("flag-run-input-good", "flags", OK, _run_input(GOOD_X)),
    Case("flag-run-save-outputs-missing-folder", "flags", ERROR, _run_outputs("nofolder/y.npz"), "does not exist"),
    Case("flag-run-save-outputs", "flags", OK, _run_outputs("y.npz"), after=_saved_outputs),
    Case("flag-run-check", "flags", OK, _run(_no_damage, "--check")),
    # damaged compile outputs
    Case("damaged-no-dir", "damaged", ERROR, lambda ws: ["run", str(ws.root / "nodir")], "no such directory"),
    Case("damaged-no-plan", "damaged", ERROR, _run(_delete_plan), "no plan.json"),
    Case("damaged-plan-not-json", "damaged", ERROR, _run(_edit_plan(lambda p: "{oops")), "cannot read"),
    Case("damaged-plan-list", "damaged", ERROR, _run(_edit_plan(lambda p: [])), "plan"),
    Case("damaged-plan-no-partitions", "damaged", ERROR, _run(_edit_plan(_plan_key("partitions"))), "not a valid"),
    Case("damaged-plan-no-timeline", "damaged", ERROR, _run(_edit_plan(_plan_key("timeline"))), "not a valid"),
    Case("damaged-plan-unknown-device", "damaged", ERROR, _run(_edit_plan(_plan_device)), "unknown device"),
    Case("damaged-plan-file-escapes", "damaged", ERROR, _run(_edit_plan(_plan_file("../model.onnx")))),
    Case("damaged-partition-truncated", "damaged", ERROR, _run(_truncate_partition), "damaged"),
    Case("damaged-partition-garbage", "damaged", ERROR, _run(_garbage_partition), "damaged"),
    Case("damaged-partition-missing", "damaged", ERROR, _run(_delete_partition), "missing"),
    Case("damaged-original-gone-check", "damaged", ERROR,
         _run(lambda ws, out: shutil.move(str(_model(ws)), str(ws.root / "moved.onnx")), "--check"), "gone"),
]
