"""The autotuner's bookkeeping, without a GPU (``wsgemm.tuning.autotune``): cache keys,
the on-disk cache, the candidates it times, and the tuning loop on CPU stand-ins."""

import dataclasses
import json
import warnings

import pytest
import torch

from wsgemm import GemmConfig, cache_files
from wsgemm.config import ConfigError, Lookahead
from wsgemm.tuning import H200, Problem, autotune, table
from wsgemm.tuning.autotune import Trial


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


def problem(m, n=4096, k=4096, **kw):
    return Problem(m, n, k, **kw)


def key(m, n=4096, k=4096):
    return autotune.cache_key(problem(m, n, k), H200)


def write_cache(cache_dir, entries):
    assert cache_files.write(cache_dir / "autotune.json", json.dumps(entries).encode())


def entry(config, m, **kw):
    return {"config": autotune._jsonable(config), "m": m, "ms": {}, "rejected": {}, **kw}


def never_called(config):
    raise AssertionError(f"a candidate was run: {config.short()}")


def test_m_is_bucketed_to_the_next_power_of_two_n_and_k_are_exact():
    assert key(33) == key(64) != key(65)
    assert key(1) != key(2) and key(3) == key(4)
    # 96 tokens fill a swapped kernel's 96-wide N tile; 97 need a wider one.
    assert key(65) == key(96) != key(97) == key(128) != key(129)
    assert [table.bucket_bound(m) for m in (1, 3, 64, 65, 96, 97, 128, 129, 512)] == [1, 4, 64, 96, 96, 128, 128,
                                                                                       256, 512]
    assert key(64, n=4096) != key(64, n=4097)
    assert key(64, k=4096) != key(64, k=4160)
    assert "m<=64|n=4096|k=4096" in key(50)


def test_a_key_names_the_gpus_numbers_dtypes_majors_and_batches():
    """Keyed by the GPU's table key (its numbers, never its name), so a winner is
    looked up on any GPU with the same numbers, and by everything of the bucket."""
    full = autotune.cache_key(Problem(300, 4096, 14336, 3, "bf16", "fp32", "k", "m", "n"), H200)
    assert full == "sm90/132sm/4.9TBps|bf16->fp32|kmn|m<=512|n=4096|k=14336|l=3"
    renamed = dataclasses.replace(H200, name="some other name")
    assert autotune.cache_key(problem(16), renamed) == key(16)
    slower = dataclasses.replace(H200, hbm_peak_bytes_per_s=1e12)
    assert autotune.cache_key(problem(16), slower) != key(16)


def test_a_cached_entry_is_returned_without_timing_anything(cache_dir):
    tuned = GemmConfig(tile_m=64, tile_n=128, split_k=4, lookahead=Lookahead.AFTER_COPY)
    write_cache(cache_dir, {key(16): entry(tuned, 16)})
    # Operands that cannot run: only the cache can answer.
    assert autotune.tuned(problem(16), H200, Trial(None, None, never_called), progress=False) == tuned
    assert autotune.remembered(problem(16), H200) == tuned
    assert autotune.remembered(problem(16, n=6144), H200) is None  # another bucket


def test_a_cached_swap_is_not_applied_where_the_operands_cannot_swap(cache_dir):
    swapped = GemmConfig(tile_m=64, tile_n=16, swap_ab=True)
    write_cache(cache_dir, {key(16): entry(swapped, 16)})
    assert autotune.remembered(problem(16, can_swap=True), H200) == swapped
    assert autotune.remembered(problem(16), H200) is None


def test_a_cached_swapped_winner_serves_only_the_tokens_its_n_tiles_were_timed_with(cache_dir):
    """Timed at M = 40 in one 48-wide token tile, a swapped winner serves M = 33-48 of
    the M <= 64 bucket; M = 64 would need a second token tile, so a call with
    ``config="autotune"`` times that M anew."""
    fitted = GemmConfig(tile_m=64, tile_n=48, swap_ab=True)
    write_cache(cache_dir, {key(40): entry(fitted, 40)})
    for m in (33, 36, 40, 48):
        assert autotune.remembered(problem(m, can_swap=True), H200) == fitted, m
    assert autotune.remembered(problem(64, can_swap=True), H200) is None
    plain = GemmConfig(tile_m=64, tile_n=64)  # unswapped: serves its whole decode bucket
    write_cache(cache_dir, {key(40): entry(plain, 40)})
    autotune._memory = None
    assert autotune.remembered(problem(64, can_swap=True), H200) == plain


def test_the_cache_file_is_written_atomically_and_survives_a_reload(cache_dir, monkeypatch):
    autotune._save({key(8): entry(GemmConfig(split_k=2), 8, ms={"x": 1.0})})
    # No temp files left behind; the record (size and hash) beside it, and the lock.
    assert sorted(p.name for p in cache_dir.iterdir()) == ["autotune.json", "autotune.json.lock",
                                                          "autotune.json.record"]
    monkeypatch.setattr(autotune, "_memory", None)
    assert GemmConfig(**autotune._load()[key(8)]["config"]) == GemmConfig(split_k=2)
    assert autotune.remembered(problem(8), H200) == GemmConfig(split_k=2)
    autotune.clear_cache()
    assert not (cache_dir / "autotune.json").exists() and not (cache_dir / "autotune.json.record").exists()
    assert autotune.remembered(problem(8), H200) is None


def test_a_whole_cache_file_without_a_record_keeps_its_winners(cache_dir):
    """Older versions wrote the file whole (renamed into place) and no record: it gets one."""
    (cache_dir / "autotune.json").write_text(json.dumps({key(16): entry(GemmConfig(tile_n=128), 16)}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache_files.CacheWarning)
        assert autotune.remembered(problem(16), H200) == GemmConfig(tile_n=128)
    assert cache_files.problem(cache_dir / "autotune.json") is None
    assert not list(cache_dir.glob("autotune.json.damaged-*"))


def test_a_cache_file_without_its_record_is_set_aside_and_counts_as_empty(cache_dir):
    (cache_dir / "autotune.json").write_text("{not json")
    with pytest.warns(cache_files.CacheWarning, match=f"the cache file {cache_dir / 'autotune.json'} cannot be "
                                                      "used \\(it has no record"):
        assert autotune._load() == {}
    assert autotune.remembered(problem(8), H200) is None
    assert [p.name.split("-")[0] for p in cache_dir.glob("autotune.json.damaged-*")] == ["autotune.json.damaged"]


def test_a_truncated_cache_file_is_set_aside_and_the_next_winner_is_stored_beside_it(cache_dir):
    write_cache(cache_dir, {key(16): entry(GemmConfig(tile_n=128), 16)})
    data = (cache_dir / "autotune.json").read_bytes()
    (cache_dir / "autotune.json").write_bytes(data[: len(data) // 3])
    with pytest.warns(cache_files.CacheWarning, match="its record says"):
        assert autotune.remembered(problem(16), H200) is None
    autotune._save({key(8): entry(GemmConfig(split_k=2), 8)})
    autotune._memory = None
    assert list(autotune._load()) == [key(8)]


def test_concurrent_processes_keep_each_others_winners(cache_dir):
    """Processes tuning different buckets at once: each stores its winner merged into
    what the file holds under its lock, so none is lost and the file stays whole."""
    import subprocess
    import sys

    code = ("import sys; from wsgemm.tuning import autotune; "
            "[autotune._save({f'{sys.argv[1]}|{i}': {'m': i}}) for i in range(20)]")
    workers = [subprocess.Popen([sys.executable, "-c", code, f"w{w}"]) for w in range(4)]
    assert [w.wait(timeout=300) for w in workers] == [0, 0, 0, 0]
    stored = json.loads(cache_files.read(cache_dir / "autotune.json"))
    assert sorted(stored) == sorted(f"w{w}|{i}" for w in range(4) for i in range(20))


def test_autotune_is_for_sm90_only(cache_dir):
    blackwell = dataclasses.replace(H200, arch="sm100", sms=148, name="NVIDIA B200")
    with pytest.raises(ConfigError, match="available on sm90, not sm100"):
        autotune.tuned(problem(16), blackwell, Trial(None, None, never_called), progress=False)


def test_the_candidates_are_the_models_best_spread_over_both_orientations():
    """Half swapped, half not, where the operands can swap (the model's choice between
    them is its least reliable); one orientation otherwise; no duplicates."""
    decode = problem(16, can_swap=True)
    picked = autotune.candidates_to_time(decode, H200)
    assert len(picked) == autotune.TOP_CANDIDATES == len(set(picked))
    assert sum(c.swap_ab for c in picked) == autotune.TOP_CANDIDATES // 2
    plain = autotune.candidates_to_time(problem(16), H200)
    assert len(plain) == autotune.TOP_CANDIDATES and not any(c.swap_ab for c in plain)
    # The best-rated plan of each orientation is among them.
    from wsgemm.tuning import ranked

    rated = [c for _, c in ranked(decode, H200)]
    assert rated[0] in picked
    assert next(c for c in rated if c.swap_ab != rated[0].swap_ab) in picked


def test_diverse_picks_each_tile_and_cluster_shape_first_with_its_unsplit_variant():
    a, a_split = GemmConfig(tile_m=64, tile_n=64), GemmConfig(tile_m=64, tile_n=64, split_k=2)
    a_split3 = GemmConfig(tile_m=64, tile_n=64, split_k=3)
    b = GemmConfig(tile_m=128, tile_n=64)
    ranked = [a_split, a_split3, b, a]
    assert autotune.diverse(ranked, 3) == [a_split, a, b]
    assert autotune.diverse(ranked, 4) == [a_split, a, b, a_split3]


def test_candidates_are_checked_then_timed_in_turns_and_the_fastest_is_kept(cache_dir, monkeypatch, fake_cuda_events):
    """The tuning loop on the CPU: stand-ins for the kernels (each call records its
    name and a duration) and for CUDA events (their elapsed time is the duration of
    the call between them)."""
    speed = {"64x64": 3.0, "128x128": 1.0, "128x256": 2.0}  # ms per call
    calls = []

    def call(config):
        name = f"{config.tile_m}x{config.tile_n}"

        def run(a, b):
            calls.append(name)
            if name == "64x64":
                return torch.full((2, 2), 7.0)  # a wrong result: rejected, never timed
            return torch.ones(2, 2)

        return run

    def one_call(between):
        (name,) = between  # exactly one call between the two events
        return speed[name]

    candidates = [GemmConfig(tile_m=128, tile_n=256), GemmConfig(tile_m=64, tile_n=64),
                  GemmConfig(tile_m=128, tile_n=128)]
    fake_cuda_events(calls, one_call)
    monkeypatch.setattr(autotune, "candidates_to_time", lambda p, gpu: candidates)
    monkeypatch.setattr(autotune, "as_launched", lambda p, config, gpu: config)
    monkeypatch.setattr(autotune, "L2Flush", NoFlush)
    monkeypatch.setattr(autotune, "WARMUP_SECONDS", 0.0)
    a = torch.ones(2, 2)
    best = autotune.tuned(problem(2), H200, Trial(a, a, call), progress=False)
    assert best == GemmConfig(tile_m=128, tile_n=128)
    timed = calls[3:]  # after each candidate's one checking call
    # In turns, the rejected one never; each round opens with an untimed call of its
    # first candidate (wsgemm.timing.time_in_turns with a rest between rounds).
    assert timed == ["128x256", "128x256", "128x128"] * autotune.TIMED_CALLS
    stored = json.loads((cache_dir / "autotune.json").read_text())[key(2)]
    assert set(stored["ms"]) == {c.short() for c in (candidates[0], candidates[2])}
    assert "differs from the first candidate" in stored["rejected"][candidates[1].short()]
    assert stored["timing"] == "events"  # 1-2 ms calls: single calls decide
    assert stored["m"] == 2  # the M it was timed at
    assert autotune.remembered(problem(2), H200) == best


def test_short_kernels_are_ranked_by_graph_replays_of_what_the_launch_rules_run(cache_dir, monkeypatch):
    """Below GRAPH_BELOW_MS the single-call ranking is replaced by CUDA-graph replays
    (stubbed here: they reverse the order), candidates run as the launch rules make
    them, and the stored winner is the candidate itself."""
    seen = []

    def call(config):
        seen.append(config)
        return lambda a, b: torch.ones(2, 2)

    def tile(name):
        return name.split("x64_")[0]

    single = {"128x256": 0.010, "128x128": 0.015}  # ms: both short
    graphed = {}

    def time_graphs(calls, a, b, flush, calls_per_graph, replays):
        assert (calls_per_graph, replays) == (autotune.GRAPH_CALLS, autotune.GRAPH_REPLAYS)
        graphed.update(calls)
        return {name: 0.030 - single[tile(name)] for name in calls}

    candidates = [GemmConfig(tile_m=128, tile_n=256), GemmConfig(tile_m=128, tile_n=128)]
    monkeypatch.setattr(autotune, "candidates_to_time", lambda p, gpu: candidates)
    monkeypatch.setattr(autotune, "as_launched",
                        lambda p, config, gpu: dataclasses.replace(config, dependent_launch=True))
    monkeypatch.setattr(autotune, "_time_candidates", lambda fns, flush: {name: single[tile(name)] for name in fns})
    monkeypatch.setattr(autotune, "time_graph_replays", time_graphs)
    monkeypatch.setattr(autotune, "L2Flush", NoFlush)
    a = torch.ones(2, 2)
    best = autotune.tuned(problem(4), H200, Trial(a, a, call), progress=False)
    assert best == GemmConfig(tile_m=128, tile_n=128)  # the graphs' winner, without the rules' change
    assert set(graphed) == {c.short() for c in candidates}
    assert seen and all(c.dependent_launch for c in seen)
    stored = json.loads((cache_dir / "autotune.json").read_text())[key(4)]
    assert stored["timing"] == "graph" and stored["config"]["dependent_launch"] is False


def test_candidates_the_launch_rules_make_one_kernel_are_timed_once(cache_dir, monkeypatch):
    """Where the launch rules replace several candidates by the same kernel (one
    128x128 tile per CTA on a one-wave problem), that kernel is compiled, checked and
    timed once; the others are recorded as running it."""
    seen = []

    def call(config):
        seen.append(config)
        return lambda a, b: torch.ones(2, 2)

    timed = {}

    def time_candidates(fns, flush):
        timed.update(fns)
        return {name: 1.0 for name in fns}

    solo = GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True)
    candidates = [GemmConfig(tile_m=128, tile_n=256, split_k=2), GemmConfig(tile_m=64, tile_n=128),
                  GemmConfig(tile_m=128, tile_n=192)]
    monkeypatch.setattr(autotune, "candidates_to_time", lambda p, gpu: candidates)
    monkeypatch.setattr(autotune, "as_launched", lambda p, config, gpu: solo if config.tile_m == 128 else config)
    monkeypatch.setattr(autotune, "_time_candidates", time_candidates)
    monkeypatch.setattr(autotune, "L2Flush", NoFlush)
    a = torch.ones(2, 2)
    best = autotune.tuned(problem(8), H200, Trial(a, a, call), progress=False)
    assert best == candidates[0] and seen == [solo, candidates[1]]
    assert set(timed) == {candidates[0].short(), candidates[1].short()}
    stored = json.loads((cache_dir / "autotune.json").read_text())[key(8)]
    assert stored["same_kernel_as"] == {candidates[2].short(): candidates[0].short()}


def test_a_candidate_the_budgets_reject_is_recorded_and_the_rest_still_run(cache_dir, monkeypatch):
    def call(config):
        if config.tile_n == 256:
            raise ConfigError("the fp32 epilogue does not fit")
        return lambda a, b: torch.ones(2, 2)

    candidates = [GemmConfig(tile_m=128, tile_n=256), GemmConfig(tile_m=128, tile_n=128)]
    monkeypatch.setattr(autotune, "candidates_to_time", lambda p, gpu: candidates)
    monkeypatch.setattr(autotune, "as_launched", lambda p, config, gpu: config)
    monkeypatch.setattr(autotune, "_time_candidates", lambda fns, flush: {name: 1.0 for name in fns})
    monkeypatch.setattr(autotune, "L2Flush", NoFlush)
    a = torch.ones(2, 2)
    assert autotune.tuned(problem(8), H200, Trial(a, a, call), progress=False) == candidates[1]
    stored = json.loads((cache_dir / "autotune.json").read_text())[key(8)]
    assert stored["rejected"] == {candidates[0].short(): "the fp32 epilogue does not fit"}
    monkeypatch.setattr(autotune, "candidates_to_time", lambda p, gpu: candidates[:1])
    with pytest.raises(ConfigError, match="no candidate ran"):
        autotune.tuned(problem(16), H200, Trial(a, a, call), progress=False)


def test_a_cached_winner_serves_its_bucket_unless_its_tiles_fill_the_waves_badly_there(cache_dir):
    """As a packaged winner does (``wsgemm.tuning.table.serves``): timed at M = 2048,
    128x256 tiles in 2x1 clusters make 128 clusters for 66 slots; at M = 1536 they
    would make 96 (1.45 waves): 92.5 us on an H200, against cuBLAS's 72.0
    (docs/tuning-log/packaged-table.md)."""
    from wsgemm import plans

    winner = GemmConfig(tile_m=128, tile_n=256, cluster_m=2)
    write_cache(cache_dir, {key(2048): entry(winner, 2048)})

    def tiles_at(m):  # what a call with config="autotune" plans (meta tensors: nothing runs)
        a = torch.empty(m, 4096, dtype=torch.bfloat16, device="meta")
        w = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
        _, spec, _ = plans._kernel_for(a, w.t(), None, None, "autotune", (m, 4096), torch.bfloat16, False, 1, H200)
        return spec.config.tile_m, spec.config.tile_n, spec.config.cluster_m

    assert tiles_at(2048) == (128, 256, 2)
    assert tiles_at(1900) == (128, 256, 2)  # 15 tile rows: the same 128 clusters as at M = 2048
    assert autotune.remembered(problem(1536, can_swap=True), H200) is None  # the next to choose decides
