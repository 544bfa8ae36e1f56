"""What every kernel of the ladder needs around it and is not the point of any step:
stand-in tensors to compile against, the compile call that keeps the PTX, and the
``__main__`` that runs a step on a Hopper GPU or, without one, compiles it and says
what it would run.

The kernels take torch tensors directly (the DSL's TVM-FFI calling convention, as the
library's kernels do). A matrix is row-major with a leading dimension that is a
multiple of 8 elements (16 bytes, what TMA requires); its sizes are runtime values, so
one compiled kernel serves every shape the step supports.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

HOPPER = "sm_90a"
BLACKWELL = "sm_100a"


def fake_matrix(dtype=cutlass.BFloat16, rows=None, cols=None):
    """A row-major (rows, cols) matrix of symbolic size, 16-byte aligned, for compiling."""
    rows = cute.sym_int() if rows is None else rows
    cols = cute.sym_int() if cols is None else cols
    ld = cute.sym_int64(divisibility=8)
    return make_fake_tensor(dtype, (rows, cols), (ld, 1), assumed_align=16)


def fake_stream():
    """The caller's current stream, read from PyTorch at each call."""
    return make_fake_stream(use_tvm_ffi_env_stream=True)


@dataclass
class Build:
    fn: object  # call with torch tensors (and ints) in the order of the host function
    ptx: str
    seconds: float


def compile_kernel(host_function, *args, arch: str = HOPPER) -> Build:
    """Compile ``host_function`` for ``arch`` with stand-in ``args``; needs no GPU."""
    dump = tempfile.mkdtemp(prefix="wsgemm-ladder-")
    options = f"--gpu-arch {arch} --enable-tvm-ffi --keep-ptx --dump-dir {dump}"
    start = time.perf_counter()
    fn = cute.compile(host_function, *args, options=options)
    seconds = time.perf_counter() - start
    ptx = fn.artifacts.PTX
    if isinstance(ptx, str) and "\n" not in ptx and os.path.exists(ptx):
        ptx = Path(ptx).read_text()
    return Build(fn, ptx, seconds)


def has_hopper_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def relative_error(result, reference) -> float:
    return ((result.float() - reference).norm() / reference.norm()).item()


def main(build, run, what: str, introduces: list[str], arch: str = HOPPER) -> int:
    """A step's ``__main__``: compile it and show the PTX instructions it introduces;
    then, on a Hopper GPU (and for a Hopper step), run it and check the result."""
    built = build()
    print(f"compiled for {arch} in {built.seconds:.1f} s; the PTX this step introduces:")
    for instruction in introduces:
        print(f"  {instruction:40s} x{built.ptx.count(instruction)}")
    if arch != HOPPER:
        print("A Blackwell step: compiled and checked only, never run here.")
        return 0
    if not has_hopper_gpu():
        print(f"No SM90 GPU here: on an H100 or H200 this would run {what} and check it against PyTorch.")
        return 0
    message = run(built)
    print(message)
    return 0


if __name__ == "__main__":
    sys.exit("harness.py is imported by the ladder's steps; run one of them instead.")
