"""07 -- Read what cuBLAS runs, and borrow its ideas.

Teaches: cuBLAS's kernel names say how it tiles a GEMM (``torch.profiler`` shows
them; ``benchmarks/sweep_configs.py`` records them beside its sweeps). For GEMMs
with 64-512 tokens against a 4096-6144-wide weight they pointed at four levers,
each shown here with its arithmetic and its measurement on an H200:

1. deep rings for narrow tiles: more bytes in flight per SM (Little's law);
2. 2-CTA clusters that multicast the weight tile: each tile is read from L2 once
   for two CTAs;
3. swapping A and B, so that the tokens fill the MMA's N and the weight its 64 rows;
4. past 128 tokens, two token tiles as wide as the tokens need (wgmma's N runs to
   256) instead of a third 128-row tile that is mostly padding.

The shared-memory budgets come from ``wsgemm.config`` (what the kernel allocates);
the times from benchmarks/results/sweep_small_mid_m.json.gz (benchmarks/NOTES.md
section 13) and, for 4, from table_one_wave_off_m_ab.json.gz,
swap_two_tiles_ab.json.gz and fitted_token_tiles_ab_2.json.gz (sections 31, 32 and 34).

Needs: any machine (pure Python, no GPU).
Run:   python examples/07_what_cublas_runs.py
"""

import re
import sys
from pathlib import Path

from wsgemm import GemmConfig
from wsgemm import config as cfg

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
sys.path.insert(0, str(RESULTS.parent))
from result_files import load_json  # noqa: E402  (reads reports moved into results/archive.tar.xz too)
SWEEPS = load_json(RESULTS / "sweep_small_mid_m.json.gz")["sweeps"]
LOAD_LATENCY_US = 1.0  # a TMA load from HBM under load, roughly (wsgemm.heuristics)


def measured(shape: list, *labels: str) -> tuple:
    """Median us of ``labels`` and of torch.matmul, all from the same sweep (timings
    from different runs do not compare), and the kernel torch.matmul ran."""
    for sweep in SWEEPS:
        for entry in sweep["shapes"]:
            if entry["shape"] == shape and all(label in entry["us"] for label in labels):
                us = entry["us"]
                return (*(us[label][0] for label in labels), us["torch.matmul"][0], entry["cublas_kernels"][0])
    raise KeyError((shape, labels))


def decode(name: str) -> str:
    """nvjet_sm90_tst_<tile>_<k-tile>x<stages>_<cluster>_<raster>_...: cuBLAS is
    column-major (it computes D^T), so its first dimension runs along our N."""
    match = re.search(r"_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_", name)
    if not match:
        return name
    tn, tm, tk, stages, cn, cm = match.groups()
    return (f"tile {tn} weight rows x {tm} tokens (k {tk}), {stages} stages, "
            f"cluster {cn} along the weight x {cm} along the tokens")


print("What torch.matmul ran (H200, B = W.t()):")
for shape in ([64, 4096, 4096], [96, 6144, 4096], [128, 4096, 4096], [512, 4096, 4096]):
    torch_us, kernel = measured(shape)
    print(f"  {'x'.join(map(str, shape)):>14}: {torch_us:5.1f} us  {kernel}")
    print(f"  {'':>14}  = {decode(kernel)}")

print("\n1. Deep rings. A stage holds one k-block of both operand tiles; wsgemm fills")
print("   shared memory with as many as fit (up to config.DEFAULT_MAX_STAGES):")
for tile_m, tile_n in ((128, 256), (128, 128), (64, 64), (64, 16)):
    budget = cfg.smem_budget(cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n",
                                           GemmConfig(tile_m=tile_m, tile_n=tile_n)))
    in_flight = budget.stages * budget.stage_bytes
    print(f"   {tile_m:3d}x{tile_n:<3d}: {budget.stage_bytes // 1024:2d} KiB a stage, {budget.stages:2d} stages, "
          f"{in_flight // 1024:3d} KiB in flight -> at most {in_flight / LOAD_LATENCY_US / 1e3:5.0f} GB/s per SM")
deep, shallow, torch_us, _ = measured([64, 4096, 4096], "swap 64x64 c1x1", "swap 64x64 c1x1 s8")
print(f"   64x4096x4096, swapped 64x64 tiles: 8 stages {shallow:.1f} us, 13 stages {deep:.1f} us "
      f"(torch.matmul {torch_us:.1f} us)")

print("\n2. Multicast pairs. Two M tiles that need the same weight tile share one cluster;")
print("   the TMA multicast delivers each weight tile to both CTAs from one L2 read.")
for shape, tile in (([96, 6144, 4096], "64x96"), ([128, 4096, 4096], "64x64")):
    alone, paired, torch_us, _ = measured(shape, f"{tile} c1x1", f"{tile} c2x1")
    print(f"   {'x'.join(map(str, shape))}, {tile} tiles: unpaired {alone:.1f} us, paired {paired:.1f} us "
          f"(torch.matmul {torch_us:.1f} us)")
four, two, _, _ = measured([512, 4096, 4096], "128x128 c4x1", "128x128 c2x1")
print(f"   Bigger is not better: 512x4096x4096 in 4-CTA clusters {four:.1f} us against {two:.1f} us for")
print("   pairs: a cluster must fit in one GPC, and the H200 holds 30 clusters of 4 at once, not 32.")

print("\n3. Swap A and B. 96 tokens in a 64-row M tile leave 32 rows of the second tile")
print("   empty; as the MMA's N they fit one 96-wide tile, and the weight fills the 64 rows.")
swapped, torch_us, _ = measured([96, 6144, 4096], "swap 64x96 c1x1")
plain, plain_torch_us, _ = measured([96, 6144, 4096], "64x96 c2x1")
print(f"   96x6144x4096: swapped 64x96 {swapped:.1f} us (torch.matmul {torch_us:.1f} us in that sweep);")
print(f"   plain 64x96 pairs {plain:.1f} us (torch.matmul {plain_torch_us:.1f} us in theirs)")


def side_by_side(name: str, shape: list) -> tuple:
    """Median us of wsgemm's default before and after a change and of torch.matmul, from
    one A/B run (``sweep_configs.py --default --base``), and the kernel cuBLAS ran."""
    for entry in load_json(RESULTS / name)["shapes"]:
        if entry["shape"] == shape:
            us = entry["us"]  # [median, p10, p90] per label
            return (us["base default"][0], us["default"][0], us["torch.matmul"][0], entry["cublas_kernels"][0],
                    entry["default_plan"])
    raise KeyError((name, shape))


print("\n4. Past 128 tokens. 260 tokens against the 70B o-proj weight (8192x8192):")
table, model, torch_us, kernel, plan = side_by_side("table_one_wave_off_m_ab.json.gz", [260, 8192, 8192])
print(f"   torch.matmul ran {kernel} = {decode(kernel)}:")
print(f"   two 136-token tiles hold 260 tokens, {260 / 272:.0%} of their MMA rows real.")
print(f"   128-row M tiles need 3 rows for 260 tokens, {260 / 384:.0%} real (the last row holds 4);")
tile = plan.split()[1].split("x64_")[0]
print(f"   the M = 512 table winner ran them on 96 of 132 SMs: {table:.1f} us; the model's {tile} tiles")
print(f"   (129 of them) in 1x2 clusters: {model:.1f} us (torch.matmul {torch_us:.1f} us in that run).")
before, swapped, torch_us, _, plan = side_by_side("swap_two_tiles_ab.json.gz", [260, 8192, 8192])
print(f"   Swapped, two 160-token tiles ({260 / 320:.0%} real) paired by a 1x2 cluster on 128 SMs: "
      f"{swapped:.1f} us")
print(f"   against {before:.1f} us for the unswapped plan (torch.matmul {torch_us:.1f} us in that run).")
wide, fitted, torch_us, _, plan = side_by_side("fitted_token_tiles_ab_2.json.gz", [260, 8192, 8192])
tokens = int(plan.split()[1].split("x")[1])  # "swap 128x144x64_...": the N tile holds the tokens
print(f"   Fitted to the tokens in steps of 16 as cuBLAS's are, two {tokens}-token tiles "
      f"({260 / (2 * tokens):.0%} real): "
      f"{fitted:.1f} us")
print(f"   against {wide:.1f} us for the 160-wide ones (torch.matmul {torch_us:.1f} us in that run).")
print("\nwsgemm's model offers all four (wsgemm/heuristics.py); the autotuner measures which wins.")
