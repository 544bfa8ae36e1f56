"""``config="autotune"`` on a Hopper GPU: it picks a working configuration, stores
it on disk, and a later call with an M of the same bucket that its tiles serve reuses
it without timing again."""

import json

import pytest
import torch

import wsgemm
from wsgemm.tuning import autotune

from test_gpu_sm90 import check, rand, run

pytestmark = pytest.mark.gpu


def test_autotune_picks_times_and_remembers(tmp_path, monkeypatch):
    monkeypatch.setenv("WSGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_memory", None)
    w = rand(2048, 4096)
    a = rand(40, 4096)
    check(run(a, w.t(), config="autotune"), a, w.t())
    entries = json.loads((tmp_path / "autotune.json").read_text())
    (entry,) = entries.values()
    assert "m<=64|n=2048|k=4096" in next(iter(entries))
    assert next(iter(entries)).startswith(wsgemm.devices.gpu(0).table_key + "|")
    assert len(entry["ms"]) >= 2 and all(ms > 0 for ms in entry["ms"].values())
    assert entry["config"] is not None and entry["m"] == 40

    def no_timing(*_):
        raise AssertionError("a cached shape bucket must not be timed again")

    monkeypatch.setattr(autotune, "_time_candidates", no_timing)
    monkeypatch.setattr(autotune, "_memory", None)  # as a new process would: from disk
    # Same bucket, fewer tokens: a swapped winner's token tiles cover them too (at
    # M = 64 one fitted to 40 tokens would not, and M = 64 would be timed anew).
    a2 = rand(36, 4096)
    check(run(a2, w.t(), config="autotune"), a2, w.t())


def test_autotune_is_rejected_on_the_operator_path():
    a = rand(64, 128).requires_grad_()
    with pytest.raises(ValueError, match="config= is eager-only"):
        wsgemm.gemm(a, rand(128, 64), config="autotune")
    torch.cuda.synchronize()
