"""The C++ host fast path (``csrc/fast_path.cpp``), built on first use.

Three steps of a cached ``wsgemm.gemm`` call cost microseconds of Python and a
fraction of one in C++ (numbers in docs/tuning-log/host-overhead.md):

* finding the plan of a call without ``out=``, ``out_dtype=`` or ``config=``, keyed
  by both operands' shapes, strides, dtypes, devices and base alignment, as
  :func:`wsgemm.plans.call_signature` keys the Python cache (``remember``, ``find``;
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
``$WSGEMM_CACHE_DIR/fast_path/``, in a separate process: a crash while compiling or
loading it there cannot take the caller down. A call that finds no build starts one
in the background and runs in Python until it is ready (:func:`load` with
``wait=False``); ``wsgemm.precompile`` and ``python -m wsgemm build`` build it ahead
of time. The library is imported only where its record vouches for it
(:mod:`wsgemm.cache_files`): a truncated one is set aside and rebuilt, never loaded.
Without a compiler wsgemm warns once and runs the same steps in Python;
``WSGEMM_FAST_PATH=0`` skips the extension altogether.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from . import cache_files

_SOURCE = Path(__file__).parent / "csrc" / "fast_path.cpp"
_lock = threading.Lock()
_state: dict = {}  # "module": the loaded extension or None once decided; "build": the build under way


def enabled_by_environment() -> bool:
    return os.environ.get("WSGEMM_FAST_PATH", "1").strip().lower() not in ("0", "false", "no", "off")


def build_directory() -> Path:
    """One directory per PyTorch build, Python version, host platform, source and
    importing package (the extension links PyTorch's C++ ABI, so a build for another
    version must never be loaded); its name is the build's tag (:func:`extension_name`)."""
    import torch

    from .compile import disk_cache_dir

    tag = (f"{torch.__version__}|{sys.implementation.cache_tag}|{cache_files.host()}|{__name__}|".encode()
           + _SOURCE.read_bytes())
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


def library_path(directory: Path) -> Path:
    return directory / f"{extension_name(directory)}.so"


def load(wait: bool = True):
    """The extension module, or None (disabled, or it could not be built: then a
    ``RuntimeWarning`` says why, once per process).

    ``wait=False`` never waits for a compiler: a verified build is imported at once;
    otherwise a build starts in a background process (once) and None comes back until
    it has finished (:func:`decided` tells a pending None from a final one)."""
    if "module" in _state:
        return _state["module"]
    with _lock:
        if "module" in _state:
            return _state["module"]
        if not enabled_by_environment():
            _state["module"] = None
            return None
        build = _state.get("build")
        if build is None or build.pid != os.getpid():  # none yet, or one the parent of a fork started
            module = _import_published()
            if module is not None:
                _state["module"] = module
                return module
            build = _state["build"] = _Build(waited_for=wait)
            build.start()
    if wait:
        build.join()
    elif build.is_alive():
        return None
    with _lock:
        if "module" not in _state:
            _state["module"] = _finish(build)
            _state.pop("build", None)
    return _state["module"]


def decided() -> bool:
    """Whether :func:`load` has its final answer (False while a build is under way)."""
    return "module" in _state


def loaded():
    """The extension if this process has loaded it, else None; never builds or waits."""
    return _state.get("module")


def _import_published():
    """The published build of this directory, imported, where its record vouches for
    it (a damaged one is set aside with a warning, unless its builder holds its lock);
    None where there is none to import."""
    directory = build_directory()
    path = library_path(directory)
    if not cache_files.verified(path, timeout=0):
        return None
    try:
        return _import(path)
    except ImportError as error:  # intact, yet not for this process (say, a changed system library)
        cache_files.set_aside(path, f"it does not import: {error}")
        return None


def _import_verified(path: Path):
    """Import the library at ``path`` once more checked against its record: ``dlopen``
    of a truncated file is a crash, not an exception."""
    reason = cache_files.problem(path)
    if reason is not None:
        raise ImportError(f"{path} cannot be used: {reason}")
    return _import(path)


def _import(path: Path):
    """Import the library at ``path``, which its record has just vouched for."""
    import importlib.util

    name = path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Build(threading.Thread):
    """The background thread that waits for the build process (:func:`_build`)."""

    def __init__(self, waited_for: bool):
        super().__init__(name="wsgemm-fast-path-build", daemon=True)
        self.pid = os.getpid()
        self.path: Path | None = None
        self.built_here = False  # False where another process's build was waited for
        self.error: BaseException | None = None
        self.seconds = 0.0
        meanwhile = "" if waited_for else ("; calls run in Python meanwhile, and `python -m wsgemm build` "
                                           "builds it ahead of time")
        print(f"wsgemm: building the C++ host fast path (once per PyTorch version, ~15-60 s{meanwhile}; "
              "WSGEMM_FAST_PATH=0 skips it)", file=sys.stderr, flush=True)

    def run(self):
        start = time.perf_counter()
        try:
            self.path, self.built_here = _build()
        except BaseException as error:  # noqa: BLE001  (reported by _finish, in the caller's thread)
            self.error = error
        self.seconds = time.perf_counter() - start


def _finish(build: _Build):
    """The module a finished build gives, or None with one warning saying why."""
    error = build.error
    if error is None:
        try:
            module = _import_verified(build.path)
            if build.path.parent != build_directory():  # a private build, in a temporary directory
                shutil.rmtree(build.path.parent, ignore_errors=True)  # (loaded: the library stays mapped)
            print(f"wsgemm: built the C++ host fast path in {build.seconds:.0f} s" if build.built_here else
                  "wsgemm: the C++ host fast path another process built is ready", file=sys.stderr, flush=True)
            return module
        except Exception as import_error:  # noqa: BLE001
            error = import_error
    warnings.warn(
        f"wsgemm: could not build the C++ host fast path ({_first_error_line(error)}); cached calls "
        "run the same steps in Python, a few microseconds slower each. Install a C++ compiler "
        "and ninja, or set WSGEMM_FAST_PATH=0 to skip the attempt.",
        RuntimeWarning,
        stacklevel=3,
    )
    return None


def _build() -> tuple[Path, bool]:
    """Build in a separate process (:func:`build_in_this_process`); returns the path of
    the library it vouches for and whether it built it (not another process); raises
    with the compiler's error where it fails."""
    directory = build_directory()
    cache_files.ensure_directory(directory)  # an unwritable one: warned here, built privately there
    # This very package, wherever this process found it (a path it put on sys.path itself
    # included), under its own name (benchmarks/maint/baseline.py's wsgemm_base).
    package = __name__.split(".")[0]
    code = ("import sys; found_in = sys.argv[1]; "
            "sys.path.insert(0, found_in) if found_in not in sys.path else None; "
            f"from {package} import fast_path; fast_path._main(sys.argv[2:])")
    found_in = str(Path(__file__).resolve().parents[1])
    private = "" if cache_files.writable(directory) else "private"
    result = subprocess.run([sys.executable, "-c", code, found_in, str(directory), private], capture_output=True,
                            text=True, check=False)
    for message in re.findall(r"CacheWarning: (.*)", result.stderr):  # the build process's: said here once
        warnings.warn(message, cache_files.CacheWarning, stacklevel=2)
    if result.returncode != 0:
        ended = (f"the build process died of signal {-result.returncode}" if result.returncode < 0
                 else f"the build process exited with status {result.returncode}")
        raise RuntimeError("\n".join(filter(None, [result.stderr.strip(), ended])))
    lines = result.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError("the build process named no library")
    return Path(lines[-1]), "built" in lines[:-1]


def _main(argv: list[str]) -> None:
    """The build process: ``directory [private]``; prints ``built`` where it built the
    library, then the library's path, last."""
    directory, private = Path(argv[0]), len(argv) > 1 and argv[1] == "private"
    path, built = build_in_this_process(directory, private=private)
    print(*(["built"] if built else []), path, sep="\n", flush=True)


def build_in_this_process(directory: Path, *, private: bool = False) -> tuple[Path, bool]:
    """The published library of ``directory`` and whether this process built it: built
    here unless another process publishes it first (its build is waited for, not
    repeated); where it cannot be published (``private``, an unwritable directory, a
    lock that timed out), a build in a temporary directory with its own record. This
    imports the library it builds: run it in a process of its own (:func:`_build`)."""
    name = extension_name(directory)
    final = directory / f"{name}.so"
    with contextlib.nullcontext(False) if private else cache_files.lock(final) as held:
        if held and cache_files.verified(final):
            return final, False
        # ~30 ms to import (it imports setuptools): only when there is something to build.
        from torch.utils import cpp_extension

        scratch = Path(tempfile.mkdtemp(dir=directory if held else None, prefix=".build-" if held else "wsgemm-"))
        try:
            cpp_extension.load(name=name, sources=[str(_SOURCE)], build_directory=str(scratch),
                               extra_cflags=["-O2"], verbose=False)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        built = scratch / f"{name}.so"
        if held and cache_files.publish(final, built):
            shutil.rmtree(scratch, ignore_errors=True)
            return final, True
        if not cache_files.publish(built, built):
            raise RuntimeError(f"could not write the fast path's build to {scratch}")
        return built, True


def _first_error_line(error: Exception) -> str:
    """The compiler's first error where there is one, not ninja's closing line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    reason = next((line for line in lines if "error:" in line and not line.startswith("Error building")), None)
    return f"{type(error).__name__}: {reason or (lines[-1] if lines else repr(error))}"
