"""``config="autotune"``: time the cost model's best candidates on the call's own
operands, keep the fastest, and remember it on disk.

The autotuner compiles ``TOP_CANDIDATES`` plans (:func:`candidates_to_time`: the cost
model's best, spread over tile and cluster shapes, swapped and unswapped alike where
both are possible), each as the launch rules will run it, checks each result against
the first one, and times them by the benchmark suites' protocol (:mod:`wsgemm.timing`:
single calls after an L2 flush; for short kernels CUDA-graph replays of back-to-back
calls). Budget: about ``TOP_CANDIDATES`` kernel compiles (~1 s each, or a disk-cache
load), then a few seconds of timing, once per shape bucket; a progress bar says so.

The winner is stored in ``$WSGEMM_CACHE_DIR/autotune.json`` under the GPU's table key
and the problem's shape bucket (:func:`.table.bucket`), with the M it was timed at, so
a later process, or a later call whose M falls in the same bucket, starts from it
(:func:`remembered`); where its tiles fit another M of the bucket badly, the cost
model serves that M instead (:func:`.table.serves`).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import torch

from .. import cache_files
from .. import compile as compile_mod
from ..config import ConfigError, GemmConfig
from ..timing import GRAPH_BELOW_MS, L2Flush, relative_error, time_graph_replays, time_in_turns
from . import rank
from .gpu import Gpu
from .launch import as_launched
from .problem import Problem
from .table import bucket, bucket_bound, serves

AUTOTUNE = "autotune"
TOP_CANDIDATES = 12
WARMUP_SECONDS = 0.2  # of rounds of calls before timing: out of the GPU's idle clocks
TIMED_CALLS = 15
# After each round of calls (warm-up and timed) the GPU idles twice as long as the
# round took: timed back to back, large candidates ran 8-18 % slower at throttled
# clocks than the suites time them (docs/tuning-log/timing.md).
REST_AFTER_ROUND = 2.0
# Where the fastest candidate's single call takes less than timing.GRAPH_BELOW_MS, the
# candidates are ranked again by CUDA-graph replays of GRAPH_CALLS back-to-back calls,
# the suites' protocol for such kernels: for 15-20 us kernels the two protocols
# disagreed on the winner, and only back-to-back calls see a dependent launch pay.
GRAPH_CALLS = 20
GRAPH_REPLAYS = 10


@dataclass(frozen=True)
class Trial:
    """What the autotuner times candidates with: the call's operands, and ``call(config)``,
    which returns a function ``(a, b) -> result`` that runs ``config`` as a call of it would."""

    a: torch.Tensor
    b: torch.Tensor
    call: Callable[[GemmConfig], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]


_lock = threading.Lock()
_memory: dict[str, dict] | None = None


def cache_path():
    return compile_mod.disk_cache_dir() / "autotune.json"


def cache_key(problem: Problem, gpu: Gpu) -> str:
    return f"{gpu.table_key}|{bucket(problem)}"


def candidates_to_time(problem: Problem, gpu: Gpu, count: int = TOP_CANDIDATES) -> list[GemmConfig]:
    """``count`` of the cost model's best plans: for problems that can swap A and B, half
    of each orientation (the model's choice between them is its least reliable); within
    one, :func:`diverse` spreads the picks over tile and cluster shapes."""
    ranked = rank.ranked(problem, gpu)
    plain = [c for _, c in ranked if not c.swap_ab]
    swapped = [c for _, c in ranked if c.swap_ab]
    if not swapped:
        return diverse(plain, count)
    half = min(count // 2, len(swapped))
    return diverse(plain, count - half) + diverse(swapped, half)


def diverse(configs: list[GemmConfig], count: int) -> list[GemmConfig]:
    """``count`` of ranked ``configs``: the best of each tile and cluster shape in turn,
    each with its unsplit variant, then the rest in rank order. The shape of the tile
    matters more than the split, and the model ranks memory-bound shapes least well."""
    picked, shapes = [], set()
    for c in configs:
        shape = (c.tile_m, c.tile_n, c.cluster_m, c.cluster_n)
        if shape in shapes:
            continue
        shapes.add(shape)
        unsplit = replace(c, split_k=1)
        picked += [c] + ([unsplit] if unsplit != c and unsplit in configs else [])
    picked += [c for c in configs if c not in picked]
    return picked[:count]


def remembered(problem: Problem, gpu: Gpu) -> GemmConfig | None:
    """The winner this machine's autotuner stored for ``problem``'s bucket, where it
    serves this M (:func:`.table.serves`)."""
    with _lock:
        entry = _load().get(cache_key(problem, gpu))
    if entry is None:
        return None
    config = GemmConfig(**entry["config"])
    if config.swap_ab and not problem.can_swap:
        return None
    measured_m = int(entry.get("m", bucket_bound(problem.m)))  # entries from before "m": the bucket bound
    return config if serves(config, measured_m, problem, gpu) else None


def tuned(problem: Problem, gpu: Gpu, trial: Trial, progress: bool = True) -> GemmConfig:
    """The fastest of :func:`candidates_to_time` on ``trial``'s operands (the stored
    winner where this bucket was timed before and it serves this M)."""
    if gpu.arch != "sm90":
        raise ConfigError(f"config='autotune' times kernels on the GPU; it is available on sm90, not {gpu.arch}")
    known = remembered(problem, gpu)
    if known is not None:
        return known
    key = cache_key(problem, gpu)
    candidates = candidates_to_time(problem, gpu)
    reference = None
    runnable: dict[str, tuple[GemmConfig, object]] = {}
    rejected: dict[str, str] = {}
    # Candidates that the launch rules turn into a kernel already in the list are timed once.
    first_with_launch: dict[GemmConfig, str] = {}
    same_kernel: dict[str, str] = {}
    for config in _progress(candidates, progress, key):  # compile and check all, then time them together
        name = config.short()
        try:
            launched = as_launched(problem.kernel_problem(config.swap_ab), config, gpu)
            if launched in first_with_launch:
                same_kernel[name] = first_with_launch[launched]
                continue
            first_with_launch[launched] = name
            call = trial.call(launched)
            result = call(trial.a, trial.b)
        except ConfigError as e:  # a candidate the budgets reject (e.g. fp32 epilogue smem)
            rejected[name] = str(e)
            continue
        if reference is None:
            reference = result.float()
        else:
            err = relative_error(result, reference)
            if not err < 2e-2:  # also catches NaN
                rejected[name] = f"result differs from the first candidate's by {err:.2e}"
                continue
        runnable[name] = (config, call)
    if not runnable:
        raise ConfigError(f"autotune: no candidate ran for {key}: {rejected}")
    flush = L2Flush(trial.a.device)
    calls = {name: call for name, (_, call) in runnable.items()}
    timings = _time_candidates({name: (lambda c: lambda: c(trial.a, trial.b))(call) for name, call in calls.items()},
                               flush)
    timing = "events"
    if min(timings.values()) < GRAPH_BELOW_MS:
        timings = time_graph_replays(calls, trial.a, trial.b, flush, GRAPH_CALLS, GRAPH_REPLAYS)
        timing = "graph"
    best = runnable[min(timings, key=timings.get)][0]
    with _lock:
        entries = dict(_load())
        entries[key] = {"config": _jsonable(best), "m": problem.m, "ms": timings, "timing": timing,
                        "rejected": rejected, "same_kernel_as": same_kernel}
        global _memory
        _memory = entries
        _save({key: entries[key]})
    return best


def _time_candidates(fns: dict, flush: L2Flush) -> dict[str, float]:
    """Median milliseconds per candidate of single calls, each after ``flush``.

    The candidates take turns call by call, after a warm-up that brings the GPU out of
    the idle clocks its compiles left it in: timing each one straight after its
    compile measured the GPU's state as much as the kernel. Taking turns exposes every
    candidate to the same drift; resting after each round keeps the clocks out of
    their sustained-load throttle (``REST_AFTER_ROUND``).
    """
    deadline = time.perf_counter() + WARMUP_SECONDS
    while time.perf_counter() < deadline:
        time_in_turns(fns, 1, flush.evict, rest=REST_AFTER_ROUND)
    times = time_in_turns(fns, TIMED_CALLS, flush, rest=REST_AFTER_ROUND)
    return {name: statistics.median(ms) for name, ms in times.items()}


def _load() -> dict:
    global _memory
    if _memory is None:
        _adopt_unrecorded(cache_path())
        data = cache_files.read(cache_path())  # None where absent or damaged (set aside with a warning)
        try:
            _memory = json.loads(data) if data is not None else {}
        except ValueError:  # vouched for, yet not JSON: written by something else
            _memory = {}
    return _memory


def _adopt_unrecorded(path) -> None:
    """Keep the winners of a file without a record that is whole JSON: older wsgemm
    versions wrote it whole (renamed into place) but wrote no record, so it is given
    one. A file that does not parse is left to ``cache_files.read`` to set aside."""
    if not path.exists() or cache_files.record_path(path).exists():
        return
    with cache_files.lock(path) as held:
        if not held or cache_files.record_path(path).exists():
            return
        try:
            data = path.read_bytes()
            if not isinstance(json.loads(data), dict):
                return
        except (OSError, ValueError):
            return
        cache_files.write(path, data)


def _save(new: dict) -> None:
    """Publish the ``new`` entries merged into what the file holds now: another process
    may have stored winners of other buckets since this one read it (the file's lock
    keeps the two writes apart). Where the directory cannot be written they stay in
    memory (one warning)."""
    path = cache_path()
    with cache_files.lock(path) as held:
        if not held:
            return
        on_disk = cache_files.read(path)
        try:
            merged = {**(json.loads(on_disk) if on_disk is not None else {}), **new}
        except ValueError:
            merged = dict(new)
        cache_files.write(path, json.dumps(merged, indent=1, sort_keys=True).encode())


def _jsonable(config: GemmConfig) -> dict:
    d = asdict(config)
    d["raster"], d["lookahead"] = config.raster.value, config.lookahead.value
    return d


def _progress(items, enabled: bool, key: str):
    if not enabled:
        return items
    try:
        from tqdm import tqdm

        return tqdm(items, desc=f"wsgemm autotune {key.split('|', 1)[-1]}", unit="config", leave=False)
    except ImportError:
        return items


def clear_cache() -> None:
    """Forget every tuned configuration (in memory and on disk)."""
    global _memory
    with _lock:
        _memory = {}
        cache_files.remove(cache_path())
