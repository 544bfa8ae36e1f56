"""Command line: ``python -m wsgemm demo | inspect | lookahead | build | bench``.

``demo``: on a supported GPU, multiply random matrices with wsgemm and torch.matmul
and print the error and TFLOP/s of both; without one, compile the kernels for each
arch and print what was built. ``inspect``: compile one configuration and write its
PTX, cubin and (with nvdisasm) SASS, with a resource summary. ``build``: build the C++
host fast path into the cache directory now (and, on a GPU, compile the kernels of
given shapes), as a container image or CI job does before the first call.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import config as cfg
from . import hardware
from .dispatch import HARDWARE_VERIFIED_ARCHS
from .errors import WsgemmError


def _add_config_args(p: argparse.ArgumentParser) -> None:
    d = cfg.GemmConfig()
    p.add_argument("--dtype", default="bf16", choices=cfg.INPUT_DTYPES)
    p.add_argument("--out-dtype", default=None, choices=cfg.OUTPUT_DTYPES)
    p.add_argument("--majors", default="kkn", help="a, b, d majors: a in k|m, b in k|n, d in n|m (default kkn)")
    p.add_argument("--tile", default=f"{d.tile_m}x{d.tile_n}x{d.tile_k}", help="MxNxK CTA tile")
    p.add_argument("--cluster", default="1x1", help="MxN cluster shape")
    p.add_argument("--stages", type=int, default=None)
    p.add_argument("--lookahead", default=d.lookahead.value, choices=[e.value for e in cfg.Lookahead])
    p.add_argument("--dependent-launch", action="store_true",
                   help="programmatic dependent launch (sm90): griddepcontrol.wait / launch_dependents")
    p.add_argument("--read-before-wait", default="", choices=cfg.READ_BEFORE_WAIT_OPERANDS,
                   help="with --dependent-launch (sm90): load this operand's first stages before the wait")
    p.add_argument("--split-k", type=int, default=1, help="split the last partial wave's tiles (sm90)")
    p.add_argument("--stream-k", action="store_true", help="stream the last partial wave's k-blocks (sm90)")
    p.add_argument("--pingpong", action="store_true",
                   help="ping-pong consumers (sm90): each consumer warpgroup runs every other tile")


def _config_from_args(args) -> cfg.GemmConfig:
    tm, tn, tk = (int(x) for x in args.tile.split("x"))
    cm, cn = (int(x) for x in args.cluster.split("x"))
    return cfg.GemmConfig(tile_m=tm, tile_n=tn, tile_k=tk, cluster_m=cm, cluster_n=cn,
                          stages=args.stages, lookahead=args.lookahead, dependent_launch=args.dependent_launch,
                          split_k=args.split_k, stream_k=args.stream_k, pingpong=args.pingpong,
                          read_before_wait=args.read_before_wait)


def describe_spec(spec: cfg.KernelSpec) -> list[str]:
    """Warp roles, tile, stages and shared-memory plan of a spec, as text lines."""
    c = spec.config
    budget = cfg.smem_budget(spec)
    lines = [f"kernel {spec.short()}"]
    if spec.arch == "sm90":
        regs = cfg.sm90_register_budget(c)
        wgs = cfg.consumer_warpgroups(c)
        sharing = ("ping-pong: each runs every other tile whole" if c.pingpong
                   else f"cooperative: {c.tile_m // wgs} rows of each tile apiece")
        lines += [
            f"  warp roles : warpgroup 0 = TMA producer (warp 0 issues, {regs.producer_registers} regs/thread); "
            f"warpgroups 1..{wgs} = wgmma consumers + epilogue, {sharing} ({regs.consumer_registers} regs/thread, "
            f"{regs.accumulator_registers} for accumulators; ptxas compiles the kernel under "
            f"{regs.launch_registers})",
        ]
    else:
        lines += [
            "  warp roles : warp 5 = TMA producer; warp 4 = tcgen05 MMA issuer"
            + (" (pair leader only, cta_group::2)" if c.two_cta else "")
            + "; warps 0-3 = epilogue (tcgen05.ld -> st.shared -> TMA store)",
            f"  TMEM       : {c.acc_stages} accumulator buffers x {c.tile_n} fp32 columns -> "
            f"allocates {cfg.tmem_columns(spec)} of {spec.facts.tmem_columns} columns",
        ]
    lines += [
        f"  tile       : {c.tile_m}x{c.tile_n}x{c.tile_k}, cluster {c.cluster_m}x{c.cluster_n}, "
        f"raster {c.raster.value} swizzle {c.swizzle}, look-ahead {c.lookahead.value}"
        + (f", last wave split {c.split_k} ways" if c.split_k > 1 else "")
        + (", last wave streamed (stream-K)" if c.stream_k else "")
        + (", programmatic dependent launch" if c.dependent_launch else "")
        + (f", {c.read_before_wait.upper()}'s first {cfg.stages_read_before_wait(spec)} stages loaded before its wait"
           if c.read_before_wait else ""),
        f"  smem       : {budget.stages} stages x {budget.stage_bytes} B + epilogue {budget.epi_bytes} B "
        f"+ {budget.reserved_bytes} B barriers/padding = {budget.total_bytes} of {budget.capacity_bytes} B",
    ]
    return lines


def _compile_report(spec: cfg.KernelSpec, out_dir: Path | None = None) -> list[str]:
    from .compile import compile_spec
    from .inspection import count_instructions, cubin_resources, disassemble

    compiled = compile_spec(spec, keep_artifacts=True, dump_dir=str(out_dir) if out_dir else None)
    lines = describe_spec(spec)
    lines.append(f"  compiled   : {spec.facts.compile_target} in {compiled.compile_seconds:.2f} s"
                 + ("" if spec.arch in HARDWARE_VERIFIED_ARCHS else " (compile-only: never run on hardware)"))
    if compiled.ptx:
        counts = {k: v for k, v in count_instructions(compiled.ptx).items() if v}
        lines.append("  PTX        : " + ", ".join(f"{k} x{v}" for k, v in counts.items()))
    if compiled.cubin_path:
        for res in cubin_resources(compiled.cubin_path):
            lines.append(
                f"  resources  : {res.registers} registers/thread at launch (cap {res.register_cap}), "
                f"stack frame {res.stack_frame_bytes} B"
                + (" (no spills)" if res.stack_frame_bytes == 0 else " (LOCAL MEMORY IN USE)")
            )
        if out_dir is not None:
            sass = disassemble(compiled.cubin_path)
            if sass is not None:
                (out_dir / "kernel.sass").write_text(sass)
                lines.append(f"  SASS       : {out_dir / 'kernel.sass'}")
            else:
                lines.append("  SASS       : nvdisasm not found (install a CUDA toolkit or the DSL's sass extra)")
    if out_dir is not None and compiled.ptx:
        (out_dir / "kernel.ptx").write_text(compiled.ptx)
        lines.append(f"  artifacts  : {out_dir}")
    return lines


def cmd_inspect(args) -> int:
    arch = hardware.arch_for_target(args.arch).name
    a, b, d = args.majors
    spec = cfg.make_spec(arch, args.dtype, args.out_dtype or args.dtype, a, b, d, _config_from_args(args))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    print("\n".join(_compile_report(spec, out_dir)))
    return 0


def _gpu_demo(args) -> int:
    import torch

    from .api import gemm
    from .timing import relative_error

    m, n, k = args.m, args.n, args.k
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    print(f"{torch.cuda.get_device_name()}: D = A @ B, M={m} N={n} K={k}, {args.dtype}, fp32 accumulation")
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    ref = a.float() @ b.float()
    rows = []
    for name, fn in (("wsgemm", lambda: gemm(a, b)), ("torch.matmul", lambda: a @ b)):
        d = fn()
        err = relative_error(d, ref)
        for _ in range(3):
            fn()
        # Time batches of back-to-back runs: the host prepares launch i+1 while the
        # GPU runs launch i, as in a model, so launch overhead is not counted as
        # GPU time (that is benchmarks/bench_overhead.py's job).
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        per_run = []
        for _ in range(5):
            start.record()
            for _ in range(args.iters):
                fn()
            end.record()
            end.synchronize()
            per_run.append(start.elapsed_time(end) / args.iters)
        ms = sorted(per_run)[len(per_run) // 2]
        rows.append((name, err, 2 * m * n * k / ms / 1e9))
    print(f"{'':14}{'rel. error vs fp32':>20}{'TFLOP/s':>10}")
    for name, err, tflops in rows:
        print(f"{name:14}{err:20.2e}{tflops:10.1f}")
    print(f"wsgemm / torch.matmul: {rows[0][2] / rows[1][2]:.2f}x (median of 5 batches of {args.iters} "
          "back-to-back runs; benchmarks/ has the careful, L2-flushed measurement)")
    return 0


def cmd_demo(args) -> int:
    gpu_ok = False
    try:
        import torch

        if torch.cuda.is_available():
            from .devices import gpu

            gpu(torch.cuda.current_device())
            gpu_ok = True
    except Exception as exc:  # an unsupported GPU: say so, then show the compile-only demo
        print(f"GPU run skipped: {exc}")
    if gpu_ok and not args.compile_only:
        return _gpu_demo(args)
    print("No supported GPU here: compiling the kernels instead (no GPU needed).")
    from dataclasses import replace

    from .tuning import H200, Problem, select

    for arch in hardware.ARCHS:
        config = select(Problem(args.m, args.n, args.k, ab_dtype=args.dtype, out_dtype=args.dtype), replace(H200, arch=arch))
        spec = cfg.make_spec(arch, args.dtype, args.dtype, "k", "k", "n", config)
        print()
        print("\n".join(_compile_report(spec)))
    return 0


def lookahead_report(archs, dtype: str = "bf16") -> str:
    """Markdown: the producer k-loop of each look-ahead policy, PTX and SASS, annotated."""
    from .compile import compile_spec
    from .inspection import disassemble, find_nvdisasm, format_excerpt, producer_loop_ptx, producer_loop_sass

    out = ["# Producer look-ahead: what the compiler emits", "",
           "Generated by `python -m wsgemm lookahead` (compile only, no GPU). Each excerpt runs from the",
           "k-loop's head to its back-edge; arrows mark the slot acquire's byte announcement, the",
           "TMA copies, the look-ahead probe and the first instruction that reads the probe's answer.", ""]
    for target in archs:
        arch = hardware.arch_for_target(target).name
        for policy in cfg.Lookahead:
            config = cfg.GemmConfig(lookahead=policy)
            spec = cfg.make_spec(arch, dtype, dtype, "k", "k", "n", config)
            compiled = compile_spec(spec, keep_artifacts=True)
            out += [f"## {target}, `{policy.value}`", ""]
            for kind, excerpt in (("PTX", producer_loop_ptx(compiled.ptx)),
                                  ("SASS", producer_loop_sass(disassemble(compiled.cubin_path) or "")
                                   if find_nvdisasm() else None)):
                if excerpt is None:
                    out += [f"{kind}: not available (install `wsgemm[sass]` for nvdisasm)", ""]
                    continue
                order = " -> ".join(text.split(":")[0] for _, text in excerpt.events)
                out += [f"{kind} order: {order}", "", "```", format_excerpt(excerpt), "```", ""]
    return "\n".join(out)


def cmd_lookahead(args) -> int:
    report = lookahead_report(args.arch)
    if args.out:
        Path(args.out).write_text(report)
        print(f"wrote {args.out}")
    else:
        print(report)
    return 0


def _shape(text: str) -> tuple[int, ...]:
    parts = tuple(int(x) for x in text.lower().split("x"))
    if len(parts) not in (3, 4):
        raise argparse.ArgumentTypeError(f"{text!r}: expected MxNxK or LxMxNxK")
    return parts


def cmd_build(args) -> int:
    import time

    from . import fast_path

    if not fast_path.enabled_by_environment():
        print("WSGEMM_FAST_PATH is off: nothing to build", file=sys.stderr)
        return 1
    start = time.perf_counter()
    module = fast_path.load()
    published = fast_path.library_path(fast_path.build_directory())
    if module is None:
        print("python -m wsgemm build: the fast path could not be built (the warning above says why); "
              "calls will run the same steps in Python", file=sys.stderr)
        return 1
    if module.__file__ != str(published):
        print(f"python -m wsgemm build: built, but {published.parent} cannot be written (see the warning "
              "above): later processes will build it again", file=sys.stderr)
        return 1
    print(f"fast path: {published} ({time.perf_counter() - start:.1f} s)")
    if args.shapes:
        import torch

        from .api import precompile

        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
        for shape, seconds in precompile(args.shapes, dtype, weight_layout=not args.row_major_b).items():
            print(f"kernel for {'x'.join(map(str, shape))}: {seconds:.1f} s")
    return 0


def cmd_bench(suite_args: list[str]) -> int:
    # benchmarks/ ships with the source tree, not the wheel: run the package beside the
    # checkout this package was installed from (pip install -e .), as
    # ``python -m benchmarks.suite`` would from the checkout's root.
    root = Path(__file__).resolve().parents[2]
    if not (root / "benchmarks" / "suite.py").is_file():
        print(f"python -m wsgemm bench runs benchmarks/suite.py from a source checkout, and there is "
              f"none here ({root / 'benchmarks'} has no suite.py): clone the repository and "
              "pip install -e '.[bench]'", file=sys.stderr)
        return 2
    import importlib

    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module("benchmarks.suite").main(suite_args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wsgemm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    demo = sub.add_parser("demo", help="run (GPU) or compile (no GPU) a GEMM and report")
    demo.add_argument("--m", type=int, default=8192)
    demo.add_argument("--n", type=int, default=8192)
    demo.add_argument("--k", type=int, default=8192)
    demo.add_argument("--dtype", default="bf16", choices=cfg.INPUT_DTYPES)
    demo.add_argument("--iters", type=int, default=20)
    demo.add_argument("--compile-only", action="store_true", help="compile and report even on a GPU")
    demo.set_defaults(func=cmd_demo)
    insp = sub.add_parser("inspect", help="compile one config; write PTX/cubin/SASS; print resources")
    insp.add_argument("--arch", default="sm_90a", choices=[f.compile_target for f in hardware.ARCHS.values()])
    insp.add_argument("--out", default="artifacts", help="directory for kernel.ptx, the cubin, kernel.sass")
    _add_config_args(insp)
    insp.set_defaults(func=cmd_inspect)
    look = sub.add_parser("lookahead", help="show where each look-ahead policy puts the producer's probe (PTX/SASS)")
    look.add_argument("--arch", nargs="+", default=[f.compile_target for f in hardware.ARCHS.values()],
                      choices=[f.compile_target for f in hardware.ARCHS.values()])
    look.add_argument("--out", default=None, help="write the markdown report here instead of printing it")
    look.set_defaults(func=cmd_lookahead)
    build = sub.add_parser("build", help="build the C++ host fast path (and, on a GPU, kernels) ahead of time")
    build.add_argument("--shapes", nargs="*", type=_shape, default=[], metavar="MxNxK",
                       help="also compile the kernels gemm will choose for these shapes (needs the GPU)")
    build.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    build.add_argument("--row-major-b", action="store_true",
                       help="plan B as a row-major (K, N) tensor, not an nn.Linear weight passed as w.t()")
    build.set_defaults(func=cmd_build)
    # No options of its own: everything after "bench" goes to suite.py (try bench --help).
    sub.add_parser("bench", add_help=False, help="run benchmarks/suite.py from a source checkout")
    args, suite_args = parser.parse_known_args(argv)
    if args.cmd == "bench":
        return cmd_bench(suite_args)
    if suite_args:
        parser.error(f"unrecognized arguments: {' '.join(suite_args)}")
    try:
        return args.func(args)
    except WsgemmError as e:  # a bad config or argument: its message says what to change
        print(f"python -m wsgemm {args.cmd}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
