"""10 -- Reading a hardware profile: where a kernel's cycles went.

Teaches: timings say that a kernel is slower, Nsight Compute's counters say where.
This example reads the profiles committed in benchmarks/results/ (condensed from
ncu's per-instruction SASS page by benchmarks/ncu_summary.py) and works four
questions from them:

1. At 8192x8192x256, the same tile and cluster as QuACK: which instructions did
   wsgemm execute that QuACK did not? (before and after the change of
   benchmarks/NOTES.md section 20)
2. Where did the warps wait? The most stalled instructions and their reasons.
3. At 8192^3, how much faster than cuBLAS could any kernel be? The tensor pipe's
   busy share, from the Speed Of Light section, bounds it.
4. At 1024x1024x4096, where cuBLAS is 1.29x faster with the same tiles: do the
   kernels move different bytes, or the same bytes differently? (section 44)

docs/profiling.md tells the same story in prose, and how to take a profile on an
H200 (``benchmarks/ncu_kernels.py`` under ``ncu``).

Needs: any machine (reads committed JSON; no GPU).
Run:   python examples/10_reading_a_profile.py
"""

import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
sys.path.insert(0, str(RESULTS.parent))
from result_files import load_json  # noqa: E402  (reads reports moved into results/archive.tar.xz too)
# Bookkeeping opcodes that section 20 is about, and the work every GEMM does.
WATCHED = ("R2UR", "CS2R", "IMAD", "UIADD3", "HGMMA", "F2FP", "STSM")


def read(name: str) -> dict:
    """A committed result (gzipped, or in the results' archive)."""
    return load_json(RESULTS / name)


def load(name: str) -> list[dict]:
    """The profiled kernels of a committed summary."""
    return read(name)["kernels"]


def who(kernel: dict) -> str:
    """A short name for a profiled kernel: whose it is, from its symbol."""
    name = kernel["kernel"]
    if "wsgemm" in name:
        return "wsgemm"
    if "quack" in name:
        return "QuACK"
    return "cuBLAS " + name.split("_")[3] if name.startswith("nvjet") else name[:24]


def cycles(kernel: dict) -> float:
    return float(kernel["speed_of_light"]["elapsed_cycles"].split()[0].replace(",", ""))


def busy(kernel: dict) -> float:
    """SM throughput in % of peak; for a GEMM that is the tensor pipe's busy share."""
    return float(kernel["speed_of_light"]["sm_throughput_pct"].split()[0])


def part1() -> None:
    print("1. Instructions executed at 8192x8192x256 (millions of warp instructions)\n")
    columns = [("wsgemm before", load("ncu_8192x8192x256_3fb39df.json.gz")[0]),
               *((f"{who(k)} after" if who(k) == "wsgemm" else who(k), k)
                 for k in load("ncu_8192x8192x256.json.gz"))]
    print(f"  {'':8s}" + "".join(f"{label:>18s}" for label, _ in columns))
    for op in ("all", *WATCHED):
        cells = []
        for _, kernel in columns:
            n = kernel["instructions_executed"] if op == "all" else kernel["top_opcodes"].get(op, 0)
            cells.append(f"{n / 1e6:18.2f}")
        print(f"  {op:8s}" + "".join(cells))
    print("  duration" + "".join(f"{k['speed_of_light']['duration']:>18s}" for _, k in columns))
    before, after = (sum(k["top_opcodes"].get(op, 0) for op in ("R2UR", "CS2R")) / 1e6
                     for k in (columns[0][1], columns[1][1]))
    print("\n  R2UR moves a register into a uniform register: wgmma reads its shared-memory")
    print("  descriptors from uniform registers, and the ring position was derived from the")
    print("  thread index, which ptxas cannot prove warp-uniform. CS2R clears two registers:")
    print(f"  acc.fill(0) before every tile. Together {before:.1f} M before, {after:.1f} M after.\n")


def part2() -> None:
    print("2. Where the warps waited (wsgemm before the change, 8192x8192x256)\n")
    kernel = load("ncu_8192x8192x256_3fb39df.json.gz")[0]
    total = kernel["stall_samples"]
    reasons = ", ".join(f"{r} {n / total:.0%}" for r, n in list(kernel["stall_reasons"].items())[:4])
    print(f"  {total} samples; by reason: {reasons}")
    # Whose instruction it is: on that kernel's SASS page the consumer warpgroups' code
    # starts at instruction 410, their register increase (USETMAXREG.TRY_ALLOC); the
    # producer warp runs the code before it. How often it ran says per what: the grid
    # has 8192/128 x ceil(8192/192) tiles of 4 k-blocks; a consumer tile has 4 warps.
    consumer_start, tiles = 410, (8192 // 128) * -(-8192 // 192)
    print(f"  {'samples':>7s}  {'reason':8s} {'executed':>8s}  instruction")
    for entry in sorted(kernel["most_stalled"], key=lambda e: -e["samples"])[:5]:
        reason = max(entry["reasons"], key=entry["reasons"].get)
        warps = 4 if entry["index"] >= consumer_start else 1
        per = {tiles: "tile", 4 * tiles: "k-block"}.get(entry["executed"] // warps, "?")
        role = f"{'consumer warps' if warps == 4 else 'producer warp'}, once per {per}"
        print(f"  {entry['samples']:7d}  {reason:8s} {entry['executed']:8d}  {entry['sass'][:40]:40s} {role}")
    print("\n  long_sb at a branch: the branch waits for a value from the memory system. The")
    print("  consumers' one follows their full-barrier probe (SYNCS.PHASECHK): they wait for")
    print("  data to land. barrier at WARPGROUP.DEPBAR: a consumer waits for its own wgmma")
    print("  batch, where a tensor-bound kernel should spend its waiting.\n")


def part3() -> None:
    print("3. A ceiling at 8192^3: the tensor pipe's busy share (Speed Of Light)\n")
    kernels = {who(k): k for k in load("ncu_8192x8192x8192.json.gz")}
    for name, kernel in kernels.items():
        print(f"  {name:26s} {busy(kernel):5.1f} % busy over {cycles(kernel) / 1e6:.2f} M cycles "
              f"at {kernel['speed_of_light']['sm_frequency']}")
    ours = kernels["wsgemm"]
    cublas = next(k for name, k in kernels.items() if name.startswith("cuBLAS"))
    ideal = cycles(ours) * busy(ours) / 100  # the cycles of tensor work the product needs
    print(f"\n  The product needs {ideal / 1e6:.2f} M cycles of tensor-pipe work; cuBLAS took "
          f"{cycles(cublas) / 1e6:.2f} M, so a kernel\n  that kept the pipe busy every cycle would be "
          f"{cycles(cublas) / ideal:.2f}x cuBLAS at the same clock: 1.10x is out of reach.")


def part4() -> None:
    print("\n4. The same bytes, fewer requests at the L2 (1024x1024x4096, 64x128 tiles in pairs)\n")
    ours, cublas = read("l2_requests_profile.json.gz")["lrc_and_walks"]["1024x1024x4096"][:2]
    rows = [("time (us)", "us", "{:.1f}"),
            ("sectors the L2 sends to the GPCs (M)", "lrc_xbar2gpc_sectors_read", "{:.2f}"),
            ("read requests the L2 slices see (M)", "lts_requests_tex_read", "{:.2f}"),
            ("tensor pipe busy (%)", "tensor_active_pct", "{:.0f}")]
    print(f"  {'':40s}{'wsgemm':>10s}{'cuBLAS':>10s}")
    for label, key, fmt in rows:
        scale = 1e6 if "(M)" in label else 1
        print(f"  {label:40s}" + "".join(f"{fmt.format(k[key] / scale):>10s}" for k in (ours, cublas)))
    # What the loads ask for: each CTA reads its 64 rows of A and its half of the
    # 128-row weight tile per k-block, one 128-byte request per row.
    asked = 128 * (4096 // 64) * (64 + 64)
    print(f"\n  The loads ask for {asked / 1e6:.2f} M requests of 128 B (128 CTAs x 64 k-blocks x 128 rows).")
    fewer = 1 - cublas["lts_requests_tex_read"] / ours["lts_requests_tex_read"]
    print("  Both kernels get the same sectors from the L2, but cuBLAS's requests reach the")
    print(f"  L2 slices {fewer:.0%} less often, and its tensor pipe waits less. 'Bytes moved' alone")
    print("  would have called the two kernels equal.")

    # The L2 request coalescer's counters (NOTES section 45): A-tile reads it merged with
    # another SM's read of the same line. Each CTA's other half, its share of the
    # multicast weight tile, is answered to both CTAs of the pair in every kernel.
    print("\n  Where the requests went: A-tile read sectors the L2's request coalescer merged")
    merged_key = "lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum"
    shown = ("cuBLAS", "64x128 c2x1 s9", "64x128 c2x1 s7", "64x128 c2x1 s6")  # all multicast pairs
    for row in read("l2_coalescing_profile.json.gz")["lrc_merges_by_config"]["1024x1024x4096"]:
        if not row["config"].startswith(shown):
            continue
        a_sectors = row["lrc__request_sectors_op_read_coalescable.sum"] - row[
            "lrc__request_sectors_op_read_coalescing_type_programmatic.sum"]
        name = "cuBLAS" if row["config"].startswith("cuBLAS") else row["config"]
        print(f"    {name:32s} {row[merged_key] / a_sectors:4.0%} merged, "
              f"{row['gpu__time_duration.sum'] / 1e3:5.1f} us")
    print("  Reads of one line merge when they arrive close together. With a 9-stage ring the")
    print("  8 CTAs sharing an A tile drift ~2 us apart over the k-loop, with 6 stages ~0.4 us;")
    print("  the launch policy now runs such grids with 7 stages, or where 96-120 tiles fit one")
    print("  wave of clusters of 8, multicasts both operands in them, as cuBLAS does.")


if __name__ == "__main__":
    part1()
    part2()
    part3()
    part4()
