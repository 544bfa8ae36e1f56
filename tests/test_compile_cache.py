import threading

import pytest

from wsgemm import GemmConfig, cache_files
from wsgemm import compile as compile_mod
from wsgemm import config as cfg


def spec(**kw):
    return cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig(**kw))


@pytest.fixture
def counted_compiles(monkeypatch):
    calls = []

    def fake_compile(s, **kwargs):
        calls.append(s)
        return compile_mod.CompiledGemm(s, fn=object(), compile_seconds=0.0)

    monkeypatch.setattr(compile_mod, "compile_spec", fake_compile)
    return calls


def test_repeat_lookups_hit_without_recompiling(counted_compiles):
    cache = compile_mod.CompileCache(use_disk=False)
    first = cache.get(spec())
    second = cache.get(spec())
    assert first is second
    assert counted_compiles == [spec()]
    assert (cache.hits, cache.misses) == (1, 1)


def test_each_code_affecting_change_is_a_new_entry(counted_compiles):
    cache = compile_mod.CompileCache(use_disk=False)
    for s in (spec(), spec(tile_n=128), spec(cluster_m=2), spec(lookahead="none"), spec(stages=3)):
        cache.get(s)
    assert len(cache) == 5 and cache.misses == 5


def test_concurrent_requests_compile_once(monkeypatch):
    calls = []
    gate = threading.Event()

    def slow_compile(s, **kwargs):
        calls.append(s)
        gate.wait(timeout=5)
        return compile_mod.CompiledGemm(s, fn=object(), compile_seconds=0.0)

    monkeypatch.setattr(compile_mod, "compile_spec", slow_compile)
    cache = compile_mod.CompileCache(use_disk=False)
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get(spec()))) for _ in range(8)]
    for th in threads:
        th.start()
    gate.set()
    for th in threads:
        th.join()
    assert len(calls) == 1
    assert len(results) == 8 and all(r is results[0] for r in results)


def test_a_real_compile_is_cached(monkeypatch):
    import cutlass.cute as cute

    real = cute.compile
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(cute, "compile", counting)
    cache = compile_mod.CompileCache(use_disk=False)
    s = spec(tile_n=64, tile_m=64)
    cache.get(s)
    cache.get(s)
    assert len(calls) == 1


def test_disk_key_depends_on_spec_and_code():
    assert compile_mod.disk_key(spec()) == compile_mod.disk_key(spec())
    assert compile_mod.disk_key(spec()) != compile_mod.disk_key(spec(tile_n=128))


def test_a_compiled_kernel_round_trips_through_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WSGEMM_CACHE_DIR", str(tmp_path))
    s = spec(tile_m=64, tile_n=64)
    compiled = compile_mod.compile_spec(s)
    path = compile_mod.save_to_disk(s, compiled.fn)
    assert path is not None and path.exists() and path.parent == tmp_path
    loaded = compile_mod.load_from_disk(s)
    assert loaded is not None and callable(loaded)
    assert compile_mod.load_from_disk(spec(tile_m=64, tile_n=128)) is None  # another spec: a miss


def test_a_cache_file_without_its_record_is_set_aside_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("WSGEMM_CACHE_DIR", str(tmp_path))
    s = spec(tile_m=64, tile_n=64)
    path = compile_mod.disk_path(s)
    path.write_bytes(b"not an object file")
    with pytest.warns(cache_files.CacheWarning, match=f"the cache file {path} cannot be used \\(it has no record"):
        assert compile_mod.load_from_disk(s) is None
    assert not path.exists() and len(list(tmp_path.glob(path.name + ".damaged-*"))) == 1


def test_a_vouched_for_file_the_dsl_cannot_load_is_set_aside(tmp_path, monkeypatch):
    monkeypatch.setenv("WSGEMM_CACHE_DIR", str(tmp_path))
    s = spec(tile_m=64, tile_n=64)
    path = compile_mod.disk_path(s)
    assert cache_files.write(path, b"not an object file")  # whole, but not a kernel
    with pytest.warns(cache_files.CacheWarning, match="the DSL could not load it"):
        assert compile_mod.load_from_disk(s) is None
    assert not path.exists()
