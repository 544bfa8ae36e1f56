"""08 -- Programmatic dependent launch: start the next GEMM before this one ends.

Teaches: what ``GemmConfig(dependent_launch=True)`` adds to the SM90 kernel and what
it buys. Two PTX instructions do the work. ``griddepcontrol.wait`` blocks until the
previous kernel on the stream has finished and flushed its writes, so everything
before it (barrier set-up, the cluster handshake, fetching TMA descriptors) may run
while that kernel is still going, and nothing after it can read stale data or
overwrite what that kernel still reads. ``griddepcontrol.launch_dependents`` lets
the *next* kernel launch once every CTA of this one has issued its last load: its
CTAs take the SMs this grid leaves and get ready while the last tiles finish.

A third variant adds ``read_before_wait="b"``, the caller's promise that no earlier
kernel writes B (a weight at inference): the producer then loads B's first stages
before its wait, so the weight's trip to HBM overlaps the previous kernel's tail.

Part 1 compiles one configuration with and without the knobs and walks the PTX.
Part 2 times back-to-back calls in a CUDA graph, where the overlap exists, and
single calls after an unrelated kernel, where it does not. On an H200 (session 40):
15.4 -> 14.3 -> 13.6 us per call in the graph (plain, dependent, + B before the wait),
18.7, 18.6 and 18.8 us for single calls (benchmarks/NOTES.md sections 15, 37 and 53
have the full measurements; the default path turns the knob on for every unbatched
plan with at most 1024 tokens and for unsplit 64-row tiles 64 to 128 wide, where it
measured faster).

Needs: any machine for part 1 (compile only); an SM90 GPU (H100 or H200) for part 2,
which is skipped with a message without one.
Run:   python examples/08_dependent_launch.py
"""

import dataclasses
import statistics

from wsgemm import GemmConfig
from wsgemm import config as cfg
from wsgemm.compile import compile_spec
from wsgemm.inspection import tma_load_parameters

CONFIG = GemmConfig(tile_m=64, tile_n=64)  # the default for 8B o-proj at 64-128 tokens
VARIANTS = {"plain launch": {}, "dependent launch": {"dependent_launch": True},
            "+ read B before wait": {"dependent_launch": True, "read_before_wait": "b"}}
MARKS = [  # (what a PTX line contains, what it means here), in the order they are looked for
    ("setmaxnreg.dec", "the producer warpgroup starts (gives registers away)"),
    ("setmaxnreg.inc", "the consumer warpgroups start (take registers)"),
    ("griddepcontrol.wait", "wait: the previous kernel has finished and flushed"),
    ("mbarrier::complete_tx::bytes", "a TMA load into the ring"),
    ("griddepcontrol.launch_dependents", "the producer has issued its last load: next kernel may launch"),
    (".global.shared::cta", "a TMA store of D (the epilogue)"),
]


def walk(ptx: str) -> list[str]:
    """Each mark's first appearance (and every griddepcontrol), in PTX order."""
    seen, rows = set(), []
    for number, line in enumerate(ptx.splitlines(), 1):
        for pattern, meaning in MARKS:
            if pattern in line and (pattern not in seen or pattern.startswith("griddepcontrol")):
                seen.add(pattern)
                rows.append(f"  line {number:5}  {line.strip()[:58]:58}  <- {meaning}")
    return rows


def part1() -> None:
    for changes in VARIANTS.values():
        spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", dataclasses.replace(CONFIG, **changes))
        ptx = compile_spec(spec, keep_artifacts=True).ptx
        print(f"{spec.config.short()}: {ptx.count('griddepcontrol')} griddepcontrol instructions")
        print("\n".join(walk(ptx)))
        wait = next((i for i, line in enumerate(ptx.splitlines()) if "griddepcontrol.wait" in line), None)
        if wait is not None:  # which descriptor (kernel parameter 1: A's, 3: B's) each load reads
            early = sorted({param for line, param in tma_load_parameters(ptx) if line < wait})
            print(f"  TMA loads ahead of the first wait read parameters {early} (1: A, 3: B)")
        print()
    print("With dependent launch, the producer waits before its first load and the consumers")
    print("before their first global access (here: the epilogue's stores). The trigger runs")
    print("once the producer's tile loop has ended, after its last load; the compiler lays that")
    early = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n",
                          dataclasses.replace(CONFIG, **VARIANTS["+ read B before wait"]))
    print(f"exit out next to the loop body. With read_before_wait='b' the first "
          f"{cfg.stages_read_before_wait(early)} stages of B")
    print("(64 KiB) load ahead of the wait, each slot announced once for both operands, A's")
    print("boxes after it (the producer's wait appears twice: one copy on the path of a work")
    print("piece with no k-blocks). Without the knobs neither instruction exists.\n")


def part2() -> int:
    import torch

    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        print("No SM90 GPU here (needs an H100 or H200): part 2 (timing) skipped.")
        return 0
    import wsgemm
    import wsgemm.timing

    m, n, k, calls = 128, 4096, 4096, 20  # Llama-3 8B o-proj, 128 tokens
    inputs = [(torch.randn(m, k, device="cuda").bfloat16(), torch.randn(n, k, device="cuda").bfloat16().t())
              for _ in range(8)]  # rotated, so the weights are not L2-resident
    flush = wsgemm.timing.L2Flush()  # the suite's and the autotuner's: read twice the L2, then spin
    configs = {label: dataclasses.replace(CONFIG, **changes) for label, changes in VARIANTS.items()}
    graphs = {}
    for label, config in configs.items():
        for a, b in inputs:  # compile, and check against cuBLAS
            ref = torch.matmul(a.float(), b.float())
            err = ((wsgemm.gemm(a, b, config=config).float() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, err
        graphs[label] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[label]):
            for i in range(calls):
                wsgemm.gemm(*inputs[i % len(inputs)], config=config)

    # Interleaved, so both see the same GPU state; milliseconds per timed call.
    graph_ms = wsgemm.timing.time_in_turns({label: graphs[label].replay for label in configs}, 15, flush.evict)

    def one_call(config):
        return lambda: wsgemm.gemm(*inputs[0], config=config)

    single_ms = wsgemm.timing.time_in_turns({label: one_call(configs[label]) for label in configs}, 15, flush)
    graph_us = {label: [1000 * ms / calls for ms in runs] for label, runs in graph_ms.items()}
    single_us = {label: [1000 * ms for ms in runs] for label, runs in single_ms.items()}
    print(f"{m}x{n}x{k}, {CONFIG.tile_m}x{CONFIG.tile_n} tiles, us per call (median of 15):")
    print(f"  {'':24}" + "".join(f"{label:>22}" for label in VARIANTS))
    for row, times in (("graph of 20 calls", graph_us), ("one call after a flush", single_us)):
        print(f"  {row:24}" + "".join(f"{statistics.median(times[label]):22.1f}" for label in VARIANTS))
    print("\nBack to back, each call's CTAs set up while the previous call's last tiles finish;")
    print("after the flush and spin kernels (neither signals early) there is nothing to overlap.")
    return 0


if __name__ == "__main__":
    part1()
    raise SystemExit(part2())
