"""03 -- Calling wsgemm.gemm from PyTorch, checked against torch.matmul.

Teaches: the API in five calls -- a plain product, an nn.Linear-style weight read
in place through ``w.t()``, a float32 result, a batched product and ``out=`` -- and
how to check a result against a float32 reference (relative Frobenius error).

Needs: an SM90 GPU (H100 or H200). Without one it says so and exits with status 0.
Run:   python examples/03_gemm_from_pytorch.py
"""

import sys

import torch


def has_sm90_gpu() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def relative_error(result: torch.Tensor, reference: torch.Tensor) -> float:
    return ((result.float() - reference).norm() / reference.norm()).item()


def main() -> int:
    if not has_sm90_gpu():
        print("No SM90 GPU here (needs an H100 or H200): nothing to run.")
        return 0
    import wsgemm

    torch.manual_seed(0)
    # The kernel accumulates in fp32: a bf16 result is off by its rounding, ~4e-3.
    tolerance = {torch.bfloat16: 1e-2, torch.float32: 1e-4}
    torch.backends.cuda.matmul.allow_tf32 = False  # keep the float32 reference exact

    a = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(3072, 4096, device="cuda", dtype=torch.bfloat16)  # nn.Linear weight (out, in)
    batch_a = torch.randn(4, 256, 512, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(1024, 2048, device="cuda", dtype=torch.bfloat16)

    cases = [  # (what, operands, keyword arguments)
        ("a @ b", (a, b), {}),
        ("a @ w.t() (w read in place)", (a, w.t()), {}),
        ("a @ b, float32 result", (a, b), {"out_dtype": torch.float32}),
        ("batched (4, 256, 512) @ b[:512]", (batch_a, b[:512]), {}),
        ("a @ b into out=", (a, b), {"out": out}),
    ]
    ok = True
    print(f"{torch.cuda.get_device_name()}: wsgemm.gemm vs a float32 reference (torch.matmul alongside)")
    for name, (x, y), kwargs in cases:
        result = wsgemm.gemm(x, y, **kwargs)
        reference = x.float() @ y.float()
        error = relative_error(result, reference)
        matmul_error = relative_error(torch.matmul(x, y), reference)
        passed = error < tolerance[result.dtype]
        ok &= passed
        print(f"  {name:34} {str(tuple(result.shape)):16} {str(result.dtype):15} error {error:.2e} "
              f"(torch.matmul, bf16: {matmul_error:.2e}) {'ok' if passed else 'TOO LARGE'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
