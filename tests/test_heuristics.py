from wsgemm import config as cfg
from wsgemm.heuristics import choose_config

H200_SMS = 132


def test_large_problems_get_wide_tiles_and_a_b_sharing_cluster():
    c = choose_config("sm90", 8192, 8192, 8192, 1, H200_SMS)
    assert (c.tile_m, c.tile_n, c.cluster_m) == (128, 256, 2)


def test_decode_shapes_get_narrow_tiles_so_every_sm_streams_weights():
    c = choose_config("sm90", 1, 6144, 4096, 1, H200_SMS)
    assert (c.tile_m, c.tile_n, c.cluster_m) == (64, 64, 1)
    assert 6144 // 64 >= 64  # 96 CTAs instead of 24 with 256-wide tiles


def test_every_heuristic_choice_is_a_valid_config():
    for arch in ("sm90", "sm100"):
        for m in (1, 16, 64, 128, 512, 4096, 16384):
            for n in (64, 4096, 28672):
                config = choose_config(arch, m, n, 4096, 1, H200_SMS)
                cfg.make_spec(arch, "bf16", "bf16", "k", "k", "n", config)  # raises if invalid
