import pytest

from wsgemm import UnsupportedDeviceError
from wsgemm import hardware
from wsgemm.dispatch import arch_for_capability


def test_hopper_runs_the_sm90_kernel():
    assert arch_for_capability((9, 0), "NVIDIA H200") == "sm90"


@pytest.mark.parametrize("cap", [(10, 0), (10, 3)])
def test_blackwell_gets_the_sm100_kernel(cap):
    assert arch_for_capability(cap, "NVIDIA B200") == "sm100"


@pytest.mark.parametrize("facts", list(hardware.ARCHS.values()), ids=list(hardware.ARCHS))
def test_every_accepted_gpu_can_run_the_binary_it_gets(facts):
    """An arch-conditional binary (sm_100a) runs on its exact arch only: a B300 (10.3)
    given an sm_100a cubin would fail to load it. Ask the DSL, per capability."""
    arch = pytest.importorskip("cutlass.base_dsl").Arch
    target = arch.from_string(facts.compile_target)
    for major, minor in facts.compute_capabilities:
        assert arch_for_capability((major, minor)) == facts.name
        device = arch.from_string(f"sm_{major}{minor}a")  # what the driver reports for this GPU
        assert device.can_run_binary_built_for(target), (f"{major}.{minor} cannot run {facts.compile_target}")


@pytest.mark.parametrize("cap, name", [((8, 0), "NVIDIA A100"), ((8, 9), "NVIDIA L4"), ((12, 0), "RTX 5090")])
def test_other_gpus_get_a_clear_error(cap, name):
    with pytest.raises(UnsupportedDeviceError) as info:
        arch_for_capability(cap, name)
    msg = str(info.value)
    assert name in msg and f"{cap[0]}.{cap[1]}" in msg and "sm90 (compute capability 9.0): runs, tested on hardware" in msg
    assert "sm100 (compute capability 10.0, 10.3): compiles, never run on hardware" in msg


def test_gemm_reports_an_unsupported_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    import wsgemm.api as api
    from wsgemm import devices, plans

    def fake_gpu(index):
        raise UnsupportedDeviceError("NVIDIA A100 (compute capability 8.0) is not supported")

    monkeypatch.setattr(devices, "gpu", fake_gpu)
    monkeypatch.setattr(plans, "_check_cuda", lambda name, t: None)
    a = torch.randn(8, 8, dtype=torch.bfloat16)
    with pytest.raises(UnsupportedDeviceError, match="A100"):
        api.gemm(a, a)


def test_an_unverified_arch_warns_before_its_first_launch(monkeypatch):
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from wsgemm import devices

    props = SimpleNamespace(major=10, minor=0, name="NVIDIA B200", multi_processor_count=148,
                            L2_cache_size=126 * 2**20)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    # The driver's numbers: SM clock, memory clock (Hz) and bus width (bits); and the
    # clusters of each size resident at once.
    monkeypatch.setattr(devices, "_driver_attributes", lambda index: (1.965e9, 4.0e9, 8192))
    monkeypatch.setattr(devices, "max_active_clusters", lambda index, size, sms=None: sms // size)
    with pytest.warns(RuntimeWarning, match="sm100 kernel has been compiled and statically checked but never run"):
        gpu = devices.gpu.__wrapped__(0)
    assert (gpu.arch, gpu.sms, gpu.name) == ("sm100", 148, "NVIDIA B200")
    assert gpu.hbm_peak_bytes_per_s == 2 * 4.0e9 * 8192 / 8 and gpu.l2_bytes == 126 * 2**20
    assert gpu.clusters(2) == 74
