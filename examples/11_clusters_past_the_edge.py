"""11 -- Clusters past the edge: the CTAs a cluster adds, and the loads they skip.

Teaches: a 2x1 cluster pads the tile grid to whole clusters, so with an odd number of
tile rows one CTA of each last-row cluster has no rows of its own. Its A box lies
wholly past M; TMA would zero-fill it, slowly, while its partner waits on the B tile
they share. The SM90 producer skips such a box and announces only the bytes it loads.
Shown four ways: which CTAs are padding (the scheduler's arithmetic); what the
compiler emitted for it (a per-tile byte count for ``mbarrier.arrive.expect_tx`` and a
branch around each copy, where the unclustered kernel announces a constant); the
pipeline model's check that the protocol stays safe, and that announcing the skipped
bytes anyway deadlocks; and the measured effect, read from the committed
benchmarks/results/padded_tiles_ab.json.gz (benchmarks/NOTES.md section 26).

Needs: any machine, compile only (no GPU).
Run:   python examples/11_clusters_past_the_edge.py
"""

import re
import sys
from pathlib import Path

from wsgemm import GemmConfig
from wsgemm import config as cfg
from wsgemm.compile import compile_spec
from wsgemm.inspection import announced_bytes_operands, producer_loop_ptx, ptx_definition
from wsgemm.kernels.common.scheduler import TileGrid
from wsgemm.model import Fault, PipelineSpec, Structure, explore_exhaustively

M, N, K = 384, 4096, 8192
PAIRED = GemmConfig(tile_m=128, tile_n=128, cluster_m=2)
ALONE = GemmConfig(tile_m=128, tile_n=128)
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "padded_tiles_ab.json.gz"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from result_files import load_json  # noqa: E402  (reads reports moved into results/archive.tar.xz too)


def padding() -> None:
    grid = TileGrid.for_problem(M, N, 1, PAIRED)
    rows = grid.clusters_m * PAIRED.cluster_m
    empty = (rows - grid.tiles_m) * grid.tiles_n
    print(f"1. {M}x{N}x{K} in 128x128 tiles: {grid.tiles_m} tile rows, padded by 2x1 clusters to {rows}.")
    print(f"   {grid.units} clusters, {grid.units * PAIRED.cluster_size} CTAs, of which {empty} have no rows: the second")
    print("   CTA of each last-row cluster. It still loads its half of the B tile it shares with its")
    print("   partner (multicast), and its A box lies wholly past M.\n")


def announced_bytes() -> None:
    print("2. What the compiler emitted (sm_90a PTX, the producer's k-loop):")
    for name, config in (("unclustered", ALONE), ("2x1 clusters", PAIRED)):
        spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", config)
        ptx = compile_spec(spec, keep_artifacts=True).ptx
        loop = producer_loop_ptx(ptx).lines
        announce = next(line.strip() for line in loop if "mbarrier.arrive.expect_tx" in line)
        (operand,) = announced_bytes_operands(announce)
        branches = sum(bool(re.search(r"@%p\d+\s+bra", line)) for line in loop)
        print(f"   {name}: {announce}")
        if operand.startswith("%r"):
            # Follow the register back to the per-tile choice of the byte count.
            lines, todo, shown = ptx.splitlines(), [operand], set()
            while todo and len(shown) < 4:
                at = ptx_definition(lines, todo.pop(0))
                line = None if at is None else lines[at].strip()
                if line and line not in shown:
                    shown.add(line)
                    print(f"      <- {line}")
                    todo += re.findall(r"%r\d+", line.split(",", 1)[1])
        print(f"      {branches} conditional branches in the loop")
    print("   Unclustered, the stage's bytes are an immediate. In clusters they are chosen per tile: the")
    print("   whole stage (A + B), or B alone where the tile's A box is padding, and each copy sits behind")
    print("   a branch on that tile test (beside the elect.sync branch every copy has).\n")


def model_check() -> None:
    safe = explore_exhaustively(PipelineSpec(Structure.SM90, 2, 3, 2, padded_tiles=(1,)))
    bug = explore_exhaustively(PipelineSpec(Structure.SM90, 2, 2, 2, fault=Fault.ANNOUNCES_SKIPPED_BOX))
    print("3. The pipeline model (every interleaving, 2 stages, 3 tiles of 2 k-blocks, tile 1 padded):")
    print(f"   {'safe' if safe.safe and safe.complete else 'NOT SAFE'}, {safe.states} states. Announcing the whole"
          " stage for a skipped box instead:")
    print(f"   {', '.join(sorted(k.value for k in bug.kinds))}: {bug.findings[next(iter(bug.kinds))].message[:96]}\n")


def measured() -> None:
    report = load_json(RESULTS)
    print("4. Measured on an H200 (results/padded_tiles_ab.json.gz; us per call, each config against the")
    print(f"   kernel before the skip, in one run; {report['environment']['date']}):")
    for shape in report["shapes"]:
        us = {label: times[0] for label, times in shape["us"].items()}
        m, n, k = shape["shape"]
        rows = -(-m // 128)
        print(f"   {m}x{n}x{k} ({rows} tile rows): 128x128 in 2x1 clusters {us['base 128x128 c2x1']:.1f} -> "
              f"{us['128x128 c2x1']:.1f}; unclustered {us['128x128 c1x1']:.1f}; cuBLAS {us['torch.matmul']:.1f}")
    seven = next({label: t[0] for label, t in s["us"].items()} for s in report["shapes"] if s["shape"][0] == 896)
    print("   Where the clustered grid fits one wave, the cluster over 3 or 5 rows now runs within a few")
    print(f"   percent of none, and over 7 rows {seven['128x128 c1x1'] / seven['128x128 c2x1']:.2f}x faster "
          "(each CTA loads half of the B tile it shares).")
    print("   At 320x5120x5120 the clustered grid needs a second wave (80 clusters for 66 slots) where the")
    print("   unclustered one fits in one: the skip helps, the waves do not.")


if __name__ == "__main__":
    padding()
    announced_bytes()
    model_check()
    measured()
