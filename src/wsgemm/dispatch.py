"""Which kernel family runs on which GPU."""

from __future__ import annotations

from . import hardware
from .errors import UnsupportedDeviceError

# Families whose kernel exists in this version. SM100 compiles once its issue lands.
IMPLEMENTED_ARCHS = ("sm90",)


def supported_gpus_text() -> str:
    parts = []
    for facts in hardware.ARCHS.values():
        caps = ", ".join(f"{major}.{minor}" for major, minor in facts.compute_capabilities)
        state = "runs" if facts.name in IMPLEMENTED_ARCHS else "not yet available"
        parts.append(f"{facts.name} (compute capability {caps}): {state}")
    return "; ".join(parts)


def arch_for_capability(capability: tuple[int, int], device_name: str = "this GPU") -> str:
    """Kernel family for a compute capability, or ``UnsupportedDeviceError``."""
    capability = tuple(capability)
    for facts in hardware.ARCHS.values():
        if capability in facts.compute_capabilities:
            if facts.name not in IMPLEMENTED_ARCHS:
                raise UnsupportedDeviceError(
                    f"{device_name} (compute capability {capability[0]}.{capability[1]}) needs the "
                    f"{facts.name} kernel, which this version of wsgemm does not ship yet. "
                    f"Supported: {supported_gpus_text()}"
                )
            return facts.name
    raise UnsupportedDeviceError(
        f"{device_name} (compute capability {capability[0]}.{capability[1]}) is not supported: "
        f"wsgemm's kernels use Hopper/Blackwell-only instructions (TMA, wgmma/tcgen05). "
        f"Supported: {supported_gpus_text()}"
    )
