"""05 -- Switch the producer's look-ahead policy on the GPU and time each one.

Teaches: ``GemmConfig(lookahead=...)`` picks where the TMA producer probes the next
slot (before_copy, after_copy, none); each policy is its own compiled kernel. The
results must be bit-identical -- the policy moves a probe, not any arithmetic -- and
the times show what the placement is worth on this GPU and shape. For a careful
measurement (L2 flushed, interleaved, several shapes) see benchmarks/bench_lookahead.py
and benchmarks/results/lookahead_ablation.md.

Needs: an SM90 GPU (H100 or H200). Without one it says so and exits with status 0.
Run:   python examples/05_policy_switch_on_gpu.py [M N K]
"""

import statistics
import sys

import torch


def has_sm90_gpu() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def time_ms(fn, iters: int = 20, repeats: int = 7) -> float:
    """Median over ``repeats`` of the mean time of ``iters`` back-to-back launches."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(repeats):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / iters)
    return statistics.median(samples)


def main(argv: list[str]) -> int:
    if not has_sm90_gpu():
        print("No SM90 GPU here (needs an H100 or H200): nothing to run.")
        return 0
    import wsgemm

    m, n, k = (int(x) for x in argv) if argv else (8192, 8192, 8192)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    results, times = {}, {}
    for policy in wsgemm.Lookahead:
        config = wsgemm.GemmConfig(lookahead=policy)
        results[policy] = wsgemm.gemm(a, b, config=config)  # compiles on first use
        times[policy] = time_ms(lambda: wsgemm.gemm(a, b, config=config))
    reference = results[wsgemm.Lookahead.BEFORE_COPY]
    identical = all(torch.equal(r, reference) for r in results.values())
    error = ((reference.float() - a.float() @ b.float()).norm() / (a.float() @ b.float()).norm()).item()

    print(f"{torch.cuda.get_device_name()}: {m}x{n}x{k} bf16, default tile and stages")
    print(f"{'policy':12} {'ms':>8} {'TFLOP/s':>8} {'vs before_copy':>15}")
    for policy, ms in times.items():
        print(f"{policy.value:12} {ms:8.3f} {2 * m * n * k / ms / 1e9:8.1f} "
              f"{times[wsgemm.Lookahead.BEFORE_COPY] / ms:14.3f}x")
    print(f"results bit-identical across policies: {identical}; error vs fp32 reference {error:.2e}")
    print("Back-to-back launches without L2 flushing: differences of ~1-2% are noise here.")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
