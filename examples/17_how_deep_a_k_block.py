"""17 -- Decode tiles: how deep a k-block.

Teaches: what one stage of the ring carries, and why a memory-bound tile wants it deep.
A decode tile streams a slab of the weight through its shared-memory ring. Each stage is
one round trip of the pipeline (example 01): the producer waits for a free slot, issues
its TMA loads and announces their bytes to the slot's full barrier; the MMA warps wait
on that barrier, multiply and free the slot. A 64-deep k-block holds 128 B of each
operand row: one 128 B-swizzled TMA box per operand. A 128-deep one holds 256 B of each
row as two boxes issued together. On half the stages the same bytes are in flight, and
each round trip moves twice the bytes. On an H200 that ran decode plans up to 8 % faster.
Which of the two effects buys it has not been measured.

Part 1 compiles the swapped 64x16 decode tile at both depths for sm_90a (no GPU) and
counts what one k-block issues. Part 2 shows which plans the default path deepens
(``heuristics.with_deep_weight_k_blocks``). Part 3 prints the H200's graph-replay times
at both depths, read from the committed reports (benchmarks/NOTES.md sections 62-63).

Needs: any machine (compile only; committed measurements).
Run:   python examples/17_how_deep_a_k_block.py
"""

import re
import sys
from pathlib import Path

from wsgemm import GemmConfig, heuristics
from wsgemm import config as cfg
from wsgemm.compile import compile_spec

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
sys.path.insert(0, str(RESULTS.parent))
from result_files import load_json  # noqa: E402  (reads reports moved into results/archive.tar.xz too)
H200_SMS = 132
TMA_LOAD = "cp.async.bulk.tensor.2d.shared::cta.global"


def part1() -> None:
    for config in (GemmConfig(tile_m=64, tile_n=16, stages=16), GemmConfig(tile_m=64, tile_n=16, tile_k=128, stages=8)):
        spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", config)
        ptx = compile_spec(spec, keep_artifacts=True).ptx
        budget = cfg.smem_budget(spec)
        wgmmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)
        print(f"64x16, {config.tile_k} deep: per k-block {ptx.count(TMA_LOAD)} TMA loads (weight and tokens), "
              f"{len(wgmmas)} x {wgmmas[0]}")
        print(f"  a stage: {budget.stage_bytes} B announced to its full barrier; {budget.stages} stages, "
              f"{budget.stages * budget.stage_bytes // 1024} KiB in flight; "
              f"{128 * config.tile_k // 64} B of each weight row a round trip\n")


def part2() -> None:
    print("The model's plans for two Llama-3 8B weights, as launched (the H200's tuned table may pick")
    print("other tiles; the rule treats them the same way):")
    for n, k in ((6144, 4096), (28672, 4096)):
        for m in (1, 16, 32, 48, 64, 128):
            chosen = heuristics.choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
            kernel_m, kernel_n = (n, m) if chosen.swap_ab else (m, n)
            launched = heuristics.as_launched("sm90", chosen, kernel_m, kernel_n, k, 1, H200_SMS, "bf16", "bf16")
            tile = f"{'swap ' if chosen.swap_ab else ''}{launched.tile_m}x{launched.tile_n}"
            clusters = f"c{launched.cluster_m}x{launched.cluster_n}"
            print(f"  {f'{m}x{n}x{k}':>14}: {tile:10s} {clusters}  {launched.tile_k}-deep k-blocks")
    print()


def plan_name(configs: dict) -> str:
    """'swap 64x32 c1x1 split 2' from the configs' short names."""
    shallow = configs["64-deep"]
    tile, clusters = shallow.split("_")[:2]
    split = re.search(r"_split(\d+)", shallow)
    swapped = any("swapab" in name for name in configs.values())
    return f"{'swap ' if swapped else ''}{tile.rsplit('x', 1)[0]} {clusters}{f' split {split[1]}' if split else ''}"


def part3() -> None:
    print("Measured on an H200 (graph replays of 20 calls, us per call; the default plan at both depths):")
    print(f"  {'shape':>15}  {'plan':28}  {'64 deep':>7}  {'128 deep':>8}  {'gain':>6}")
    for name in ("deep_k_blocks", "deep_k_blocks_tokens_24_48", "deep_k_blocks_tokens_64_128"):
        for shape, row in list(load_json(RESULTS / f"{name}.json.gz")["rows"].items())[::3]:  # every third
            us = row["graph_us"]
            print(f"  {shape:>15}  {plan_name(row['configs']):28}  {us['64-deep']:7.2f}  {us['128-deep']:8.2f}  "
                  f"{us['64-deep'] / us['128-deep']:5.3f}x")
    print("\nSwapped tiles of up to 32 token columns gained in every run, so the rule deepens them. Unswapped")
    print("64-row tiles gained where they were 160 or more weight columns wide and unclustered; narrower ones")
    print("ran 0.96-1.04x across runs (64x48 above, 0.959x in the A/B of NOTES section 63), so they stay 64")
    print("deep; in 2x1 clusters they lost up to 11 %.")


if __name__ == "__main__":
    print("1. What one k-block issues\n")
    part1()
    print("2. Which plans the default path deepens\n")
    part2()
    print("3. What the H200 measured\n")
    part3()
