"""What a kernel is built from: ``GemmConfig`` (the knobs) and ``KernelSpec`` (knobs +
problem traits, the compile-cache key), with every derived budget computed and
checked here, before anything is compiled or launched.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from . import hardware
from .errors import ConfigError, UnsupportedDtypeError

# Element sizes of the dtypes the kernels implement, by wsgemm's dtype names.
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
INPUT_DTYPES = ("fp16", "bf16")
OUTPUT_DTYPES = ("fp16", "bf16", "fp32")


class Lookahead(str, enum.Enum):
    """Where the TMA producer probes the *next* stage's empty barrier.

    ``BEFORE_COPY``: probe stage k+1 before issuing stage k's TMA copies (CUTLASS C++
    ``sm100_mma_warpspecialized::load()``). ``AFTER_COPY``: probe after the copies,
    not on a tile's last k-block (NVIDIA's CuTe DSL Blackwell examples). ``NONE``: no
    probe; every iteration blocks in ``producer_acquire``. All three are correct:
    the probe's result is only a hint (see docs/producer-lookahead.md).
    """

    BEFORE_COPY = "before_copy"
    AFTER_COPY = "after_copy"
    NONE = "none"


class Raster(str, enum.Enum):
    """Order in which the persistent scheduler walks output tiles."""

    ALONG_M = "along_m"  # consecutive work items step down M (B tiles reused from L2)
    ALONG_N = "along_n"  # consecutive work items step along N (A tiles reused from L2)


# ``GemmConfig.read_before_wait``'s values: nothing, or the operand read before the wait.
READ_BEFORE_WAIT_OPERANDS = ("", "a", "b")


@dataclass(frozen=True)
class GemmConfig:
    """Compile-time knobs of a GEMM kernel. ``None`` means "derive it"."""

    tile_m: int = 128
    tile_n: int = 256
    tile_k: int = 64
    cluster_m: int = 1
    cluster_n: int = 1
    stages: int | None = None  # shared-memory ring depth; None: as many as fit
    epi_stages: int = 2  # shared-memory buffers the epilogue cycles through
    raster: Raster = Raster.ALONG_M
    swizzle: int = 1  # width, in clusters, of the band the raster zig-zags in
    lookahead: Lookahead = Lookahead.BEFORE_COPY
    # SM100 only: a CTA pair shares one 2*tile_m x tile_n MMA (cta_group::2).
    two_cta: bool = False
    # SM100 only: tensor-memory accumulator buffers (MMA of tile t+1 overlaps
    # the epilogue of tile t when >= 2).
    acc_stages: int = 2
    # SM90 only: split the K range of each output tile of the last, partial wave over
    # this many work items; the last one to run adds the others' fp32 partial sums
    # (see kernels/common/split_k.py). With fewer tiles than SMs that is every tile;
    # when the tiles fill whole waves, nothing is split.
    split_k: int = 1
    # SM90 only: stream-K for the last, partial wave instead of split-K: its tiles'
    # k-blocks are dealt out evenly over every resident cluster, in contiguous runs that
    # may cross tile boundaries, and pieces of one tile meet in the fp32 workspace
    # (see kernels/common/stream_k.py). Takes split_k=1.
    stream_k: bool = False
    # Compute D^T = B^T A^T instead (2-D operands only; wsgemm.api swaps the views,
    # the kernel is unchanged): a decode-sized M becomes the MMA's N, where a 16- or
    # 32-wide tile wastes little, and the weight fills the 64/128-row side.
    swap_ab: bool = False
    # SM90 only: programmatic dependent launch. The kernel may start while the previous
    # kernel on the stream finishes: its CTAs set up their barriers on SMs that kernel
    # has left and wait (griddepcontrol.wait) before touching global memory; each CTA
    # lets the next kernel launch once it has issued its last load. Measured on an H200
    # it helps some back-to-back shapes and slows others, so a config is built with it
    # off, and where wsgemm chooses the config the launch rules (``wsgemm.tuning.launch``) turn
    # it on for the shapes it helps (docs/tuning-log/dependent-launch.md).
    dependent_launch: bool = False
    # SM90 only: ping-pong consumers. Each of the two consumer warpgroups owns whole
    # tiles, alternating with the other (even and odd work items), so one warpgroup's
    # epilogue overlaps the other's mainloop; their mainloops take turns on the tensor
    # cores. Off: both warpgroups share each tile, 64 rows each ("cooperative"), and the
    # tensor cores idle through every epilogue. Holds a whole tile's accumulators per
    # thread, so it takes tiles of at most 128x192 (64x256); no split-K or stream-K.
    pingpong: bool = False
    # SM90 only, with dependent_launch: "a" or "b" promises that the kernels before this
    # one on the stream do not write that operand (a weight at inference; not so in
    # training, where an optimizer step writes it, or right after a weight is loaded).
    # The producer then loads the operand's first stages (``stages_read_before_wait``)
    # before griddepcontrol.wait, under the previous kernel's tail, and the other
    # operand's after it (docs/tuning-log/dependent-launch.md). Where the promise is false
    # the GEMM reads stale values: off unless asked for.
    read_before_wait: str = ""

    def __post_init__(self) -> None:
        # Accept the enums' string values, so GemmConfig(lookahead="none") works.
        object.__setattr__(self, "raster", _coerce_enum(Raster, self.raster, "raster"))
        object.__setattr__(
            self, "lookahead", _coerce_enum(Lookahead, self.lookahead, "lookahead")
        )

    @property
    def cluster_size(self) -> int:
        return self.cluster_m * self.cluster_n

    @property
    def has_workspace(self) -> bool:
        """Pieces of a tile meet in an fp32 workspace (split-K or stream-K): the kernel's
        entry point then also takes the workspace tensors."""
        return self.split_k > 1 or self.stream_k

    def short(self) -> str:
        """A compact human-readable name, e.g. ``128x256x64_c2x1_s4_before_copy``."""
        stages = "auto" if self.stages is None else str(self.stages)
        name = (
            f"{self.tile_m}x{self.tile_n}x{self.tile_k}_c{self.cluster_m}x{self.cluster_n}"
            f"_s{stages}_e{self.epi_stages}_{self.raster.value}_w{self.swizzle}"
            f"_{self.lookahead.value}"
        )
        if self.two_cta:
            name += "_2cta"
        if self.split_k > 1:
            name += f"_split{self.split_k}"
        if self.stream_k:
            name += "_streamk"
        if self.swap_ab:
            name += "_swapab"
        if self.dependent_launch:
            name += "_pdl"
        if self.pingpong:
            name += "_pingpong"
        if self.read_before_wait:
            name += f"_{self.read_before_wait}early"
        return name


def _coerce_enum(enum_cls, value, what: str):
    try:
        return enum_cls(value)
    except ValueError:
        allowed = ", ".join(repr(e.value) for e in enum_cls)
        raise ConfigError(f"{what}={value!r} is not one of {allowed}") from None


# --------------------------------------------------------------------------------------
# Budgets
# --------------------------------------------------------------------------------------

# Shared memory kept aside for the mbarriers and the alignment padding between
# buffers (each TMA buffer starts on a 1024-byte boundary).
SMEM_RESERVED_BYTES = 1024
# Ring depth when the config leaves ``stages`` unset: as many stages as fit, up to
# this many.
DEFAULT_MAX_STAGES = 16
# The most an explicit ``stages`` may ask for: narrow tiles have small stages, and a
# memory-bound GEMM wants many of them in flight (cuBLAS runs 64x64 tiles 13 deep).
MAX_STAGES = 16
# Each split but the last writes a whole fp32 tile of partial sums; past a handful
# the extra traffic and the last split's reduction outweigh the extra SMs.
MAX_SPLIT_K = 16

# SM90 warp roles: one producer warpgroup gives its registers to the consumers.
SM90_PRODUCER_REGISTERS = 40  # enough for TMA issue and the scheduler arithmetic
# Registers a consumer thread needs besides its accumulators: addresses,
# loop state and the epilogue's conversion buffer. 40 is what a ping-pong warpgroup
# with a 128x192 tile has beside its 192 accumulators under the 232-register cap, and
# ptxas fits it without spilling (a compile test checks the stack frame); QuACK runs
# the same tile under the same split (quack/gemm_sm90.py: 40 / 232 registers below
# 208 accumulators).
SM90_CONSUMER_REGISTER_OVERHEAD = 40
# Registers one wgmma needs beside its accumulators (descriptors, predicates, what is
# live across it) under ptxas's kernel-wide count (``RegisterBudget.launch_registers``):
# with three consumer warpgroups (128 registers) ptxas fit m64n192 (96 accumulators)
# and asked 138 for m64n208 (104).
SM90_WGMMA_LIVE_REGISTERS = 32


@dataclass(frozen=True)
class SmemBudget:
    a_stage_bytes: int
    b_stage_bytes: int
    epi_bytes: int
    reserved_bytes: int
    stages: int
    capacity_bytes: int

    @property
    def stage_bytes(self) -> int:
        return self.a_stage_bytes + self.b_stage_bytes

    @property
    def total_bytes(self) -> int:
        return self.stages * self.stage_bytes + self.epi_bytes + self.reserved_bytes


@dataclass(frozen=True)
class RegisterBudget:
    producer_registers: int
    consumer_registers: int
    accumulator_registers: int  # fp32 accumulator registers per consumer thread
    # What ptxas compiles the whole kernel under, whatever setmaxnreg raises the
    # consumers to later: the register file over the CTA's threads (one CTA per SM).
    # No single instruction may need more; a wgmma's accumulators are one instruction's.
    launch_registers: int
    wgmma_accumulator_registers: int  # one m64nNk16 wgmma's, per thread: N / 2


# ``Epilogue.activation``'s values, named as torch.nn.functional computes them: "gelu"
# the exact (erf) form, "gelu_tanh" ``gelu(x, approximate="tanh")``.
ACTIVATIONS = ("", "relu", "gelu", "gelu_tanh", "silu")
# ``Epilogue.bias``'s values: no bias, one value per column of the kernel's D (the
# caller's N), or one per row (the caller's N after a swapped plan made it the kernel's M).
BIAS_PLACEMENTS = ("", "n", "m")


@dataclass(frozen=True)
class Epilogue:
    """What the epilogue computes from the fp32 accumulators before the one conversion
    to the output dtype: ``act(alpha * acc + bias)``. Part of the compile-cache key; the
    bias values and ``alpha`` are runtime arguments. The default computes ``acc``."""

    activation: str = ""  # one of ACTIVATIONS; "" for none
    bias: str = ""  # one of BIAS_PLACEMENTS
    bias_dtype: str = "fp32"  # fp16 | bf16 | fp32
    scaled: bool = False  # alpha is a runtime argument (else 1)

    @property
    def fused(self) -> bool:
        """Anything beyond the conversion: the kernel then takes the bias and alpha."""
        return self != Epilogue()

    def short(self) -> str:
        parts = [f"bias{self.bias}{self.bias_dtype}" if self.bias else "", self.activation,
                 "alpha" if self.scaled else ""]
        return "_".join(p for p in parts if p)


def check_epilogue(epilogue: Epilogue) -> None:
    _check_choice("activation", epilogue.activation, ACTIVATIONS)
    _check_choice("bias", epilogue.bias, BIAS_PLACEMENTS)
    if epilogue.bias_dtype not in DTYPE_BYTES:
        raise UnsupportedDtypeError(f"bias dtype {epilogue.bias_dtype!r} is not supported; "
                                    f"use one of {sorted(DTYPE_BYTES)}")
    if not isinstance(epilogue.scaled, bool):
        raise ConfigError(f"scaled={epilogue.scaled!r} must be True or False")


@dataclass(frozen=True)
class KernelSpec:
    """Everything that changes the generated code: the compile-cache key.

    Build it with :func:`make_spec`, which validates and fills in derived values.
    """

    arch: str  # "sm90" | "sm100"
    ab_dtype: str  # "fp16" | "bf16"
    out_dtype: str  # "fp16" | "bf16" | "fp32"
    a_major: str  # "k" (row-major A) | "m" (column-major A)
    b_major: str  # "k" (B given as W^T, W row-major) | "n" (row-major B)
    d_major: str  # "n" (row-major D) | "m" (column-major D)
    config: GemmConfig = field(default_factory=GemmConfig)
    batched: bool = False  # operands carry a leading batch mode L
    # Bytes every TMA base address and non-unit stride is a multiple of.
    alignment: int = hardware.TMA_ALIGNMENT_BYTES
    epilogue: Epilogue = field(default_factory=Epilogue)

    @property
    def facts(self) -> hardware.ArchFacts:
        return hardware.ARCHS[self.arch]

    def short(self) -> str:
        return (
            f"{self.arch}_{self.ab_dtype}to{self.out_dtype}_a{self.a_major}"
            f"b{self.b_major}d{self.d_major}{'_batched' if self.batched else ''}_{self.config.short()}"
            + (f"_{self.epilogue.short()}" if self.epilogue.fused else "")
        )


def epilogue_tile(spec: "KernelSpec") -> tuple[int, int]:
    """Shape of the sub-tile the epilogue moves through shared memory per step."""
    c = spec.config
    if spec.arch == "sm100":
        # The DSL's own rule (pure Python), so the budget matches what the kernel builds:
        # tensor-memory loads cover 32 lanes per warp, 4 warps -> 128 rows.
        from cutlass.utils.blackwell_helpers import compute_epilogue_tile_size

        return compute_epilogue_tile_size(
            c.tile_m, c.tile_n, c.two_cta, DTYPE_BYTES[spec.out_dtype] * 8, None, spec.d_major == "m"
        )
    # A sub-tile is what one store step of the threads sharing a tile covers: 64 rows
    # per wgmma warpgroup, 32 columns; the narrowest step where the tile's width is an
    # odd multiple of it.
    columns = 2 * SM90_TILE_N_STEP if c.tile_n % (2 * SM90_TILE_N_STEP) == 0 else SM90_TILE_N_STEP
    return (min(c.tile_m, 64 * tile_warpgroups(c)), min(c.tile_n, columns))


def cta_pair(config: GemmConfig) -> int:
    """CTAs that share one MMA: 2 with Blackwell's cta_group::2, else 1."""
    return 2 if config.two_cta else 1


def consumer_warpgroups(config: GemmConfig) -> int:
    """SM90: warpgroups that issue wgmma: two with ping-pong consumers, else one per
    64 rows of the tile (wgmma's M) up to 192 rows, and two for 256.

    A 256-row tile gives each of its two warpgroups 128 rows (two wgmmas stacked, as a
    ping-pong warpgroup does), not four warpgroups 64 each: ptxas compiles the kernel
    under one register count, 65536 / threads (168 with three warpgroups in all, 128
    with four, 96 with five), and a single wgmma's accumulators must fit it
    (``RegisterBudget.launch_registers``). Five warpgroups would cap 256-row tiles at
    128 columns; two take up to 192. A 192-row tile has three of 64 rows, up to 192
    columns (m64n192 under 128 registers)."""
    return 2 if config.pingpong or config.tile_m == 256 else max(1, config.tile_m // 64)


def tile_warpgroups(config: GemmConfig) -> int:
    """SM90: consumer warpgroups that share one tile (and read each ring slot): one
    with ping-pong consumers, else all of them."""
    return 1 if config.pingpong else consumer_warpgroups(config)


def wgmma_batches_in_flight(tile_wgs: int) -> int:
    """SM90: k-blocks of wgmmas a consumer warpgroup leaves running when it moves on to
    the next k-block, given how many warpgroups share its tile (:func:`tile_warpgroups`).

    Alone on its tile (64-row tiles, ping-pong consumers), a warpgroup keeps one
    batch in flight: waiting for all of its wgmmas would leave the tensor pipe idle
    until it has issued the next k-block's. Two cooperative warpgroups share the
    pipe, so while one waits for its batch the other's keeps the pipe busy; they wait
    for all of their wgmmas each k-block and release that k-block's slot at once,
    which leaves the producer one more free stage to load ahead (cuBLAS's nvjet
    kernels do the same; docs/tuning-log/decode.md has the measurements).
    """
    return 1 if tile_wgs == 1 else 0


def epilogue_buffer_sets(config: GemmConfig) -> int:
    """Sets of ``epi_stages`` epilogue buffers in shared memory: one per ping-pong
    consumer (their epilogues run independently), else one."""
    return consumer_warpgroups(config) // tile_warpgroups(config)


def bias_tile_elems(spec: KernelSpec) -> int:
    """fp32 elements of shared memory the SM90 epilogue stages a tile's bias in
    (``kernels/common/epilogue.py``): the tile's columns, or rows for a bias along the
    kernel's M, one stretch per set of epilogue buffers. The SM100 epilogue reads it
    from global memory."""
    if not spec.epilogue.bias or spec.arch != "sm90":
        return 0
    c = spec.config
    return (c.tile_n if spec.epilogue.bias == "n" else c.tile_m) * epilogue_buffer_sets(c)


def smem_budget(spec: KernelSpec) -> SmemBudget:
    """Shared memory per CTA: the ring (``config.stages``, or as many as fit up to
    ``DEFAULT_MAX_STAGES``), the epilogue buffers and the reserve for barriers and padding."""
    c = spec.config
    in_bytes = DTYPE_BYTES[spec.ab_dtype]
    a_stage = c.tile_m * c.tile_k * in_bytes
    # A 2-CTA MMA splits B's N columns between the pair: each CTA holds half.
    b_stage = c.tile_n // cta_pair(c) * c.tile_k * in_bytes
    epi_m, epi_n = epilogue_tile(spec)
    epi = epi_m * epi_n * DTYPE_BYTES[spec.out_dtype] * c.epi_stages * epilogue_buffer_sets(c)
    epi += bias_tile_elems(spec) * DTYPE_BYTES["fp32"]
    capacity = spec.facts.smem_per_cta_bytes
    stages = c.stages
    if stages is None:
        stages = min(DEFAULT_MAX_STAGES, (capacity - epi - SMEM_RESERVED_BYTES) // (a_stage + b_stage))
    return SmemBudget(a_stage, b_stage, epi, SMEM_RESERVED_BYTES, stages, capacity)


# Bytes of the operand a dependent launch may read before griddepcontrol.wait
# (``GemmConfig.read_before_wait``) that each CTA loads there. Enough to cover the wait
# (an SM's share of HBM, 4.8 TB/s over 132 SMs, delivers 64 KiB in 1.8 us), few enough
# that where the wait is short the other operand's first box does not queue behind
# many: on the H200's decode suite 64 KiB ran graph replays 1.037x faster and single
# calls level, every stage (up to 16) 1.019x and 0.988x (docs/tuning-log/dependent-launch.md).
READ_BEFORE_WAIT_BYTES = 64 * 1024


def stages_read_before_wait(spec: KernelSpec) -> int:
    """Ring stages whose ``read_before_wait`` operand the producer loads before
    ``griddepcontrol.wait``: ``READ_BEFORE_WAIT_BYTES`` of it, at least one stage and
    at most the ring."""
    budget = smem_budget(spec)
    operand = spec.config.read_before_wait
    stage = budget.a_stage_bytes if operand == "a" else budget.b_stage_bytes
    return max(1, min(budget.stages, READ_BEFORE_WAIT_BYTES // stage))


def tmem_columns(spec: KernelSpec) -> int:
    """Tensor-memory columns the SM100 kernel allocates: one fp32 column per output
    column per accumulator buffer (128 lanes = 128 rows), rounded up to the power of
    two ``tcgen05.alloc`` requires (at least 32)."""
    used = spec.config.acc_stages * spec.config.tile_n
    return max(32, 1 << (used - 1).bit_length())


def ctas_per_sm(budget: SmemBudget, facts: hardware.ArchFacts) -> int:
    """How many CTAs of this shared-memory footprint an SM can hold at once (shared
    memory only: an upper bound, which is what the tensor-memory check needs)."""
    return facts.smem_per_sm_bytes // (budget.total_bytes + hardware.SMEM_SYSTEM_BYTES_PER_CTA)


def sm90_register_budget(config: GemmConfig) -> RegisterBudget:
    facts = hardware.SM90
    wgs = consumer_warpgroups(config)
    threads = (1 + wgs) * hardware.THREADS_PER_WARPGROUP
    launch = min(facts.max_registers_per_thread, facts.registers_per_sm // threads // 8 * 8)
    # setmaxnreg only moves registers between a CTA's warps: the consumers may take what
    # the producer gives up of the CTA's launch allocation, never more (a setmaxnreg.inc
    # past it waits forever: docs/tuning-log/dependent-launch.md). Counted from the launch
    # allocation, not the register file, which it may fall short of by the rounding.
    per_wg_thread_pool = launch * (1 + wgs)
    consumer = (per_wg_thread_pool - SM90_PRODUCER_REGISTERS) // wgs
    consumer = min(facts.max_registers_per_thread, consumer - consumer % 8)
    acc = config.tile_m * config.tile_n // (tile_warpgroups(config) * hardware.THREADS_PER_WARPGROUP)
    one_wgmma = 64 * config.tile_n // hardware.THREADS_PER_WARPGROUP
    return RegisterBudget(SM90_PRODUCER_REGISTERS, consumer, acc, launch, one_wgmma)


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------

# 64, 128 and 192 rows: a consumer warpgroup per 64; 256: two (see consumer_warpgroups).
SM90_TILE_M = (64, 128, 192, 256)
SM90_PINGPONG_MAX_TILE_M = 128  # a ping-pong warpgroup's whole tile: two wgmmas stacked
# wgmma takes any N that is a multiple of 8 up to 256; a warp's stmatrix.x4 writes
# 16x16, the epilogue's narrowest step, so tiles are multiples of 16 (``epilogue_tile``).
SM90_TILE_N_STEP = 16
SM90_TILE_N = tuple(range(SM90_TILE_N_STEP, 257, SM90_TILE_N_STEP))
# 128-deep k-blocks only on SM90, where the launch policy gives them to decode tiles
# streaming a weight (``tuning.launch.deep_k_blocks_for_decode``); the SM100 kernel
# runs nowhere here, so it keeps the depth its tests check.
SM90_TILE_K = (64, 128)
SM100_TILE_K = (64,)
CLUSTER_DIMS = (1, 2, 4)
SWIZZLES = (1, 2, 4, 8, 16)


def _check_choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} is not supported; choose one of {list(allowed)}")


def make_spec(
    arch: str,
    ab_dtype: str,
    out_dtype: str,
    a_major: str,
    b_major: str,
    d_major: str,
    config: GemmConfig,
    batched: bool = False,
    epilogue: Epilogue = Epilogue(),
) -> KernelSpec:
    """Validate a configuration for one arch and problem kind and resolve ``stages``.

    Raises ``ConfigError`` naming the offending knob and the budget it breaks.
    """
    if arch not in hardware.ARCHS:
        raise ConfigError(f"unknown arch {arch!r}; wsgemm builds {sorted(hardware.ARCHS)}")
    if ab_dtype not in INPUT_DTYPES:
        raise UnsupportedDtypeError(
            f"input dtype {ab_dtype!r} is not supported; use one of {list(INPUT_DTYPES)}"
        )
    if out_dtype not in OUTPUT_DTYPES:
        raise UnsupportedDtypeError(
            f"output dtype {out_dtype!r} is not supported; use one of {list(OUTPUT_DTYPES)}"
        )
    _check_choice("a_major", a_major, ("k", "m"))
    _check_choice("b_major", b_major, ("k", "n"))
    _check_choice("d_major", d_major, ("n", "m"))
    if not isinstance(config, GemmConfig):
        raise ConfigError(f"config must be a wsgemm.GemmConfig, got {type(config).__name__}")
    check_epilogue(epilogue)
    if epilogue.bias == "m" and batched:
        raise ConfigError("a bias along the kernel's M (a swapped plan's) is for 2-D products only")

    if arch == "sm90":
        _check_sm90(config)
    else:
        _check_sm100(config)

    if not isinstance(config.swap_ab, bool):
        raise ConfigError(f"swap_ab={config.swap_ab!r} must be True or False")
    # The swap happens in wsgemm.plans, on the operands' views; the kernel never sees it,
    # and reads the caller's A as its B and the caller's B as its A.
    early = {"a": "b", "b": "a"}.get(config.read_before_wait, "") if config.swap_ab else config.read_before_wait
    config = replace(config, swap_ab=False, read_before_wait=early)
    spec = KernelSpec(arch, ab_dtype, out_dtype, a_major, b_major, d_major, config, batched=batched,
                      epilogue=epilogue)
    if arch == "sm100" and tmem_columns(spec) > spec.facts.tmem_columns:
        raise ConfigError(
            f"{config.acc_stages} accumulator buffers of {config.tile_n} fp32 columns need "
            f"{config.acc_stages * config.tile_n} tensor-memory columns; an SM has "
            f"{spec.facts.tmem_columns}: use fewer acc_stages or a smaller tile_n"
        )
    budget = smem_budget(spec)
    if budget.stages < 2:
        raise ConfigError(
            f"{config.short()}: one stage needs {budget.stage_bytes} B of shared memory and the "
            f"epilogue {budget.epi_bytes} B, so fewer than 2 stages fit in "
            f"{budget.capacity_bytes} B; use a smaller tile or fewer epi_stages"
        )
    if budget.total_bytes > budget.capacity_bytes:
        raise ConfigError(
            f"{config.short()}: {budget.stages} stages need {budget.total_bytes} B of shared "
            f"memory but a CTA can have at most {budget.capacity_bytes} B on {arch}; "
            f"at most {max_stages_that_fit(budget)} stages fit"
        )
    if arch == "sm100":
        _check_tmem_per_sm(spec, budget)
    if config.stages is None:
        spec = replace(spec, config=replace(config, stages=budget.stages))
    return spec


def _check_tmem_per_sm(spec: KernelSpec, budget: SmemBudget) -> None:
    """Co-resident CTAs must fit their tensor memory side by side: a CTA whose
    ``tcgen05.alloc`` finds too few free columns blocks until another CTA on the SM frees
    its own, at the end of that CTA's persistent loop; CTAs of two clusters that wait on
    each other that way never finish."""
    resident = ctas_per_sm(budget, spec.facts)
    columns = tmem_columns(spec)
    if resident * columns > spec.facts.tmem_columns:
        c = spec.config
        raise ConfigError(
            f"{c.short()}: {budget.total_bytes} B of shared memory lets {resident} CTAs share an SM, "
            f"and each allocates {columns} tensor-memory columns ({c.acc_stages} x {c.tile_n}, rounded "
            f"to a power of two); {resident} x {columns} > the SM's {spec.facts.tmem_columns}, so a "
            f"CTA's allocation could wait on another forever. Use more stages (stages=None fills "
            f"shared memory), fewer acc_stages or a smaller tile_n"
        )


def max_stages_that_fit(budget: SmemBudget) -> int:
    free = budget.capacity_bytes - budget.epi_bytes - budget.reserved_bytes
    return free // budget.stage_bytes


SM100_TILE_M = (128,)  # rows per CTA; the MMA is 128 (1 CTA) or 256 (2-CTA pair) rows
SM100_TILE_N = (64, 128, 192, 256)


def _check_common(config: GemmConfig) -> None:
    _check_choice("cluster_m", config.cluster_m, CLUSTER_DIMS)
    _check_choice("cluster_n", config.cluster_n, CLUSTER_DIMS)
    # SM90 and SM100 share the portable limit; wsgemm never opts into larger clusters.
    portable = hardware.SM90.max_portable_cluster_size
    if config.cluster_size > portable:
        raise ConfigError(
            f"cluster {config.cluster_m}x{config.cluster_n} has {config.cluster_size} CTAs; "
            f"a portable cluster has at most {portable}"
        )
    _check_choice("swizzle", config.swizzle, SWIZZLES)
    if config.stages is not None and not (2 <= config.stages <= MAX_STAGES):
        raise ConfigError(f"stages={config.stages} must be between 2 and {MAX_STAGES}")
    if not 1 <= config.epi_stages <= 4:
        raise ConfigError(f"epi_stages={config.epi_stages} must be between 1 and 4")
    if not (isinstance(config.split_k, int) and 1 <= config.split_k <= MAX_SPLIT_K):
        raise ConfigError(f"split_k={config.split_k!r} must be an integer between 1 and {MAX_SPLIT_K}")
    if not isinstance(config.dependent_launch, bool):
        raise ConfigError(f"dependent_launch={config.dependent_launch!r} must be True or False")
    if not isinstance(config.stream_k, bool):
        raise ConfigError(f"stream_k={config.stream_k!r} must be True or False")
    if not isinstance(config.pingpong, bool):
        raise ConfigError(f"pingpong={config.pingpong!r} must be True or False")
    if config.read_before_wait not in READ_BEFORE_WAIT_OPERANDS:
        raise ConfigError(f"read_before_wait={config.read_before_wait!r} must be '', 'a' or 'b'")
    if config.stream_k and config.split_k != 1:
        raise ConfigError(f"stream_k=True with split_k={config.split_k}: the last wave is either split or "
                          "streamed; pass split_k=1 with stream_k")


# (GemmConfig field, what it turns on, the value that turns it off): SM90 kernel features
# the SM100 kernel does not implement.
SM90_ONLY_FEATURES = (
    ("split_k", "split-K", 1),
    ("dependent_launch", "programmatic dependent launch", False),
    ("stream_k", "stream-K", False),
    ("pingpong", "ping-pong consumers", False),
    ("read_before_wait", "reads before griddepcontrol.wait", ""),
)


def _check_sm100(config: GemmConfig) -> None:
    _check_choice("tile_m", config.tile_m, SM100_TILE_M)
    _check_choice("tile_n", config.tile_n, SM100_TILE_N)
    _check_choice("tile_k", config.tile_k, SM100_TILE_K)
    _check_common(config)
    if config.two_cta and config.cluster_m % 2:
        raise ConfigError(
            f"two_cta pairs CTAs along M, so cluster_m must be even (got cluster_m={config.cluster_m})"
        )
    if not 1 <= config.acc_stages <= 4:
        raise ConfigError(f"acc_stages={config.acc_stages} must be between 1 and 4")
    for name, feature, off in SM90_ONLY_FEATURES:
        value = getattr(config, name)
        if value != off:
            raise ConfigError(f"{name}={value!r}: {feature} is implemented in the sm90 kernel only; "
                              f"the sm100 kernel takes {name}={off!r}")


def sm90_registers_fit(config: GemmConfig) -> bool:
    """Whether ``config``'s accumulators fit the SM90 register budget (the checks
    ``make_spec`` runs), for planners that choose among tile shapes."""
    return _sm90_register_problem(config) is None


def _sm90_register_problem(config: GemmConfig) -> str | None:
    """Why ``config``'s tile does not fit the registers, or ``None`` where it does."""
    regs = sm90_register_budget(config)
    if regs.accumulator_registers + SM90_CONSUMER_REGISTER_OVERHEAD > regs.consumer_registers:
        return (
            f"tile {config.tile_m}x{config.tile_n} needs {regs.accumulator_registers} accumulator "
            f"registers per consumer thread; with {regs.consumer_registers} registers per consumer "
            f"thread at most {regs.consumer_registers - SM90_CONSUMER_REGISTER_OVERHEAD} fit; "
            "use a smaller tile_n" + (" or tile_m, or pingpong=False" if config.pingpong else "")
        )
    if regs.wgmma_accumulator_registers + SM90_WGMMA_LIVE_REGISTERS > regs.launch_registers:
        return (
            f"tile {config.tile_m}x{config.tile_n}: one m64n{config.tile_n} wgmma holds "
            f"{regs.wgmma_accumulator_registers} accumulator registers per thread; with "
            f"{1 + consumer_warpgroups(config)} warpgroups ptxas compiles the kernel under "
            f"{regs.launch_registers} registers, of which at most "
            f"{regs.launch_registers - SM90_WGMMA_LIVE_REGISTERS} can be one wgmma's; use a smaller tile_n"
        )
    return None


def _check_sm90(config: GemmConfig) -> None:
    _check_choice("tile_m", config.tile_m, SM90_TILE_M)
    _check_choice("tile_n", config.tile_n, SM90_TILE_N)
    _check_choice("tile_k", config.tile_k, SM90_TILE_K)
    _check_common(config)
    if config.two_cta:
        raise ConfigError("two_cta is a Blackwell (sm100) feature; Hopper has no cta_group::2 MMA")
    if config.read_before_wait and not config.dependent_launch:
        raise ConfigError(f"read_before_wait={config.read_before_wait!r} reads before griddepcontrol.wait, "
                          "which only a dependent launch has: pass dependent_launch=True with it")
    if config.pingpong and config.tile_m > SM90_PINGPONG_MAX_TILE_M:
        raise ConfigError(f"pingpong=True with tile_m={config.tile_m}: a ping-pong warpgroup holds a whole tile, "
                          f"at most {SM90_PINGPONG_MAX_TILE_M} rows; pass pingpong=False or a smaller tile_m")
    problem = _sm90_register_problem(config)
    if problem:
        raise ConfigError(problem)
    if config.pingpong and config.has_workspace:
        # A piece of a tile would end in a partial-sum exchange through the workspace,
        # which both warpgroups of a tile join; a ping-pong tile has one.
        raise ConfigError(f"pingpong=True with {'stream_k=True' if config.stream_k else f'split_k={config.split_k}'}: "
                          "ping-pong consumers run whole tiles; pass split_k=1 and stream_k=False")
