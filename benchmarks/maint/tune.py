"""Autotune every shape bucket of some benchmark suites, and keep the autotuner's file.

    WSGEMM_CACHE_DIR=/tmp/ws python -m benchmarks.maint.tune --suite llm --suite decode --save run.json
    python -m benchmarks.maint.tuned_table <committed runs ...> run.json

Calls ``wsgemm.gemm(a, b, config="autotune")`` once per problem, on the operands the
suite times (``benchmarks.harness.make_operands``); problems whose bucket is already in
the cache cost nothing. Start from an empty cache directory to re-tune everything.
The saved file is ``autotune.json`` as the autotuner wrote it
(``wsgemm.tuning.autotune``: every candidate's time per bucket, keyed
``<Gpu.table_key>|<bucket>``, with the M it was timed at).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import torch

import wsgemm
from benchmarks import shapes
from benchmarks.harness import make_operands
from wsgemm import plans
from wsgemm.tuning import autotune


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.maint.tune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", action="append", choices=sorted(shapes.SUITES), required=True)
    p.add_argument("--filter", default=None, help="only problems whose label matches this regular expression")
    p.add_argument("--save", type=Path, required=True, help="where to copy the autotune file (JSON)")
    args = p.parse_args(argv)
    problems = shapes.select(args.suite, args.filter)
    start = time.monotonic()
    for i, problem in enumerate(problems, 1):
        t0 = time.monotonic()
        a, b = make_operands(problem, torch.bfloat16)
        wsgemm.gemm(a, b, config="autotune")
        plan = plans.make_plan(a, b, None, None, "autotune")
        print(f"[{i}/{len(problems)}] {problem.label}: {plan.spec.config.short()} "
              f"({time.monotonic() - t0:.1f} s)", flush=True)
    args.save.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(autotune.cache_path(), args.save)
    print(f"tuned {len(problems)} problems in {time.monotonic() - start:.0f} s; wrote {args.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
