import itertools

import pytest

from wsgemm import ConfigError, GemmConfig, Lookahead, Raster, UnsupportedDtypeError
from wsgemm import config as cfg
from wsgemm import hardware


def spec(config=None, **kw):
    args = dict(arch="sm90", ab_dtype="bf16", out_dtype="bf16", a_major="k", b_major="k", d_major="n")
    args.update(kw)
    return cfg.make_spec(config=config or GemmConfig(), **args)


def test_default_config_resolves_stages_from_the_smem_budget():
    s = spec()
    budget = cfg.smem_budget(s)
    assert s.config.stages == budget.stages == 4  # 48 KiB per 128x256x64 bf16 stage
    assert budget.total_bytes <= hardware.SM90.smem_per_cta_bytes
    # One more stage would not fit.
    assert budget.total_bytes + budget.stage_bytes > hardware.SM90.smem_per_cta_bytes


def test_smaller_tiles_get_more_stages_up_to_the_cap():
    # 64x64x64 bf16: 16 KiB per stage; 13 fit beside the epilogue buffers.
    assert spec(GemmConfig(tile_m=64, tile_n=64)).config.stages == 13
    # 64x16 (a swapped decode tile): 10 KiB per stage, so the cap binds.
    assert spec(GemmConfig(tile_m=64, tile_n=16)).config.stages == cfg.DEFAULT_MAX_STAGES


def test_fp32_output_takes_more_epilogue_smem():
    bf16 = cfg.smem_budget(spec())
    fp32 = cfg.smem_budget(spec(out_dtype="fp32"))
    assert fp32.epi_bytes == 2 * bf16.epi_bytes


def test_enum_values_accepted_as_strings():
    c = GemmConfig(lookahead="none", raster="along_n")
    assert c.lookahead is Lookahead.NONE and c.raster is Raster.ALONG_N


def test_bad_enum_value_names_the_choices():
    with pytest.raises(ConfigError, match="lookahead='sideways' is not one of 'before_copy', 'after_copy', 'none'"):
        GemmConfig(lookahead="sideways")


@pytest.mark.parametrize(
    "config, message",
    [
        (GemmConfig(tile_m=96), r"tile_m=96 is not supported; choose one of \[64, 128, 192, 256\]"),
        (GemmConfig(tile_n=100), r"tile_n=100 is not supported"),
        (GemmConfig(tile_k=32), r"tile_k=32 is not supported"),
        (GemmConfig(cluster_m=3), r"cluster_m=3 is not supported"),
        (GemmConfig(cluster_m=4, cluster_n=4), r"cluster 4x4 has 16 CTAs; a portable cluster has at most 8"),
        (GemmConfig(stages=17), r"stages=17 must be between 2 and 16"),
        (GemmConfig(swizzle=3), r"swizzle=3 is not supported"),
        (GemmConfig(two_cta=True), r"two_cta is a Blackwell \(sm100\) feature"),
        (GemmConfig(stages=1), r"stages=1 must be between 2 and 16"),
        (GemmConfig(epi_stages=0), r"epi_stages=0 must be between 1 and 4"),
        (GemmConfig(split_k=0), r"split_k=0 must be an integer between 1 and 16"),
        (GemmConfig(split_k=17), r"split_k=17 must be an integer between 1 and 16"),
        (GemmConfig(split_k=2.0), r"split_k=2.0 must be an integer"),
    ],
)
def test_invalid_configs_raise_config_error(config, message):
    with pytest.raises(ConfigError, match=message):
        spec(config)


def test_too_many_stages_names_the_budget():
    with pytest.raises(ConfigError, match=r"5 stages need 263168 B of shared memory but a CTA can have at most 232448 B on sm90; at most 4 stages fit"):
        spec(GemmConfig(stages=5))


def test_256_row_tiles_stack_two_wgmmas_in_each_of_two_warpgroups():
    # Four warpgroups of 64 rows would lower ptxas's one register count for the kernel
    # to 65536 / 640 threads: 96, below what one m64n144 wgmma needs.
    config = GemmConfig(tile_m=256, tile_n=192)
    assert (cfg.consumer_warpgroups(config), cfg.tile_warpgroups(config)) == (2, 2)
    regs = cfg.sm90_register_budget(config)
    assert (regs.consumer_registers, regs.accumulator_registers) == (232, 192)
    assert cfg.epilogue_tile(spec(config)) == (128, 32)
    with pytest.raises(ConfigError, match=r"tile 256x208 needs 208 accumulator registers .* at most 192 fit"):
        spec(GemmConfig(tile_m=256, tile_n=208))
    # 192 rows: three warpgroups of 64 under ptxas's 128 registers (65536 / 512 threads).
    tall = GemmConfig(tile_m=192, tile_n=192)
    assert (cfg.consumer_warpgroups(tall), cfg.sm90_register_budget(tall).launch_registers) == (3, 128)
    with pytest.raises(ConfigError, match=r"tile 192x208: one m64n208 wgmma holds 104 accumulator registers per "
                                          r"thread; with 4 warpgroups ptxas compiles the kernel under 128 registers"):
        spec(GemmConfig(tile_m=192, tile_n=208))
    with pytest.raises(ConfigError, match=r"pingpong=True with tile_m=256: a ping-pong warpgroup holds a whole "
                                          r"tile, at most 128 rows"):
        spec(GemmConfig(tile_m=256, tile_n=64, pingpong=True))


def test_register_budget_is_checked():
    regs = cfg.sm90_register_budget(GemmConfig(tile_m=128, tile_n=256))
    assert (regs.producer_registers, regs.consumer_registers, regs.accumulator_registers) == (40, 232, 128)
    # The whole register file is shared out: 1 producer + 2 consumer warpgroups.
    assert (regs.producer_registers + 2 * regs.consumer_registers) * 128 <= hardware.SM90.registers_per_sm


@pytest.mark.parametrize("pingpong", [False, True])
def test_consumers_take_only_what_the_producer_gives_up_of_the_launch_allocation(pingpong):
    for tile_m, tile_n in itertools.product(cfg.SM90_TILE_M, cfg.SM90_TILE_N):
        config = GemmConfig(tile_m=tile_m, tile_n=tile_n, pingpong=pingpong)
        regs = cfg.sm90_register_budget(config)
        warpgroups = 1 + cfg.consumer_warpgroups(config)
        assert regs.launch_registers * warpgroups * 128 <= hardware.SM90.registers_per_sm
        assert regs.producer_registers + (warpgroups - 1) * regs.consumer_registers \
            <= regs.launch_registers * warpgroups
        assert regs.consumer_registers % 8 == 0


@pytest.mark.parametrize("kw, exc, message", [
    (dict(ab_dtype="fp32"), UnsupportedDtypeError, "input dtype 'fp32' is not supported"),
    (dict(out_dtype="int8"), UnsupportedDtypeError, "output dtype 'int8' is not supported"),
    (dict(a_major="n"), ConfigError, "a_major='n' is not supported"),
    (dict(arch="sm80"), ConfigError, "unknown arch 'sm80'"),
])
def test_make_spec_rejects_bad_problem_traits(kw, exc, message):
    with pytest.raises(exc, match=message):
        spec(**kw)


def test_spec_is_hashable_and_distinguishes_every_code_affecting_field():
    base = spec()
    variants = [
        spec(ab_dtype="fp16"),
        spec(out_dtype="fp32"),
        spec(a_major="m"),
        spec(b_major="n"),
        spec(d_major="m"),
        spec(GemmConfig(tile_n=128)),
        spec(GemmConfig(cluster_m=2)),
        spec(GemmConfig(stages=3)),
        spec(GemmConfig(epi_stages=1)),
        spec(GemmConfig(raster="along_n")),
        spec(GemmConfig(swizzle=2)),
        spec(GemmConfig(lookahead="none")),
    ]
    keys = {base, *variants}
    assert len(keys) == 1 + len(variants)
    assert spec() == base and hash(spec()) == hash(base)


def test_128_deep_k_blocks_are_sm90_only_and_halve_the_stages_that_fit():
    shallow, deep = spec(GemmConfig(tile_m=64, tile_n=16)), spec(GemmConfig(tile_m=64, tile_n=16, tile_k=128))
    assert "64x16x128_" in deep.config.short() and deep != shallow
    assert cfg.smem_budget(deep).stage_bytes == 2 * cfg.smem_budget(shallow).stage_bytes
    with pytest.raises(ConfigError, match=r"tile_k=128 is not supported; choose one of \[64\]"):
        cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(tile_k=128))


def test_split_k_is_sm90_only():
    with pytest.raises(ConfigError, match=r"split_k=2: split-K is implemented in the sm90 kernel only"):
        cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(split_k=2))


def test_split_k_is_part_of_the_name_and_the_cache_key():
    plain, split = spec(GemmConfig()), spec(GemmConfig(split_k=2))
    assert plain != split and "_split2" in split.config.short() and "split" not in plain.config.short()


def test_swap_ab_is_named_but_stripped_from_the_kernel_spec():
    swapped = GemmConfig(tile_n=32, swap_ab=True)
    assert "_swapab" in swapped.short()
    assert spec(swapped) == spec(GemmConfig(tile_n=32))  # one kernel serves both


def test_dependent_launch_is_off_by_default_named_and_part_of_the_cache_key():
    off, on = spec(GemmConfig()), spec(GemmConfig(dependent_launch=True))
    assert off.config.dependent_launch is False and on.config.dependent_launch is True
    assert on != off and on.short().endswith("_pdl") and "pdl" not in off.short()


def test_dependent_launch_is_sm90_only_and_a_bool():
    with pytest.raises(ConfigError, match=r"dependent_launch=True: .* sm90 kernel only"):
        cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(dependent_launch=True))
    with pytest.raises(ConfigError, match=r"dependent_launch=1 must be True or False"):
        spec(GemmConfig(dependent_launch=1))


def test_read_before_wait_names_an_operand_of_a_dependent_launch_in_the_callers_terms():
    early = GemmConfig(dependent_launch=True, read_before_wait="b")
    assert spec(early).config.read_before_wait == "b" and spec(early).short().endswith("_pdl_bearly")
    assert spec(early) != spec(GemmConfig(dependent_launch=True))
    # Swapped, the kernel reads the caller's B as its A.
    assert spec(GemmConfig(tile_n=32, dependent_launch=True, read_before_wait="b", swap_ab=True)) == \
        spec(GemmConfig(tile_n=32, dependent_launch=True, read_before_wait="a"))
    with pytest.raises(ConfigError, match=r"read_before_wait='b' reads before griddepcontrol.wait, .* "
                                          r"pass dependent_launch=True"):
        spec(GemmConfig(read_before_wait="b"))
    with pytest.raises(ConfigError, match=r"read_before_wait='w' must be '', 'a' or 'b'"):
        spec(GemmConfig(dependent_launch=True, read_before_wait="w"))
    with pytest.raises(ConfigError, match=r"read_before_wait='b': .* sm90 kernel only"):
        cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(read_before_wait="b"))


def test_stream_k_is_sm90_only_a_bool_named_and_excludes_split_k():
    streamed = spec(GemmConfig(stream_k=True))
    assert streamed.config.short().endswith("_streamk") and streamed != spec(GemmConfig())
    assert streamed.config.has_workspace and GemmConfig(split_k=2).has_workspace
    assert not GemmConfig().has_workspace
    with pytest.raises(ConfigError, match=r"stream_k=True with split_k=2: .* pass split_k=1"):
        spec(GemmConfig(stream_k=True, split_k=2))
    with pytest.raises(ConfigError, match=r"stream_k=True: .* sm90 kernel only"):
        cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(stream_k=True))
    with pytest.raises(ConfigError, match=r"stream_k='yes' must be True or False"):
        spec(GemmConfig(stream_k="yes"))


def test_pingpong_is_sm90_only_named_and_holds_whole_tiles_per_warpgroup():
    """Ping-pong consumers: two warpgroups, each with a whole tile's accumulators
    (128x128: 128 fp32 registers per thread), its own set of epilogue buffers of 64
    rows, and its own four warps releasing each ring slot it read."""
    pingpong = GemmConfig(tile_m=128, tile_n=128, pingpong=True)
    cooperative = GemmConfig(tile_m=128, tile_n=128)
    built = spec(pingpong)
    assert built.config.short().endswith("_pingpong") and built != spec(cooperative)
    assert (cfg.consumer_warpgroups(pingpong), cfg.tile_warpgroups(pingpong)) == (2, 1)
    assert (cfg.consumer_warpgroups(cooperative), cfg.tile_warpgroups(cooperative)) == (2, 2)
    assert cfg.sm90_register_budget(pingpong).accumulator_registers == 128
    assert cfg.sm90_register_budget(cooperative).accumulator_registers == 64
    assert cfg.epilogue_tile(built) == (64, 32) and cfg.epilogue_tile(spec(cooperative)) == (128, 32)
    # Two sets of half-height buffers: the same bytes as the cooperative epilogue's one set.
    assert cfg.smem_budget(built).epi_bytes == cfg.smem_budget(spec(cooperative)).epi_bytes == 2 * 128 * 32 * 2
    assert cfg.consumer_warpgroups(GemmConfig(tile_m=64, tile_n=256, pingpong=True)) == 2
    with pytest.raises(ConfigError, match=r"pingpong=True: ping-pong consumers .* sm90 kernel only"):
        cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(pingpong=True))
    with pytest.raises(ConfigError, match=r"pingpong=1 must be True or False"):
        spec(GemmConfig(pingpong=1))


@pytest.mark.parametrize("config, message", [
    (GemmConfig(tile_m=128, tile_n=256, pingpong=True), r"256 accumulator registers .* or pingpong=False"),
    (GemmConfig(tile_n=128, split_k=2, pingpong=True), r"pingpong=True with split_k=2: .* whole tiles"),
    (GemmConfig(tile_n=128, stream_k=True, pingpong=True), r"pingpong=True with stream_k=True: .* whole tiles"),
])
def test_pingpong_configs_that_cannot_run_raise_config_error(config, message):
    with pytest.raises(ConfigError, match=message):
        spec(config)


@pytest.mark.parametrize("config", [
    GemmConfig(cluster_m=2, stages=2),
    GemmConfig(tile_n=128, acc_stages=4, stages=3),
    GemmConfig(cluster_m=2, two_cta=True, stages=3),
    GemmConfig(cluster_m=2, stages=2, epi_stages=1),
], ids=lambda c: c.short())
def test_sm100_rejects_co_resident_ctas_whose_tensor_memory_does_not_fit_side_by_side(config):
    """Two such CTAs fit one SM's shared memory, but 2 x 512 tensor-memory columns do not
    fit its 512: the second CTA's tcgen05.alloc would wait for the first to finish."""
    with pytest.raises(ConfigError, match=r"lets 2 CTAs share an SM.*512 tensor-memory columns.*2 x 512 > the SM's 512"):
        cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", config)


def test_sm100_every_buildable_config_fits_its_co_resident_ctas_tensor_memory():
    checked = 0
    for tile_n, acc, stages, cluster_m, two_cta, epi in itertools.product(
            cfg.SM100_TILE_N, (1, 2, 3, 4), (None, 2, 3, 4, 6), (1, 2), (False, True), (1, 2)):
        if two_cta and cluster_m == 1:
            continue
        config = GemmConfig(tile_n=tile_n, acc_stages=acc, stages=stages, cluster_m=cluster_m, two_cta=two_cta,
                            epi_stages=epi)
        try:
            spec = cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", config)
        except ConfigError:
            continue
        budget = cfg.smem_budget(spec)
        assert cfg.ctas_per_sm(budget, spec.facts) * cfg.tmem_columns(spec) <= hardware.SM100.tmem_columns
        checked += 1
    assert checked > 50
