"""``python -m wsgemm.pipeline_sim``: check both kernels' pipelines under every look-ahead
policy, one CTA and whole SM100 clusters (up to 4x2, with the partial-order reduction),
show that planted bugs are caught under each policy, and print (optionally draw) the
timeline model. Runs on any machine in about two and a half minutes (``--quick``: about
30 seconds)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .. import config as cfg
from ..config import GemmConfig, Lookahead
from .checker import explore_exhaustively, explore_randomly
from .cluster import ClusterFault, ClusterSpec
from .machine import Violation
from .spec import Fault, PipelineSpec, Structure, fault_applies
from .timeline import Latencies, compare_policies, draw_gantt, format_report, timeline_spec

# (stages, tiles, k_blocks) explored exhaustively for each structure and policy.
EXHAUSTIVE_SIZES = {
    Structure.SM90: [(2, 2, 2), (2, 3, 3), (3, 2, 3), (3, 3, 3), (2, 2, 4)],
    # Four tiles: each warpgroup waits for its turn after the other's tile, twice.
    Structure.SM90_PINGPONG: [(2, 2, 2), (2, 3, 3), (3, 2, 3), (3, 3, 3), (2, 4, 2)],
    Structure.SM100: [(2, 2, 2), (2, 3, 2), (2, 2, 4), (3, 2, 3)],
}
QUICK_SIZES = [(2, 2, 2)]
# The kernels' real shape (4 stages, 2 SM90 consumer warpgroups) over more work:
# too many states to enumerate, so random schedules.
RANDOM_SPEC = dict(stages=4, tiles=4, k_blocks=8, consumer_warpgroups=2)

# What each planted bug must be caught as.
EXPECTED = {
    Fault.TRUSTS_UNREADY_TOKEN: Violation.STAGE_OVERWRITTEN,
    Fault.RELEASE_COUNT_LOW: Violation.OVER_ARRIVAL,
    Fault.RELEASE_COUNT_HIGH: Violation.DEADLOCK,
    Fault.PRODUCER_PARITY_FLIPPED: Violation.DEADLOCK,
    Fault.CONSUMER_PARITY_FLIPPED: Violation.READ_BEFORE_LANDED,
    Fault.EARLY_SLOT_RELEASE: Violation.STAGE_OVERWRITTEN,
    Fault.EARLY_ACC_RELEASE: Violation.ACC_OVERWRITTEN,
    Fault.SKIPS_MAINLOOP_TURN: Violation.READ_BEFORE_LANDED,
    Fault.ANNOUNCES_SKIPPED_BOX: Violation.DEADLOCK,
    Fault.SKIPS_REAL_BOX: Violation.READ_BEFORE_LANDED,
}
# SM90: tiles whose A box is all padding (the producer skips it), as (stages, tiles,
# k_blocks, padded tiles): one padded tile between others, and every tile padded.
PADDED_SIZES = [(2, 3, 2, (1,)), (2, 2, 2, (0, 1)), (3, 3, 3, (2,))]


def fault_spec(structure: Structure, fault: Fault, policy: Lookahead) -> PipelineSpec:
    """The smallest spec that exposes ``fault``: 2 stages, 2 tiles of 2 k-blocks (and a
    single accumulator buffer, so the second tile reuses it)."""
    return PipelineSpec(structure, 2, 2, 2, policy, acc_stages=1, fault=fault)


def check_policies(quick: bool) -> bool:
    print("1. The kernels' protocol, every look-ahead policy")
    print(f"   {'structure':13} {'policy':12} {'exhaustive (every interleaving)':36} random schedules")
    ok = True
    for structure in Structure:
        sizes = QUICK_SIZES if quick else EXHAUSTIVE_SIZES[structure]
        for policy in Lookahead:
            states, verdicts = 0, []
            for stages, tiles, k_blocks in sizes:
                result = explore_exhaustively(PipelineSpec(structure, stages, tiles, k_blocks, policy))
                states += result.states
                verdicts.append(result.safe and result.complete)
            randomly = explore_randomly(PipelineSpec(structure, lookahead=policy, **RANDOM_SPEC),
                                        runs=10 if quick else 100)
            ok &= all(verdicts) and randomly.safe
            exhaustive = f"{'safe' if all(verdicts) else 'VIOLATION'}: {len(sizes)} size{'s' * (len(sizes) > 1)}, {states} states"
            random_text = f"{'safe' if randomly.safe else 'VIOLATION'}: {randomly.completed_runs} runs"
            print(f"   {structure.value:13} {policy.value:12} {exhaustive:36} {random_text}")
    padded = PADDED_SIZES[:1] if quick else PADDED_SIZES
    for structure in (Structure.SM90, Structure.SM90_PINGPONG):
        results = [explore_exhaustively(PipelineSpec(structure, stages, tiles, k_blocks, policy, padded_tiles=tiles_))
                   for stages, tiles, k_blocks, tiles_ in padded for policy in Lookahead]
        safe = all(r.safe and r.complete for r in results)
        ok &= safe
        print(f"   {structure.value:13} {'padded A':12} {'safe' if safe else 'VIOLATION'}: {len(padded)} sizes x "
              f"3 policies, {sum(r.states for r in results)} states")
    for structure in Structure:
        sizes = ", ".join(f"{s}x{t}x{k}" for s, t, k in (QUICK_SIZES if quick else EXHAUSTIVE_SIZES[structure]))
        print(f"   {structure.value} sizes (stages x tiles x k-blocks): {sizes}")
    print("   padded A (stages x tiles x k-blocks, padded tiles): "
          + ", ".join(f"{s}x{t}x{k} {tiles_}" for s, t, k, tiles_ in padded))
    print(f"   random schedules of {RANDOM_SPEC}")
    return ok


def check_faults() -> bool:
    print("\n2. Planted bugs (smallest spec that exposes each), caught under each policy?")
    print(f"   {'structure':13} {'fault':24} {'expected':24} " + " ".join(f"{p.value:12}" for p in Lookahead))
    ok = True
    for structure in Structure:
        for fault in Fault:
            if not fault_applies(fault, structure):
                continue
            ok &= _report_fault(structure.value, fault.value, EXPECTED[fault],
                                [explore_exhaustively(fault_spec(structure, fault, policy)) for policy in Lookahead])
    return ok


def _report_fault(where: str, fault: str, expected: Violation, results) -> bool:
    """One row: whether each policy's result has the expected finding (else what it has)."""
    cells = []
    for result in results:
        found = "yes" if expected in result.kinds else "NO: " + (
            ", ".join(sorted(k.value for k in result.kinds)) or "nothing")
        cells.append(f"{found:12}")
    print(f"   {where:13} {fault:24} {expected.value:24} " + " ".join(cells))
    example = next((r.findings[expected].message for r in results if expected in r.findings), "")
    print(f"   {'':13} e.g. {_shorten(example, 110)}")
    return all(expected in r.kinds for r in results)


# Clusters checked over every interleaving (config, stages, tiles, k-blocks), and
# larger ones over every interleaving with the partial-order reduction (.reduction):
# two stages, two tiles of three k-blocks.
CLUSTER_SIZES = [
    (dict(), 2, 2, 2),
    (dict(cluster_m=2), 1, 1, 2),
    (dict(cluster_m=2, two_cta=True), 1, 2, 2),
    (dict(cluster_m=2, two_cta=True), 2, 1, 2),
]
REDUCED_CLUSTERS = [dict(cluster_m=4, cluster_n=2), dict(cluster_m=4, cluster_n=2, two_cta=True),
                    dict(cluster_n=2), dict(cluster_m=2, cluster_n=2, two_cta=True)]
CLUSTER_EXPECTED = {
    ClusterFault.SLOT_COMMIT_WITHOUT_PEER: Violation.DEADLOCK,
    ClusterFault.ACC_COMMIT_WITHOUT_PEER: Violation.DEADLOCK,
    ClusterFault.EXPECT_TX_OF_ONE_CTA: Violation.READ_BEFORE_LANDED,
    ClusterFault.DEALLOC_BEFORE_PEER_READ: Violation.TMEM_NOT_HELD,
    ClusterFault.DROPS_PRODUCER_TAIL: Violation.AFTER_EXIT,
}


def _cluster(config: dict, policy: Lookahead, stages=1, tiles=2, k_blocks=1, **kwargs) -> ClusterSpec:
    return ClusterSpec.of(GemmConfig(**config, lookahead=policy), stages=stages, tiles=tiles, k_blocks=k_blocks,
                          acc_stages=1, **kwargs)


def check_clusters(quick: bool) -> bool:
    print("\n3. SM100 clusters: multicast, 2-CTA pairs, tensor memory per SM (one accumulator buffer)")
    ok = True
    for config, stages, tiles, k_blocks in CLUSTER_SIZES[::2] if quick else CLUSTER_SIZES:
        policies = [Lookahead.BEFORE_COPY] if quick else list(Lookahead)
        results = [explore_exhaustively(_cluster(config, p, stages, tiles, k_blocks)) for p in policies]
        safe = all(r.safe and r.complete for r in results)
        ok &= safe
        name = results[0].spec.short().split(" s")[0]
        print(f"   {name:28} {stages}x{tiles}x{k_blocks}: {'safe' if safe else 'VIOLATION'} under "
              f"{len(policies)} polic{'ies' if len(policies) > 1 else 'y'}, {sum(r.states for r in results)} states")
    for config in REDUCED_CLUSTERS[:1] if quick else REDUCED_CLUSTERS:
        policies = [Lookahead.BEFORE_COPY] if quick else list(Lookahead)
        results = [explore_exhaustively(_cluster(config, p, 2, 2, 3), reduce=True) for p in policies]
        safe = all(r.safe and r.complete for r in results)
        ok &= safe
        name = results[0].spec.short().split(" s")[0]
        print(f"   {name:28} 2x2x3: {'safe' if safe else 'VIOLATION'} under {len(policies)} "
              f"polic{'ies' if len(policies) > 1 else 'y'}, {sum(r.states for r in results)} states (reduced)")
    policies = [Lookahead.BEFORE_COPY] if quick else list(Lookahead)
    print(f"   {'structure':13} {'fault':24} {'expected':24} " + " ".join(f"{p.value:12}" for p in policies))
    for fault, expected in CLUSTER_EXPECTED.items():
        config = dict(cluster_m=2, two_cta=True)
        ok &= _report_fault("pair 2x1", fault.value, expected,
                            [explore_exhaustively(_cluster(config, p, fault=fault)) for p in policies])
    # Two clusters on the same two SMs, each CTA allocating all 512 columns (the config
    # make_spec refuses): one CTA of each cluster gets an SM's columns, and neither
    # cluster can finish.
    unchecked = cfg.KernelSpec("sm100", "bf16", "bf16", "k", "k", "n",
                               GemmConfig(cluster_m=2, stages=2, lookahead=Lookahead.NONE))
    result = explore_exhaustively(ClusterSpec(unchecked, stages=1, tiles=1, k_blocks=2, acc_stages=1))
    ok &= Violation.DEADLOCK in result.kinds
    print(f"   co-resident: GemmConfig(cluster_m=2, stages=2) unchecked: "
          f"{'deadlock caught' if Violation.DEADLOCK in result.kinds else 'NOT CAUGHT'} ({result.states} states)")
    return ok


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def show_timelines(png_dir: Path | None) -> None:
    print("\n4. Timeline MODEL (latencies measured on an H100 or an H200, or assumed; not a measurement)")
    for structure in Structure:
        spec = timeline_spec(structure)
        print(f"\n   {structure.value}: {spec.stages} stages, {spec.tiles} tiles of {spec.k_blocks} k-blocks")
        timelines = compare_policies(spec)
        print("   " + format_report(timelines).replace("\n", "\n   "))
        blocking = compare_policies(spec, Latencies(probe_blocks_issue=True))
        print("   ... if a pending try_wait also stopped the warp's issue (probe_blocks_issue=True; "
              "measured on an H100 and an H200: it does not):")
        print("   " + "\n   ".join(format_report(blocking).splitlines()[2:]))
        if png_dir is not None:
            png_dir.mkdir(parents=True, exist_ok=True)
            path = png_dir / f"timeline-{structure.value}.png"
            draw_gantt(timelines, path)
            print(f"   Gantt chart: {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wsgemm.pipeline_sim", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smallest sizes only (about 30 seconds)")
    parser.add_argument("--png-dir", type=Path, help="write a Gantt chart per structure here")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    ok = check_policies(args.quick)
    ok &= check_faults()
    ok &= check_clusters(args.quick)
    show_timelines(args.png_dir)
    print(f"\n{'all checks passed' if ok else 'SOME CHECKS FAILED'} in {time.perf_counter() - start:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
