"""First use and a damaged cache on a Hopper GPU, with real kernels and the real C++ fast
path, each scenario in new processes (a crash fails the test, not the run):

* a fresh cache: the first call answers while the fast path still builds (in the
  background), then calls switch to it; a second process loads everything;
* every file of a cache truncated to a third: a new process warns naming the files,
  answers correctly, and leaves a whole cache for the next one;
* three processes at once on one empty cache: one builds the fast path and each kernel,
  the others wait and load;
* a cache directory that cannot be written: one warning, everything kept in memory.

Each process prints one JSON line of facts, which ``pytest -s`` shows (timings
included: the first call's seconds in a fresh cache is the number to report)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from wsgemm import cache_files

pytestmark = pytest.mark.gpu

# The shape, 3000x1000x2000 bf16 with an nn.Linear-style weight; then a second
# shape whose kernel differs (a decode-sized M).
CALLS = """
import json, sys, time, warnings
started = time.perf_counter()
import torch, wsgemm
from wsgemm import api, cache_files, compile as compile_mod, fast_path
imported = time.perf_counter() - started
warnings.simplefilter("always")
caught = []
def keep(message, category, *args, **kwargs):  # wsgemm's own, not other libraries'
    if str(message).startswith("wsgemm:"):
        caught.append(f"{category.__name__}: {message}")
warnings.showwarning = keep
torch.manual_seed(0)
facts = {"import_s": imported, "errors": []}
for m, n, k in ((3000, 1000, 2000), (8, 1000, 2000)):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    start = time.perf_counter()
    d = wsgemm.gemm(a, w.t())
    torch.cuda.synchronize()
    facts.setdefault("first_call_s", time.perf_counter() - start)
    facts.setdefault("fast_path_pending_after_first_call", not fast_path.decided())
    reference = a.float() @ w.float().t()
    facts["errors"].append(((d.float() - reference).norm() / reference.norm()).item())
if "wait" in sys.argv[1:]:
    module = fast_path.load()
    d = wsgemm.gemm(a, w.t())
    torch.cuda.synchronize()
    facts["fast_path_bound"] = module is not None and api._call_cached == module.call
    facts["fast_path_file"] = getattr(module, "__file__", None)
entries = list(compile_mod.KERNEL_CACHE._entries.values())
facts["kernels"] = len(entries)
facts["kernels_compiled"] = sum(not e.extra.get("from_disk") for e in entries)
facts["warnings"] = caught
print(json.dumps(facts))
"""


def run_calls(cache_dir, *args, env=None):
    return subprocess.Popen([sys.executable, "-c", CALLS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, WSGEMM_CACHE_DIR=str(cache_dir), **(env or {})))


def facts_of(process, timeout=900):
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"exit status {process.returncode}\n{err[-4000:]}"
    facts = json.loads(out.strip().splitlines()[-1])
    facts["stderr"] = err
    print(json.dumps({k: v for k, v in facts.items() if k != "stderr"}))
    assert max(facts["errors"]) < 1e-2, facts["errors"]
    return facts


@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    """A cache filled by one process on first use (kernels, the fast path, an autotune
    entry), with that process's facts."""
    cache = tmp_path_factory.mktemp("populated")
    first = facts_of(run_calls(cache, "wait"))
    # An autotune.json, which config=None consults too (a winner the autotuner stored).
    subprocess.run([sys.executable, "-c", "from wsgemm.tuning import autotune; "
                    "autotune._save({'not-this-gpu|bucket': {'config': {}, 'm': 1}})"],
                   env=dict(os.environ, WSGEMM_CACHE_DIR=str(cache)), check=True, timeout=300)
    return cache, first


def test_the_first_call_in_a_fresh_cache_does_not_wait_for_the_fast_path(populated):
    _, first = populated
    assert first["fast_path_pending_after_first_call"], "the first call waited for the fast path's build"
    assert first["first_call_s"] < 5.0  # one kernel compile and planning; the build goes on beside it
    assert first["fast_path_bound"] and "building the C++ host fast path" in first["stderr"]
    assert "built the C++ host fast path in" in first["stderr"]
    assert not [w for w in first["warnings"] if "CacheWarning" in w], first["warnings"]


def test_a_second_process_loads_everything_from_the_cache(populated):
    cache, first = populated
    second = facts_of(run_calls(cache))
    assert second["kernels_compiled"] == 0 and second["kernels"] == first["kernels"]
    assert not second["fast_path_pending_after_first_call"] and "building" not in second["stderr"]
    # Loading is faster than building, but CUDA's start-up dominates both (on an H100:
    # 3.1 s for the first process's first call, 2.3 s for the second's).
    assert second["first_call_s"] < first["first_call_s"]
    assert not second["warnings"], second["warnings"]


def test_a_cache_with_every_file_truncated_to_a_third_heals(populated, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(populated[0], cache, ignore=shutil.ignore_patterns("*.lock"))
    damaged = [p for p in cache.rglob("*") if p.is_file() and p.stat().st_size > 0]
    data_files = [p for p in damaged if not p.name.endswith(cache_files.RECORD_SUFFIX)]
    assert any(p.suffix == ".o" for p in data_files) and any(p.suffix == ".so" for p in data_files)
    assert any(p.name == "autotune.json" for p in data_files)
    for path in damaged:
        os.truncate(path, path.stat().st_size // 3)
    healed = facts_of(run_calls(cache, "wait"))
    warned = "\n".join(healed["warnings"])
    for path in data_files:
        assert f"CacheWarning: wsgemm: the cache file {path} cannot be used" in warned, (path, warned)
    assert healed["fast_path_bound"] and healed["kernels_compiled"] == healed["kernels"]
    for path in data_files:
        if path.name != "autotune.json":  # rewritten only when something is tuned
            assert cache_files.verified(path), path
    again = facts_of(run_calls(cache))
    assert not again["warnings"] and again["kernels_compiled"] == 0, again["warnings"]


def test_three_processes_on_one_empty_cache_build_everything_once(tmp_path):
    processes = [run_calls(tmp_path, "wait") for _ in range(3)]
    facts = [facts_of(p) for p in processes]
    stderr = "".join(f["stderr"] for f in facts)
    assert stderr.count("built the C++ host fast path in") == 1, stderr[-4000:]
    assert len({f["fast_path_file"] for f in facts}) == 1 and all(f["fast_path_bound"] for f in facts)
    assert sum(f["kernels_compiled"] for f in facts) == facts[0]["kernels"]  # each kernel compiled once
    assert not [w for f in facts for w in f["warnings"] if "CacheWarning" in w]


def test_a_cache_directory_that_cannot_be_written_keeps_everything_in_memory(tmp_path):
    """/proc admits no new directory, even to root: every write fails."""
    facts = facts_of(run_calls("/proc/wsgemm-cache", "wait", env={"TMPDIR": str(tmp_path)}))
    cache_warnings = [w for w in facts["warnings"] if "CacheWarning" in w]
    assert len(cache_warnings) == 1 and "cannot write to the cache directory /proc/wsgemm-cache" in cache_warnings[0]
    assert facts["fast_path_bound"] and facts["fast_path_file"].startswith(str(tmp_path))  # built privately
    assert not list(tmp_path.glob("wsgemm-*"))  # and its temporary directory removed once loaded
