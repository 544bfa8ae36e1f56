"""Facts about the GPU a call runs on, read once per device: its kernel family, and the
numbers the planner chooses by (``tuning.Gpu``)."""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings

import torch

from .dispatch import HARDWARE_VERIFIED_ARCHS, arch_for_capability
from .tuning.gpu import H200, Gpu

# Cluster sizes the planner may ask about; their residency is read from the driver once.
CLUSTER_SIZES = (1, 2, 4, 8)


@functools.lru_cache(maxsize=None)
def gpu(index: int) -> Gpu:
    """The planner's view of device ``index``; warns once for an arch whose kernel has
    never run on hardware here."""
    props = torch.cuda.get_device_properties(index)
    arch = arch_for_capability((props.major, props.minor), props.name)
    if arch not in HARDWARE_VERIFIED_ARCHS:
        warnings.warn(
            f"wsgemm: the {arch} kernel has been compiled and statically checked but never run "
            f"on hardware by its authors; check its results on your {props.name} against "
            "torch.matmul before relying on it (tests/test_gpu_sm90.py shows how)",
            RuntimeWarning,
            stacklevel=3,
        )
    clock_hz, memory_clock_hz, bus_bits = _driver_attributes(index)
    resident = tuple((size, max_active_clusters(index, size, props.multi_processor_count)) for size in CLUSTER_SIZES)
    return Gpu(arch, props.multi_processor_count, clock_hz, 2 * memory_clock_hz * bus_bits / 8, props.L2_cache_size,
               resident, props.name)


def _driver_attributes(index: int) -> tuple[float, float, int]:
    """(SM clock Hz, memory clock Hz, memory bus width in bits) from the driver; where it
    does not answer, an H200's, with a warning (the plans stay valid, only less suited)."""
    try:
        import cuda.bindings.driver as driver

        attribute = driver.CUdevice_attribute
        _check(driver.cuInit(0), index)

        def read(name):
            return _check(driver.cuDeviceGetAttribute(getattr(attribute, name), index), index)

        values = (read("CU_DEVICE_ATTRIBUTE_CLOCK_RATE") * 1e3, read("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE") * 1e3,
                  read("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH"))
        if all(values):
            return values
        problem = f"it reported {values}"
    except Exception as exc:  # noqa: BLE001  (an old driver or binding: plan with assumed numbers)
        problem = repr(exc)
    warnings.warn(f"wsgemm: could not read device {index}'s clocks and memory bus from the driver ({problem}); "
                  "planning with an H200's numbers", RuntimeWarning, stacklevel=3)
    return H200.sm_clock_hz, 3.201e9, 6144


_clusters_lock = threading.Lock()
_max_clusters: dict[tuple[int, int], int] = {}


def max_active_clusters(index: int, cluster_size: int, sms: int | None = None) -> int:
    """How many clusters of ``cluster_size`` CTAs (one per SM) can be resident at once.

    Asked of the driver (cuOccupancyMaxActiveClusters, through the DSL's
    ``HardwareInfo``): GPCs limit which SMs can pair, so it is not simply
    ``SMs / cluster_size``.
    """
    key = (index, cluster_size)
    with _clusters_lock:
        if key not in _max_clusters:
            if cluster_size == 1:
                value = sms if sms is not None else torch.cuda.get_device_properties(index).multi_processor_count
            else:
                import cutlass.utils

                with _primary_context(index):
                    value = cutlass.utils.HardwareInfo(index).get_max_active_clusters(cluster_size)
            _max_clusters[key] = max(1, int(value))
        return _max_clusters[key]


def _check(result, index: int):
    import cuda.bindings.driver as driver

    err, *value = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver error {err} on device {index}")
    return value[0] if value else None


@contextlib.contextmanager
def _primary_context(index: int):
    """The device's primary context (torch's) current on this thread for a few driver
    calls. HardwareInfo asks the driver with the *current* context, and a thread has
    none until its first CUDA runtime call: asked first thing in a fresh process or
    a new thread, it failed with CUDA_ERROR_INVALID_CONTEXT. Retaining and pushing
    the primary context neither synchronizes nor touches a stream, so it is also
    safe while a CUDA graph is being captured."""
    import cuda.bindings.driver as driver

    _check(driver.cuInit(0), index)
    device = _check(driver.cuDeviceGet(index), index)
    context = _check(driver.cuDevicePrimaryCtxRetain(device), index)
    try:
        _check(driver.cuCtxPushCurrent(context), index)
        try:
            yield
        finally:
            _check(driver.cuCtxPopCurrent(), index)
    finally:
        _check(driver.cuDevicePrimaryCtxRelease(device), index)


@functools.lru_cache(maxsize=1)
def several_gpus() -> bool:
    return torch.cuda.device_count() > 1
