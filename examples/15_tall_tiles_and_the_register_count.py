"""15 -- Tall tiles: why a 256-row tile has two consumer warpgroups and a 192-row one three.

Teaches: the register limit that decides how an SM90 kernel may split a tile among
its warpgroups, and where tiles taller than 128 rows pay. wgmma multiplies 64 rows at
a time, so one consumer warpgroup per 64 rows is the obvious split. But ptxas
compiles the whole kernel under one register count, the register file over the CTA's
threads (65536 / threads), whatever ``setmaxnreg`` raises the consumers to later, and
no single instruction may need more than that count: a wgmma's accumulators are one
instruction's. Four warpgroups of 64 rows (640 threads, 96 registers) cannot issue
m64n144; two warpgroups of 128 rows each, stacking two wgmmas per k-step as a
ping-pong warpgroup does, stay at 168 and take up to 256x192.

Part 1 compiles 128x256, 192x192 and 256x192 tiles and reads what ptxas did: threads,
the register count in the cubin, wgmmas per k-block. Part 2 shows the checks
``make_spec`` runs before compiling. Part 3 is where the default path uses such
tiles (swapped, one token tile beside 192- or 256-row weight tiles in one wave, at
M = 129-192, where cuBLAS runs the same tiles, or two token tiles beside 192-row ones,
each pair sharing its weight tile, on 9216- to 12672-row weights up to M = 224; plain, two rows of
192-row tiles paired along M at M = 257-384) with the times measured on an H200, read
from the committed benchmarks/results/swap_256_rows_ab.json.gz,
swap_192_rows_ab.json.gz, tall_pairs_ab.json.gz, tall_pairs_wider.json.gz (its last
two shapes are unchanged controls) and plain_tall_tiles_ab.json.gz (benchmarks/NOTES.md
sections 39, 41, 47 and 48).

Needs: any machine (compile only; committed measurements).
Run:   python examples/15_tall_tiles_and_the_register_count.py
"""

import re
import sys
from pathlib import Path

from wsgemm import GemmConfig, heuristics
from wsgemm import config as cfg
from wsgemm.compile import compile_spec
from wsgemm.inspection import cubin_resources

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
sys.path.insert(0, str(RESULTS.parent))
from result_files import load_json  # noqa: E402  (reads reports moved into results/archive.tar.xz too)
H200_SMS = 132


def part1() -> None:
    for config in (GemmConfig(tile_m=128, tile_n=256), GemmConfig(tile_m=192, tile_n=192),
                   GemmConfig(tile_m=256, tile_n=192)):
        spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", config)
        compiled = compile_spec(spec, keep_artifacts=True)
        (res,) = cubin_resources(compiled.cubin_path)
        regs = cfg.sm90_register_budget(config)
        wgmmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", compiled.ptx)
        warpgroups = cfg.consumer_warpgroups(config)
        print(f"{config.tile_m}x{config.tile_n}: {warpgroups} consumer warpgroups of "
              f"{config.tile_m // warpgroups} rows, {(1 + warpgroups) * 128} threads")
        print(f"  ptxas's register count for the kernel: {res.registers} (65536 / threads: "
              f"{regs.launch_registers}); stack frame {res.stack_frame_bytes} B")
        print(f"  per k-block and warpgroup: {len(wgmmas)} x {wgmmas[0]}, each holding "
              f"{regs.wgmma_accumulator_registers} accumulators per thread")
        print(f"  a consumer thread's accumulators in all: {regs.accumulator_registers} of the "
              f"{regs.consumer_registers} setmaxnreg gives it\n")


def part2() -> None:
    for config in (GemmConfig(tile_m=192, tile_n=208), GemmConfig(tile_m=256, tile_n=208),
                   GemmConfig(tile_m=256, tile_n=128, pingpong=True)):
        try:
            cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", config)
        except cfg.ConfigError as error:
            print(f"{config.tile_m}x{config.tile_n}{' pingpong' if config.pingpong else ''}: {error}\n")


def part3() -> None:
    for m, n, k in ((136, 28672, 4096), (176, 22016, 8192), (192, 10240, 8192), (208, 12288, 8192),
                    (136, 6144, 4096), (384, 6144, 4096)):
        chosen = heuristics.choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
        rows = ("no tall tiles (they would be split)" if chosen.tile_m <= 128 else
                f"{chosen.tile_m}-row weight tiles beside two token tiles, each pair sharing its weight tile"
                if chosen.swap_ab and chosen.cluster_n == 2 else
                f"{chosen.tile_m}-row weight tiles" if chosen.swap_ab else
                f"two rows of {chosen.tile_m}-row tiles, each pair sharing its weight tile")
        print(f"{m}x{n}x{k}: the default path plans {'swap ' if chosen.swap_ab else ''}"
              f"{chosen.tile_m}x{chosen.tile_n} c{chosen.cluster_m}x{chosen.cluster_n}: {rows}")
    print("\nMeasured on an H200 (single calls after an L2 flush, us; 'before': the plan before each change):")
    print(f"  {'shape':>18}  {'before':>7}  {'now':>7}  {'cuBLAS':>7}  cuBLAS's kernel")
    plain = load_json(RESULTS / "plain_tall_tiles_ab.json.gz")
    reports = [load_json(RESULTS / f"{name}.json.gz")
               for name in ("swap_256_rows_ab", "swap_192_rows_ab", "tall_pairs_ab")] + [
                   load_json(RESULTS / "tall_pairs_wider.json.gz")["ab"],
                   plain["runs"]["2_after_the_swap_heldout"]]
    for report in reports:
        for shape in report["shapes"]:
            us = {impl: times[0] for impl, times in shape["us"].items()}
            kernel = re.search(r"nvjet_sm90_tst_(\d+x\d+)_\w+?_(\dx\d)", shape["cublas_kernels"][-1])
            print(f"  {'x'.join(map(str, shape['shape'])):>18}  {us['base default']:7.1f}  {us['default']:7.1f}  "
                  f"{us['torch.matmul']:7.1f}  {kernel.group(1) + ' in ' + kernel.group(2) if kernel else '-'}")


if __name__ == "__main__":
    print("1. What ptxas did with each split\n")
    part1()
    print("2. What make_spec refuses before compiling\n")
    part2()
    print("3. Where the default path uses tall tiles\n")
    part3()
