"""The autotuner's bookkeeping, without a GPU: shape buckets and the on-disk cache."""

import json

import pytest

from wsgemm import GemmConfig, autotune
from wsgemm.config import Lookahead


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WSGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_memory", None)
    return tmp_path


class NoFlush:
    """``wsgemm.timing.L2Flush`` without a GPU."""

    def __init__(self, device=None, mode="read"):
        pass

    def __call__(self):
        pass

    evict = __call__


def key(m, n=4096, k=4096):
    return autotune.bucket_key("NVIDIA H200", "sm90", "bf16", "bf16", ("k", "k", "n"), m, n, k, 1)


def test_m_is_bucketed_to_the_next_power_of_two_n_and_k_are_exact():
    assert key(33) == key(64) != key(65)
    assert key(1) != key(2) and key(3) == key(4)
    # 96 tokens fill a swapped kernel's 96-wide N tile; 97 need a wider one.
    assert key(65) == key(96) != key(97) == key(128) != key(129)
    assert [autotune.bucket_bound(m) for m in (1, 3, 64, 65, 96, 97, 128, 129, 512)] == [1, 4, 64, 96, 96, 128, 128,
                                                                                          256, 512]
    assert key(64, n=4096) != key(64, n=4097)
    assert key(64, k=4096) != key(64, k=4160)
    assert "m<=64|n=4096|k=4096" in key(50)


def test_a_key_gives_back_its_bucket_shape():
    full = autotune.bucket_key("NVIDIA H200", "sm90", "bf16", "fp32", ("k", "m", "n"), 300, 4096, 14336, 3)
    assert autotune.bucket_shape(full) == (512, 4096, 14336, 3)
    assert autotune.bucket_shape(full).m_bound == 512


def test_a_cached_entry_is_returned_without_timing_anything(cache_dir):
    tuned = GemmConfig(tile_m=64, tile_n=128, split_k=4, lookahead=Lookahead.AFTER_COPY)
    (cache_dir / "autotune.json").write_text(json.dumps(
        {key(16): {"config": autotune._jsonable(tuned), "ms": {}, "rejected": {}}}))
    # No tensors, no candidates: only the cache can answer.
    assert autotune.tuned_config(None, None, None, None, key=key(16), candidates=[]) == tuned


def test_the_cache_file_is_written_atomically_and_survives_a_reload(cache_dir, monkeypatch):
    entries = {key(8): {"config": autotune._jsonable(GemmConfig(split_k=2)), "ms": {"x": 1.0}, "rejected": {}}}
    autotune._save(entries)
    assert [p.name for p in cache_dir.iterdir()] == ["autotune.json"]  # no temp files left behind
    monkeypatch.setattr(autotune, "_memory", None)
    assert autotune._config_from(autotune._load()[key(8)]["config"]) == GemmConfig(split_k=2)
    autotune.clear_cache()
    assert not (cache_dir / "autotune.json").exists()


def test_an_unreadable_cache_counts_as_empty(cache_dir):
    (cache_dir / "autotune.json").write_text("{not json")
    assert autotune._load() == {}


def test_candidates_are_checked_then_timed_in_turns_and_the_fastest_is_kept(cache_dir, monkeypatch, fake_cuda_events):
    """The tuning loop on the CPU: stand-ins for the kernels (each call records its
    name and a duration) and for CUDA events (their elapsed time is the duration of
    the call between them)."""
    import torch

    from wsgemm import api

    speed = {"64x64": 3.0, "128x128": 1.0, "128x256": 2.0}  # ms per call
    calls = []

    def gemm_eager(a, b, out, out_dtype, config):
        name = f"{config.tile_m}x{config.tile_n}"
        calls.append(name)
        if name == "64x64":
            return torch.full((2, 2), 7.0)  # a wrong result: rejected, never timed
        return torch.ones(2, 2)

    def one_call(between):
        (name,) = between  # exactly one call between the two events
        return speed[name]

    monkeypatch.setattr(api, "gemm_eager", gemm_eager)
    fake_cuda_events(calls, one_call)
    monkeypatch.setattr(autotune, "L2Flush", NoFlush)
    monkeypatch.setattr(autotune, "WARMUP_SECONDS", 0.0)
    a = torch.ones(2, 2)
    candidates = [GemmConfig(tile_m=128, tile_n=256), GemmConfig(tile_m=64, tile_n=64),
                  GemmConfig(tile_m=128, tile_n=128)]
    best = autotune.tuned_config(a, a, None, None, key=key(2), candidates=candidates, progress=False, m=2)
    assert best == GemmConfig(tile_m=128, tile_n=128)
    timed = calls[3:]  # after each candidate's one checking call
    # In turns, the rejected one never; each round opens with an untimed call of its
    # first candidate (wsgemm.timing.time_in_turns with a rest between rounds).
    assert timed == ["128x256", "128x256", "128x128"] * autotune.TIMED_CALLS
    entry = json.loads((cache_dir / "autotune.json").read_text())[key(2)]
    assert set(entry["ms"]) == {c.short() for c in (candidates[0], candidates[2])}
    assert "differs from the first candidate" in entry["rejected"][candidates[1].short()]
    assert entry["timing"] == "events"  # 1-2 ms calls: single calls decide
    assert entry["m"] == 2 and autotune.tuned_at_m(key(2)) == 2  # the M it was timed at


def test_short_kernels_are_ranked_by_graph_replays_of_what_the_launch_policy_runs(cache_dir, monkeypatch):
    """Below GRAPH_BELOW_MS the single-call ranking is replaced by CUDA-graph replays
    (stubbed here: they reverse the order), candidates run as ``launch`` makes them,
    and the stored winner is the candidate itself."""
    import torch

    from wsgemm import api

    seen = []

    def gemm_eager(a, b, out, out_dtype, config):
        seen.append(config)
        return torch.ones(2, 2)

    single = {"128x256": 0.010, "128x128": 0.015}  # ms: both short
    monkeypatch.setattr(api, "gemm_eager", gemm_eager)
    monkeypatch.setattr(autotune, "_time_candidates", lambda fns, flush: {
        name: single[name.split("x64_")[0]] for name in fns})
    graphed = {}

    def time_graphs(calls, a, b, flush):
        graphed.update(calls)
        return {name: 0.030 - single[name.split("x64_")[0]] for name in calls}

    monkeypatch.setattr(autotune, "_time_graphs", time_graphs)
    monkeypatch.setattr(autotune, "L2Flush", NoFlush)
    candidates = [GemmConfig(tile_m=128, tile_n=256), GemmConfig(tile_m=128, tile_n=128)]
    launch = lambda c: GemmConfig(**{**c.__dict__, "dependent_launch": True})  # noqa: E731
    best = autotune.tuned_config(torch.ones(2, 2), torch.ones(2, 2), None, None, key=key(4),
                                 candidates=candidates, progress=False, launch=launch)
    assert best == GemmConfig(tile_m=128, tile_n=128)  # the graphs' winner, without the policy's change
    assert set(graphed) == {c.short() for c in candidates}
    assert seen and all(c.dependent_launch for c in seen)
    entry = json.loads((cache_dir / "autotune.json").read_text())[key(4)]
    assert entry["timing"] == "graph" and entry["config"]["dependent_launch"] is False


def test_candidates_the_launch_policy_makes_one_kernel_are_timed_once(cache_dir, monkeypatch):
    """Where the launch policy replaces every candidate by the same kernel (one
    128x128 tile per CTA on a one-wave problem), that kernel is compiled, checked and
    timed once; the others are recorded as running it."""
    import torch

    from wsgemm import api

    seen = []

    def gemm_eager(a, b, out, out_dtype, config):
        seen.append(config)
        return torch.ones(2, 2)

    timed = {}

    def time_candidates(fns, flush):
        timed.update(fns)
        return {name: 1.0 for name in fns}

    monkeypatch.setattr(api, "gemm_eager", gemm_eager)
    monkeypatch.setattr(autotune, "_time_candidates", time_candidates)
    monkeypatch.setattr(autotune, "L2Flush", NoFlush)
    solo = GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True)
    candidates = [GemmConfig(tile_m=128, tile_n=256, split_k=2), GemmConfig(tile_m=64, tile_n=128),
                  GemmConfig(tile_m=128, tile_n=192)]

    def launch(config):
        return solo if config.tile_m == 128 else config

    best = autotune.tuned_config(torch.ones(2, 2), torch.ones(2, 2), None, None, key=key(8),
                                 candidates=candidates, progress=False, launch=launch)
    assert best == candidates[0] and seen == [solo, candidates[1]]
    assert set(timed) == {candidates[0].short(), candidates[1].short()}
    entry = json.loads((cache_dir / "autotune.json").read_text())[key(8)]
    assert entry["same_kernel_as"] == {candidates[2].short(): candidates[0].short()}


def test_a_cached_winner_serves_its_bucket_unless_its_tiles_fill_the_waves_badly_there(cache_dir, monkeypatch):
    """As a packaged winner does (``heuristics.table_winner_or_model``): timed at
    M = 2048, 128x256 tiles in 2x1 clusters make 128 clusters for 66 slots; at
    M = 1536 they would make 96 (1.45 waves), where the model's pick ran 1.30x faster
    on an H200 (benchmarks/NOTES.md section 26)."""
    import torch

    from wsgemm import api

    winner = GemmConfig(tile_m=128, tile_n=256, cluster_m=2)
    (cache_dir / "autotune.json").write_text(json.dumps(
        {key(2048): {"config": autotune._jsonable(winner), "ms": {}, "rejected": {}, "m": 2048}}))

    def tiles_at(m):
        a = torch.empty(m, 4096, dtype=torch.bfloat16, device="meta")
        w = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
        _, spec, _ = api._kernel_for(a, w.t(), None, None, "autotune", (m, 4096), torch.bfloat16, False, 1,
                                     "NVIDIA H200", "sm90", 132)
        return spec.config.tile_m, spec.config.tile_n, spec.config.cluster_m

    assert autotune.tuned_at_m(key(2048)) == 2048
    assert tiles_at(2048) == (128, 256, 2)
    assert tiles_at(1900) == (128, 256, 2)  # 15 tile rows: the same 128 clusters as at M = 2048
    assert tiles_at(1536) != (128, 256, 2)


def test_entries_without_a_recorded_m_count_as_timed_at_the_bucket_bound(cache_dir):
    (cache_dir / "autotune.json").write_text(json.dumps(
        {key(300): {"config": autotune._jsonable(GemmConfig()), "ms": {}, "rejected": {}}}))
    assert autotune.tuned_at_m(key(300)) == 512
