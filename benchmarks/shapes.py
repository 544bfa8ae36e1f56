"""Named suites of GEMM problems for ``benchmarks.suite`` (and the tools that time its problems).

A problem is ``D = A @ B`` with A (M, K) row-major (batched: (L, M, K)) and B in one
of two layouts:

- ``b_row``: B (K, N) row-major, as a plain ``torch.randn(K, N)``;
- ``b_weight_t``: B = W.t() with W (N, K) row-major, how ``nn.Linear`` stores its
  weight; B is then K-major and read in place, never copied.

Model dimensions (Llama 3, "The Llama 3 Herd of Models", arXiv:2407.21783, Table 3,
and the ``config.json`` of meta-llama/Meta-Llama-3-8B and -70B):

- Llama-3 8B:  hidden 4096, intermediate (FFN) 14336, 32 heads, 8 KV heads, head dim 128;
- Llama-3 70B: hidden 8192, intermediate (FFN) 28672, 64 heads, 8 KV heads, head dim 128.

Each decoder layer runs four projection GEMMs: QKV (q, k, v fused: N = (heads +
2 * kv_heads) * head_dim), O (N = K = hidden), gate/up **fused** into one GEMM
(N = 2 * intermediate, as inference engines concatenate the two weights) and down
(K = intermediate). M is the number of tokens in the batch.
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

LAYOUTS = {
    "b_row": "A (M, K) row-major, B (K, N) row-major",
    "b_weight_t": "A (M, K) row-major, B = W.t() with W (N, K) row-major (nn.Linear weight)",
}


@dataclass(frozen=True)
class Problem:
    """One GEMM of a suite: D (batch, M, N) = A (batch, M, K) @ B (batch, K, N)."""

    label: str  # unique across all suites: "<suite>/<readable name>"
    m: int
    n: int
    k: int
    batch: int = 1  # 1: plain 2-D operands; L > 1: 3-D operands, one B per batch entry
    layout: str = "b_row"  # a key of LAYOUTS

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    @property
    def shape_text(self) -> str:
        mnk = f"{self.m}x{self.n}x{self.k}"
        return mnk if self.batch == 1 else f"{self.batch}x{mnk}"


@dataclass(frozen=True)
class Model:
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int

    def projections(self) -> dict[str, tuple[int, int]]:
        """Weight shapes (N, K) of one decoder layer's projection GEMMs."""
        return {
            "qkv": ((self.heads + 2 * self.kv_heads) * self.head_dim, self.hidden),
            "o": (self.hidden, self.heads * self.head_dim),
            "gate_up": (2 * self.intermediate, self.hidden),
            "down": (self.hidden, self.intermediate),
        }


LLAMA3_8B = Model("llama3-8b", hidden=4096, intermediate=14336, heads=32, kv_heads=8, head_dim=128)
LLAMA3_70B = Model("llama3-70b", hidden=8192, intermediate=28672, heads=64, kv_heads=8, head_dim=128)
# Off the tuned table: the packaged winners were measured on Llama-3's weights only, so
# on these the throughput model picks every plan (the ``config.json`` of Qwen/Qwen2.5-7B
# and -14B).
QWEN25_7B = Model("qwen2.5-7b", hidden=3584, intermediate=18944, heads=28, kv_heads=4, head_dim=128)
QWEN25_14B = Model("qwen2.5-14b", hidden=5120, intermediate=13824, heads=40, kv_heads=8, head_dim=128)

LLM_TOKENS = (1, 16, 64, 128, 512, 2048, 4096, 8192, 16384)
# The llm suite keeps every token count for 8B (36 problems) and every other one for
# 70B (20): 70B's GEMMs are 8B's with each dimension doubled, so the sampled M still
# covers decode, the tile-quantized middle and large prefill, and the suite stays
# at 56 problems.
LLM_TOKENS_70B = LLM_TOKENS[::2]
DECODE_TOKENS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)
DECODE_TOKENS_70B = (1, 8, 32, 128)
# Chunked or small-batch prefill: token counts between the llm suite's 128 and 2048,
# off its grid, where a plan fills one or two waves of the SMs and the tile shapes
# fitted to M (not the tuned table's buckets) decide the speed.
PREFILL_TOKENS = (136, 192, 256, 320, 384, 448, 768, 1024)
PREFILL_TOKENS_70B = (192, 320, 768)
OFF_TABLE_TOKENS = (1, 16, 32, 48, 64, 128, 512, 2048)


def _projection_problems(suite: str, model: Model, tokens: tuple[int, ...]) -> list[Problem]:
    return [
        Problem(f"{suite}/{model.name} {proj} M={m}", m, n, k, layout="b_weight_t")
        for proj, (n, k) in model.projections().items()
        for m in tokens
    ]


def _square() -> list[Problem]:
    return [Problem(f"square/{s}^3", s, s, s) for s in (1024, 2048, 4096, 8192, 16384)]


def _llm() -> list[Problem]:
    return _projection_problems("llm", LLAMA3_8B, LLM_TOKENS) + _projection_problems(
        "llm", LLAMA3_70B, LLM_TOKENS_70B
    )


def _decode() -> list[Problem]:
    return _projection_problems("decode", LLAMA3_8B, DECODE_TOKENS) + _projection_problems(
        "decode", LLAMA3_70B, DECODE_TOKENS_70B
    )


def _prefill() -> list[Problem]:
    return _projection_problems("prefill", LLAMA3_8B, PREFILL_TOKENS) + _projection_problems(
        "prefill", LLAMA3_70B, PREFILL_TOKENS_70B
    )


def _off_table() -> list[Problem]:
    return _projection_problems("qwen", QWEN25_7B, OFF_TABLE_TOKENS) + _projection_problems(
        "qwen", QWEN25_14B, OFF_TABLE_TOKENS
    )


def _shortk() -> list[Problem]:
    # K of one or a few k-blocks: the prologue/epilogue and the tile scheduler,
    # not the main loop, decide the speed.
    return [Problem(f"shortk/8192x8192 K={k}", 8192, 8192, k) for k in (128, 256, 384, 512, 768, 1024)] + [
        Problem(f"shortk/16384x16384 K={k}", 16384, 16384, k) for k in (128, 512)
    ]


def _batched() -> list[Problem]:
    lmnk = [
        (8, 2048, 2048, 2048),
        (32, 1024, 1024, 1024),
        (64, 512, 512, 512),
        (64, 1024, 1024, 128),  # attention scores Q @ K^T: L = batch * heads, K = head dim
        (64, 1024, 128, 1024),  # attention output P @ V
    ]
    return [Problem(f"batched/L={l} {m}x{n}x{k}", m, n, k, batch=l) for l, m, n, k in lmnk]


# Seeds of the random suites: shapes nobody tuned for. A planner change is tuned on
# ``TUNING_SEED``'s shapes only and reported on the others' (held out).
TUNING_SEED = 7
REPORT_SEEDS = (1001, 1002)


def _log_uniform(rng: random.Random, low: int, high: int, multiple: int = 1) -> int:
    """An integer in [low, high], uniform in log scale, rounded to ``multiple``."""
    x = math.exp(rng.uniform(math.log(low), math.log(high)))
    return min(high, max(low, multiple * round(x / multiple)))


def random_problems(seed: int) -> list[Problem]:
    """40 shapes drawn from ``seed``: 28 of M 1-8192 with N and K multiples of 8 in
    256-16384 (B = W.t()), 8 decode shapes of M 1-64 on such weights, and 4 batched ones
    (L 2-64, each dimension a multiple of 8 in 64-2048, B row-major)."""
    rng = random.Random(seed)
    suite = f"random{seed}"
    weights = [(_log_uniform(rng, 256, 16384, 8), _log_uniform(rng, 256, 16384, 8)) for _ in range(36)]
    tokens = [_log_uniform(rng, 1, 8192) for _ in range(28)] + [_log_uniform(rng, 1, 64) for _ in range(8)]
    problems = [Problem(f"{suite}/{m}x{n}x{k}", m, n, k, layout="b_weight_t") for m, (n, k) in zip(tokens, weights)]
    for _ in range(4):
        l, m, n, k = _log_uniform(rng, 2, 64), *(_log_uniform(rng, 64, 2048, 8) for _ in range(3))
        problems.append(Problem(f"{suite}/L={l} {m}x{n}x{k}", m, n, k, batch=l))
    return problems


def _quick() -> list[Problem]:
    return [
        Problem("quick/4096^3", 4096, 4096, 4096),
        Problem("quick/llama3-8b qkv M=2048", 2048, 6144, 4096, layout="b_weight_t"),
        Problem("quick/llama3-8b down M=16", 16, 4096, 14336, layout="b_weight_t"),
        Problem("quick/8192x8192 K=256", 8192, 8192, 256),
        Problem("quick/L=8 1024x1024x1024", 1024, 1024, 1024, batch=8),
    ]


SUITES: dict[str, list[Problem]] = {
    "square": _square(),
    "llm": _llm(),
    "decode": _decode(),
    "prefill": _prefill(),
    "qwen": _off_table(),
    "shortk": _shortk(),
    "batched": _batched(),
    "quick": _quick(),
    **{f"random{seed}": random_problems(seed) for seed in (TUNING_SEED, *REPORT_SEEDS)},
}


def select(suites: list[str], label_filter: str | None = None) -> list[Problem]:
    """Problems of the named suites, in order, keeping labels in which the regular
    expression ``label_filter`` matches (case-insensitive; a plain word matches labels
    that contain it)."""
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise KeyError(f"unknown suite(s) {unknown}; choose from {sorted(SUITES)}")
    problems = [p for s in suites for p in SUITES[s]]
    if label_filter:
        pattern = re.compile(label_filter, re.IGNORECASE)
        problems = [p for p in problems if pattern.search(p.label)]
    return problems


def from_json(path) -> list[Problem]:
    """Problems listed in a JSON file, each an object with ``label``, ``m``, ``n``, ``k`` and
    optionally ``batch`` and ``layout`` (other keys are ignored): what
    ``benchmarks.maint.plan_diff --json`` writes, the problems whose plan a change moved."""
    return [Problem(e["label"], e["m"], e["n"], e["k"], batch=e.get("batch", 1), layout=e.get("layout", "b_row"))
            for e in json.loads(Path(path).read_text())]


def given(mnk: list[tuple[int, int, int]], weight: bool = False) -> list[Problem]:
    """Problems of the caller's own shapes (``suite.py --shapes``), labelled
    ``shapes/MxNxK``; B is ``W.t()`` of an (N, K) weight with ``weight``, else row-major."""
    layout = "b_weight_t" if weight else "b_row"
    return [Problem(f"shapes/{m}x{n}x{k}", m, n, k, layout=layout) for m, n, k in mnk]
