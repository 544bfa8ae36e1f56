"""First use: what a new user waits for, in fresh processes.

Three child processes, each timing its own ``import wsgemm`` and calls:

1. **empty cache** (a fresh ``WSGEMM_CACHE_DIR``): the first ``wsgemm.gemm`` of a
   3000x1000x2000 bf16 product (B an ``nn.Linear`` weight as ``w.t()``), checked against
   a float32 reference; the C++ host fast path builds in the background meanwhile;
2. **the same cache, a new process**: the same call, everything loaded from disk;
3. **precompile, another empty cache**: ``wsgemm.precompile`` of the ``llm`` suite's
   shapes (``benchmarks/shapes.py``), then one of them called;
4. **QuACK, where installed**: the same first call through ``quack.gemm_interface.gemm``
   (its heuristic config) in a new process, its kernel cache and CuTe DSL's pointed at an
   empty directory, beside wsgemm's.

    python -m benchmarks.bench_first_call [--out DIR]

Prints a table and writes ``first_call_<gpu>.json`` to ``--out`` (default: print only).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# One product timed in a new process: its first call, a second one, the import before
# them. IMPORTS (below) binds ``gemm(a, b)`` and ``facts()``, what else the row reports.
FIRST_CALL = r"""
import json, time
t0 = time.perf_counter()
IMPORTS
t_import = time.perf_counter() - t0
a = torch.randn(3000, 2000, device="cuda").bfloat16()
w = torch.randn(1000, 2000, device="cuda").bfloat16()
torch.cuda.synchronize()
t0 = time.perf_counter()
d = gemm(a, w.t())
torch.cuda.synchronize()
first = time.perf_counter() - t0
ref = a.float() @ w.float().t()
error = ((d.float() - ref).norm() / ref.norm()).item()
t0 = time.perf_counter(); gemm(a, w.t()); torch.cuda.synchronize(); second = time.perf_counter() - t0
print(json.dumps({"import_s": t_import, "first_call_s": first, "second_call_s": second, "relative_error": error,
                  **facts()}))
"""
WSGEMM_FIRST_CALL = FIRST_CALL.replace("IMPORTS", """import torch, wsgemm
gemm = wsgemm.gemm
facts = lambda: {"fast_path_loaded_after_first_call": wsgemm.fast_path.loaded() is not None}""")
QUACK_FIRST_CALL = FIRST_CALL.replace("IMPORTS", """import torch
from benchmarks.harness import quack_gemm
gemm, note = quack_gemm(autotune=False)
if gemm is None:
    print(json.dumps({"skipped": note}))
    raise SystemExit
facts = lambda: {"implementation": note}""")

PRECOMPILE = r"""
import json, time
t0 = time.perf_counter()
import torch, wsgemm
from benchmarks import shapes
t_import = time.perf_counter() - t0
problems = shapes.SUITES["llm"]
mnk = sorted({(p.m, p.n, p.k) for p in problems})
t0 = time.perf_counter()
seconds = wsgemm.precompile(mnk, progress=False)
t_precompile = time.perf_counter() - t0
m, n, k = mnk[len(mnk) // 2]
a = torch.randn(m, k, device="cuda").bfloat16(); w = torch.randn(n, k, device="cuda").bfloat16()
torch.cuda.synchronize()
t0 = time.perf_counter(); wsgemm.gemm(a, w.t()); torch.cuda.synchronize(); first = time.perf_counter() - t0
print(json.dumps({"import_s": t_import, "shapes": len(mnk), "precompile_s": t_precompile,
                  "kernels_compiled": sum(1 for s in seconds.values() if s > 0), "first_call_after_s": first,
                  "first_call_shape": [m, n, k]}))
"""

def child(code: str, cache: str) -> dict:
    # Every disk cache a first call could hit, fresh: CuTe DSL's own (its parsed sources)
    # and QuACK's compiled kernels.
    env = dict(os.environ, WSGEMM_CACHE_DIR=cache, CUTE_DSL_CACHE_DIR=os.path.join(cache, "cute-dsl"),
               QUACK_CACHE_DIR=os.path.join(cache, "quack"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900,
                         cwd=Path(__file__).resolve().parents[1])
    if out.returncode:
        raise RuntimeError(f"child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="write first_call_<gpu>.json here")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bench_first_call needs a CUDA GPU", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name()
    with tempfile.TemporaryDirectory() as fresh, tempfile.TemporaryDirectory() as other:
        rows = {"empty cache": child(WSGEMM_FIRST_CALL, fresh),
                "same cache, new process": child(WSGEMM_FIRST_CALL, fresh),
                "precompile llm suite, empty cache": child(PRECOMPILE, other)}
        quack = child(QUACK_FIRST_CALL, other)
        if "skipped" not in quack:
            rows["QuACK, empty cache"] = quack
    print(f"{gpu}; 3000x1000x2000 bf16")
    for name, row in rows.items():
        print(f"{name:<36}" + "  ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in row.items()))
    if args.out:
        tag = "h200" if "H200" in gpu else "h100" if "H100" in gpu else "gpu"
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"first_call_{tag}.json").write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
