"""Which plans the default path (``config=None``) launches differently in the working
tree than in another commit, on the CPU: how far a heuristic change reaches before it
costs GPU time (the "N of 3510 plans change" counts of benchmarks/NOTES.md).

    python benchmarks/baseline.py main /tmp/base
    PYTHONPATH=/tmp/base python benchmarks/plan_diff.py                 # 3510 sweep shapes
    PYTHONPATH=/tmp/base python benchmarks/plan_diff.py --set held-out  # 4032 more
    PYTHONPATH=/tmp/base python benchmarks/plan_diff.py --set suites
    PYTHONPATH=/tmp/base python benchmarks/plan_diff.py --sample 3   # + shapes for an A/B

Plans are those an H200 (132 SMs, sm90) would launch for ``A @ W.t()`` (bf16, an
``nn.Linear`` weight), planned on meta tensors; changes are printed by weight (N x K)
and plan pair with the token counts M they cover, to pick A/B shapes from.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Weights (N, K) swept in sessions 46-48: Qwen2.5 7B/14B, Llama-3 8B/70B and others.
SWEEP_WEIGHTS = ((4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944), (7168, 5120), (5120, 5120),
                 (27648, 5120), (5120, 13824), (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
                 (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672), (1024, 4096), (2048, 2048),
                 (2560, 2560), (3072, 3072), (4096, 11008), (11008, 4096), (12288, 4096), (8192, 2048),
                 (5120, 8192), (14336, 4096))
SWEEP_TOKENS = tuple(range(1, 129)) + (136, 144, 160, 176, 192, 224, 256)
# A grid of weights at M = 1-64, held-out shapes of sections 67-68 (three weights overlap the sweep's).
HELD_OUT_ROWS = (1536, 2048, 2560, 3072, 3584, 4096, 4608, 5120, 6144)
HELD_OUT_COLUMNS = (2048, 3072, 4096, 5120, 8192, 11008, 14336)


def shape_set(name: str) -> list[tuple[int, int, int]]:
    """(M, N, K) of a named set."""
    if name == "sweep":
        return [(m, n, k) for n, k in SWEEP_WEIGHTS for m in SWEEP_TOKENS]
    if name == "held-out":
        return [(m, n, k) for n in HELD_OUT_ROWS for k in HELD_OUT_COLUMNS for m in range(1, 65)]
    import shapes
    problems = [p for suite in ("llm", "decode", "prefill", "qwen") for p in shapes.SUITES[suite]]
    return sorted({(p.m, p.n, p.k) for p in problems if p.batch == 1 and p.layout == "b_weight_t"})


def planned(package, problems) -> dict[tuple, str]:
    """The plan ``package``'s default path launches for each problem on an H200."""
    import torch

    plans = {}
    for m, n, k in problems:
        a = torch.empty(m, k, dtype=torch.bfloat16, device="meta")
        b = torch.empty(n, k, dtype=torch.bfloat16, device="meta").t()
        mode, spec, _ = package.api._kernel_for(a, b, None, None, None, (m, n), torch.bfloat16, False, 1,
                                                "NVIDIA H200", "sm90", 132)
        plans[m, n, k] = f"{mode} {spec.config.short()}"
    return plans


def grouped_changes(before: dict, after: dict) -> dict[tuple, list[int]]:
    """{(N, K, plan before, plan after): [M, ...]} for the problems whose plan changed."""
    changes = collections.defaultdict(list)
    for (m, n, k), plan in sorted(before.items(), key=lambda item: (item[0][1], item[0][2], item[0][0])):
        if after[m, n, k] != plan:
            changes[n, k, plan, after[m, n, k]].append(m)
    return changes


def token_ranges(tokens: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    runs = []
    for m in tokens:
        if runs and m == runs[-1][1] + 1:
            runs[-1][1] = m
        else:
            runs.append([m, m])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def ab_sample(changes: dict[tuple, list[int]], per_group: int) -> list[str]:
    """Up to ``per_group`` token counts of each change, spread over its range, as
    ``MxNxK`` for ``sweep_configs.py --shapes``."""
    picked = []
    for (n, k, _, _), tokens in changes.items():
        step = max(1, (len(tokens) - 1) / max(1, per_group - 1))
        picked += [f"{m}x{n}x{k}" for m in dict.fromkeys(tokens[round(i * step)] for i in range(per_group)
                                                         if round(i * step) < len(tokens))]
    return picked


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", choices=("sweep", "held-out", "suites"), default="sweep")
    p.add_argument("--sample", type=int, default=0, metavar="N",
                   help="also print up to N shapes of each change for an A/B (sweep_configs.py --shapes)")
    args = p.parse_args(argv)
    try:
        import wsgemm_base
    except ImportError:
        p.exit(2, "no wsgemm_base: export the commit to compare with (benchmarks/baseline.py) onto PYTHONPATH\n")
    import wsgemm

    problems = shape_set(args.set)
    changes = grouped_changes(planned(wsgemm_base, problems), planned(wsgemm, problems))
    rev_file = Path(wsgemm_base.__file__).with_name("BASELINE_REV")
    base = rev_file.read_text().strip() if rev_file.exists() else "?"
    print(f"{sum(map(len, changes.values()))} of {len(problems)} plans change ({args.set}; base {base})")
    for (n, k, before, after), tokens in changes.items():
        print(f"  {n}x{k} M = {token_ranges(tokens)}: {before} -> {after}")
    if args.sample:
        print("--shapes " + ",".join(ab_sample(changes, args.sample)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
