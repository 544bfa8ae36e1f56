"""Compile-only verification of the SM100 (Blackwell) kernel. No Blackwell GPU is
available to this project: these checks -- it builds for sm_100f over dtypes, majors,
tiles, clusters, the 2-CTA MMA and look-ahead policies; its PTX has the tcgen05/TMA
structure the design promises; its budgets hold -- are all the verification it has."""

import itertools
import re

import pytest

from wsgemm import ConfigError, GemmConfig, Lookahead
from wsgemm import config as cfg
from wsgemm import hardware
from wsgemm.compile import compile_spec
from wsgemm.inspection import (announced_bytes, count_instructions, cubin_resources, disassemble,
                               producer_probe_precedes_copies, ptx_definition, sass_instructions, sass_loop_around,
                               sass_mnemonic, sass_opcode, uniform_moves_between)

MAJORS = [(a, b, d) for a, b, d in itertools.product("km", "kn", "nm")]


def build(ab="bf16", out="bf16", majors=("k", "k", "n"), config=None):
    spec = cfg.make_spec("sm100", ab, out, *majors, config or GemmConfig())
    return spec, compile_spec(spec, keep_artifacts=True)


# Bit 24 of a shared::cluster address selects the CTA of a 2-CTA pair: a pair's loads
# complete on the even (leader) CTA's barrier with it cleared (CUTLASS's
# Sm100MmaPeerBitMask, 0xFEFFFFFF).
PEER_BIT = 1 << 24


def instruction_lines(ptx: str, opcode: str) -> list[str]:
    return [line.strip() for line in ptx.splitlines() if line.strip().startswith(opcode)]


def and_mask_defining(ptx: str, register: str) -> int | None:
    """The 32-bit immediate of the ``and.b32`` that defines ``register``, if any."""
    lines = ptx.splitlines()
    index = ptx_definition(lines, register)
    match = re.match(r"\s*and\.b32\s+%\w+,\s*%\w+,\s*(-?\d+);", lines[index]) if index is not None else None
    return int(match.group(1)) & 0xFFFFFFFF if match else None


def assert_sm100_structure(spec, compiled):
    ptx = compiled.ptx
    counts = count_instructions(ptx)
    for instruction in ("tcgen05.mma", "tcgen05.alloc", "tcgen05.dealloc", "tcgen05.ld", "tcgen05.commit"):
        assert counts[instruction] >= 1, f"{instruction} missing"
    assert counts["tcgen05.alloc"] == counts["tcgen05.dealloc"] == counts["tcgen05.relinquish_alloc_permit"] == 1
    assert counts["mbarrier::complete_tx"] >= 2  # A and B loads complete on the full barrier
    assert ".global.shared::cta.tile.bulk_group" in ptx  # the TMA store of D
    assert "tcgen05.fence::before_thread_sync" in ptx and "tcgen05.fence::after_thread_sync" in ptx
    group = "cta_group::2" if spec.config.two_cta else "cta_group::1"
    assert f"tcgen05.mma.{group}" in ptx
    # Budgets: shared memory as allocated by the kernel, tensor memory, registers.
    budget = cfg.smem_budget(spec)
    assert compiled.extra["smem_bytes"] <= budget.total_bytes <= hardware.SM100.smem_per_cta_bytes
    assert compiled.extra["tx_bytes"] == budget.stage_bytes * cfg.cta_pair(spec.config)
    # What the PTX itself announces: a pair's leader expects both CTAs' halves.
    assert announced_bytes(ptx) and set(announced_bytes(ptx)) == {budget.stage_bytes * cfg.cta_pair(spec.config)}
    cols = cfg.tmem_columns(spec)
    assert 32 <= cols <= 512 and cols & (cols - 1) == 0
    assert f"tcgen05.alloc.{group}.sync.aligned.shared::cta.b32" in ptx
    (res,) = cubin_resources(compiled.cubin_path)
    assert res.stack_frame_bytes == 0, "local memory in use: spills"
    assert res.registers * 192 <= 65536


@pytest.mark.parametrize("ab, out", [("bf16", "bf16"), ("fp16", "fp16"), ("bf16", "fp32"), ("fp16", "fp32")])
@pytest.mark.parametrize("majors", MAJORS, ids=["".join(m) for m in MAJORS])
def test_dtypes_and_majors_compile(ab, out, majors):
    spec, compiled = build(ab, out, majors)
    assert_sm100_structure(spec, compiled)
    assert "kind::f16" in compiled.ptx


@pytest.mark.parametrize(
    "config",
    [
        GemmConfig(tile_n=64),
        GemmConfig(tile_n=128, acc_stages=4),
        GemmConfig(tile_n=192),
        GemmConfig(cluster_m=2),
        GemmConfig(cluster_n=2),
        GemmConfig(cluster_m=2, cluster_n=2),
        GemmConfig(cluster_m=2, two_cta=True),
        GemmConfig(cluster_m=2, cluster_n=2, two_cta=True),
        GemmConfig(cluster_m=2, two_cta=True, tile_n=128),
        GemmConfig(cluster_m=4, two_cta=True, tile_n=128),
        GemmConfig(acc_stages=1, stages=3, epi_stages=1),
        GemmConfig(raster="along_n", swizzle=4),
    ],
    ids=lambda c: c.short(),
)
def test_tiles_clusters_and_two_cta_compile(config):
    spec, compiled = build(config=config)
    assert_sm100_structure(spec, compiled)
    assert_cluster_structure(config, compiled.ptx)


def assert_cluster_structure(config, ptx):
    if config.cluster_size > 1:
        assert "barrier.cluster" in ptx
        # Slot releases reach the CTAs that fed the MMA: the commit itself multicasts
        # (a multicast TMA load elsewhere in the PTX proves nothing about the commit).
        commits = instruction_lines(ptx, "tcgen05.commit")
        assert any(".multicast::cluster" in line for line in commits), commits
    loads = [line for line in instruction_lines(ptx, "cp.async.bulk.tensor")
             if re.match(r"cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global", line)]  # global -> shared
    assert len(loads) >= 2  # A and B
    for line in loads:
        assert "mbarrier::complete_tx::bytes" in line, line
        if config.two_cta:
            # Each CTA of the pair loads its half, and every load completes on the
            # leader's barrier: 2-SM loads, the barrier address with the peer bit cleared.
            assert ".cta_group::2" in line, line
            barrier = re.findall(r"\[([^\]]+)\]", line)[2]
            mask = and_mask_defining(ptx, barrier)
            assert mask is not None and not mask & PEER_BIT, (line, mask)
        else:
            assert ".cta_group::2" not in line, line


# Combinations the matrices above leave out: 2-CTA pairs with narrow and 192-wide tiles,
# fp32 output and M-major operands; the largest clusters; the other look-ahead policies
# with clusters and pairs.
@pytest.mark.parametrize("out, majors, config", [
    ("bf16", "kkn", GemmConfig(cluster_m=2, two_cta=True, tile_n=64)),
    ("bf16", "kkn", GemmConfig(cluster_m=2, two_cta=True, tile_n=192)),
    ("fp32", "kkn", GemmConfig(cluster_m=2, two_cta=True)),
    ("bf16", "mnm", GemmConfig(cluster_m=2, two_cta=True)),
    ("fp32", "mnn", GemmConfig(cluster_m=2, cluster_n=2)),
    ("bf16", "kkn", GemmConfig(cluster_m=4)),
    ("bf16", "kkn", GemmConfig(cluster_n=4)),
    ("bf16", "kkn", GemmConfig(cluster_m=4, cluster_n=2)),
    ("bf16", "kkn", GemmConfig(cluster_m=4, cluster_n=2, two_cta=True)),
    ("bf16", "kkn", GemmConfig(cluster_m=2, cluster_n=2, lookahead=Lookahead.AFTER_COPY)),
    ("bf16", "kkn", GemmConfig(cluster_m=2, two_cta=True, lookahead=Lookahead.AFTER_COPY)),
    ("bf16", "kkn", GemmConfig(cluster_m=2, cluster_n=2, lookahead=Lookahead.NONE)),
    ("bf16", "kkn", GemmConfig(cluster_m=2, two_cta=True, lookahead=Lookahead.NONE)),
], ids=lambda x: x.short() if isinstance(x, GemmConfig) else x)
def test_less_common_combinations_compile(out, majors, config):
    spec, compiled = build("bf16", out, tuple(majors), config)
    assert_sm100_structure(spec, compiled)
    assert_cluster_structure(config, compiled.ptx)
    assert producer_probe_precedes_copies(compiled.ptx) == (config.lookahead == Lookahead.BEFORE_COPY)


def test_default_policy_probes_the_next_stage_before_the_copies():
    _, compiled = build(config=GemmConfig(lookahead=Lookahead.BEFORE_COPY))
    assert producer_probe_precedes_copies(compiled.ptx)


@pytest.mark.parametrize("policy", [Lookahead.AFTER_COPY, Lookahead.NONE])
def test_other_policies_compile_and_move_the_probe(policy):
    spec, compiled = build(config=GemmConfig(lookahead=policy))
    assert_sm100_structure(spec, compiled)
    assert not producer_probe_precedes_copies(compiled.ptx)


def test_tensor_memory_over_budget_is_refused_before_compiling():
    with pytest.raises(ConfigError, match=r"4 accumulator buffers of 256 fp32 columns need 1024 tensor-memory columns; an SM has 512"):
        cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(acc_stages=4))


@pytest.mark.parametrize(
    "config, message",
    [
        (GemmConfig(tile_m=64), r"tile_m=64 is not supported; choose one of \[128\]"),
        (GemmConfig(two_cta=True), r"two_cta pairs CTAs along M, so cluster_m must be even"),
        (GemmConfig(acc_stages=0), r"acc_stages=0 must be between 1 and 4"),
        (GemmConfig(tile_n=96), r"tile_n=96 is not supported"),
    ],
)
def test_invalid_sm100_configs(config, message):
    with pytest.raises(ConfigError, match=message):
        cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", config)


@pytest.mark.parametrize("config", [GemmConfig(cluster_m=2), GemmConfig(cluster_m=2, two_cta=True)],
                         ids=lambda c: c.short())
def test_mma_descriptors_are_built_in_uniform_registers(config):
    """As on SM90 (test_compile_sm90): the MMA warp's tcgen05.mma (UTCHMMA) takes its
    descriptors from uniform registers, and none are moved there between them."""
    _, compiled = build(config=config)
    sass = disassemble(compiled.cubin_path)
    if sass is None:
        pytest.skip("nvdisasm not installed (pip install -e '.[sass]')")
    assert uniform_moves_between(sass_instructions(sass), "UTCHMMA") == []


@pytest.mark.parametrize("config", [
    GemmConfig(tile_m=128, tile_n=128, stages=5),
    GemmConfig(tile_m=128, tile_n=128, cluster_m=2, two_cta=True, stages=6),
], ids=lambda c: c.short())
def test_the_k_loops_have_no_division_by_the_ring_depth(config):
    """The MMA warp and the TMA producer step their ring slot and wait parity along
    their k-loops (``SmemRing.next_slot``), as the SM90 roles do: taken from a running
    count, a ring depth that is not a power of two put two divisions (``UIMAD.WIDE`` by
    a magic number, ``ULEA.HI``) into every k-block of these single-thread issue loops."""
    _, compiled = build(config=config)
    sass = disassemble(compiled.cubin_path)
    if sass is None:
        pytest.skip("nvdisasm not installed (pip install -e '.[sass]')")
    loop = sass_loop_around(sass, "UTCHMMA")
    assert len([ins for ins in loop if sass_opcode(ins) == "UTCHMMA"]) == config.tile_k // 16
    assert not [ins for ins in loop if ".HI" in sass_mnemonic(ins)]
    producer_loop = sass_loop_around(sass, "UTMALDG")
    assert len([ins for ins in producer_loop if sass_opcode(ins) == "UTMALDG"]) == 2  # A and B
    assert not [ins for ins in producer_loop if ".HI" in sass_mnemonic(ins)]
