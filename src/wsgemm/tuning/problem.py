"""The product a plan is chosen for, as the kernel sees it."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Problem:
    """``D (batches, m, n) = A (batches, m, k) @ B (batches, k, n)`` in the kernel's terms.

    Majors are the kernel's (``config.KernelSpec``): ``a_major`` "k" (row-major A) or
    "m", ``b_major`` "k" (B read as ``W.t()``) or "n", ``d_major`` "n" (row-major D) or
    "m". ``can_swap``: 2-D operands the kernel can also read transposed, so it may
    compute ``D^T = B^T A^T`` instead (``GemmConfig.swap_ab``).
    """

    m: int
    n: int
    k: int
    batches: int = 1
    ab_dtype: str = "bf16"
    out_dtype: str = "bf16"
    a_major: str = "k"
    b_major: str = "k"
    d_major: str = "n"
    can_swap: bool = False

    @property
    def k_major(self) -> bool:
        """Both operands are read along K (A row-major, B an ``nn.Linear`` weight)."""
        return self.a_major == "k" and self.b_major == "k"

    def swapped(self) -> "Problem":
        """The problem the kernel runs for ``D^T = B^T A^T``: B^T is its A, A^T its B.
        A K-major operand stays K-major when transposed into the other's place."""
        other = {"k": "k", "m": "n", "n": "m"}
        return replace(self, m=self.n, n=self.m, a_major=other[self.b_major], b_major=other[self.a_major],
                       d_major=other[self.d_major], can_swap=False)

    def kernel_problem(self, swap_ab: bool) -> "Problem":
        return self.swapped() if swap_ab else self
