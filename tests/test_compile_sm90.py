"""Compile-only checks of the SM90 kernel (no GPU): it builds for sm_90a over dtypes,
majors, tiles, clusters and look-ahead policies, its PTX holds the instructions the
design promises, and ptxas kept it within the register file without spills."""

import itertools

import pytest

from wsgemm import GemmConfig, Lookahead
from wsgemm import config as cfg
from wsgemm.compile import compile_spec
from wsgemm.inspection import count_instructions, cubin_resources, producer_probe_precedes_copies

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
    threads = (1 + cfg.consumer_warpgroups(spec.config)) * 128
    assert res.registers * threads <= 65536
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
        GemmConfig(cluster_m=2),
        GemmConfig(cluster_n=2),
        GemmConfig(cluster_m=2, cluster_n=2),
        GemmConfig(stages=2, epi_stages=1),
        GemmConfig(raster="along_n", swizzle=4),
    ],
    ids=lambda c: c.short(),
)
def test_tiles_clusters_and_schedules_compile(config):
    spec, compiled = build(config=config)
    assert_core_structure(spec, compiled)
    assert f"m64n{config.tile_n}k16" in compiled.ptx
    if config.cluster_size > 1:
        assert ".multicast::cluster" in compiled.ptx
        assert "barrier.cluster" in compiled.ptx
    else:
        assert ".multicast::cluster" not in compiled.ptx


def test_default_policy_probes_the_next_stage_before_the_copies():
    _, compiled = build(config=GemmConfig(lookahead=Lookahead.BEFORE_COPY))
    assert producer_probe_precedes_copies(compiled.ptx)


@pytest.mark.parametrize("policy", [Lookahead.AFTER_COPY, Lookahead.NONE])
def test_other_policies_do_not_probe_before_the_copies(policy):
    spec, compiled = build(config=GemmConfig(lookahead=policy))
    assert_core_structure(spec, compiled)
    assert not producer_probe_precedes_copies(compiled.ptx)
