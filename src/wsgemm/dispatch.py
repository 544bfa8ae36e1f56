"""Which kernel family runs on which GPU."""

from __future__ import annotations

from . import hardware
from .errors import UnsupportedDeviceError

# Families whose kernel has run on real hardware in this project's tests. SM100 is
# compiled and statically checked only: no Blackwell GPU is available to us.
HARDWARE_VERIFIED_ARCHS = ("sm90",)


def supported_gpus_text() -> str:
    parts = []
    for facts in hardware.ARCHS.values():
        caps = ", ".join(f"{major}.{minor}" for major, minor in facts.compute_capabilities)
        if facts.name in HARDWARE_VERIFIED_ARCHS:
            state = "runs, tested on hardware"
        else:
            state = "compiles, never run on hardware by this project"
        parts.append(f"{facts.name} (compute capability {caps}): {state}")
    return "; ".join(parts)


def arch_for_capability(capability: tuple[int, int], device_name: str = "this GPU") -> str:
    """Kernel family for a compute capability, or ``UnsupportedDeviceError``."""
    capability = tuple(capability)
    for facts in hardware.ARCHS.values():
        if capability in facts.compute_capabilities:
            return facts.name
    raise UnsupportedDeviceError(
        f"{device_name} (compute capability {capability[0]}.{capability[1]}) is not supported: "
        f"wsgemm's kernels use Hopper/Blackwell-only instructions (TMA, wgmma/tcgen05). "
        f"Supported: {supported_gpus_text()}"
    )
