"""The packaged table: measured winners per shape, for the GPUs they were measured on
(``tables/*.json``, data with its provenance).

A shape bucket is the kernel's dtypes, majors, N, K, batches and M rounded up to a
bucket bound (:func:`bucket_bound`): decode batch sizes vary while a model's N and K do
not. A table's ``entries`` are winners timed at their bucket's bound; its ``points``
are winners timed at one exact M (keyed ``m=136`` instead of ``m<=256``). A call takes
the winner timed at the smallest M of its bucket at or above its own, where that
winner still fits its M (:func:`serves`); else the cost model chooses.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from ..config import GemmConfig
from ..grid import ceil_div
from . import rank
from .cost import estimate_seconds
from .gpu import Gpu
from .problem import Problem

TABLES = Path(__file__).parent / "tables"
# Bucket bounds are powers of two, and 96: 96 tokens fill a swapped 96-wide tile that
# a bucket up to 128 would time with a 128-wide one.
SWAP_BUCKET_BOUND = 96
# A winner timed at M = m' serves another M of its bucket unless the cost model puts it
# more than this much further behind its own best there than at m': its tiles may fill
# the waves badly at the other M.
WAVE_LOSS_MAX = 1.05


def bucket_bound(m: int) -> int:
    """The largest M of ``m``'s bucket: the next power of two, or 96 for M = 65-96."""
    if 64 < m <= SWAP_BUCKET_BOUND:
        return SWAP_BUCKET_BOUND
    return 1 << max(0, (m - 1).bit_length())


def bucket(problem: Problem) -> str:
    """``problem``'s bucket, e.g. ``bf16->bf16|kkn|m<=128|n=4096|k=4096|l=1``."""
    p = problem
    return (f"{p.ab_dtype}->{p.out_dtype}|{p.a_major}{p.b_major}{p.d_major}|m<={bucket_bound(p.m)}"
            f"|n={p.n}|k={p.k}|l={p.batches}")


def point(problem: Problem) -> str:
    """``problem``'s own key, its exact M in place of the bucket's bound."""
    return bucket(problem).replace(f"|m<={bucket_bound(problem.m)}|", f"|m={problem.m}|")


@functools.lru_cache(maxsize=None)
def _winners(gpu_key: str) -> dict[str, list[tuple[int, dict]]]:
    """{bucket: [(measured M, config fields), ...] in increasing M} of ``gpu_key``'s tables."""
    found: dict[str, list[tuple[int, dict]]] = {}
    for path in sorted(TABLES.glob("*.json")):
        for table in json.loads(path.read_text())["tables"]:
            if table["gpu"] != gpu_key:
                continue
            for key, fields in table.get("entries", {}).items():
                bound = int(key.split("|")[2].removeprefix("m<="))
                found.setdefault(key, []).append((bound, fields))
            for key, fields in table.get("points", {}).items():
                parts = key.split("|")
                m = int(parts[2].removeprefix("m="))
                parts[2] = f"m<={bucket_bound(m)}"
                found.setdefault("|".join(parts), []).append((m, fields))
    return {key: sorted(found[key], key=lambda item: item[0]) for key in found}


def winner(problem: Problem, gpu: Gpu) -> GemmConfig | None:
    """The packaged winner timed at the smallest M of ``problem``'s bucket at or above
    its own, where it serves this M."""
    timed = _winners(gpu.table_key).get(bucket(problem))
    if not timed:
        return None
    measured_m, fields = next(((m, f) for m, f in timed if m >= problem.m), timed[-1])
    config = GemmConfig(**fields)
    if config.swap_ab and not problem.can_swap:
        return None
    return config if serves(config, measured_m, problem, gpu) else None


def serves(config: GemmConfig, measured_m: int, problem: Problem, gpu: Gpu) -> bool:
    """Whether a winner timed at M = ``measured_m`` serves ``problem``'s M too: a swapped
    winner only up to the tokens its N tiles were timed with, and any winner only where
    the cost model does not put it more than ``WAVE_LOSS_MAX`` further behind its best
    than at ``measured_m``. Below 128 tokens, where the problems are memory-bound and the
    model ranks least well, a plain winner serves as it is."""
    if config.swap_ab:
        return ceil_div(problem.m, config.tile_n) <= ceil_div(measured_m, config.tile_n)
    if problem.m == measured_m or problem.m <= 128:
        return True

    def loss(m: int) -> float:
        at_m = Problem(m, problem.n, problem.k, problem.batches, problem.ab_dtype, problem.out_dtype,
                       problem.a_major, problem.b_major, problem.d_major, problem.can_swap)
        best_seconds = rank.ranked(at_m, gpu)[0][0]
        return estimate_seconds(at_m, config, gpu) / best_seconds

    return loss(problem.m) <= WAVE_LOSS_MAX * loss(measured_m)
