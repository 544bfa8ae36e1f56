"""Hardware facts and budgets, in one place, each with its source.

Kernels, the config checker, ``inspect`` and the docs read these numbers from here;
nothing else in the package spells them out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ArchFacts:
    """What one GPU architecture offers a single CTA."""

    name: str  # wsgemm's name for the kernel family: "sm90" or "sm100"
    # The DSL/ptxas target: one whose binary runs on every compute capability listed
    # below. An arch-conditional target ("a", e.g. sm_100a) runs only on its exact arch;
    # a family target ("f", e.g. sm_100f) runs on every later minor of its major, with
    # the same tcgen05/TMA instructions (the DSL's ``Arch.can_run_binary_built_for``).
    compile_target: str
    compute_capabilities: tuple[tuple[int, int], ...]
    # Dynamic shared memory a CTA may opt into. CUDA C++ Programming Guide,
    # "Technical Specifications per Compute Capability": 227 KB for 9.0 and 10.0.
    smem_per_cta_bytes: int
    # Shared memory of one SM, which co-resident CTAs divide (CUDA C++ Programming
    # Guide, same table: 228 KB for 9.0 and 10.0).
    smem_per_sm_bytes: int
    # 32-bit registers per SM; one CTA per SM here, so the CTA may use them all.
    # CUDA C++ Programming Guide, same table: 64 K for 9.0 and 10.0.
    registers_per_sm: int
    # Largest register count `setmaxnreg` accepts (PTX ISA, setmaxnreg: 24..256,
    # a multiple of 8).
    max_registers_per_thread: int
    # Tensor memory (Blackwell only): 128 lanes x 512 columns of 32 bits per SM.
    # PTX ISA, "Tensor Memory"; allocations are powers of two, 32 to 512 columns.
    tmem_columns: int
    # Cluster sizes that launch on every part without opting in (PTX ISA /
    # CUDA guide, "Thread Block Clusters": 8 is the portable maximum).
    max_portable_cluster_size: int


SM90 = ArchFacts(
    name="sm90",
    compile_target="sm_90a",
    compute_capabilities=((9, 0),),
    smem_per_cta_bytes=232448,
    smem_per_sm_bytes=233472,
    registers_per_sm=65536,
    max_registers_per_thread=256,
    tmem_columns=0,
    max_portable_cluster_size=8,
)

SM100 = ArchFacts(
    name="sm100",
    # sm_100f, not sm_100a: the one binary runs on 10.0 and 10.3.
    compile_target="sm_100f",
    # 10.0: B200 and GB200; 10.3: B300 and GB300 (same tcgen05 feature set).
    compute_capabilities=((10, 0), (10, 3)),
    smem_per_cta_bytes=232448,
    smem_per_sm_bytes=233472,
    registers_per_sm=65536,
    max_registers_per_thread=256,
    tmem_columns=512,
    max_portable_cluster_size=8,
)

ARCHS: dict[str, ArchFacts] = {SM90.name: SM90, SM100.name: SM100}

WARP_SIZE = 32
WARPS_PER_WARPGROUP = 4
THREADS_PER_WARPGROUP = WARP_SIZE * WARPS_PER_WARPGROUP

# Every 16-byte boundary matters to TMA: the global base address and every
# non-unit stride of a tensor map must be multiples of 16 bytes
# (CUDA Driver API, cuTensorMapEncodeTiled: globalAddress and globalStrides).
TMA_ALIGNMENT_BYTES = 16

# Shared memory the driver reserves for system use per resident CTA (CUDA C++
# Programming Guide, "Shared Memory" of compute capability 9.0/10.0: 1 KB per block).
SMEM_SYSTEM_BYTES_PER_CTA = 1024

# An mbarrier is one 64-bit word in shared memory (PTX ISA, "mbarrier object").
MBARRIER_BYTES = 8

# Shared-memory buffers that TMA writes with a 128-byte swizzle must start on a
# 1024-byte boundary (the swizzle pattern repeats every 8 rows of 128 bytes).
SWIZZLE_ATOM_ALIGNMENT_BYTES = 1024


def arch_for_target(target: str) -> ArchFacts:
    """``"sm_90a"`` -> SM90 facts; raises ``KeyError`` for targets we do not build."""
    for facts in ARCHS.values():
        if facts.compile_target == target:
            return facts
    raise KeyError(target)
