"""Cold start: compile time per config, and what a second process pays.

Runs ``wsgemm.precompile`` for a few configurations in a fresh process with an empty
disk cache (cold: every kernel compiled), then again in a new process with the
cache it left (warm: kernels loaded from disk), and reports the time of each
kernel and of the first ``gemm`` call.

    python -m benchmarks.bench_compile [OUT]

Prints a table and writes ``cold_start.md`` and ``cold_start.json`` to ``OUT``
(default ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import RESULTS  # not harness: the children time a cold import

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch, wsgemm
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
wsgemm.fast_path.load()  # the C++ host fast path: built (cold) or loaded (warm)
t_fast_path = time.perf_counter() - t0
shapes = [(4096, 4096, 4096), (64, 4096, 4096), (8192, 8192, 1024)]
seconds = wsgemm.precompile(shapes, progress=False)
a = torch.randn(512, 512, device="cuda").bfloat16()
t0 = time.perf_counter(); wsgemm.gemm(a, a); torch.cuda.synchronize(); first = time.perf_counter() - t0
print(json.dumps({"import_s": t_import, "fast_path_s": t_fast_path, "per_shape_s": {str(k): v for k, v in seconds.items()}, "first_call_s": first}))
"""


def run_child(cache: str) -> dict:
    env = {**os.environ, "WSGEMM_CACHE_DIR": cache}
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode:
        raise RuntimeError(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_compile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", type=Path, default=RESULTS, help="output folder (default: benchmarks/results/)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache:
        cold = run_child(cache)
        warm = run_child(cache)
    report = {"cold": cold, "warm": warm}
    lines = ["# Cold start: compile vs disk cache", "",
             "| | import wsgemm s | C++ fast path s | " + " | ".join(f"{k} s" for k in cold["per_shape_s"])
             + " | first gemm s |",
             "|---|---|---|" + "---|" * len(cold["per_shape_s"]) + "---|"]
    for name, r in report.items():
        lines.append(f"| {name} | {r['import_s']:.2f} | {r['fast_path_s']:.2f} | "
                     + " | ".join(f"{v:.2f}" for v in r["per_shape_s"].values()) + f" | {r['first_call_s']:.2f} |")
    lines += ["", "cold: fresh process, empty disk cache; warm: fresh process, the cache the cold run left. "
              "The C++ fast path is built once per PyTorch version (cold) and loaded after (warm).",
              "Regenerate: `python -m benchmarks.bench_compile`"]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "cold_start.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "cold_start.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
