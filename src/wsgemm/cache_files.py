"""Files in wsgemm's cache directory: written whole, checked before use, built once.

Three caches keep files under ``$WSGEMM_CACHE_DIR``: compiled kernels (``k<key>.o``),
the C++ host fast path's build (``fast_path/<tag>/<name>.so``) and the autotuner's
winners (``autotune.json``). A full disk, a killed process or a network file system
can leave any of them truncated, and loading a truncated shared object kills the
process inside ``dlopen`` (a bus error, which no ``except`` catches). So each of them
goes through this module:

* **Publishing** (:func:`publish`, :func:`write`): the file is written to a temporary
  name beside its place, flushed and renamed into place; then its *record*,
  ``<name>.record`` (a small JSON: format, size, SHA-256, host platform), is written the
  same way. The record comes last, so a file without one is unfinished or orphaned.
* **Checking** (:func:`problem`, :func:`verified`, :func:`read`): a file is used only
  where its record vouches for its size, hash and this host. One that does not is
  judged again while holding its lock (a writer may be between the two renames) and,
  if still bad, set aside under a new name (``<name>.damaged-<time>-<pid>``, kept for
  a post-mortem, never deleted) with one :class:`CacheWarning` naming both paths; the
  caller then rebuilds it.
* **Building once** (:func:`lock`): a process about to build a file takes an exclusive
  ``fcntl.flock`` on ``<name>.lock`` beside it, so another process building the same
  file waits for that build and then reads it instead of repeating it. After
  :data:`LOCK_TIMEOUT_S` (a hung holder) it proceeds without publishing.
* **An unwritable directory** (read-only, full, permissions): the first failure warns
  once per process (:class:`CacheWarning`) and, for the rest of the process, files
  for that directory are built and kept in memory only; verified files already there
  still load.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import platform
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

RECORD_FORMAT = 1
RECORD_SUFFIX = ".record"
LOCK_SUFFIX = ".lock"
DAMAGED_INFIX = ".damaged-"
LOCK_TIMEOUT_S = 300.0  # longer than any build wsgemm does (the fast path: ~15-60 s)
MISSING = "missing"


class CacheWarning(RuntimeWarning):
    """A cache file was damaged and set aside, or the cache directory cannot be written."""


def host() -> str:
    """What a file built here is built for: ``linux-x86_64``, ``linux-aarch64``, ..."""
    return f"{sys.platform}-{platform.machine()}"


def record_path(path: Path) -> Path:
    return path.with_name(path.name + RECORD_SUFFIX)


def _record(size: int, digest: str) -> bytes:
    return json.dumps({"format": RECORD_FORMAT, "size": size, "sha256": digest, "host": host()}).encode()


def _digest_of_file(path: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def _judge(path: Path, data: bytes | None = None) -> str | None:
    """Why ``path`` cannot be used (:data:`MISSING` where it is absent), or None. With
    ``data``, the bytes already read from it are what is checked."""
    try:
        raw = record_path(path).read_bytes()
    except FileNotFoundError:
        return MISSING if not path.exists() else "it has no record (its writer did not finish)"
    except OSError as error:
        return f"its record cannot be read ({error})"
    try:
        record = json.loads(raw)
        expected = (int(record["format"]), int(record["size"]), str(record["sha256"]), str(record["host"]))
    except (ValueError, KeyError, TypeError):
        return "its record is unreadable"
    record_format, size, digest, built_for = expected
    if record_format != RECORD_FORMAT:
        return f"its record is of format {record_format}, this wsgemm writes {RECORD_FORMAT}"
    if built_for != host():
        return f"it was built for {built_for}, this host is {host()}"
    try:
        actual_size, actual_digest = ((len(data), hashlib.sha256(data).hexdigest()) if data is not None
                                      else _digest_of_file(path))
    except FileNotFoundError:
        return "its record has no file"
    except OSError as error:
        return f"it cannot be read ({error})"
    if actual_size != size:
        return f"it is {actual_size} bytes, its record says {size}"
    if actual_digest != digest:
        return "its SHA-256 differs from its record's"
    return None


def problem(path: Path) -> str | None:
    """Why ``path`` cannot be used, or None where its record vouches for it. Only looks:
    sets nothing aside (a writer may be between its two renames)."""
    return _judge(Path(path))


def verified(path: Path, timeout: float | None = None) -> bool:
    """Whether ``path`` is there and vouched for by its record. A damaged one is judged
    again under its lock (waiting up to ``timeout`` seconds, :data:`LOCK_TIMEOUT_S` by
    default, for a writer) and set aside with a :class:`CacheWarning`."""
    path = Path(path)
    reason = _judge(path)
    if reason is None:
        return True
    return reason != MISSING and _settled(path, timeout)


def read(path: Path, timeout: float | None = None) -> bytes | None:
    """The bytes of ``path`` where its record vouches for them (the very bytes read are
    checked), else None; a damaged file is set aside as :func:`verified` does."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError:  # absent or unreadable: _judge says which
        data = None
    reason = _judge(path, data) if data is not None else _judge(path)
    if reason is None:
        return data
    if reason != MISSING and _settled(path, timeout):  # its writer has finished meanwhile
        with contextlib.suppress(OSError):
            data = path.read_bytes()
            return data if _judge(path, data) is None else None
    return None


def _settled(path: Path, timeout: float | None) -> bool:
    """Judge ``path`` again under its lock (a writer may have been between its two
    renames): True where it is whole now; else it is set aside (see :func:`verified`)."""
    with lock(path, timeout) as held:
        reason = _judge(path)
        if reason is None:
            return True
        if reason == MISSING:
            return False
        if held:
            set_aside(path, reason)
        elif not writable(path.parent):
            _warn_once(("damaged", str(path)),
                       f"wsgemm: the cache file {path} cannot be used ({reason}) and its directory cannot be "
                       "written; it is rebuilt in memory")
        # else another process holds its lock (building it, or judging it): left to that one
        return False


def set_aside(path: Path, reason: str) -> Path | None:
    """Rename ``path`` (and its record) out of the way, warn once naming both, and return
    the new name (None where it was gone already or could not be renamed)."""
    path = Path(path)
    aside = path.with_name(f"{path.name}{DAMAGED_INFIX}{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    moved = False
    for source, target in ((path, aside), (record_path(path), record_path(aside))):
        try:
            os.replace(source, target)
            moved = True
        except FileNotFoundError:  # set aside by another process already, or a record without its file
            pass
        except OSError as error:
            _warn_once(("damaged", str(path)),
                       f"wsgemm: the cache file {path} cannot be used ({reason}) and could not be set aside "
                       f"({error}); it is rebuilt in memory")
            return None
    if not moved:
        return None
    warnings.warn(f"wsgemm: the cache file {path} cannot be used ({reason}); set aside as {aside.name} "
                  "and rebuilt", CacheWarning, stacklevel=2)
    return aside


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------

def write(path: Path, data: bytes) -> bool:
    """Publish ``data`` as ``path`` (then its record); False, with one warning (per
    process), where the directory cannot be written."""
    path = Path(path)
    if not writable(path.parent):
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _replace_atomically(path, lambda f: f.write(data))
        _replace_atomically(record_path(path), lambda f: f.write(_record(len(data), hashlib.sha256(data).hexdigest())))
        return True
    except OSError as error:
        mark_unwritable(path.parent, error)
        return False


def publish(path: Path, built: Path) -> bool:
    """Publish the finished file ``built`` as ``path``: moved (or, from another file
    system, copied) into place, then its record written. ``built`` may be ``path``
    itself (a file built in place privately: only the record is written). False, with
    one warning (per process), where ``path``'s directory cannot be written."""
    path, built = Path(path), Path(built)
    if not writable(path.parent):
        return False
    try:
        size, digest = _digest_of_file(built)
        if built != path:
            _move_into_place(built, path)
        _replace_atomically(record_path(path), lambda f: f.write(_record(size, digest)))
        return True
    except OSError as error:
        mark_unwritable(path.parent, error)
        return False


def _move_into_place(built: Path, path: Path) -> None:
    with open(built, "rb") as f:
        os.fsync(f.fileno())
    try:
        os.replace(built, path)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        with open(built, "rb") as source:
            _replace_atomically(path, lambda f: f.write(source.read()))


def _replace_atomically(path: Path, write_to) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write_to(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove(path: Path) -> None:
    """Delete ``path`` and its record (record first: a file without one is unfinished)."""
    for p in (record_path(Path(path)), Path(path)):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


# --------------------------------------------------------------------------------------
# Unwritable directories: in memory, one warning
# --------------------------------------------------------------------------------------

_unwritable: set[str] = set()
_warned: set = set()
_warned_lock = threading.Lock()


def writable(directory: Path) -> bool:
    """False once writing to ``directory`` (or a directory above it) has failed in this
    process."""
    directory = Path(directory)
    return not any(str(d) in _unwritable for d in (directory, *directory.parents))


def ensure_directory(directory: Path) -> bool:
    """Create ``directory`` and try writing in it; False (one warning) where it
    cannot be written."""
    directory = Path(directory)
    if not writable(directory):
        return False
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
        return True
    except OSError as error:
        mark_unwritable(directory, error)
        return False


def mark_unwritable(directory: Path, error: OSError) -> None:
    """From now on keep what ``directory`` would hold in memory; warn once per process
    (the caches' directories are one tree: its first failure speaks for all)."""
    _unwritable.add(str(directory))
    _warn_once("unwritable",
               f"wsgemm: cannot write to the cache directory {directory} ({error.strerror or error}); compiled "
               "kernels, the fast path's build and autotune results are kept in memory for this process and "
               "rebuilt by the next one (set WSGEMM_CACHE_DIR to a writable directory)")


def _warn_once(key, message: str) -> None:
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, CacheWarning, stacklevel=3)


# --------------------------------------------------------------------------------------
# Building once across processes
# --------------------------------------------------------------------------------------

_held: dict[str, list] = {}  # path -> [file descriptor or None, depth, held]
_thread_locks: dict[str, threading.RLock] = {}
_thread_locks_lock = threading.Lock()


@contextlib.contextmanager
def lock(path: Path, timeout: float | None = None):
    """Hold ``<path>.lock`` exclusively: another process (or thread) building ``path``
    is waited for, up to ``timeout`` seconds (:data:`LOCK_TIMEOUT_S` by default; 0: do
    not wait). Re-entrant within a thread. Yields True where held, False where the
    wait timed out or the lock file cannot be created (an unwritable directory): then
    the caller builds in memory and publishes nothing."""
    path = Path(path)
    timeout = LOCK_TIMEOUT_S if timeout is None else timeout
    key = str(path)
    with _thread_locks_lock:
        thread_lock = _thread_locks.setdefault(key, threading.RLock())
    if not (thread_lock.acquire(timeout=timeout) if timeout > 0 else thread_lock.acquire(blocking=False)):
        yield False
        return
    try:
        entry = _held.get(key)
        if entry is not None:  # this thread holds it already
            entry[1] += 1
        else:
            entry = _held[key] = [None, 1, False]
            entry[0], entry[2] = _acquire_file_lock(path, timeout)
        try:
            yield entry[2]
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del _held[key]
                if entry[0] is not None:
                    os.close(entry[0])  # closing releases the flock
    finally:
        thread_lock.release()


def _acquire_file_lock(path: Path, timeout: float) -> tuple[int | None, bool]:
    import fcntl

    if not ensure_directory(path.parent):
        return None, False
    try:
        fd = os.open(path.with_name(path.name + LOCK_SUFFIX), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        mark_unwritable(path.parent, error)
        return None, False
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd, True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                if timeout > 0:
                    _warn_once(("timeout", str(path)),
                               f"wsgemm: waited {timeout:.0f} s for another process building {path}; "
                               "building it in memory instead")
                return None, False
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.25)
        except OSError:  # a file system without flock: build as if alone (publishing is atomic)
            return fd, True
