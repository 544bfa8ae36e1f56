"""The C++ host fast path (``csrc/fast_path.cpp``), built on first use.

Three steps of a cached ``wsgemm.gemm`` call cost microseconds of Python and a
fraction of one in C++ (numbers in docs/tuning-log/host-overhead.md):

* finding the plan of a call without ``out=``, ``out_dtype=`` or ``config=``, keyed
  by both operands' shapes, strides, dtypes, devices and base alignment, as
  :func:`wsgemm.api._signature` keys the Python cache (``remember``, ``find``;
  ``call_transposed`` makes ``wsgemm.nn.Linear``'s ``weight.t()`` view first);
* launching it: a direct or swapped plan's result is allocated and its TVM-FFI
  kernel called from C++ (a split's workspace asked of ``wsgemm.workspace`` in one
  Python call), any other plan's ``run`` called (``call(a, b)``, which
  ``wsgemm.gemm`` asks first);
* recording the product for autograd as one C++ node instead of a
  ``torch.autograd.Function`` (in ``call``, and ``record_product`` for calls the
  cache does not serve);
* the kernels of the ``torch.ops.wsgemm.gemm`` operator, which compiled graphs call:
  the same lookup and launch, and the same node (``register_operator``, from
  :mod:`wsgemm.ops`).

The extension is compiled with ``torch.utils.cpp_extension`` (a C++ compiler and
ninja; ~15-30 s, once per PyTorch and Python version) into
``$WSGEMM_CACHE_DIR/fast_path/``. Without a compiler wsgemm warns once and runs the
same steps in Python; ``WSGEMM_FAST_PATH=0`` skips the extension altogether.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
import warnings
from pathlib import Path

_SOURCE = Path(__file__).parent / "csrc" / "fast_path.cpp"
_lock = threading.Lock()
_state: dict = {}  # "module": the loaded extension or None once decided


def enabled_by_environment() -> bool:
    return os.environ.get("WSGEMM_FAST_PATH", "1").strip().lower() not in ("0", "false", "no", "off")


def build_directory() -> Path:
    """One directory per PyTorch build, Python version, source and importing package
    (the extension links PyTorch's C++ ABI, so a build for another version must never
    be loaded); its name is the build's tag (:func:`extension_name`)."""
    import torch

    from .compile import disk_cache_dir

    tag = f"{torch.__version__}|{sys.implementation.cache_tag}|{__name__}|".encode() + _SOURCE.read_bytes()
    return disk_cache_dir() / "fast_path" / hashlib.sha256(tag).hexdigest()[:16]


def extension_name(directory: Path) -> str:
    """The extension's module name: unique to its build directory.

    The plan cache is a global of the loaded library, and ``cpp_extension.load``
    hands back a module it already loaded under the same name. A second package in
    the process (``benchmarks/maint/baseline.py``'s ``wsgemm_base``) that loaded the same
    module would share the cache, and its cached calls would run the plans the first
    package remembered for the same operands (an A/B of two default paths then times
    one of them twice; docs/tuning-log/dependent-launch.md)."""
    return f"wsgemm_fast_path_{directory.name}"


def _build():
    """The extension: imported if this directory holds a build, else built."""
    directory = build_directory()
    name = extension_name(directory)
    built = directory / f"{name}.so"
    if built.is_file():
        # Built for this source, PyTorch and Python (the directory's name says so):
        # import it without cpp_extension.load's checks (0.41 s per process on the
        # H200's machine, results/cold_start.md). A file another process is still
        # linking fails to import: then load() below waits for that build instead.
        try:
            return _import_built(built, name)
        except ImportError:
            pass
    # ~30 ms to import (it imports setuptools): only when there is something to build.
    from torch.utils import cpp_extension

    directory.mkdir(parents=True, exist_ok=True)
    print("wsgemm: building the C++ host fast path (once per PyTorch version, ~15-30 s; "
          "WSGEMM_FAST_PATH=0 skips it)...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    module = cpp_extension.load(name=name, sources=[str(_SOURCE)], build_directory=str(directory),
                                extra_cflags=["-O2"], verbose=False)
    print(f"wsgemm: built the fast path in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return module


def _import_built(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load():
    """The extension module, or None (disabled, or it could not be built: then a
    ``RuntimeWarning`` says why, once per process)."""
    if "module" in _state:
        return _state["module"]
    with _lock:
        if "module" not in _state:
            module = None
            if enabled_by_environment():
                try:
                    module = _build()
                except Exception as error:  # noqa: BLE001  (no compiler, no ninja, headers: all mean "use Python")
                    warnings.warn(
                        f"wsgemm: could not build the C++ host fast path ({_first_error_line(error)}); cached calls "
                        "run the same steps in Python, a few microseconds slower each. Install a C++ compiler "
                        "and ninja, or set WSGEMM_FAST_PATH=0 to skip the attempt.",
                        RuntimeWarning,
                        stacklevel=3,
                    )
            _state["module"] = module
    return _state["module"]


def _first_error_line(error: Exception) -> str:
    """The compiler's first error where there is one, not ninja's closing line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    reason = next((line for line in lines if "error:" in line and not line.startswith("Error building")), None)
    return f"{type(error).__name__}: {reason or (lines[-1] if lines else repr(error))}"
