"""Which kernel configuration a call runs: :func:`select`.

In order, the first that answers:

1. the caller's ``GemmConfig``, used as given;
2. ``config="autotune"``: the fastest of the cost model's best candidates, timed on the
   call's operands the first time its shape bucket is seen (:mod:`.autotune`);
3. a winner this machine's autotuner stored for the bucket;
4. the packaged table of winners measured on this kind of GPU (:mod:`.table`);
5. the cost model's best plan (:mod:`.cost`, over the candidates of :mod:`.candidates`).

Then, for all but the first, the launch rules (:mod:`.launch`): ping-pong consumers,
stream-K, raster bands, dependent launch, deeper k-blocks, epilogue buffers.

The package needs no DSL and no GPU: :class:`Gpu` holds the numbers a device reports
(``wsgemm.devices`` reads them), and ``H100_SXM`` and ``H200`` hold them for planning on
a CPU.
"""

from __future__ import annotations

from ..config import GemmConfig
from ..grid import ceil_div
from . import autotune, table
from .autotune import AUTOTUNE, Trial
from .gpu import H100_SXM, H200, Gpu
from .launch import as_launched
from .problem import Problem
from .rank import best, ranked


def select(problem: Problem, gpu: Gpu, config: GemmConfig | str | None = None, *,
           trial: Trial | None = None) -> GemmConfig:
    """The configuration ``problem`` runs on ``gpu``: see the module's docstring.
    ``trial`` (the call's operands) is needed for ``config="autotune"`` only. A plan with
    ``swap_ab`` set computes ``D^T = B^T A^T``: the caller swaps the operands' views."""
    if isinstance(config, GemmConfig):
        return config
    if config == AUTOTUNE:
        if trial is None:
            raise ValueError("config='autotune' times candidates on the call's operands: pass trial=")
        chosen = autotune.tuned(problem, gpu, trial)
    elif config is not None:
        raise TypeError(f"config must be a wsgemm.GemmConfig, 'autotune' or None, got {config!r}")
    elif gpu.arch != "sm90":
        chosen = sm100_default(problem, gpu)
    else:
        chosen = autotune.remembered(problem, gpu) or table.winner(problem, gpu) or best(problem, gpu)
    return as_launched(problem.kernel_problem(chosen.swap_ab), chosen, gpu)


def sm100_default(problem: Problem, gpu: Gpu) -> GemmConfig:
    """Blackwell, never measured here: CUTLASS's default shape, 128x256 tiles with two
    tensor-memory accumulators, a 2x1 cluster sharing B from two waves of tiles up."""
    tiles = ceil_div(problem.m, 128) * ceil_div(problem.n, 256) * problem.batches
    cluster_m = 2 if ceil_div(problem.m, 128) >= 2 and tiles >= 2 * gpu.sms else 1
    return GemmConfig(tile_m=128, tile_n=256 if tiles >= gpu.sms else 128, cluster_m=cluster_m, acc_stages=2)


__all__ = ["AUTOTUNE", "H100_SXM", "H200", "Gpu", "Problem", "Trial", "as_launched", "best", "ranked", "select",
           "sm100_default"]
