"""``wsgemm.cache_files``, the checks every cache file goes through, on plain files: a
damaged file (truncated, empty, of another record format, built for another host,
without its record) is set aside with one warning naming it, never read; a file being
written is waited for, not judged; processes building one file at once build it once;
an unwritable directory warns once and keeps results in memory."""

import errno
import json
import os
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from wsgemm import cache_files
from wsgemm.cache_files import CacheWarning

DATA = bytes(range(256)) * 40


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch):
    """Each test as a new process would see it: no directory known unwritable, no
    warning given yet."""
    monkeypatch.setattr(cache_files, "_unwritable", set())
    monkeypatch.setattr(cache_files, "_warned", set())


def run_python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_a_written_file_reads_back_with_its_record_and_no_temporary_files(tmp_path):
    path = tmp_path / "sub" / "blob.bin"
    assert cache_files.write(path, DATA)
    assert sorted(p.name for p in path.parent.iterdir()) == ["blob.bin", "blob.bin.record"]
    record = json.loads(cache_files.record_path(path).read_text())
    assert record["size"] == len(DATA) and record["host"] == cache_files.host() and record["format"] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache_files.read(path) == DATA
        assert cache_files.verified(path) and cache_files.problem(path) is None
        assert cache_files.read(tmp_path / "absent") is None and not cache_files.verified(tmp_path / "absent")


def _truncate(path):
    path.write_bytes(DATA[: len(DATA) // 3])


def _empty(path):
    path.write_bytes(b"")


def _record_of_another_format(path):
    record = json.loads(cache_files.record_path(path).read_text())
    cache_files.record_path(path).write_text(json.dumps({**record, "format": 0}))


def _record_of_another_host(path):
    record = json.loads(cache_files.record_path(path).read_text())
    foreign = "linux-aarch64" if cache_files.host() != "linux-aarch64" else "linux-x86_64"
    cache_files.record_path(path).write_text(json.dumps({**record, "host": foreign}))


def _no_record(path):
    cache_files.record_path(path).unlink()


def _garbled_record(path):
    record = cache_files.record_path(path)
    record.write_bytes(record.read_bytes()[:7])


def _same_size_other_bytes(path):
    path.write_bytes(bytes(reversed(DATA)))


@pytest.mark.parametrize("damage, reason", [
    (_truncate, f"it is {len(DATA) // 3} bytes, its record says {len(DATA)}"),
    (_empty, f"it is 0 bytes, its record says {len(DATA)}"),
    (_record_of_another_format, "its record is of format 0, this wsgemm writes 1"),
    (_record_of_another_host, "it was built for linux-"),
    (_no_record, "it has no record (its writer did not finish)"),
    (_garbled_record, "its record is unreadable"),
    (_same_size_other_bytes, "its SHA-256 differs from its record's"),
])
def test_a_damaged_file_is_set_aside_once_with_a_warning_naming_it(tmp_path, damage, reason):
    path = tmp_path / "blob.bin"
    assert cache_files.write(path, DATA)
    damage(path)
    with pytest.warns(CacheWarning) as caught:
        assert cache_files.read(path) is None
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith(f"wsgemm: the cache file {path} cannot be used ({reason}")
    set_aside = [p for p in tmp_path.glob("blob.bin.damaged-*") if not p.name.endswith(".record")]
    assert len(set_aside) == 1 and f"set aside as {set_aside[0].name} and rebuilt" in message  # renamed, kept
    assert not path.exists() and not cache_files.record_path(path).exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # gone now: a plain miss, no second warning
        assert cache_files.read(path) is None and not cache_files.verified(path)
    assert cache_files.write(path, DATA) and cache_files.read(path) == DATA  # rebuilt in its place


def test_a_file_being_published_is_waited_for_not_set_aside(tmp_path):
    """A writer holds the lock between writing the file and its record: a reader that
    finds the file without its record waits for the lock and then reads it whole."""
    path, ready = tmp_path / "blob.bin", tmp_path / "ready"
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from wsgemm import cache_files
        path, ready = Path(sys.argv[1]), Path(sys.argv[2])
        with cache_files.lock(path):
            path.write_bytes(bytes(range(256)) * 40)
            ready.touch()
            time.sleep(1.5)
            cache_files.publish(path, path)  # the record, last
        """), str(path), str(ready)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline and writer.poll() is None
            time.sleep(0.02)
        assert cache_files.problem(path) == "it has no record (its writer did not finish)"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert cache_files.read(path) == DATA
    finally:
        assert writer.wait(timeout=60) == 0


def test_processes_building_one_file_at_once_build_it_once(tmp_path):
    path, log = tmp_path / "blob.bin", tmp_path / "builds.log"
    code = """
        import os, sys, time
        from pathlib import Path
        from wsgemm import cache_files
        path, log = Path(sys.argv[1]), Path(sys.argv[2])
        if not cache_files.verified(path):
            with cache_files.lock(path) as held:
                assert held
                if not cache_files.verified(path):  # another process may have built it meanwhile
                    with open(log, "a") as f:
                        f.write(f"{os.getpid()}\\n")
                    time.sleep(0.5)
                    assert cache_files.write(path, bytes(range(256)) * 40)
        assert cache_files.read(path) == bytes(range(256)) * 40
        """
    workers = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(path), str(log)])
               for _ in range(4)]
    assert [w.wait(timeout=300) for w in workers] == [0, 0, 0, 0]
    assert len(log.read_text().split()) == 1
    assert cache_files.read(path) == DATA


def test_a_lock_held_too_long_is_given_up_with_one_warning(tmp_path):
    path, ready = tmp_path / "blob.bin", tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from wsgemm import cache_files
        with cache_files.lock(Path(sys.argv[1])):
            Path(sys.argv[2]).touch()
            time.sleep(120)
        """), str(path), str(ready)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.02)
        with pytest.warns(CacheWarning, match=f"waited 1 s for another process building {path}; building it "
                                              "in memory instead"):
            with cache_files.lock(path, timeout=1) as held:
                assert not held
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with cache_files.lock(path, timeout=0) as held:  # no waiting, no warning
                assert not held
    finally:
        holder.kill()
        holder.wait()
    with cache_files.lock(path, timeout=5) as held:  # released when its holder died
        assert held


def _fail_writes(monkeypatch):
    """Every file creation and rename fails as on a read-only file system (root ignores
    permissions, so chmod cannot make a directory read-only in tests run as root)."""
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    real_open = os.open

    def open_for_reading_only(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            read_only()
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(cache_files.tempfile, "mkstemp", read_only)
    monkeypatch.setattr(cache_files.os, "replace", read_only)
    monkeypatch.setattr(cache_files.os, "open", open_for_reading_only)


def test_a_read_only_directory_warns_once_and_still_serves_what_it_holds(tmp_path, monkeypatch):
    kept = tmp_path / "kept.bin"
    assert cache_files.write(kept, DATA)
    _fail_writes(monkeypatch)
    with pytest.warns(CacheWarning) as caught:
        assert not cache_files.write(tmp_path / "a.bin", DATA)
        assert not cache_files.write(tmp_path / "b.bin", DATA)
        with cache_files.lock(tmp_path / "c.bin") as held:
            assert not held
        assert cache_files.read(kept) == DATA  # verified files still load
    assert [str(w.message) for w in caught] == [
        f"wsgemm: cannot write to the cache directory {tmp_path} (Read-only file system); compiled kernels, the "
        "fast path's build and autotune results are kept in memory for this process and rebuilt by the next one "
        "(set WSGEMM_CACHE_DIR to a writable directory)"]


def test_a_damaged_file_in_a_read_only_directory_is_not_read_and_warned_of_once(tmp_path, monkeypatch):
    path = tmp_path / "blob.bin"
    assert cache_files.write(path, DATA)
    _truncate(path)
    _fail_writes(monkeypatch)
    with pytest.warns(CacheWarning) as caught:
        for _ in range(3):
            assert cache_files.read(path) is None
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and "cannot write to the cache directory" in messages[0]
    assert messages[1] == (f"wsgemm: the cache file {path} cannot be used (it is {len(DATA) // 3} bytes, its record "
                           f"says {len(DATA)}) and its directory cannot be written; it is rebuilt in memory")
    assert path.exists()  # left where it was


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes to read-only directories")
def test_a_directory_without_write_permission_warns_once(tmp_path):
    directory = tmp_path / "cache"
    directory.mkdir()
    directory.chmod(0o555)
    try:
        with pytest.warns(CacheWarning, match="cannot write to the cache directory") as caught:
            assert not cache_files.write(directory / "a.bin", DATA)
            assert not cache_files.write(directory / "b.bin", DATA)
        assert len(caught) == 1
    finally:
        directory.chmod(0o755)


def test_a_full_disk_keeps_results_in_memory_with_one_warning(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache_files.os, "fsync", full)
    full_disk = r"cannot write to the cache directory .* \(No space left on device\)"
    with pytest.warns(CacheWarning, match=full_disk) as caught:
        assert not cache_files.write(tmp_path / "a.bin", DATA)
        assert not cache_files.write(tmp_path / "b.bin", DATA)
    assert len(caught) == 1
    assert [p.name for p in tmp_path.iterdir()] == []  # no half-written file left behind
