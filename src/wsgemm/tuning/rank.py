"""Every candidate rated by the cost model, best first."""

from __future__ import annotations

import functools

from ..config import GemmConfig
from .candidates import candidates
from .cost import Rates, estimate_seconds
from .gpu import Gpu
from .problem import Problem

# Plans rated within this share of the fastest count as a tie: the model's error is
# larger than that, and the tie goes to the plan with less that can go wrong.
TIE = 0.02


def tie_break(config: GemmConfig) -> tuple:
    """Among near-equal plans: unsplit first (no workspace, no fix-up), unswapped (no
    transposed views), then the wider tile (fewer stores, and 128-row tiles before
    taller ones of a shallower ring) and the smaller cluster (its CTAs need not keep
    in step)."""
    return config.split_k, config.swap_ab, -config.tile_n, config.cluster_size


@functools.lru_cache(maxsize=1024)
def ranked(problem: Problem, gpu: Gpu) -> tuple[tuple[float, GemmConfig], ...]:
    """(modelled seconds, plan) of every candidate, best first (near-ties by
    :func:`tie_break`)."""
    rates = Rates.for_gpu(gpu)
    rated = sorted(((estimate_seconds(problem, c, gpu, rates), c) for c in candidates(problem, gpu)),
                   key=lambda item: item[0])
    if not rated:
        raise ValueError(f"no candidate plan for {problem}")
    best = rated[0][0]
    close = sorted((item for item in rated if item[0] <= best * (1 + TIE)), key=lambda item: tie_break(item[1]))
    return tuple(close + [item for item in rated if item[0] > best * (1 + TIE)])


def best(problem: Problem, gpu: Gpu) -> GemmConfig:
    return ranked(problem, gpu)[0][1]
