import pytest

from wsgemm import UnsupportedDeviceError
from wsgemm.dispatch import arch_for_capability


def test_hopper_runs_the_sm90_kernel():
    assert arch_for_capability((9, 0), "NVIDIA H200") == "sm90"


@pytest.mark.parametrize("cap", [(10, 0), (10, 3)])
def test_blackwell_is_recognised_but_not_shipped_yet(cap):
    with pytest.raises(UnsupportedDeviceError, match=r"needs the sm100 kernel, which this version of wsgemm does not ship yet"):
        arch_for_capability(cap, "NVIDIA B200")


@pytest.mark.parametrize("cap, name", [((8, 0), "NVIDIA A100"), ((8, 9), "NVIDIA L4"), ((12, 0), "RTX 5090")])
def test_other_gpus_get_a_clear_error(cap, name):
    with pytest.raises(UnsupportedDeviceError) as info:
        arch_for_capability(cap, name)
    msg = str(info.value)
    assert name in msg and f"{cap[0]}.{cap[1]}" in msg and "sm90 (compute capability 9.0): runs" in msg


def test_gemm_reports_an_unsupported_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    import wsgemm.api as api

    def fake_facts(index):
        raise UnsupportedDeviceError("NVIDIA A100 (compute capability 8.0) is not supported")

    monkeypatch.setattr(api, "_device_facts", fake_facts)
    monkeypatch.setattr(api, "_check_cuda", lambda name, t: None)
    a = torch.randn(8, 8, dtype=torch.bfloat16)
    with pytest.raises(UnsupportedDeviceError, match="A100"):
        api.gemm(a, a)
