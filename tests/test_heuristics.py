import dataclasses

import pytest

from wsgemm import config as cfg
from wsgemm import heuristics
from wsgemm.heuristics import (
    BAND_CLUSTERS,
    FITTED_SWAP_HBM_GAIN,
    H200,
    ONE_WAVE_MIN_K_BLOCKS,
    PLAIN_TILE_N,
    SHARE_SCALED_FILL_MAX_ROWS,
    SPARE_EPILOGUE_BUFFERS,
    SWAP_TALL_PAIRS_MAX_K_BLOCKS,
    SWAP_TALL_PAIRS_MAX_M,
    SWAP_TALL_TILES_MAX_M,
    SWAP_THREE_TILES_MAX_M,
    SWAP_FOUR_TILES_MAX_M,
    SWAP_SPLIT_FILL_MAX_M,
    SWAP_SPLIT_FILL_MIN_K_BLOCKS,
    SWAP_TWO_TILES_MAX_M,
    SWAP_TWO_TILES_MIN_K_BLOCKS,
    TWO_ROWS_FILLING_MIN_M,
    _swapped_candidates,
    _token_tiles_split_to_fill_one_wave,
    _tile_seconds,
    _widths_filling_waves,
    _zero_fill_seconds,
    candidates_to_time,
    ceil_div,
    choose_config,
    estimate_seconds,
    fitted_token_tile,
    pingpong_variant,
    ranked_sm90_configs,
    resident_clusters,
    table_winner_or_model,
    with_spare_epilogue_buffers,
)

H200_SMS = 132


def test_large_problems_get_wide_tiles_and_a_b_sharing_cluster():
    c = choose_config("sm90", 8192, 8192, 8192, 1, H200_SMS)
    assert (c.tile_m, c.tile_n, c.cluster_m) == (128, 256, 2)


def test_small_problems_get_64_row_tiles_up_to_m_1024():
    """At M = 384-1024 with N and K near 1024, 64-row tiles as wide as the waves allow
    ran 1.06-1.89x faster on an H200 than the 128-row tiles of half the width (and
    their splits) the model picked before (NOTES section 24); from M = 2048 the wide
    128-row tiles stay."""
    c = choose_config("sm90", 1024, 1024, 1024, 1, H200_SMS)
    assert (c.tile_m, c.tile_n, c.split_k) == (64, 128, 1)
    c = choose_config("sm90", 512, 1024, 1024, 1, H200_SMS)
    assert (c.tile_m, c.split_k) == (64, 1)
    c = choose_config("sm90", 2048, 2048, 2048, 1, H200_SMS)
    assert (c.tile_m, c.tile_n) == (128, 256)


def test_decode_shapes_keep_most_sms_streaming_weights():
    c = choose_config("sm90", 1, 6144, 4096, 1, H200_SMS)
    assert c.tile_m == 64 and not c.swap_ab  # 3-D or unreadable operands: no swap offered
    work_items = (6144 // c.tile_n + (6144 % c.tile_n > 0)) * c.split_k
    assert work_items >= 0.7 * H200_SMS


def test_decode_shapes_swap_so_the_tokens_take_a_narrow_n_tile():
    c = choose_config("sm90", 1, 4096, 14336, 1, H200_SMS, can_swap=True)
    assert c.swap_ab and c.tile_n <= 32


def test_few_tiles_and_long_k_split_k_to_fill_the_sms():
    c = choose_config("sm90", 512, 4096, 14336, 1, H200_SMS)  # 64 tiles of 128x256
    assert c.split_k > 1
    tiles = (512 // c.tile_m) * (4096 // c.tile_n)
    assert tiles < H200_SMS and tiles * c.split_k >= 0.9 * H200_SMS
    c = choose_config("sm90", 1, 4096, 4096, 1, H200_SMS)  # 64 tiles of 64x64
    assert c.split_k > 1


def test_whole_waves_and_many_waves_are_not_split():
    # 8192^3 and 4096x28672: 16-27 waves; 2048x4096 with 128x256 tiles: 256 tiles ...
    for m, n, k in ((8192, 8192, 8192), (4096, 28672, 4096), (2048, 4096, 4096)):
        assert choose_config("sm90", m, n, k, 1, H200_SMS).split_k == 1


def test_the_tiles_of_a_last_partial_wave_are_split():
    # 1024x10240 in 128x256 tiles paired 2x1: 160 clusters, two waves of 66 and a tail
    # of 28; splitting the tail 2 ways turns a third full tile-time into half of one.
    c = choose_config("sm90", 1024, 10240, 8192, 1, H200_SMS)
    tiles = (1024 // c.tile_m) * (10240 // c.tile_n + (10240 % c.tile_n > 0))
    assert c.split_k > 1 and tiles > H200_SMS
    args = (1024, 10240, 8192, 1, H200_SMS, c.tile_m, c.tile_n)
    split_seconds = estimate_seconds(*args, c.split_k, cluster_m=c.cluster_m)
    assert split_seconds < 0.9 * estimate_seconds(*args, cluster_m=c.cluster_m)


def test_a_split_costs_a_fixed_fix_up_latency():
    """Small problems whose unsplit tiles fill most SMs stay unsplit: the model picked
    splits there that ran 1.1-1.9x slower than unsplit tiles on an H200, until a split
    tile's fix-up cost a fixed latency as well as its bytes (NOTES section 25)."""
    for m, n, k in ((384, 1024, 1024), (384, 1024, 4096), (512, 1024, 4096), (768, 2048, 4096),
                    (256, 2048, 2048)):
        assert choose_config("sm90", m, n, k, 1, H200_SMS).split_k == 1, (m, n, k)
    args = (384, 1024, 1024, 1, H200_SMS, 64, 96)
    no_latency = dataclasses.replace(H200, split_fixup_s=0.0)
    assert estimate_seconds(*args, 2, H200) - estimate_seconds(*args, 2, no_latency) == pytest.approx(3e-6)
    assert estimate_seconds(*args, 1, H200) == estimate_seconds(*args, 1, no_latency)  # unsplit: no fix-up
    # Each split past two adds one more slot for the last split to read after the others.
    no_extra = dataclasses.replace(H200, split_fixup_per_extra_split_s=0.0)
    assert estimate_seconds(*args, 2, H200) == estimate_seconds(*args, 2, no_extra)
    assert estimate_seconds(*args, 4, H200) - estimate_seconds(*args, 4, no_extra) == pytest.approx(2e-6)
    # Few tiles and a long k-loop still split (decode, M = 1, 32 tiles of a 2048-row weight).
    assert choose_config("sm90", 1, 2048, 14336, 1, H200_SMS, can_swap=True).split_k > 1


def test_splits_past_two_are_taken_only_where_they_pay_their_fix_up():
    """Each split past two costs another round trip before the epilogue (NOTES section
    51): on 1024- to 3072-row weights at small M the model splits less than it did
    (8 -> 4, 4 -> 2, 3 -> none), which ran 1.05x faster on an H200."""
    assert choose_config("sm90", 1, 2048, 4096, 1, H200_SMS, can_swap=True).split_k == 4  # was 8
    assert choose_config("sm90", 8, 3072, 4096, 1, H200_SMS, can_swap=True).split_k == 1  # was 4, then 2 (section 68)
    assert choose_config("sm90", 128, 2048, 4096, 1, H200_SMS).split_k == 1  # was 4
    # Long k-loops over few tiles still split (decode on a 1024-row weight).
    assert choose_config("sm90", 16, 1024, 8192, 1, H200_SMS, can_swap=True).split_k >= 4
    # Two tile rows pair along M, reading each weight tile once: 1x2 there ran 0.92x.
    two_rows = choose_config("sm90", 256, 2048, 8192, 1, H200_SMS)
    assert (two_rows.tile_m, two_rows.cluster_m, two_rows.cluster_n) == (128, 2, 1)


def test_two_splits_of_one_token_tile_pay_their_fix_up_after_the_hbm_paced_stream():
    """Where HBM, not the SMs, paces the stream of the weight, the last of two splits
    still waits for its loads before its fix-up: on weights of 48-64 tiles of 64 rows
    the unsplit swap ran 1.10x faster than split 2 on an H200 (NOTES section 67)."""
    # Swapped (the weight along the kernel's M), 16 tokens in one tile, at the fitted
    # family's per-SM rate: 112 split CTAs would stream faster than HBM delivers.
    args = (3584, 16, 3584, 1, H200_SMS, 64, 16)
    fitted = dataclasses.replace(H200, sm_hbm_bytes_per_s=FITTED_SWAP_HBM_GAIN * H200.sm_hbm_bytes_per_s)
    hbm_seconds = (3584 * 3584 + 16 * 3584) * 2 / H200.hbm_bytes_per_s
    assert estimate_seconds(*args, 2, fitted) > hbm_seconds + fitted.split_fixup_s
    assert estimate_seconds(*args, 2, fitted) > estimate_seconds(*args, 1, fitted)  # 10.0 and 8.0 us; ran 9.9, 8.6
    for m, n, k in ((16, 3584, 3584), (12, 3072, 4096), (24, 4096, 8192)):
        assert choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True).split_k == 1, (m, n, k)
    # Past two splits the charge stays inside the SMs' time: on 32-40 weight tiles
    # three and four splits ran 2-9 % faster than one split fewer.
    assert choose_config("sm90", 1, 2048, 4096, 1, H200_SMS, can_swap=True).split_k == 4


def test_a_narrow_token_box_zero_fills_for_free_in_one_wave_of_unsplit_64_row_tiles():
    """The Llama suites' swapped 64x16 plans ran M = 1-16 within ~1 % of each other, so
    padding a 16-row token box costs nothing there; charged the flat rate, the model
    split 2048-5120-row weights at M = 1-8 that ran 1.12x faster unsplit in graph
    replays (NOTES section 68)."""
    swapped_m1 = dict(m=3584, n=1, k_blocks=56, tile_m=64, tile_n=16, model=H200)
    flat = _zero_fill_seconds(56 * 64 * 2, 16, 1, H200)
    assert flat > 2e-6  # the flat rate's charge for 15 rows of padding a tile
    assert _tile_seconds(**swapped_m1) - _tile_seconds(**swapped_m1, narrow_fill_free=True) == pytest.approx(flat)
    for m, n, k in ((1, 3584, 3584), (4, 2560, 2560), (1, 4096, 11008)):
        assert choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True).split_k == 1, (m, n, k)
    # Split work items keep the charge: free there, 1024-2048-row weights went from 4
    # splits to 3, which ran 2-7 % slower.
    assert choose_config("sm90", 8, 1024, 4096, 1, H200_SMS, can_swap=True).split_k == 4


def test_a_last_partial_wave_pulls_less_than_hbm_full_rate(monkeypatch):
    """Over several waves of an HBM-paced stream, a last wave holding a share f of the
    slots took about (1 + f) / 2 of a full wave's time on an H200: 64x224 tiles in 2.6
    waves ran 1.05-1.10x slower than 64x192 tiles in three full ones, which the model
    had tied at the HBM time (NOTES section 69)."""
    args = (128, 37888, 3584, 1, H200_SMS)
    hbm_seconds = (128 * 3584 + 3584 * 37888) * 2 / H200.hbm_bytes_per_s
    three_full_waves = estimate_seconds(*args, 64, 192, cluster_m=2)  # 198 pairs of 66 slots
    assert three_full_waves == pytest.approx(hbm_seconds)
    waves = 170 / 66  # 64x224 tiles: 170 pairs
    drain = hbm_seconds / waves * (1 - 38 / 66) / 2
    assert estimate_seconds(*args, 64, 224, cluster_m=2) == pytest.approx(hbm_seconds + drain)
    chosen = choose_config("sm90", *args, can_swap=True)
    assert (chosen.tile_m, chosen.tile_n, chosen.cluster_m) == (64, 192, 2)
    # One partial wave is not charged: its per-SM rates price its fewer CTAs already.
    monkeypatch.setattr(heuristics, "_last_wave_drain_seconds", lambda *args: pytest.fail("charged"))
    estimate_seconds(128, 8192, 3584, 1, H200_SMS, 64, 192, cluster_m=2)  # 43 pairs


def test_short_k_is_not_split():
    assert choose_config("sm90", 64, 64, 256, 1, H200_SMS).split_k == 1


def test_model_ranks_compute_bound_wide_tiles_first():
    ranked = ranked_sm90_configs(8192, 8192, 8192, 1, H200_SMS)
    assert (ranked[0][1].tile_m, ranked[0][1].tile_n) == (128, 256)
    # 128x256 at 80 % of an SM's MMA peak: within the model's own constants.
    seconds = estimate_seconds(8192, 8192, 8192, 1, H200_SMS, 128, 256)
    assert 0.6e-3 < seconds < 3e-3


def test_every_heuristic_choice_is_a_valid_config():
    for arch in ("sm90", "sm100"):
        for m in (1, 16, 64, 128, 512, 4096, 16384):
            for n, k in ((64, 4096), (4096, 4096), (28672, 4096), (4096, 28672)):
                config = choose_config(arch, m, n, k, 1, H200_SMS)
                cfg.make_spec(arch, "bf16", "bf16", "k", "k", "n", config)  # raises if invalid


def test_autotune_times_both_swapped_and_plain_kernels_for_decode_shapes():
    # The model keeps M = 1 on a 9216x8192 weight unswapped (its 144 64-row tiles are
    # more than a wave); the autotuner must still try swapping.
    assert not choose_config("sm90", 1, 9216, 8192, 1, H200_SMS, can_swap=True).swap_ab
    candidates = candidates_to_time(1, 9216, 8192, 1, H200_SMS, True, 8)
    assert len(candidates) == len(set(candidates)) == 8
    assert 3 <= sum(c.swap_ab for c in candidates) <= 4  # half, or every swapped candidate there is
    assert candidates[0] == choose_config("sm90", 1, 9216, 8192, 1, H200_SMS, can_swap=True)
    # Without the option, or for large M, only unswapped ones, the model's choice first.
    assert not any(c.swap_ab for c in candidates_to_time(1, 6144, 8192, 1, H200_SMS, False, 8))
    large = candidates_to_time(1024, 2048, 4096, 1, H200_SMS, True, 8)
    assert not any(c.swap_ab for c in large) and large[0] == choose_config("sm90", 1024, 2048, 4096, 1, H200_SMS, True)


def test_long_runs_also_try_the_models_choice_in_raster_bands():
    """A long walk along M re-reads A from HBM once per wave; bands keep it in L2.
    Measured, not modelled (NOTES section 17): the autotuner's last candidate is the
    model's first choice walking in bands, where the grid is long enough for it."""
    ranked = [c for _, c in ranked_sm90_configs(8192, 6144, 4096, 1, H200_SMS, True)]
    candidates = candidates_to_time(8192, 6144, 4096, 1, H200_SMS, True, 8)
    assert len(candidates) == len(set(candidates)) == 8
    assert candidates[:7] == ranked[:7]
    assert candidates[-1] == dataclasses.replace(ranked[0], swizzle=BAND_CLUSTERS)
    # Two M tiles, or less than two waves: the order of the walk hardly matters.
    for m, n in ((512, 28672), (2048, 8192)):
        assert all(c.swizzle == 1 for c in candidates_to_time(m, n, 4096, 1, H200_SMS, True, 12))


def test_tile_widths_that_fit_the_waves():
    """10240 = 64 x 160 and 28672 = 128 x 224: at M = 512 these fill 1.94 and 3.88
    waves of 66 clusters where 128x256 fills 1.21 and 3.39 (measured on an H200:
    0.67x -> 0.98x and 0.87x -> 0.96x of cuBLAS; NOTES section 17)."""
    assert choose_config("sm90", 512, 10240, 8192, 1, H200_SMS).tile_n == 160
    assert choose_config("sm90", 512, 28672, 4096, 1, H200_SMS).tile_n == 224
    assert choose_config("sm90", 8192, 8192, 8192, 1, H200_SMS).tile_n == 256


def test_m_tiles_sharing_a_weight_tile_are_paired_by_a_multicast_cluster():
    # Measured on an H200 (NOTES section 13): 3-14 % faster than unpaired at M = 96-512.
    for m, n in ((512, 4096), (512, 6144), (128, 4096)):
        c = choose_config("sm90", m, n, 4096, 1, H200_SMS)
        assert c.cluster_m == 2 and (m + c.tile_m - 1) // c.tile_m >= 2
    # One M tile: nothing to pair.
    assert choose_config("sm90", 64, 4096, 4096, 1, H200_SMS).cluster_m == 1


def test_a_cluster_pads_the_grid_and_multicast_shares_the_loads():
    # 3 M tiles in pairs: the fourth CTA of each cluster column computes padding.
    padded = estimate_seconds(384, 128 * 132, 4096, 1, H200_SMS, 128, 128, cluster_m=2)
    assert padded > estimate_seconds(256, 128 * 132, 4096, 1, H200_SMS, 128, 128, cluster_m=2)
    # A load-bound narrow tile: pairs halve each CTA's weight bytes.
    alone = estimate_seconds(128, 4096, 4096, 1, H200_SMS, 64, 64)
    assert estimate_seconds(128, 4096, 4096, 1, H200_SMS, 64, 64, cluster_m=2) <= alone


def test_clusters_of_four_and_eight_fit_the_gpcs_not_the_sm_count():
    # The H200's driver fits 30 clusters of 4 and 15 of 8 (NOTES section 30), 66 pairs.
    assert [resident_clusters(H200_SMS, size) for size in (1, 2, 4, 8)] == [132, 66, 30, 15]


def test_one_wave_of_a_long_k_loop_shares_l2_and_clusters_along_n():
    """Measured on an H200 (NOTES section 30): at 320-384x2560x8192, 64x128 tiles in
    2x2 clusters (30 clusters, one wave) ran 1.2x faster than the 128x128 split tiles
    the model chose before, which it had rated faster by charging each CTA its L2
    port's full rate."""
    for m in (320, 384):
        c = choose_config("sm90", m, 2560, 8192, 1, H200_SMS)
        assert (c.tile_m, c.tile_n, c.cluster_m, c.cluster_n, c.split_k) == (64, 128, 2, 2, 1)
    # L2's share: the same tiles, 132 of them at once, each read slower than 66.
    full_wave = estimate_seconds(128 * 66, 256, 8192, 1, H200_SMS, 128, 128)
    half_wave = estimate_seconds(128 * 33, 256, 8192, 1, H200_SMS, 128, 128)
    assert full_wave > 1.2 * half_wave
    # ... and a 2x2 cluster reads less of it than a pair along M.
    assert (estimate_seconds(384, 2560, 8192, 1, H200_SMS, 64, 128, cluster_m=2, cluster_n=2)
            < estimate_seconds(384, 2560, 8192, 1, H200_SMS, 64, 128, cluster_m=2))


def test_clusters_along_n_only_in_one_wave_of_a_long_k_loop():
    def along_n(m, n, k):
        return {(c.tile_m, c.cluster_m) for _, c in ranked_sm90_configs(m, n, k, 1, H200_SMS) if c.cluster_n > 1}

    assert along_n(384, 2560, 8192)
    # Short k-loop, or more than one wave: never (the model as fitted before).
    assert not along_n(384, 2560, (ONE_WAVE_MIN_K_BLOCKS - 1) * 64)
    assert not along_n(8192, 8192, 8192)
    # 64-row tiles pair along N only in 2x2 clusters.
    assert (64, 1) not in along_n(384, 2560, 8192)


def test_swapped_tokens_take_one_narrow_tile_or_two_paired_ones():
    from wsgemm.heuristics import H200, _swapped_candidates

    def shapes(m):
        return {(c.tile_n, c.cluster_n) for _, c in _swapped_candidates(m, 4096, 4096, H200_SMS, H200)}

    assert shapes(128) == {(128, 1), (64, 2)}
    assert shapes(96) == {(96, 1), (64, 2)}
    # 16- and 32-wide pairs measured 1.2-1.8x slower than one tile: not offered.
    assert shapes(32) == {(32, 1)} and shapes(5) == {(16, 1)}


def test_autotune_candidates_cover_each_tile_shape_and_its_unsplit_variant():
    # At M = 64 the model ranks every split first; the unsplit swapped 64x64 tile
    # measured fastest (NOTES section 13) and must be among the timed candidates.
    candidates = candidates_to_time(64, 4096, 4096, 1, H200_SMS, True, 12)
    assert len(candidates) == len(set(candidates)) == 12
    swapped_64 = [c for c in candidates if c.swap_ab and (c.tile_m, c.tile_n) == (64, 64)]
    assert {c.split_k for c in swapped_64} >= {1, 2}
    shapes = [(c.swap_ab, c.tile_m, c.tile_n, c.cluster_m, c.cluster_n) for c in candidates]
    assert len(set(shapes)) >= 5


def test_the_model_never_offers_stream_k():
    """The model's ranking and the autotuner's candidates leave stream-K out: on the
    H200 it measured slower than the default configuration on most suite shapes
    (benchmarks/NOTES.md section 16). Only the launch policy streams the last wave,
    of long runs (test_planning.py)."""
    for m, n, k in ((1, 6144, 4096), (512, 4096, 4096), (512, 10240, 8192), (8192, 8192, 8192)):
        assert not any(c.stream_k for _, c in ranked_sm90_configs(m, n, k, 1, H200_SMS, True))
        assert not any(c.stream_k for c in candidates_to_time(m, n, k, 1, H200_SMS, True, 12))


def test_autotune_swapped_candidates_hold_every_m_of_the_bucket():
    """Tuned at M = 96, a bucket's winner also runs M = 128: a swapped candidate's N
    tiles must hold 128 tokens (one 128-wide tile or a 1x2 pair of 64), not 96."""
    swapped = [c for c in candidates_to_time(96, 4096, 4096, 1, H200_SMS, True, 12, tokens_up_to=128)
               if c.swap_ab]
    assert swapped and all(c.tile_n * c.cluster_n >= 128 for c in swapped)
    assert any(c.tile_n == 96 for c in candidates_to_time(96, 4096, 4096, 1, H200_SMS, True, 12) if c.swap_ab)


def _resolved(config, out_dtype):
    return cfg.make_spec("sm90", "bf16", out_dtype, "k", "k", "n", config).config


@pytest.mark.parametrize("pingpong", [False, True], ids=["cooperative", "pingpong"])
@pytest.mark.parametrize("out_dtype", ["bf16", "fp16", "fp32"])
def test_spare_epilogue_buffers_never_cost_a_ring_stage(out_dtype, pingpong):
    """Every SM90 tile: the chosen config gets the most extra epilogue buffers that
    shared memory holds beside the ring it already had (one more would not fit), and
    then builds; 64-row ping-pong tiles keep theirs."""
    for tile_m in cfg.SM90_TILE_M:
        for tile_n in cfg.SM90_TILE_N:
            given = cfg.GemmConfig(tile_m=tile_m, tile_n=tile_n, pingpong=pingpong)
            try:
                ring = _resolved(given, out_dtype).stages
            except cfg.ConfigError:  # e.g. a ping-pong tile past the register file
                continue
            chosen = with_spare_epilogue_buffers("sm90", given, "bf16", out_dtype)
            if pingpong and tile_m != 128:
                assert chosen == given
                continue
            assert chosen.stages in (None, ring)
            assert _resolved(chosen, out_dtype).stages == ring
            if chosen.epi_stages < SPARE_EPILOGUE_BUFFERS:
                one_more = dataclasses.replace(given, stages=ring, epi_stages=chosen.epi_stages + 1)
                with pytest.raises(cfg.ConfigError, match="shared memory"):
                    _resolved(one_more, out_dtype)


def test_spare_epilogue_buffers_where_measured_and_only_on_sm90():
    # 128x256, bf16 out: 4 stages of 48 KB leave room for 4 buffers of 8 KB.
    wide = with_spare_epilogue_buffers("sm90", cfg.GemmConfig(), "bf16", "bf16")
    assert (wide.stages, wide.epi_stages) == (4, 4)
    # 128x192: 5 stages of 40 KB leave room for 3 buffers of 8 KB, not 4 (NOTES
    # section 18: 6 % slower with 4, which cost the fifth stage).
    assert with_spare_epilogue_buffers("sm90", cfg.GemmConfig(tile_n=192), "bf16", "bf16").epi_stages == 3
    # Ping-pong 128x192: two sets of 64x32 buffers; three each keep 5 stages (NOTES section 20).
    pingpong = with_spare_epilogue_buffers("sm90", cfg.GemmConfig(tile_n=192, pingpong=True), "bf16", "bf16")
    assert (pingpong.stages, pingpong.epi_stages) == (5, 3)
    assert with_spare_epilogue_buffers("sm100", cfg.GemmConfig(), "bf16", "bf16") == cfg.GemmConfig()


def test_pingpong_variants_pick_the_tile_width_the_waves_favour():
    """A ping-pong warpgroup holds a whole tile: 128-row tiles are 192 or 128 wide,
    whichever leaves the busiest SM less work (128 up to K = 128), with two epilogue
    buffers (the spare-buffer rule adds more where they cost no stage); 64-row tiles
    keep their width; split or streamed tiles have no ping-pong variant (NOTES
    section 19)."""
    pair = cfg.GemmConfig(cluster_m=2, epi_stages=4, stages=4)
    # 8192 wide: 43 tiles of 192 (21 waves of 66 clusters) beat 64 of 128 (32 waves).
    variant = pingpong_variant(pair, 8192, 8192, 512, 1, H200_SMS)
    assert variant == cfg.GemmConfig(tile_n=192, cluster_m=2, pingpong=True)
    # 4096 wide: 22 tiles of 192 (6 waves, the last a third full) lose to 32 of 128 (8 waves).
    assert pingpong_variant(pair, 4096, 4096, 512, 1, H200_SMS).tile_n == 128
    assert pingpong_variant(pair, 8192, 8192, 128, 1, H200_SMS).tile_n == 128  # two k-blocks
    narrow = pingpong_variant(cfg.GemmConfig(tile_m=64, tile_n=224), 8192, 8192, 512, 1, H200_SMS)
    assert (narrow.tile_n, narrow.epi_stages) == (224, 2)
    assert pingpong_variant(cfg.GemmConfig(split_k=2), 8192, 8192, 512, 1, H200_SMS) is None
    assert pingpong_variant(cfg.GemmConfig(stream_k=True), 8192, 8192, 512, 1, H200_SMS) is None
    assert with_spare_epilogue_buffers("sm90", narrow, "bf16", "bf16") == narrow
    assert pingpong_variant(cfg.GemmConfig(tile_m=256, tile_n=128), 8192, 8192, 512, 1, H200_SMS) is None
    for tile_m in (64, 128):
        for tile_n in cfg.SM90_TILE_N:
            for k in (128, 1024):
                given = cfg.GemmConfig(tile_m=tile_m, tile_n=tile_n)
                _resolved(pingpong_variant(given, 8192, 8192, k, 1, H200_SMS), "fp32")  # builds


def test_a_measured_winner_gives_way_only_where_its_waves_fit_worse_than_where_it_was_timed():
    """128x256 tiles in 2x1 clusters, timed at M = 2048 on a 4096x4096 weight (128
    clusters for 66 slots): at M = 1536 (96 clusters, 1.45 waves) the model's own pick
    serves; where it was timed and below M = 129, the winner. A swapped winner serves
    the M its token tiles hold, and gives way past them."""
    winner = cfg.GemmConfig(tile_m=128, tile_n=256, cluster_m=2)
    assert table_winner_or_model(winner, 2048, 2048, 4096, 4096, 1, H200_SMS) == winner
    other = table_winner_or_model(winner, 2048, 1536, 4096, 4096, 1, H200_SMS)
    assert other != winner and other == choose_config("sm90", 1536, 4096, 4096, 1, H200_SMS)
    assert table_winner_or_model(winner, 128, 96, 4096, 4096, 1, H200_SMS) == winner
    swapped = cfg.GemmConfig(tile_m=64, tile_n=16, swap_ab=True)
    assert table_winner_or_model(swapped, 16, 12, 4096, 4096, 1, H200_SMS, True) == swapped
    assert table_winner_or_model(swapped, 16, 1536, 4096, 4096, 1, H200_SMS, True) == choose_config(
        "sm90", 1536, 4096, 4096, 1, H200_SMS, can_swap=True)


def test_a_one_wave_winner_gives_way_where_fewer_tile_rows_leave_sms_idle():
    """The M = 512 winner of the 8192x8192 weight, 128x256 tiles in 2x1 clusters: 128
    CTAs over 4 tile rows. Over the 3 rows of M = 320 it would run 96 CTAs on 132
    SMs, and the model's pick (two rows of 192x128 in 2x1 clusters, 128 CTAs) serves;
    at M = 448, 4 rows again, the winner does."""
    winner = cfg.GemmConfig(tile_m=128, tile_n=256, cluster_m=2)
    here = table_winner_or_model(winner, 512, 320, 8192, 8192, 1, H200_SMS)
    assert here == choose_config("sm90", 320, 8192, 8192, 1, H200_SMS)
    assert (here.tile_m, here.tile_n, here.cluster_m, here.cluster_n) == (192, 128, 2, 1)
    assert table_winner_or_model(winner, 512, 448, 8192, 8192, 1, H200_SMS) == winner


def test_past_m_128_tokens_swap_into_two_wide_n_tiles_where_the_model_gains():
    """M = 257-320 in two 160-wide N tiles paired by a 1x2 cluster (128 CTAs at
    300x8192x8192, where 128-row tiles take 3 rows of which the last is mostly
    padding); only where the operands can swap, not past SWAP_TWO_TILES_MAX_M, and
    not with work items (whole or split k-loops) shorter than SWAP_TWO_TILES_MIN_K_BLOCKS."""
    swapped = choose_config("sm90", 300, 8192, 8192, 1, H200_SMS, can_swap=True)
    assert swapped.swap_ab and (swapped.tile_m, swapped.tile_n, swapped.cluster_n) == (128, 160, 2)
    assert not choose_config("sm90", 300, 8192, 8192, 1, H200_SMS, can_swap=False).swap_ab
    assert not choose_config("sm90", SWAP_TWO_TILES_MAX_M + 1, 8192, 8192, 1, H200_SMS, can_swap=True).swap_ab
    # N = 2048, K = 4096: the swapped tiles would need 16-block splits to fill the GPU;
    # K = 256: no swapped candidate is left at all, and the plain tiles serve.
    assert not choose_config("sm90", 300, 2048, 4096, 1, H200_SMS, can_swap=True).swap_ab
    for m, k in ((300, 256), (136, 1024), (320, 1984)):
        assert _swapped_candidates(m, 1100, k, H200_SMS, H200) == []
        assert not choose_config("sm90", m, 1100, k, 1, H200_SMS, can_swap=True).swap_ab
    for m in (136, 200, 260, 320):
        for _, config in _swapped_candidates(m, 2048, 4096, H200_SMS, H200):
            assert -(-64 // config.split_k) >= SWAP_TWO_TILES_MIN_K_BLOCKS
            four_tiles = 3 * config.tile_n < m <= 4 * config.tile_n and config.split_k == 1
            assert config.tile_n < m <= 2 * config.tile_n or m <= config.tile_n or four_tiles


def test_two_token_tiles_are_fitted_to_the_tokens_in_steps_of_16():
    """cuBLAS's tiles at M = 129-320 are 104-160 wide: two 112-wide token tiles hold
    M = 200 with 11 % padding where two 128-wide ones had 22 % (NOTES section 34). The
    model reads the efficiency of such widths between the measured ones."""
    from wsgemm.heuristics import MMA_EFFICIENCY, fitted_token_tile, mma_efficiency

    assert [fitted_token_tile(m, 2) for m in (129, 136, 160, 200, 224, 260, 300, 320)] == \
        [80, 80, 80, 112, 112, 144, 160, 160]
    assert fitted_token_tile(200, 1) == 208
    for m in (136, 200, 260):
        widths = {c.tile_n for _, c in _swapped_candidates(m, 8192, 8192, H200_SMS, H200)}
        assert widths <= {fitted_token_tile(m, 1), fitted_token_tile(m, 2)} and fitted_token_tile(m, 2) in widths
        assert all(width % 16 == 0 and width in cfg.SM90_TILE_N for width in widths)
    chosen = choose_config("sm90", 200, 8192, 8192, 1, H200_SMS, can_swap=True)
    assert chosen.swap_ab and (chosen.tile_m, chosen.tile_n, chosen.cluster_n) == (128, 112, 2)
    assert mma_efficiency(128, 128) == MMA_EFFICIENCY[128, 128]
    assert mma_efficiency(128, 112) == pytest.approx((MMA_EFFICIENCY[128, 96] + MMA_EFFICIENCY[128, 128]) / 2)
    assert MMA_EFFICIENCY[64, 64] < mma_efficiency(64, 80) < MMA_EFFICIENCY[64, 96]


def test_past_the_swaps_128_row_tiles_take_fitted_widths_where_they_fit_the_waves():
    """1536x2560x8192: 11 columns of 240 make 132 tiles for 132 SMs, 10 of 256 make 120;
    fitted plain widths only for 128-row tiles and past SWAP_TWO_TILES_MAX_M
    (NOTES section 34)."""
    from wsgemm.heuristics import FITTED_PLAIN_TILE_N, PLAIN_TILE_N, _plain_candidates

    assert all(width % 32 == 16 and width not in PLAIN_TILE_N for width in FITTED_PLAIN_TILE_N)
    chosen = choose_config("sm90", 1536, 2560, 8192, 1, H200_SMS)
    assert (chosen.tile_m, chosen.tile_n) == (128, 240)
    for m in (200, SWAP_TWO_TILES_MAX_M, 384, 1024, 4096):
        fitted = {(c.tile_m, c.tile_n) for _, c in _plain_candidates(m, 2560, 8192, 1, H200_SMS, H200)
                  if c.tile_n in FITTED_PLAIN_TILE_N}
        assert all(tile_m == 128 for tile_m, _ in fitted)
        assert bool(fitted) == (m > SWAP_TWO_TILES_MAX_M)


def test_the_autotuner_times_two_tile_swaps_that_hold_the_calls_tokens():
    """Past M = 128 the autotuner's swapped candidates hold the call's own M in two
    token tiles (or three beside 256-row weight tiles), as the default path's do, not
    the bucket's largest M (512 here); a swapped winner serves the bucket's M up to
    what its tiles hold, the model past it."""
    candidates = candidates_to_time(300, 8192, 8192, 1, H200_SMS, True, 12, tokens_up_to=512)
    swapped = [c for c in candidates if c.swap_ab]
    assert swapped and len(candidates) == 12
    assert all(c.tile_n < 300 <= c.tile_n * c.cluster_n for c in swapped if c.tile_m < 256)
    assert all(c.tile_n == 112 for c in swapped if c.tile_m == 256)  # three tiles fitted to 300
    assert not any(c.swap_ab for c in candidates_to_time(300, 8192, 8192, 1, H200_SMS, False, 12))
    assert not any(c.swap_ab for c in candidates_to_time(400, 8192, 8192, 1, H200_SMS, True, 12, tokens_up_to=512))
    winner = cfg.GemmConfig(tile_m=128, tile_n=160, cluster_n=2, swap_ab=True)
    assert table_winner_or_model(winner, 300, 320, 8192, 8192, 1, H200_SMS, True) == winner
    past = table_winner_or_model(winner, 300, 400, 8192, 8192, 1, H200_SMS, True)
    assert past == choose_config("sm90", 400, 8192, 8192, 1, H200_SMS, can_swap=True) != winner


def test_a_weight_from_hbm_and_tokens_from_l2_load_side_by_side():
    """One token tile beside weight tiles that only it reads: the weight streams from
    HBM while the tokens come from L2, and the slower of the two paths sets the pace,
    not their sum. 64x176 swapped tiles ran 176x6144x4096 in 21.5 us against 34.8
    modelled with the sum (NOTES section 40), faster than the 64x192 tiles in 2x1
    clusters picked before (23.8 us)."""
    chosen = choose_config("sm90", 176, 6144, 4096, 1, H200_SMS, can_swap=True)
    assert chosen.swap_ab and (chosen.tile_m, chosen.tile_n, chosen.cluster_size, chosen.split_k) == (64, 176, 1, 1)
    overlapped = _tile_seconds(6144, 176, 64, 64, 176, H200)
    summed = _tile_seconds(6144, 176, 64, 64, 176, H200, paths_overlap=False)
    assert overlapped < 0.75 * summed
    # Two operands from L2 (many tiles of each) still queue for it.
    both_l2 = dict(m=4096, n=4096, k_blocks=64, tile_m=128, tile_n=128, model=H200)
    assert _tile_seconds(**both_l2) == _tile_seconds(**both_l2, paths_overlap=False)


def test_split_tiles_and_several_waves_keep_their_loads_summed():
    """Rated with overlapping loads, one token tile split 2-8 ways displaced pairs of
    token tiles sharing the weight by multicast and ran 12-25 % slower than them
    (192x8192x8192: 45.4 us against 40.0), and over several waves 2-12 % slower
    (192x57344x8192: 305 us against 285; NOTES section 40): there the loads keep the
    sum, and the pairs stay."""
    for n, k in ((8192, 8192), (57344, 8192)):
        chosen = choose_config("sm90", 192, n, k, 1, H200_SMS, can_swap=True)
        assert chosen.swap_ab and (chosen.tile_n, chosen.cluster_n, chosen.split_k) == (96, 2, 1)


def test_64_row_tiles_over_several_waves_of_a_long_k_loop_share_l2():
    """192x28672x4096: 384 tiles of 64x224 in ~3 waves re-read the weight per tile row
    and drew ~8.6 TB/s from L2 (103.6 us); 128x224 tiles in 2x1 clusters ran 88.2 us
    (NOTES section 38). With 32 k-blocks the term does not apply, nor where the
    weight streams from HBM through one token tile (a swapped decode kernel). (Where
    the operands can swap, swapped weight tiles take these shapes: the next tests.)"""
    chosen = choose_config("sm90", 192, 28672, 4096, 1, H200_SMS)
    assert (chosen.tile_m, chosen.tile_n, chosen.cluster_m) == (128, 224, 2)
    assert choose_config("sm90", 192, 28672, 2048, 1, H200_SMS).tile_m == 64
    decode = choose_config("sm90", 16, 57344, 8192, 1, H200_SMS, can_swap=True)
    assert decode.swap_ab and (decode.tile_m, decode.tile_n) == (64, 16)


@pytest.mark.parametrize("m, n, k, rows, width", [(136, 28672, 4096, 256, 144), (192, 28672, 4096, 256, 192),
                                                   (160, 32768, 8192, 256, 160), (176, 22016, 8192, 192, 176),
                                                   (136, 24576, 4096, 192, 144)])
def test_one_token_tile_beside_tall_weight_tiles_in_one_wave(m, n, k, rows, width):
    """cuBLAS's 256x136 at 136x28672x4096 and 192x176 at 176x22016x8192: 112 weight
    tiles of 256 rows, or 115 of 192, make one wave beside one token tile (NOTES
    section 39). Not where they would make more than a wave (57344 rows: 224 and 299
    tiles), where they would be split (6144 rows), past SWAP_TALL_TILES_MAX_M (a wider
    token tile's accumulators do not fit), for k-loops shorter than
    ONE_WAVE_MIN_K_BLOCKS, or where the operands cannot swap."""
    chosen = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
    assert chosen.swap_ab and (chosen.tile_m, chosen.tile_n, chosen.cluster_m, chosen.split_k) == (rows, width, 2, 1)
    assert choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=False).tile_m < 192

    def offers_tall_tiles(m, n, k):
        return any(c.tile_m > 128 for _, c in _swapped_candidates(m, n, k, H200_SMS, H200))

    assert offers_tall_tiles(m, n, k)
    assert not offers_tall_tiles(m, 57344, k) and not offers_tall_tiles(SWAP_TALL_TILES_MAX_M + 1, n, k)
    assert not offers_tall_tiles(m, n, (ONE_WAVE_MIN_K_BLOCKS - 1) * 64)
    assert all(c.split_k == 1 for _, c in _swapped_candidates(m, 6144, k, H200_SMS, H200) if c.tile_m > 128)
    cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", chosen)  # its accumulators fit


@pytest.mark.parametrize("m, n, k, width", [(192, 10240, 8192, 96), (144, 10240, 8192, 80), (136, 10240, 4096, 80),
                                            (160, 11008, 4096, 80), (192, 9216, 4096, 96), (192, 12288, 4096, 96),
                                            (160, 10240, 10240, 80), (224, 11008, 4096, 112), (200, 12288, 8192, 112)])
def test_two_token_tiles_beside_192_row_weight_tiles_in_pairs(m, n, k, width):
    """M = 129-224 on 9216- to 12288-row weights: two token tiles fitted to M beside
    48-64 weight tiles of 192 rows, each pair of token tiles in a 1x2 cluster sharing
    the weight tile (NOTES sections 47-48). Not on 8192 rows (86 CTAs, under
    SWAP_TALL_PAIRS_MIN_FILL of the SMs), past SWAP_TALL_PAIRS_MAX_K_BLOCKS or under
    ONE_WAVE_MIN_K_BLOCKS k-blocks, past one wave of pairs, outside M = 129-224
    (SWAP_TALL_PAIRS_MAX_M), or where the operands cannot swap."""
    chosen = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
    assert chosen.swap_ab and (chosen.tile_m, chosen.tile_n, chosen.cluster_m, chosen.cluster_n,
                               chosen.split_k) == (192, width, 1, 2, 1), chosen
    cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", chosen)  # its accumulators fit

    def tall_pairs(m, n, k, can_swap=True):
        c = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=can_swap)
        return c.swap_ab and c.tile_m == 192 and c.cluster_n == 2

    assert not tall_pairs(m, n, k, can_swap=False)
    assert not tall_pairs(m, 8192, k)
    assert not tall_pairs(m, n, (SWAP_TALL_PAIRS_MAX_K_BLOCKS + 1) * 64)
    assert not tall_pairs(m, n, (ONE_WAVE_MIN_K_BLOCKS - 1) * 64)
    assert not tall_pairs(m, 13824, k)  # 72 weight tiles: more than one wave of pairs
    assert not tall_pairs(SWAP_TALL_PAIRS_MAX_M + 16, n, k) and not tall_pairs(128, n, k)


@pytest.mark.parametrize("m, n, k, width", [(256, 9216, 4096, 144), (240, 11008, 8192, 176), (232, 7168, 8192, 112),
                                            (256, 5120, 8192, 80), (248, 9216, 14336, 144), (150, 5120, 8192, 80),
                                            (176, 6144, 10240, 96)])
def test_two_rows_of_128_row_tiles_take_the_width_that_fills_one_wave(m, n, k, width):
    """At M = 129-256 two rows of 128-row tiles in 2x1 clusters, in the width whose
    columns make one wave of the pairs (126-128 CTAs; NOTES sections 49-50), unsplit. Not
    below TWO_ROWS_FILLING_MIN_M, for k-loops under ONE_WAVE_MIN_K_BLOCKS, for batched
    problems, or where the model swaps A and B (two token tiles beside 192-row weight
    tiles at M <= 224 on an 11008-row weight)."""
    chosen = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
    assert not chosen.swap_ab and (chosen.tile_m, chosen.tile_n, chosen.cluster_m, chosen.cluster_n,
                                   chosen.split_k) == (128, width, 2, 1, 1), chosen
    assert 2 * ceil_div(n, width) <= H200_SMS < 2 * ceil_div(n, width - 16)

    def fills(m, n, k, batches=1):
        c = choose_config("sm90", m, n, k, batches, H200_SMS, can_swap=True)
        return (c.tile_m, c.tile_n, c.cluster_m, c.split_k) == (128, width, 2, 1) and not c.swap_ab

    assert not fills(m, n, (ONE_WAVE_MIN_K_BLOCKS - 1) * 64)
    assert not fills(TWO_ROWS_FILLING_MIN_M - 17, n, k) and not fills(m, n, k, batches=2)
    assert choose_config("sm90", 208, 11008, 4096, 1, H200_SMS, can_swap=True).swap_ab


@pytest.mark.parametrize("m, n, k, tile, split", [
    (176, 5120, 14336, (128, 176, 1), 3), (184, 7168, 20480, (128, 192, 1), 2), (160, 5120, 13824, (128, 160, 1), 3),
    (136, 6144, 18944, (192, 80, 2), 2), (129, 6144, 12288, (192, 80, 2), 2), (192, 3072, 20480, (192, 96, 2), 4),
    (188, 3584, 28672, (192, 96, 2), 3)])
def test_token_tiles_split_to_fill_one_wave_on_long_k_loops(m, n, k, tile, split):
    """At M = 129-192 with k-loops of 192 k-blocks or more, where the model declines the
    swap: one token tile fitted to M beside 128-row weight tiles, unclustered, or two
    beside 192-row weight tiles in 1x2 clusters, whichever keeps more SMs working when
    split as many ways as one wave holds (NOTES section 50). Not for shorter k-loops,
    outside M = 129-192, for batched problems or views that cannot swap, where fewer
    than 70 % of the SMs would work (2048 rows) or not even two splits fit (9216 rows),
    nor in place of the swaps the model picks first (two token tiles beside 128-row
    weight tiles on 3584 rows)."""
    chosen = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
    assert chosen.swap_ab and (chosen.tile_m, chosen.tile_n, chosen.cluster_n, chosen.split_k) == (
        *tile, split), chosen
    assert chosen.cluster_m == 1 and chosen in candidates_to_time(m, n, k, 1, H200_SMS, True, 8)
    ctas = {tile_m: ceil_div(n, tile_m) * pair * min(4, resident_clusters(H200_SMS, pair) // ceil_div(n, tile_m))
            for tile_m, pair in ((128, 1), (192, 2))}
    assert ctas[tile[0]] == max(ctas.values()) and ctas[tile[0]] <= H200_SMS

    assert not _token_tiles_split_to_fill_one_wave(m, n, (SWAP_SPLIT_FILL_MIN_K_BLOCKS - 1) * 64, H200_SMS, H200)
    assert not _token_tiles_split_to_fill_one_wave(SWAP_SPLIT_FILL_MAX_M + 1, n, k, H200_SMS, H200)
    assert not _token_tiles_split_to_fill_one_wave(m, 2048, k, H200_SMS, H200)  # 64 CTAs at most
    assert not _token_tiles_split_to_fill_one_wave(m, 9216, k, H200_SMS, H200)  # not two splits
    assert not choose_config("sm90", m, n, k, 2, H200_SMS, can_swap=True).swap_ab
    assert not choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=False).swap_ab
    pairs = choose_config("sm90", 144, 3584, 27648, 1, H200_SMS, can_swap=True)
    assert pairs.swap_ab and (pairs.tile_m, pairs.tile_n, pairs.cluster_n) == (128, 80, 2), pairs


@pytest.mark.parametrize("m, n, k, width", [(384, 6144, 4096, 96), (320, 6144, 4096, 96), (352, 7168, 8192, 112),
                                            (384, 8192, 14336, 128), (336, 10240, 8192, 160)])
def test_two_rows_of_192_row_tiles_pair_along_m_where_128_row_tiles_need_three(m, n, k, width):
    """At M = 257-384 two 192-row tiles in 2x1 clusters (the weight multicast to both)
    replace three rows of 128-row tiles in 1x2 clusters (NOTES section 41). Not where
    the model swaps A and B (two token tiles measured faster), outside M = 257-384, for
    k-loops shorter than ONE_WAVE_MIN_K_BLOCKS, or past one wave."""
    for can_swap in (True, False):
        chosen = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=can_swap)
        assert not chosen.swap_ab and (chosen.tile_m, chosen.tile_n, chosen.cluster_m, chosen.split_k) == (
            192, width, 2, 1), (can_swap, chosen)
    cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", chosen)  # its accumulators fit
    assert choose_config("sm90", 256, n, k, 1, H200_SMS).tile_m != 192
    assert choose_config("sm90", 400, n, k, 1, H200_SMS).tile_m != 192
    assert choose_config("sm90", m, n, (ONE_WAVE_MIN_K_BLOCKS - 1) * 64, 1, H200_SMS).tile_m != 192
    assert choose_config("sm90", m, n, k, 2, H200_SMS).tile_m != 192
    assert choose_config("sm90", m, 28672, k, 1, H200_SMS).tile_m != 192  # more than a wave of pairs


@pytest.mark.parametrize("m, n, k, width", [(288, 11008, 4096, 96), (272, 10240, 5120, 96), (304, 11008, 5120, 112),
                                            (336, 11008, 28672, 112)])
def test_three_token_tiles_beside_256_row_weight_tiles_in_place_of_a_plain_plan(m, n, k, width):
    """cuBLAS's 256x96 and 256x112 at M = 272-336 on 10240- and 11008-row weights: 40
    or 43 weight tiles times three token tiles fitted to M (NOTES section 42). Not in
    place of the two-token-tile swaps the model picks, past SWAP_THREE_TILES_MAX_M, for
    k-loops shorter than ONE_WAVE_MIN_K_BLOCKS, on weights too small to fill the SMs,
    or where the operands cannot swap."""
    chosen = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
    assert chosen.swap_ab and (chosen.tile_m, chosen.tile_n, chosen.split_k) == (256, width, 1), chosen
    cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", chosen)  # its accumulators fit

    def three_token_tiles(m, n, k, can_swap=True):
        c = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=can_swap)
        return c.swap_ab and c.tile_m == 256

    assert not three_token_tiles(m, n, k, can_swap=False)
    assert not three_token_tiles(SWAP_THREE_TILES_MAX_M + 16, n, k)
    assert not three_token_tiles(m, n, (ONE_WAVE_MIN_K_BLOCKS - 1) * 64)
    assert not three_token_tiles(m, 6144, k)
    # A swap of two 160-wide token tiles in 1x2 clusters stays.
    assert not three_token_tiles(320, 10240, 8192)


@pytest.mark.parametrize("m, n, k", [(384, 6144, 4096), (288, 11008, 4096)])
def test_the_autotuner_times_the_tall_tiles_the_default_path_may_pick(m, n, k):
    """Tall tiles are weighed after the swap decision (NOTES sections 41-42); the
    autotuner's candidates hold them too, so the default path's plan is among those
    it times."""
    chosen = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
    assert chosen.tile_m in (192, 256), chosen
    assert chosen in candidates_to_time(m, n, k, 1, H200_SMS, True, 12)


def test_two_rows_of_192_row_tiles_leave_the_swaps_the_model_picks():
    """At 320x10240x8192 two swapped 160-wide token tiles ran 1.07x faster than
    192x160 tiles (NOTES section 41): the swap decision comes first."""
    chosen = choose_config("sm90", 320, 10240, 8192, 1, H200_SMS, can_swap=True)
    assert chosen.swap_ab and chosen.tile_n == 160, chosen


@pytest.mark.parametrize("m, n, k, width", [(40, 10240, 4096, 80), (56, 6144, 8192, 48),
                                            (40, 13824, 4096, 112), (64, 22016, 14336, 176)])
def test_one_tile_row_takes_the_width_whose_columns_fill_a_wave(m, n, k, width):
    """Up to M = 64 the weight streams from HBM, and the tile columns set how many SMs
    stream it: 10240 rows in 80-wide columns make 128 CTAs, in 160-wide ones 64 (NOTES
    section 43). Not past M = 64, nor narrower than ONE_ROW_FITTED_MIN_N."""
    chosen = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
    assert not chosen.swap_ab and (chosen.tile_m, chosen.tile_n, chosen.split_k) == (64, width, 1), chosen
    assert ceil_div(n, width) <= H200_SMS < ceil_div(n, width - 16)
    assert choose_config("sm90", 80, n, k, 1, H200_SMS).tile_n in PLAIN_TILE_N
    assert _widths_filling_waves(2048, 1, H200_SMS) == ()  # 16 wide: below ONE_ROW_FITTED_MIN_N


@pytest.mark.parametrize("m, n, k, split", [(48, 3072, 2048, 1), (40, 5120, 5120, 1), (36, 2048, 2048, 1),
                                            (44, 3584, 18944, 2), (60, 2048, 2048, 1)])
def test_33_to_64_tokens_swap_into_one_fitted_token_tile(m, n, k, split):
    """One token tile fitted to 33-64 tokens beside 64-row weight tiles, in one wave:
    up to 1.36x faster than the plans before at M = 36-60 (NOTES section 64), rated
    with FITTED_SWAP_HBM_GAIN. Where its 64-row tiles need more than a wave
    (11008-row weights and wider) the plain plans stay."""
    chosen = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
    assert chosen.swap_ab and (chosen.tile_m, chosen.tile_n, chosen.split_k) == (64, fitted_token_tile(m, 1), split)
    assert ceil_div(n, 64) * split <= H200_SMS
    assert not choose_config("sm90", m, 11008, 4096, 1, H200_SMS, can_swap=True).swap_ab
    assert not choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=False).swap_ab


@pytest.mark.parametrize("m, n, k, split", [(1, 4608, 3584, 1), (16, 5120, 5120, 1), (24, 5120, 8192, 1),
                                            (4, 3584, 18944, 2), (2, 8192, 8192, 1)])
def test_1_to_32_tokens_swap_into_one_fitted_token_tile_beside_64_row_weight_tiles(m, n, k, split):
    """The same family at M = 1-32 (16- and 32-wide token tiles): it displaced 128-row
    weight tiles split 2-4 ways, 1.051x faster in single calls and 1.062x in graph
    replays over 31 shapes (NOTES section 66)."""
    chosen = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
    assert chosen.swap_ab and (chosen.tile_m, chosen.tile_n, chosen.split_k) == (64, fitted_token_tile(m, 1), split)
    assert ceil_div(n, 64) * split <= H200_SMS


def test_a_box_less_than_half_padding_costs_its_share_up_to_64_rows():
    """A 64-row box at M = 48 (16 rows of padding) costs a quarter of the flat rate's
    charge, a 32-wide one at M = 24 a quarter too; at M = 1 (63 rows) the flat rate
    (NOTES sections 64-65). A 144-wide box keeps the flat rate (at M = 136 the share
    picked slower plans)."""
    k_bytes = 4096 * 2
    flat = lambda rows: k_bytes * rows / H200.oob_fill_bytes_per_s  # noqa: E731
    assert _zero_fill_seconds(k_bytes, 64, 48, H200) == pytest.approx(flat(16) / 4)
    assert _zero_fill_seconds(k_bytes, 32, 24, H200) == pytest.approx(flat(8) / 4)
    assert _zero_fill_seconds(k_bytes, 64, 1, H200) == pytest.approx(flat(63))
    assert _zero_fill_seconds(k_bytes, 64, 64, H200) == 0
    assert SHARE_SCALED_FILL_MAX_ROWS == 64
    assert _zero_fill_seconds(k_bytes, 144, 136, H200) == pytest.approx(flat(8))


@pytest.mark.parametrize("m, n, k", [(24, 11008, 4096), (20, 12288, 4096), (28, 4608, 3584)])
def test_17_to_30_tokens_swap_into_64_row_weight_tiles_beside_one_32_wide_token_tile(m, n, k):
    """With the 32-wide token box charged its padding's share, the model swaps 17-30
    tokens into 64-row weight tiles beside one 32-wide token tile, where the flat
    charge had it run plain 64x192-64x256 tiles (11008 and 12288 rows) or split
    128-row weight tiles 3 ways (4608 rows): 1.10-1.21x faster in graph replays on an
    H200 (NOTES section 65)."""
    chosen = choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
    assert chosen.swap_ab and (chosen.tile_m, chosen.tile_n) == (64, 32)
    assert chosen.split_k <= 3


@pytest.mark.parametrize("m, k, width", [(300, 4096, 80), (352, 14336, 96), (440, 8192, 112)])
def test_four_token_tiles_fill_one_wave_with_a_4096_row_weight(m, k, width):
    """Four token tiles fitted to M, paired in 1x2 clusters, unsplit: 32 weight tiles
    times four make 128 CTAs (NOTES section 38). Not where they would make more than a
    wave (6144 rows: 192 CTAs), past SWAP_FOUR_TILES_MAX_M, for k-loops shorter than
    ONE_WAVE_MIN_K_BLOCKS, or where the operands cannot swap."""
    chosen = choose_config("sm90", m, 4096, k, 1, H200_SMS, can_swap=True)
    assert chosen.swap_ab and (chosen.tile_m, chosen.tile_n, chosen.cluster_n, chosen.split_k) == (128, width, 2, 1)
    assert not choose_config("sm90", m, 4096, k, 1, H200_SMS, can_swap=False).swap_ab
    assert not choose_config("sm90", 384, 6144, 4096, 1, H200_SMS, can_swap=True).swap_ab
    assert not choose_config("sm90", SWAP_FOUR_TILES_MAX_M + 1, 4096, k, 1, H200_SMS, can_swap=True).swap_ab
    short = (ONE_WAVE_MIN_K_BLOCKS - 1) * 64
    assert not any(3 * c.tile_n < m for _, c in _swapped_candidates(m, 4096, short, H200_SMS, H200))


def test_a_four_tile_swap_winner_serves_the_m_its_tiles_hold():
    """Timed at M = 300 (four 80-wide tiles), it serves M = 320 and gives way to the
    model at M = 330, which would need a fifth token tile."""
    winner = cfg.GemmConfig(tile_m=128, tile_n=80, cluster_n=2, swap_ab=True)
    assert table_winner_or_model(winner, 300, 320, 4096, 4096, 1, H200_SMS, True) == winner
    past = table_winner_or_model(winner, 300, 330, 4096, 4096, 1, H200_SMS, True)
    assert past == choose_config("sm90", 330, 4096, 4096, 1, H200_SMS, can_swap=True) != winner
    # The autotuner times them too, fitted to the call's M.
    timed = candidates_to_time(400, 4096, 4096, 1, H200_SMS, True, 12, tokens_up_to=512)
    assert any(c.swap_ab and (c.tile_n, c.cluster_n) == (112, 2) for c in timed)


def test_deep_weight_k_blocks_only_for_narrow_decode_sm90_tiles_on_k_major_operands():
    from wsgemm.heuristics import with_deep_weight_k_blocks

    def deepened(config, m=1, k=4096, arch="sm90", k_major=True):
        return with_deep_weight_k_blocks(arch, config, m, k, "bf16", "bf16", k_major)

    decode = cfg.GemmConfig(tile_m=64, tile_n=16, swap_ab=True, epi_stages=4)
    deep = deepened(decode)
    assert (deep.tile_k, deep.stages) == (128, 8)  # 16 stages of 10 KiB fit beside the epilogue
    assert deepened(deep) is deep
    assert deepened(dataclasses.replace(decode, tile_n=32), m=32).tile_k == 128
    one_token_tile = cfg.GemmConfig(tile_m=64, tile_n=224, epi_stages=2)  # unswapped, M <= 64
    assert (deepened(one_token_tile, m=64).tile_k, deepened(one_token_tile, m=64).stages) == (128, 3)
    unchanged = [
        dict(config=decode, arch="sm100"), dict(config=decode, k_major=False), dict(config=decode, k=1920),
        dict(config=dataclasses.replace(decode, tile_n=64), m=64),  # wide token tiles: level (0.98-1.01x)
        dict(config=one_token_tile, m=65),  # two rows of token tiles: unmeasured
        dict(config=dataclasses.replace(one_token_tile, cluster_m=2), m=64),  # lost up to 11 % at M = 128
        dict(config=dataclasses.replace(one_token_tile, tile_m=128), m=64),
        dict(config=dataclasses.replace(one_token_tile, tile_n=80), m=64),  # 0.96-1.02x
        dict(config=cfg.GemmConfig(tile_m=64, tile_n=256, epi_stages=4), m=64),  # 2 deep stages: unmeasured
    ]
    for case in unchanged:
        assert deepened(**case) is case["config"], case
