"""Which plans the default path (``config=None``) launches differently in the working
tree than in another commit, on the CPU: how far a planner change reaches before it
costs GPU time, and which shapes an A/B on the GPU must time.

    python -m benchmarks.maint.baseline main /tmp/base
    PYTHONPATH=/tmp/base python -m benchmarks.maint.plan_diff                  # every suite
    PYTHONPATH=/tmp/base python -m benchmarks.maint.plan_diff --set weights    # 3,510 decode/prefill shapes
    PYTHONPATH=/tmp/base python -m benchmarks.maint.plan_diff --gpu h100 --json changed.json

Plans are those the chosen GPU (``--gpu h200`` or ``h100``: ``wsgemm.tuning``'s
presets) would launch, planned on meta tensors in each suite problem's own layout
(``benchmarks/shapes.py``); the ``weights`` set is ``A @ W.t()`` over the weights and
token counts the decode studies swept. ``--json`` writes the changed problems, the
input of an A/B on the GPU.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import torch

from benchmarks import shapes
from wsgemm.tuning import H100_SXM, H200

GPUS = {"h200": H200, "h100": H100_SXM}
# Weights (N, K) of the decode and prefill studies: Qwen2.5 7B/14B, Llama-3 8B/70B and others.
SWEEP_WEIGHTS = ((4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944), (7168, 5120), (5120, 5120),
                 (27648, 5120), (5120, 13824), (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
                 (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672), (1024, 4096), (2048, 2048),
                 (2560, 2560), (3072, 3072), (4096, 11008), (11008, 4096), (12288, 4096), (8192, 2048),
                 (5120, 8192), (14336, 4096))
SWEEP_TOKENS = tuple(range(1, 129)) + (136, 144, 160, 176, 192, 224, 256)
SUITES = ("square", "llm", "decode", "prefill", "qwen", "shortk", "batched")


def problem_set(name: str) -> list[shapes.Problem]:
    if name == "weights":
        return [shapes.Problem(f"weights/{m}x{n}x{k}", m, n, k, layout="b_weight_t")
                for n, k in SWEEP_WEIGHTS for m in SWEEP_TOKENS]
    return [p for suite in (SUITES if name == "suites" else (name,)) for p in shapes.SUITES[suite]]


def meta_operands(p: shapes.Problem):
    lead = (p.batch,) if p.batch > 1 else ()
    a = torch.empty(*lead, p.m, p.k, dtype=torch.bfloat16, device="meta")
    if p.layout == "b_weight_t":
        return a, torch.empty(p.n, p.k, dtype=torch.bfloat16, device="meta").t()
    return a, torch.empty(*lead, p.k, p.n, dtype=torch.bfloat16, device="meta")


def planned(package, problems, gpu) -> dict[str, str]:
    """{label: "mode config"} the package's default path launches for each problem. A
    package from before ``wsgemm.plans`` planned through ``api._kernel_for`` with the
    GPU's name and SM count."""
    found = {}
    for p in problems:
        a, b = meta_operands(p)
        if hasattr(package, "plans"):
            shape, dtype, batched, batches = package.plans.validate_shapes_and_dtypes(a, b, None, None, None)
            mode, spec, _ = package.plans._kernel_for(a, b, None, None, None, shape, dtype, batched, batches, gpu)
        else:
            shape, dtype, batched, batches = package.api.validate_shapes_and_dtypes(a, b, None, None, None)
            mode, spec, _ = package.api._kernel_for(a, b, None, None, None, shape, dtype, batched, batches,
                                                    gpu.name, gpu.arch, gpu.sms)
        found[p.label] = f"{mode} {spec.config.short()}"
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", default="suites", help=f"'suites' (all of {', '.join(SUITES)}), one suite, or 'weights'")
    p.add_argument("--gpu", choices=sorted(GPUS), default="h200")
    p.add_argument("--json", type=Path, help="write the changed problems here (the input of a GPU A/B)")
    args = p.parse_args(argv)
    try:
        import wsgemm_base
    except ImportError:
        p.exit(2, "no wsgemm_base: export the commit to compare with (python -m benchmarks.maint.baseline) "
                  "onto PYTHONPATH\n")
    import wsgemm

    gpu = GPUS[args.gpu]
    problems = problem_set(args.set)
    before, after = planned(wsgemm_base, problems, gpu), planned(wsgemm, problems, gpu)
    changed = [prob for prob in problems if before[prob.label] != after[prob.label]]
    rev_file = Path(wsgemm_base.__file__).with_name("BASELINE_REV")
    base = rev_file.read_text().strip() if rev_file.exists() else "?"
    counts = collections.Counter(prob.label.split("/")[0] for prob in changed)
    totals = collections.Counter(prob.label.split("/")[0] for prob in problems)
    print(f"{len(changed)} of {len(problems)} plans change on {gpu.name} (base {base}): "
          + ", ".join(f"{suite} {counts[suite]} of {totals[suite]}" for suite in totals))
    for prob in changed:
        print(f"  {prob.label:40s} {before[prob.label]:60s} -> {after[prob.label]}")
    if args.json:
        args.json.write_text(json.dumps([dict(label=prob.label, m=prob.m, n=prob.n, k=prob.k, batch=prob.batch,
                                              layout=prob.layout, before=before[prob.label], after=after[prob.label])
                                         for prob in changed], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
