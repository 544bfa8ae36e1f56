import errno
import json
import os
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


# --------------------------------------------------------------------------------------
# The disk cache's checks, with stand-ins for the DSL's compile, export and load
# --------------------------------------------------------------------------------------

STAND_IN_DSL = """
import types
import cutlass.cute as cute
from wsgemm import compile as compile_mod

def install(compiles):
    class Exported:
        def export_to_c(self, path, function_name):
            with open(path, "wb") as f:
                f.write(f"{function_name}|".encode() * 500)

    def fake_compile(spec, **kwargs):
        compiles.append(spec)
        return compile_mod.CompiledGemm(spec, fn=Exported(), compile_seconds=0.0)

    def fake_load(path, enable_tvm_ffi=True):
        with open(path, "rb") as f:
            name = f.read().split(b"|")[0].decode()
        return types.SimpleNamespace(**{name: ("loaded", path)})

    compile_mod.compile_spec = fake_compile
    cute.runtime.load_module = fake_load
"""


@pytest.fixture
def stand_in_dsl(tmp_path, monkeypatch):
    """The DSL's compile, export and load replaced by stand-ins (a kernel object is its
    function's name, repeated); the cache directory is ``tmp_path``. Returns the list of
    specs compiled."""
    import cutlass.cute as cute

    monkeypatch.setenv("WSGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache_files, "_unwritable", set())
    monkeypatch.setattr(cache_files, "_warned", set())
    monkeypatch.setattr(cute.runtime, "load_module", cute.runtime.load_module)
    namespace = {}
    exec(STAND_IN_DSL, namespace)
    compiles = []
    monkeypatch.setattr(compile_mod, "compile_spec", compile_mod.compile_spec)
    namespace["install"](compiles)
    return compiles


@pytest.mark.parametrize("damage", ["truncated", "zero-length", "record of another format",
                                    "built for another host"])
def test_a_damaged_kernel_object_is_set_aside_and_compiled_again(stand_in_dsl, tmp_path, damage):
    s = spec(tile_m=64, tile_n=64)
    first = compile_mod.CompileCache().get(s)
    path = compile_mod.disk_path(s)
    assert stand_in_dsl == [s] and first.fn.__class__.__name__ == "Exported" and cache_files.verified(path)
    assert compile_mod.CompileCache().get(s).extra == {"from_disk": True}  # a new process: loaded
    data = path.read_bytes()
    record = json.loads(cache_files.record_path(path).read_text())
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 3])
    elif damage == "zero-length":
        path.write_bytes(b"")
    elif damage == "record of another format":
        cache_files.record_path(path).write_text(json.dumps({**record, "format": 99}))
    else:
        cache_files.record_path(path).write_text(json.dumps({**record, "host": "linux-sparc64"}))
    with pytest.warns(cache_files.CacheWarning, match=f"the cache file {path} cannot be used") as caught:
        again = compile_mod.CompileCache().get(s)
    assert len(caught) == 1 and "set aside as" in str(caught[0].message)
    assert stand_in_dsl == [s, s] and "from_disk" not in again.extra  # compiled again...
    assert cache_files.read(path) == data  # ...and published again, whole
    assert len([p for p in tmp_path.glob(path.name + ".damaged-*") if not p.name.endswith(".record")]) == 1


def test_processes_compiling_one_kernel_at_once_compile_it_once(tmp_path):
    """Four processes on one empty cache ask for the same kernel: one compiles it, the
    others wait for its lock and load what it published."""
    import subprocess
    import sys

    code = STAND_IN_DSL + """
import sys, time
from wsgemm import GemmConfig, config as cfg
compiles = []
install(compiles)
slow = compile_mod.compile_spec
compile_mod.compile_spec = lambda s, **kw: (time.sleep(1.0), slow(s, **kw))[1]
s = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig(tile_m=64, tile_n=64))
entry = compile_mod.CompileCache().get(s)
print("compiled" if compiles else "loaded", entry.extra.get("from_disk", False))
"""
    env = dict(os.environ, WSGEMM_CACHE_DIR=str(tmp_path))
    workers = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
               for _ in range(4)]
    outputs = [w.communicate(timeout=300)[0].split() for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0, 0]
    assert sorted(map(tuple, outputs)) == [("compiled", "False")] + [("loaded", "True")] * 3


def test_a_read_only_cache_directory_compiles_in_memory_with_one_warning(stand_in_dsl, tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(compile_mod.tempfile, "TemporaryDirectory", read_only)
    monkeypatch.setattr(cache_files.tempfile, "mkstemp", read_only)
    cache = compile_mod.CompileCache()
    with pytest.warns(cache_files.CacheWarning) as caught:
        for tile_n in (64, 128, 192):
            cache.get(spec(tile_m=64, tile_n=tile_n))
            cache.get(spec(tile_m=64, tile_n=tile_n))
    assert len(stand_in_dsl) == 3 and len(cache) == 3
    assert [str(w.message).split(" (")[0] for w in caught] == [
        f"wsgemm: cannot write to the cache directory {tmp_path}"]
    assert "Read-only file system" in str(caught[0].message)
    assert [p for p in tmp_path.iterdir()] == []


def test_a_real_truncated_kernel_object_is_never_loaded(tmp_path):
    """A kernel compiled and exported for real, truncated to a third: a new process warns,
    sets it aside and compiles again, instead of handing the DSL a broken object."""
    import subprocess
    import sys

    code = """
import sys, warnings
from wsgemm import GemmConfig, compile as compile_mod, config as cfg
s = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig(tile_m=64, tile_n=64))
if sys.argv[1] == "build":
    assert compile_mod.CompileCache().get(s) and compile_mod.disk_path(s).exists()
else:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        entry = compile_mod.CompileCache().get(s)
    print("from_disk" in entry.extra, [str(w.message) for w in caught])
"""
    env = dict(os.environ, WSGEMM_CACHE_DIR=str(tmp_path))
    built = subprocess.run([sys.executable, "-c", code, "build"], env=env, capture_output=True, text=True,
                           timeout=600, check=False)
    assert built.returncode == 0, built.stderr[-2000:]
    (path,) = tmp_path.glob("k*.o")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    loaded = subprocess.run([sys.executable, "-c", code, "load"], env=env, capture_output=True, text=True,
                            timeout=600, check=False)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.startswith("False [") and f"the cache file {path} cannot be used (it is" in loaded.stdout
    assert cache_files.verified(path)  # compiled again and published whole
