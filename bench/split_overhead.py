"""Wall time of split inference against one monolithic onnxruntime session (DESIGN §6).

Builds a zoo model (ResNet-50 by default), compiles it for 100 crossbars at
50 ns per MVM, then times ``cimsplit.runtime.Session.run`` and a plain
onnxruntime session of the original model with the same thread settings
(intra-op threads, sequential, all optimizations), alternating the two run by
run so that machine load hits both alike.  Prints medians, the median of
per-run pair ratios and the best-run ratio (target: split / monolithic <= 1.15),
the bytes the runtime copied per inference, and the load average before and
after (the machine is shared: a ratio measured under load is noisier).

    .venv/bin/python bench/split_overhead.py [--model resnet50] [--image-size 224]
        [--runs 30] [--warmup 3] [--threads 1] [--crossbars 100] [--mvm-latency 50ns]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from cimsplit.cli import main as cli
from cimsplit.models import zoo
from cimsplit.runtime import Session
from cimsplit.runtime.devices import session_options


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--image-size", type=int, default=None)
    parser.add_argument("--int8", action="store_true")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--crossbars", default="100")
    parser.add_argument("--mvm-latency", default="50ns")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cimsplit-bench-") as tmp:
        model_path = Path(tmp) / f"{args.model}.onnx"
        onnx.save(zoo.build(args.model, image_size=args.image_size, int8=args.int8), model_path)
        out = Path(tmp) / "out"
        start = time.perf_counter()
        status = cli(["compile", str(model_path), "-o", str(out), "--crossbars", args.crossbars,
                      "--mvm-latency", args.mvm_latency])
        if status:
            return status
        print(f"compile: {time.perf_counter() - start:.1f} s (profiling included unless cached)")

        load_before = os.getloadavg()
        mono = ort.InferenceSession(str(model_path), sess_options=session_options(args.threads),
                                    providers=["CPUExecutionProvider"])
        with Session(out, threads=args.threads) as split:
            spec = split.input_specs[0]
            x = np.random.default_rng(0).standard_normal(tuple(spec.shape)).astype(spec.dtype)
            feeds = {spec.name: x}
            names = [o.name for o in mono.get_outputs()]
            for _ in range(args.warmup):
                mono.run(names, feeds)
                split.run(feeds)
            t_mono, t_split = [], []
            for k in range(args.runs):
                # Alternate which goes first, so that a load spike or a warm cache favours neither.
                order = [("mono", lambda: mono.run(names, feeds)), ("split", lambda: split.run(feeds))]
                for label, call in order if k % 2 == 0 else order[::-1]:
                    t0 = time.perf_counter()
                    call()
                    (t_mono if label == "mono" else t_split).append(time.perf_counter() - t0)
            parts = len(split.manifest.partitions)
            transfers = len(split.manifest.transfers)
            copied_mb = split.transfer_stats.bytes / split.runs / 1e6
        load_after = os.getloadavg()
    m_mono, m_split = statistics.median(t_mono) * 1e3, statistics.median(t_split) * 1e3
    print(f"model {args.model} (image {args.image_size or 'default'}{', int8' if args.int8 else ''}), "
          f"{parts} partitions, {transfers} transfers, {args.threads} thread(s), {args.runs} runs")
    print(f"load average (1, 5, 15 min): before {' '.join(f'{v:.2f}' for v in load_before)}, "
          f"after {' '.join(f'{v:.2f}' for v in load_after)} on {os.cpu_count()} CPUs")
    print(f"transfers copied {copied_mb:.1f} MB per inference (counted)")
    print(f"monolithic onnxruntime: median {m_mono:.2f} ms per inference")
    print(f"split (cimsplit run):   median {m_split:.2f} ms per inference")
    pair = statistics.median(b / a for a, b in zip(t_mono, t_split))
    print(f"ratio split / monolithic: {m_split / m_mono:.3f} (medians), {pair:.3f} (median of per-run pairs); "
          f"target <= 1.15")
    print(f"best runs: monolithic {min(t_mono) * 1e3:.2f} ms, split {min(t_split) * 1e3:.2f} ms, "
          f"ratio {min(t_split) / min(t_mono):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
