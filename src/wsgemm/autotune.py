"""``config="autotune"``: time the throughput model's best candidates on the real
inputs, keep the fastest, and remember it on disk.

The model in :mod:`wsgemm.heuristics` ranks configurations; the autotuner compiles
its best ``TOP_CANDIDATES``, checks each result against the model's first choice,
times single calls after an L2 flush with CUDA events, and stores the winner in a
JSON file keyed by

    (GPU name, arch, dtypes, operand majors, M rounded up to a power of two, N, K, batches)

so a later process (or a later call with a nearby M: decode batch sizes vary while a
model's N and K do not) starts from the answer. The file lives next to the compiled
kernels: ``$WSGEMM_CACHE_DIR/autotune.json`` (see :func:`wsgemm.compile.disk_cache_dir`).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
from dataclasses import asdict

import torch

from . import compile as compile_mod
from .config import ConfigError, GemmConfig

AUTOTUNE = "autotune"
TOP_CANDIDATES = 8
WARMUP_CALLS = 2
TIMED_CALLS = 15

_lock = threading.Lock()
_memory: dict[str, dict] | None = None


def cache_path():
    return compile_mod.disk_cache_dir() / "autotune.json"


def bucket_key(gpu: str, arch: str, ab_dtype: str, out_dtype: str, majors: tuple, m: int, n: int, k: int,
               batches: int) -> str:
    m_bucket = 1 << max(0, (m - 1).bit_length())
    return f"{gpu}|{arch}|{ab_dtype}->{out_dtype}|{''.join(majors)}|m<={m_bucket}|n={n}|k={k}|l={batches}"


def _load() -> dict:
    global _memory
    if _memory is None:
        try:
            _memory = json.loads(cache_path().read_text())
        except (OSError, ValueError):
            _memory = {}
    return _memory


def _save(entries: dict) -> None:
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".autotune-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f, indent=1, sort_keys=True)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old or the new file
    except OSError as e:  # a read-only cache directory costs re-tuning, not the call
        import warnings

        warnings.warn(f"wsgemm: could not write the autotune cache {path}: {e}", RuntimeWarning, stacklevel=3)


def _config_from(entry: dict) -> GemmConfig:
    return GemmConfig(**entry)


def _time_candidate(fn, flush: torch.Tensor) -> float:
    """Median milliseconds of single calls, each after an L2 flush, as a model runs
    them (weights come from HBM, not from the previous call's L2 lines).

    The flush *reads* a buffer twice the L2's size: a memset would leave the L2 full
    of dirty lines whose write-back competes with the timed kernel. It also keeps
    the GPU busy while the host queues the call, so launch overhead does not leak
    into the timing of small problems.
    """
    for _ in range(WARMUP_CALLS):
        fn()
    events = []
    for _ in range(TIMED_CALLS):
        flush.sum()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def _l2_flush_buffer(device) -> torch.Tensor:
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    return torch.zeros(2 * l2_bytes // 4, dtype=torch.float32, device=device)


def tuned_config(a, b, out, out_dtype, *, key: str, candidates: list[GemmConfig], progress: bool = True) -> GemmConfig:
    """The fastest of ``candidates`` for this call (from the cache when ``key`` is known)."""
    from .api import gemm_eager

    with _lock:
        entry = _load().get(key)
    if entry is not None:
        return _config_from(entry["config"])

    scratch = torch.empty_like(out) if out is not None else None
    reference = None
    timings: dict[str, float] = {}
    rejected: dict[str, str] = {}
    best = None
    flush = _l2_flush_buffer(a.device)
    bar = _progress(candidates, progress, key)
    for config in bar:
        name = config.short()
        try:
            fn = (lambda c: lambda: gemm_eager(a, b, scratch, out_dtype, c))(config)
            result = fn()
        except ConfigError as e:  # a candidate the budgets reject (e.g. fp32 epilogue smem)
            rejected[name] = str(e)
            continue
        if reference is None:
            reference = result.float()
        else:
            err = ((result.float() - reference).norm() / reference.norm().clamp_min(1e-30)).item()
            if not err < 2e-2:  # also catches NaN
                rejected[name] = f"result differs from the first candidate's by {err:.2e}"
                continue
        timings[name] = _time_candidate(fn, flush)
        if best is None or timings[name] < timings[best.short()]:
            best = config
    if best is None:
        raise ConfigError(f"autotune: no candidate ran for {key}: {rejected}")
    with _lock:
        entries = dict(_load())
        entries[key] = {"config": _jsonable(best), "ms": timings, "rejected": rejected}
        global _memory
        _memory = entries
        _save(entries)
    return best


def _jsonable(config: GemmConfig) -> dict:
    d = asdict(config)
    d["raster"], d["lookahead"] = config.raster.value, config.lookahead.value
    return d


def _progress(items, enabled: bool, key: str):
    if not enabled:
        return items
    try:
        from tqdm import tqdm

        return tqdm(items, desc=f"wsgemm autotune {key.split('|', 4)[-1]}", unit="config", leave=False)
    except ImportError:
        return items


def clear_cache() -> None:
    """Forget every tuned configuration (in memory and on disk)."""
    global _memory
    with _lock:
        _memory = {}
        try:
            cache_path().unlink()
        except FileNotFoundError:
            pass
