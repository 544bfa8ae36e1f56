from wsgemm import config as cfg
from wsgemm.heuristics import choose_config, estimate_seconds, ranked_sm90_configs

H200_SMS = 132


def test_large_problems_get_wide_tiles_and_a_b_sharing_cluster():
    c = choose_config("sm90", 8192, 8192, 8192, 1, H200_SMS)
    assert (c.tile_m, c.tile_n, c.cluster_m) == (128, 256, 2)


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


def test_a_full_wave_of_tiles_is_never_split():
    for m, n, k in ((8192, 8192, 8192), (2048, 4096, 4096), (512, 28672, 4096), (1, 57344, 8192)):
        assert choose_config("sm90", m, n, k, 1, H200_SMS).split_k == 1


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
