"""12 -- Tiles that end at the edge: the last tile row moves inside, and an output's last 16 bytes.

Teaches: when M is not a multiple of the tile height, the last row of tiles reaches
past the operand's edge, and a TMA box that straddles the edge is slow to load (TMA
fills its outside rows with zeros). The SM90 kernel moves that tile back so that its
box ends at the edge: it recomputes rows its neighbour also computes, with the same
instructions, and stores the same values over them. Two hardware rules shape it: a
TMA box must *start* on a 16-byte boundary (so along a contiguous dimension the tile
moves in 16-byte steps), and a TMA store writes whole 16-byte chunks (so an output
whose rows end between two boundaries cannot be stored into in place at all).
Shown four ways: where the tiles start (the scheduler's arithmetic); what the
compiler emitted (each tile's box row worked out once per tile, outside the k-loop);
which outputs ``wsgemm.gemm`` computes into a staging buffer; and the measured effect,
read from the committed benchmarks/results/edge_tiles_moved_*.json (in its archive)
(benchmarks/NOTES.md section 27).

Needs: any machine, compile only (no GPU).
Run:   python examples/12_tiles_that_end_at_the_edge.py
"""

import math
import sys
from pathlib import Path

import torch

from wsgemm import GemmConfig, api
from wsgemm import config as cfg
from wsgemm.compile import compile_spec
from wsgemm.inspection import producer_loop_ptx, ptx_definition, tma_coordinates
from wsgemm.kernels.common.scheduler import (
    ceil_div,
    edge_tile_offset,
    edge_tile_overhang,
)
from wsgemm.operands import tma_major, writable_major

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
sys.path.insert(0, str(RESULTS.parent))
from result_files import load_json  # noqa: E402  (reads reports moved into results/archive.tar.xz too)


def starts(extent: int, tile: int, granule: int = 1) -> list[int]:
    tiles = ceil_div(extent, tile)
    overhang = edge_tile_overhang(tiles, extent, tile, granule)
    return [t * tile + edge_tile_offset(t, tiles, overhang) for t in range(tiles)]


def where_tiles_start() -> None:
    print("1. Where the tiles start (kernels/common/scheduler.py):")
    rows = starts(576, 128)
    print(f"   M = 576 in 128-row tiles: rows {rows}. The last tile covers {rows[-1]}-{rows[-1] + 127}, not")
    print("   512-639: rows 448-511 are computed twice, and no box reaches past row 575.")
    columns = starts(1100, 192, granule=8)
    print(f"   N = 1100 in 192-wide tiles, N contiguous in bf16: columns {columns}. The last tile would")
    print(f"   move back 52 columns; a box must start on a 16-byte boundary, so it moves {6 * 192 - columns[-1] - 192}"
          " (6 x 8 elements)")
    print(f"   and still reaches {columns[-1] + 192 - 1100} columns past the edge (52 columns stopped the kernel with"
          " an illegal instruction).\n")


def compiler_output() -> None:
    spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig(tile_m=128, tile_n=128))
    ptx = compile_spec(spec, keep_artifacts=True).ptx
    lines = ptx.splitlines()
    loop = producer_loop_ptx(ptx).lines
    load = next(line.strip() for line in loop if "cp.async.bulk.tensor" in line)
    k_coordinate, row = tma_coordinates(load)
    print("2. What the compiler emitted (sm_90a PTX, 128x128 tiles, the producer's k-loop):")
    print(f"   {load[:104]}...")
    print(f"   The box's coordinates are {{k, row}} = {{{k_coordinate}, {row}}}; inside the loop only {k_coordinate}"
          " changes (+64 per k-block).")
    at = ptx_definition(lines, row)
    print(f"   {row} is written once per tile, before the loop:")
    print(f"      {lines[at].strip()}")
    print("   that is tile_row x 128 plus the edge offset times a 0-or-1 'is this the last tile' term, built")
    print("   from min/max arithmetic a few lines earlier: no branch, and nothing added to the k-loop.\n")


def staged_outputs() -> None:
    wide = torch.empty(512, 1104, dtype=torch.bfloat16, device="meta")
    a, b = torch.empty(512, 256, dtype=torch.bfloat16, device="meta"), torch.empty(256, 1104, dtype=torch.bfloat16,
                                                                                      device="meta")
    print("3. Outputs whose rows end between 16-byte boundaries (wsgemm/operands.py):")
    for n in (1100, 1096):
        view = wide[:, :n]
        mode, _ = api._choose_mode(a, b[:, :n], view, (512, n), torch.bfloat16)
        print(f"   out = wide[:, :{n}] (rows of {n * 2} bytes, pitch {1104 * 2}): readable as an operand: "
              f"{tma_major(view) is not None}; stored in place: {writable_major(view) is not None}; plan: {mode}")
    print("   A TMA store writes whole 16-byte chunks: into wide[:, :1100] it would also write columns")
    print("   1100-1103 of `wide`. wsgemm did, until a GPU test with NaN margins caught it; such an output is")
    print("   now computed into a padded buffer and copied.\n")


def load(name: str) -> dict:
    """A committed report, by name (a ``.json.gz`` or one kept in the results' archive)."""
    return load_json(RESULTS / f"{name}.json.gz")


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(map(math.log, values)) / len(values))


def measured() -> None:
    fixed = load("edge_tiles_moved_ab")
    print(f"4. Measured on an H200 (us per call; each against the kernel before, in one run; "
          f"{fixed['environment']['date']}):")
    for shape in fixed["shapes"]:
        m, n, k = shape["shape"]
        if m in (576, 320, 640) and n in (2560, 5120):
            us = {label: times[0] for label, times in shape["us"].items()}
            print(f"   {m}x{n}x{k}, 128x128 tiles ({m / 128:.1f} tile rows): {us['base 128x128 c1x1']:.1f} -> "
                  f"{us['128x128 c1x1']:.1f}; cuBLAS {us['torch.matmul']:.1f}")
    for name, what, controls in (
            ("edge_tiles_moved_defaults_ab", "the default path, 25 shapes at M = 200-2900", []),
            # The split file's last two shapes are controls whose plans do not move.
            ("edge_tiles_moved_split_ab", "one-wave split-K defaults, 20 shapes at M = 136-700",
             [[1100, 4096, 4096], [512, 2048, 8192]])):
        shapes = [s for s in load(name)["shapes"] if s["shape"] not in controls]
        us = [{label: times[0] for label, times in s["us"].items()} for s in shapes]
        print(f"   {what}: {geomean(u['base default'] / u['default'] for u in us):.3f}x faster, "
              f"{geomean(u['torch.matmul'] / u['base default'] for u in us):.3f}x -> "
              f"{geomean(u['torch.matmul'] / u['default'] for u in us):.3f}x of cuBLAS")
    print("   640 rows make the same 5 x 20 grid as 576 with every box inside: moved, 576 runs as 640 does.")


if __name__ == "__main__":
    where_tiles_start()
    compiler_output()
    staged_outputs()
    measured()
