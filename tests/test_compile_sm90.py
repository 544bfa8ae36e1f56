"""Compile-only checks of the SM90 kernel (no GPU): it builds for sm_90a over dtypes,
majors, tiles, clusters and look-ahead policies, its PTX holds the instructions the
design promises, and ptxas kept it within the register file without spills."""

import dataclasses
import inspect
import itertools
import re

import pytest

from wsgemm import GemmConfig, Lookahead
from wsgemm import config as cfg
from wsgemm.compile import compile_spec
from wsgemm.kernels.common import split_k
from wsgemm.inspection import (announced_bytes_operands, count_instructions, cubin_resources, disassemble,
                               producer_loop_ptx, producer_probe_precedes_copies, ptx_destination, sass_instructions,
                               sass_loop_around, sass_mnemonic, sass_opcode, tma_coordinates, tma_load_parameters,
                               uniform_moves_between)
from wsgemm.kernels.sm90 import Sm90Gemm

MAJORS = [(a, b, d) for a, b, d in itertools.product("km", "kn", "nm")]


def build(ab="bf16", out="bf16", majors=("k", "k", "n"), config=None):
    spec = cfg.make_spec("sm90", ab, out, *majors, config or GemmConfig())
    return spec, compile_spec(spec, keep_artifacts=True)


def assert_core_structure(spec, compiled):
    ptx = compiled.ptx
    counts = count_instructions(ptx)
    assert counts["wgmma.mma_async"] >= 1
    assert "cp.async.bulk.tensor" in ptx
    # A and B loads complete on the full barrier (MN-major tiles take several boxes).
    assert counts["mbarrier::complete_tx"] >= 2
    assert counts["mbarrier.try_wait"] >= 2
    assert counts["setmaxnreg"] == 2  # producer gives registers, consumers take them
    # TMA store of D (shared -> global bulk tensor copy).
    assert "cp.async.bulk.tensor" in ptx and ".global.shared::cta" in ptx
    (res,) = cubin_resources(compiled.cubin_path)
    assert res.stack_frame_bytes == 0, "local memory in use: spills or indexed register arrays"
    warpgroups = 1 + cfg.consumer_warpgroups(spec.config)
    assert res.registers * warpgroups * 128 <= 65536
    # setmaxnreg moves registers between the CTA's warps only: what the warpgroups ask
    # for must fit in what the CTA launched with, or a setmaxnreg.inc waits forever.
    regs = cfg.sm90_register_budget(spec.config)
    asked = [int(n) for n in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+);", ptx)]
    assert sorted(asked) == sorted([regs.producer_registers, regs.consumer_registers])
    consumers = warpgroups - 1
    assert regs.producer_registers + consumers * regs.consumer_registers <= res.register_cap * warpgroups
    assert cfg.smem_budget(spec).total_bytes <= spec.facts.smem_per_cta_bytes


@pytest.mark.parametrize("ab, out", [("bf16", "bf16"), ("fp16", "fp16"), ("bf16", "fp32"), ("fp16", "fp32")])
@pytest.mark.parametrize("majors", MAJORS, ids=["".join(m) for m in MAJORS])
def test_dtypes_and_majors_compile(ab, out, majors):
    spec, compiled = build(ab, out, majors)
    assert_core_structure(spec, compiled)
    assert f"{'bf16' if ab == 'bf16' else 'f16'}.{'bf16' if ab == 'bf16' else 'f16'}" in compiled.ptx


@pytest.mark.parametrize(
    "config",
    [
        GemmConfig(tile_m=64, tile_n=64),
        GemmConfig(tile_m=64, tile_n=256),
        GemmConfig(tile_m=128, tile_n=128),
        GemmConfig(tile_m=128, tile_n=192),
        GemmConfig(tile_m=128, tile_n=160, cluster_m=2),
        GemmConfig(tile_m=64, tile_n=224),
        GemmConfig(cluster_m=2),
        GemmConfig(cluster_n=2),
        GemmConfig(cluster_m=2, cluster_n=2),
        GemmConfig(stages=2, epi_stages=1),
        GemmConfig(raster="along_n", swizzle=4),
        GemmConfig(tile_m=64, tile_n=96, cluster_m=4),
        GemmConfig(tile_m=64, tile_n=64, cluster_n=4, stages=13),
        GemmConfig(tile_m=128, tile_n=112, cluster_n=2),  # a fitted token tile: 16-wide epilogue steps
        GemmConfig(tile_m=64, tile_n=80, split_k=2),
        # 256 rows: two warpgroups of 128 rows, two wgmmas each per k-step.
        GemmConfig(tile_m=256, tile_n=192),
        GemmConfig(tile_m=256, tile_n=144, cluster_n=2, split_k=2),
        GemmConfig(tile_m=256, tile_n=128, cluster_m=2, stream_k=True),
        # 192 rows: three warpgroups of 64, the widest wgmma ptxas fits under 128 registers.
        GemmConfig(tile_m=192, tile_n=192),
        GemmConfig(tile_m=192, tile_n=176, cluster_m=2, swap_ab=True),
    ],
    ids=lambda c: c.short(),
)
def test_tiles_clusters_and_schedules_compile(config):
    spec, compiled = build(config=config)
    assert_core_structure(spec, compiled)
    assert f"m64n{config.tile_n}k16" in compiled.ptx
    # A k-block is 4 k-steps; a warpgroup stacks tile_m / (64 x its tile's warpgroups) wgmmas in each.
    assert compiled.ptx.count("wgmma.mma_async.sync") == 4 * config.tile_m // (64 * cfg.tile_warpgroups(config))
    if config.cluster_size > 1:
        assert ".multicast::cluster" in compiled.ptx
        assert "barrier.cluster" in compiled.ptx
    else:
        assert ".multicast::cluster" not in compiled.ptx


@pytest.mark.parametrize("d_major", ["n", "m"])
def test_tiles_of_odd_multiples_of_16_store_16_columns_a_step(d_major):
    """A warp's stmatrix.x4 writes 16x16: 112 columns are 7 steps of 16, not 3.5 of 32."""
    spec, compiled = build(majors=("k", "k", d_major), config=GemmConfig(tile_m=128, tile_n=112, cluster_n=2))
    assert cfg.epilogue_tile(spec) == (128, 16)
    assert cfg.epilogue_tile(cfg.make_spec("sm90", "bf16", "bf16", "k", "k", d_major, GemmConfig(tile_n=160))) == \
        (128, 32)
    assert_core_structure(spec, compiled)
    assert "stmatrix" in compiled.ptx


@pytest.mark.parametrize("epi_stages", [2, 4])
def test_the_epilogue_keeps_all_but_one_buffer_in_flight(epi_stages):
    """The store warp waits only until epi_stages - 1 TMA stores are still reading
    shared memory (the buffer written next is then free), and for all of them at exit.
    Four buffers fit beside 128x256's 4-stage ring: what the default path picks."""
    spec, compiled = build(config=GemmConfig(stages=4, epi_stages=epi_stages))
    assert_core_structure(spec, compiled)
    waits = {int(n) for n in re.findall(r"cp\.async\.bulk\.wait_group\.read\s+(\d+)", compiled.ptx)}
    assert waits == {epi_stages - 1, 0}


PINGPONG_CONFIGS = [
    GemmConfig(tile_m=128, tile_n=128, pingpong=True),
    GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True),
    GemmConfig(tile_m=128, tile_n=192, cluster_m=2, epi_stages=4, pingpong=True),  # 192 accumulators
    GemmConfig(tile_m=128, tile_n=192, cluster_m=2, epi_stages=3, pingpong=True),  # the default: 5 stages
    GemmConfig(tile_m=64, tile_n=256, cluster_n=2, pingpong=True),
    GemmConfig(tile_m=64, tile_n=128, epi_stages=4, pingpong=True),
]


@pytest.mark.parametrize("majors", [("k", "k", "n"), ("m", "n", "m")], ids=["kkn", "mnm"])
@pytest.mark.parametrize("config", PINGPONG_CONFIGS, ids=lambda c: c.short())
def test_pingpong_consumers_take_turns_and_store_on_their_own(config, majors):
    """Each consumer warpgroup issues every wgmma of its own tiles (64 rows at a time),
    waits for its turn at the tensor cores and hands it on (one ``bar.arrive`` of both
    warpgroups' 256 threads), and runs its epilogue on a 128-thread barrier; its whole
    tile's fp32 accumulators fit in registers without spilling (checked in
    ``assert_core_structure``)."""
    spec, compiled = build(majors=majors, config=config)
    assert_core_structure(spec, compiled)
    ptx = compiled.ptx
    wgmma_per_k_block = config.tile_m // 64 * config.tile_k // 16
    assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n{config.tile_n}k16") == wgmma_per_k_block
    assert re.findall(r"bar\.arrive\s+%r\d+,\s*(\d+)", ptx) == ["256"]
    assert {int(n) for n in re.findall(r"bar\.sync\s+%r\d+,\s*(\d+)", ptx)} == {128, 256}
    waits = {int(n) for n in re.findall(r"cp\.async\.bulk\.wait_group\.read\s+(\d+)", ptx)}
    assert waits == {config.epi_stages - 1, 0}


def test_cooperative_consumers_share_each_tile_and_its_epilogue():
    _, compiled = build(config=GemmConfig(tile_m=128, tile_n=128))
    ptx = compiled.ptx
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n128k16") == 4  # one per k16 step: 64 rows each
    assert "bar.arrive" not in ptx
    assert re.findall(r"bar\.sync\s+\d+,\s*(\d+)", ptx) and not re.findall(r"bar\.sync\s+\d+,\s*128\b", ptx)


@pytest.mark.parametrize("config, in_flight", [
    (GemmConfig(tile_m=128, tile_n=256, cluster_m=2), 0),  # two cooperative warpgroups per tile
    (GemmConfig(tile_m=128, tile_n=16, swap_ab=True), 0),
    (GemmConfig(tile_m=64, tile_n=16, tile_k=128, stages=8, swap_ab=True), 1),  # a decode tile, 128 deep
    (GemmConfig(tile_m=64, tile_n=128), 1),  # one warpgroup alone on its tile
    (GemmConfig(tile_m=64, tile_n=224, tile_k=128, stages=3), 1),  # one row of decode tokens, 128 deep
    (GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True), 1),
], ids=lambda v: v.short() if isinstance(v, GemmConfig) else f"in_flight{v}")
def test_a_warpgroup_alone_on_its_tile_keeps_one_wgmma_batch_in_flight(config, in_flight):
    """Cooperative warpgroups wait for all their wgmmas each k-block (the other's keep
    the tensor pipe busy); a warpgroup alone on its tile leaves one batch running.
    Either way every tile ends with a wait for all of them."""
    _, compiled = build(config=config)
    waits = [int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", compiled.ptx)]
    assert set(waits) == {in_flight, 0}


def test_a_128_deep_decode_tile_issues_eight_wgmmas_a_k_block_and_announces_its_whole_stage():
    """The swapped decode tile of tuning.launch.deep_k_blocks_for_decode: one 64x16
    wgmma per 16 of its 128-deep k-block, two 128 B-swizzled boxes per operand a stage
    (one at 64 deep), and the whole stage (64x128 and 16x128 bf16: 20 KiB) announced
    to the full barrier."""
    loads = "cp.async.bulk.tensor.2d.shared::cta.global"
    spec, compiled = build(config=GemmConfig(tile_m=64, tile_n=16, tile_k=128, stages=8))
    assert_core_structure(spec, compiled)
    assert compiled.ptx.count("wgmma.mma_async.sync.aligned.m64n16k16") == 8
    assert compiled.ptx.count(loads) == 4
    assert build(config=GemmConfig(tile_m=64, tile_n=16, stages=16))[1].ptx.count(loads) == 2
    stage = cfg.smem_budget(spec).stage_bytes
    assert stage == (64 + 16) * 128 * 2
    constant = announced_bytes(compiled.ptx)
    assert constant == str(stage) or re.search(rf"mov\.b32\s+{re.escape(constant)},\s*{stage};", compiled.ptx)


def test_default_policy_probes_the_next_stage_before_the_copies():
    _, compiled = build(config=GemmConfig(lookahead=Lookahead.BEFORE_COPY))
    assert producer_probe_precedes_copies(compiled.ptx)


def announced_bytes(ptx: str) -> str:
    """The operand of the producer's ``mbarrier.arrive.expect_tx`` (there is one)."""
    (operand,) = announced_bytes_operands(ptx)
    return operand


@pytest.mark.parametrize("config", [GemmConfig(tile_m=128, tile_n=128, cluster_m=2),
                                    GemmConfig(tile_m=128, tile_n=256, cluster_n=2)], ids=lambda c: c.short())
def test_clustered_producers_announce_per_tile_bytes_and_can_skip_each_copy(config):
    """A cluster pads the tile grid, so a tile may lie wholly past M (or N): the
    producer then skips that operand's box and announces only what it loads
    (docs/tuning-log/packaged-table.md). The byte count is chosen per tile from the whole
    stage and the stage less one box; unclustered kernels announce a constant."""
    spec, compiled = build(config=config)
    assert_core_structure(spec, compiled)
    budget = cfg.smem_budget(spec)
    stage = budget.stage_bytes
    assert announced_bytes(compiled.ptx).startswith("%r")
    # Whole stage or less A's box, then that or less B's box.
    choices = re.findall(r"selp\.b32\s+%r\d+,\s*(\d+),\s*(\d+),", compiled.ptx)
    assert (str(stage), str(stage - budget.a_stage_bytes)) in choices
    assert re.search(rf"add\.s32\s+%r\d+,\s*%r\d+,\s*-{budget.b_stage_bytes};", compiled.ptx)
    _, plain = build(config=dataclasses.replace(config, cluster_m=1, cluster_n=1))
    constant = announced_bytes(plain.ptx)  # an immediate, or a register loaded with one
    assert constant == str(stage) or re.search(rf"mov\.b32\s+{re.escape(constant)},\s*{stage};", plain.ptx)


@pytest.mark.parametrize("policy", [Lookahead.AFTER_COPY, Lookahead.NONE])
def test_other_policies_do_not_probe_before_the_copies(policy):
    spec, compiled = build(config=GemmConfig(lookahead=policy))
    assert_core_structure(spec, compiled)
    assert not producer_probe_precedes_copies(compiled.ptx)


@pytest.mark.parametrize(
    "config",
    [GemmConfig(tile_m=64, tile_n=64, split_k=2), GemmConfig(tile_m=128, tile_n=256, split_k=3),
     GemmConfig(tile_m=128, tile_n=128, cluster_m=2, split_k=4),
     GemmConfig(tile_m=128, tile_n=128, stream_k=True), GemmConfig(tile_m=64, tile_n=64, cluster_m=2, stream_k=True),
     GemmConfig(tile_m=128, tile_n=16, stream_k=True, swap_ab=True)],
    ids=lambda c: c.short(),
)
def test_split_k_kernels_publish_partials_with_release_and_wait_with_acquire(config):
    """The fix-up's memory-model contract, as compiled (split-K and stream-K share it):
    each contributor's threads store their partial sums, meet at a CTA barrier, and
    one thread counts the CTA in with a release add (cumulative: it covers the stores
    the barrier ordered before it); the finisher polls the flag with acquire loads
    and resets it."""
    spec, compiled = build(config=config)
    assert_core_structure(spec, compiled)
    ptx = compiled.ptx
    release = ptx.index("red.release.gpu.global.add.s32")
    assert re.search(r"bar\.sync\s+\d+,\s*\d+;", ptx[ptx.rindex("st.global", 0, release):release]), \
        "no CTA barrier between the last partial-sum store and the release"
    assert "ld.acquire.gpu.global" in ptx
    assert "st.relaxed.gpu.global.b32" in ptx  # the flag's reset
    # Fragment-order partial sums: one fp32 store per accumulator register.
    acc_per_thread = config.tile_m * config.tile_n // (cfg.consumer_warpgroups(config) * 128)
    assert ptx.count("st.global.b32") + 4 * ptx.count("st.global.v4") >= acc_per_thread


@pytest.mark.parametrize("config, slots_loaded_first",
                         [(GemmConfig(tile_m=64, tile_n=16, swap_ab=True, split_k=6), 5),
                          (GemmConfig(tile_m=64, tile_n=64, split_k=6), 2),
                          (GemmConfig(tile_m=128, tile_n=256, split_k=3), 1)],
                         ids=lambda v: v.short() if isinstance(v, GemmConfig) else str(v))
def test_finisher_loads_several_slots_before_adding(config, slots_loaded_first):
    """Each slot a finisher reads is an L2 round trip: a decode tile's whole fix-up
    (5 slots of 8 values a thread) is loaded before the first add, a 64x64 tile's two
    slots a round, a 128x256 tile's (128 values a thread) one."""
    _, compiled = build(config=config)
    ptx = compiled.ptx
    after_wait = ptx[ptx.rindex("ld.acquire.gpu.global"):]
    before_first_add = after_wait[:after_wait.index("add.f32")]
    frag = config.tile_m * config.tile_n // (cfg.consumer_warpgroups(config) * 128)
    assert split_k.slots_in_flight(frag) >= slots_loaded_first
    assert before_first_add.count("ld.global.b32") == slots_loaded_first * frag


def test_plain_kernels_have_no_split_k_fixup():
    _, compiled = build()
    assert "red.release.gpu" not in compiled.ptx and "ld.acquire.gpu" not in compiled.ptx


@pytest.mark.parametrize(
    "config, majors",
    [(GemmConfig(tile_m=64, tile_n=16, split_k=2), ("k", "k", "m")),
     (GemmConfig(tile_m=128, tile_n=32), ("k", "k", "m")),
     (GemmConfig(tile_m=128, tile_n=16, split_k=4), ("k", "k", "n"))],
    ids=lambda v: v.short() if isinstance(v, GemmConfig) else "".join(v),
)
def test_narrow_n_tiles_for_swapped_decode_compile(config, majors):
    """swap_ab puts the tokens on N: 16- and 32-wide wgmma tiles, M-major D (D^T)."""
    spec, compiled = build(majors=majors, config=config)
    assert_core_structure(spec, compiled)
    assert f"m64n{config.tile_n}k16" in compiled.ptx


def _first(ptx: str, pattern: str) -> int:
    index = ptx.find(pattern)
    assert index >= 0, f"{pattern!r} not in the PTX"
    return index


@pytest.mark.parametrize(
    "config",
    [GemmConfig(tile_m=128, tile_n=128, cluster_m=2, dependent_launch=True),
     GemmConfig(tile_m=128, tile_n=16, split_k=4, dependent_launch=True)],
    ids=lambda c: c.short(),
)
def test_dependent_launch_waits_before_any_global_access_and_lets_the_next_kernel_launch(config):
    """Programmatic dependent launch: ``griddepcontrol.wait`` in the producer before
    its first TMA load and in the consumers before their first global access, and
    ``launch_dependents`` once the producer has issued its last load."""
    _, compiled = build(config=config)
    ptx = compiled.ptx
    wait = _first(ptx, "griddepcontrol.wait;")
    assert wait < _first(ptx, "mbarrier::complete_tx::bytes")  # the first TMA load
    assert ptx.count("griddepcontrol.wait;") == 2  # producer and consumers
    assert wait < _first(ptx, "griddepcontrol.launch_dependents;")


@pytest.mark.parametrize("config", [
    GemmConfig(tile_m=64, tile_n=16, split_k=4, dependent_launch=True, read_before_wait="b"),
    GemmConfig(tile_m=128, tile_n=16, cluster_n=2, swap_ab=True, dependent_launch=True, read_before_wait="b"),
    GemmConfig(tile_m=128, tile_n=128, cluster_m=2, stream_k=True, dependent_launch=True, read_before_wait="a"),
], ids=lambda c: c.short())
def test_the_operand_read_before_wait_loads_before_the_producers_wait_and_the_other_after(config):
    """``read_before_wait``: the producer's only loads ahead of its ``griddepcontrol.wait``
    read the promised operand (the caller's B is the kernel's A when swapped); the
    other operand's first load follows the wait."""
    _, compiled = build(config=config)
    kernel_params = list(inspect.signature(Sm90Gemm.kernel).parameters)[1:]  # after self
    descriptor = {"a": kernel_params.index("tma_a"), "b": kernel_params.index("tma_b")}
    early = config.read_before_wait if not config.swap_ab else {"a": "b", "b": "a"}[config.read_before_wait]
    late = "b" if early == "a" else "a"
    lines = compiled.ptx.splitlines()
    wait = next(i for i, line in enumerate(lines) if "griddepcontrol.wait;" in line)
    loads = tma_load_parameters(compiled.ptx)
    assert {param for line, param in loads if line < wait} == {descriptor[early]}
    assert min(line for line, param in loads if param == descriptor[late]) > wait


def test_by_default_there_is_no_grid_dependency_control():
    _, compiled = build(config=GemmConfig(tile_m=128, tile_n=128))
    assert "griddepcontrol" not in compiled.ptx


_BARE_CALL_CHECK = """
import pytest, torch, tvm_ffi
from wsgemm import GemmConfig, config as cfg
from wsgemm.compile import compile_spec, launcher

config = GemmConfig(split_k={split_k})
compiled = compile_spec(cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", config))
bare = launcher(compiled.fn)
assert type(bare) is tvm_ffi.Function, type(bare)
a = torch.randn(64, 64).to(torch.bfloat16)
b = torch.randn(64, 64).to(torch.bfloat16).t()
d = torch.empty(64, 64, dtype=torch.bfloat16)
workspace = (torch.zeros(1, dtype=torch.int32), torch.zeros(1)) if config.split_k > 1 else ()
messages = []
for fn in (compiled.fn, bare):
    with pytest.raises(ValueError, match="expected device_type=cuda") as info:
        fn(a, b, d, *workspace, 1)
    messages.append(str(info.value))
assert messages[0] == messages[1], messages
print("same")
"""


@pytest.mark.parametrize("split_k", [1, 2], ids=["plain", "split_k"])
def test_cached_calls_launch_the_bare_tvm_ffi_function_with_the_same_arguments(split_k):
    """``compile.launcher`` skips the DSL's Python wrapper; the bare function must take
    the same positional arguments and check them the same way (here: a CPU tensor is
    refused by both, with the same message). In a child process: without a GPU the
    DSL builds the host function, and its TVM-FFI entry, only for an explicit target
    arch (``CUTE_DSL_ARCH``, read when the DSL is imported)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a")
    result = subprocess.run([sys.executable, "-c", _BARE_CALL_CHECK.format(split_k=split_k)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("same"), result.stderr[-2000:]



@pytest.mark.parametrize("config", [
    GemmConfig(tile_m=128, tile_n=192, cluster_m=2, epi_stages=3, pingpong=True),
    GemmConfig(cluster_m=2),
    GemmConfig(tile_m=128, tile_n=128, cluster_m=2, split_k=2),
], ids=lambda c: c.short())
def test_wgmma_descriptors_are_built_in_uniform_registers(config):
    """wgmma reads its shared-memory descriptors from uniform registers. The consumer's
    ring position and operand slice derive from the warp-uniform warp index, so ptxas
    builds them there: no R2UR (register -> uniform register move) among the wgmmas.
    Derived from the thread index, they took four per wgmma, and the tile's
    accumulators were cleared with CS2R before every tile; the first wgmma now
    overwrites them instead (docs/tuning-log/pingpong.md)."""
    _, compiled = build(config=config)
    sass = disassemble(compiled.cubin_path)
    if sass is None:
        pytest.skip("nvdisasm not installed (pip install -e '.[sass]')")
    instructions = sass_instructions(sass)
    assert uniform_moves_between(instructions, "HGMMA") == []
    if not config.has_workspace:  # a workspace piece without k-blocks still clears
        assert not [ins for ins in instructions if sass_opcode(ins) == "CS2R"]


@pytest.mark.parametrize("config", [
    GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True, stages=6, epi_stages=4),
    GemmConfig(tile_m=128, tile_n=192, cluster_m=2, stages=5, epi_stages=3),
    GemmConfig(tile_m=64, tile_n=64, stages=13, epi_stages=4),
], ids=lambda c: c.short())
def test_no_division_by_the_ring_depth_in_the_k_loops(config):
    """Both roles step their ring slot and wait parity along their k-loops
    (``SmemRing.next_slot``). Taken from the running count (``count % stages``), a
    ring depth that is not a power of two put a division (``IMAD.HI``, ``LEA.HI``)
    between the wgmmas of every k-block, where ncu sampled "dispatch" stalls
    (docs/tuning-log/pingpong.md), and 7-8 ``.HI`` instructions into each k-block
    of the TMA producer (twice its length now; docs/tuning-log/tile-shapes.md)."""
    _, compiled = build(config=config)
    sass = disassemble(compiled.cubin_path)
    if sass is None:
        pytest.skip("nvdisasm not installed (pip install -e '.[sass]')")
    instructions = sass_instructions(sass)
    wgmmas = [i for i, ins in enumerate(instructions) if sass_opcode(ins) == "HGMMA"]
    among = instructions[wgmmas[0]:wgmmas[-1] + 1]
    assert not [ins for ins in among if ".HI" in sass_mnemonic(ins)]
    producer_loop = sass_loop_around(sass, "UTMALDG")
    assert len([ins for ins in producer_loop if sass_opcode(ins) == "UTMALDG"]) == 2  # A and B
    assert not [ins for ins in producer_loop if ".HI" in sass_mnemonic(ins)]


@pytest.mark.parametrize("config", [
    GemmConfig(tile_m=128, tile_n=128),
    GemmConfig(tile_m=128, tile_n=192, cluster_m=2),
    GemmConfig(tile_m=64, tile_n=256, cluster_n=2),
    GemmConfig(tile_m=128, tile_n=128, split_k=2),
    GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True),
], ids=lambda c: c.short())
def test_edge_tiles_are_moved_once_per_tile_not_per_k_block(config):
    """The last tile row and column move back to end at the edge
    (``scheduler.edge_tile_offset``, docs/tuning-log/tile-shapes.md): each TMA load's
    box origin is worked out once per tile, so inside the producer's k-loop only the
    k coordinate of a box changes (K-major operands: ``{k, row}``)."""
    _, compiled = build(config=config)
    loop = producer_loop_ptx(compiled.ptx).lines
    written = {ptx_destination(line) for line in loop}
    loads = [line for line in loop if "cp.async.bulk.tensor" in line and "complete_tx" in line]
    assert len(loads) == 2  # A and B
    for load in loads:
        k, row = tma_coordinates(load)
        assert k in written and row not in written, load


def test_the_sass_helpers_read_nvdisasm_lines():
    sass = """
        /*0100*/                   R2UR UR4, R16 ;                      /* 0x000000001004 */
    .L_x_3:
        /*0110*/                   HGMMA.64x192x16.F32.BF16 R24, gdesc[UR4].tnspB, R24 ;
        /*0120*/              @!P0 R2UR UR5, R17 ;
        /*0130*/                   HGMMA.64x192x16.F32.BF16 R24, gdesc[UR4].tnspB, R24, gsb0 ;
        /*0140*/                   CS2R R120, SRZ ;
    """
    instructions = sass_instructions(sass)
    assert instructions[0] == "R2UR UR4, R16" and len(instructions) == 5
    assert [sass_opcode(i) for i in instructions] == ["R2UR", "HGMMA", "R2UR", "HGMMA", "CS2R"]
    assert uniform_moves_between(instructions, "HGMMA") == ["@!P0 R2UR UR5, R17"]
    with pytest.raises(ValueError, match="no UTCHMMA"):
        uniform_moves_between(instructions, "UTCHMMA")
    looped = """
    .L_x_1:
        /*0100*/                   UIADD3 UR4, UPT, UPT, UR4, 0x1, URZ ;
        /*0110*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UR4, UPT ;
        /*0120*/              @!P0 BRA `(.L_x_2) ;
        /*0130*/                   BRA.U UP1, `(.L_x_1) ;
    .L_x_2:
        /*0140*/                   EXIT ;
    """
    assert [sass_opcode(i) for i in sass_loop_around(looped, "UTCHMMA")] == ["UIADD3", "UTCHMMA", "BRA", "BRA"]
    with pytest.raises(ValueError, match="not inside a loop"):
        sass_loop_around(looped.replace("`(.L_x_1)", "`(.L_x_2)"), "UTCHMMA")
