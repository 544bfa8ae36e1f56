"""What the planner knows of a GPU: numbers the device reports, never its name.

``Gpu`` holds the SM count, the SM clock, the HBM's peak bandwidth, the L2's size and
how many clusters of each size the driver fits at once. ``wsgemm.device`` builds one
from the device in hand; ``H100_SXM`` and ``H200`` are the same numbers written down,
for tools and tests that run without a GPU. The cost model (:mod:`.cost`) turns them
into rates; the packaged table (:mod:`.table`) is keyed by them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    arch: str  # wsgemm's kernel family: "sm90" or "sm100"
    sms: int
    sm_clock_hz: float  # the SM clock's maximum (the driver's CLOCK_RATE)
    hbm_peak_bytes_per_s: float  # 2 x memory clock x bus width (the driver's attributes)
    l2_bytes: int
    # (cluster size, clusters resident at once): the driver's answer
    # (cudaOccupancyMaxActiveClusters); a cluster sits in one GPC, so clusters of 4
    # and 8 fill fewer than all SMs.
    resident: tuple[tuple[int, int], ...] = ()
    name: str = ""  # for messages and reports only: nothing is chosen by it

    def clusters(self, size: int) -> int:
        """Clusters of ``size`` CTAs (one per SM) resident at once."""
        for cluster_size, count in self.resident:
            if cluster_size == size:
                return count
        return max(1, self.sms // size)  # no answer from the driver: whole clusters of SMs

    @property
    def table_key(self) -> str:
        """What a packaged table is measured for: arch, SMs and HBM bandwidth (TB/s, one
        decimal), e.g. ``sm90/132sm/4.8TBps``. GPUs that share it run the same plans
        at the same speed, as far as the cost model can tell."""
        return f"{self.arch}/{self.sms}sm/{self.hbm_peak_bytes_per_s / 1e12:.1f}TBps"


# Clusters of 1, 2, 4 and 8 an H100 SXM or H200 (132 SMs) holds at once, as their
# driver reports: 4 and 8 do not divide its GPCs evenly.
_HOPPER_132_RESIDENT = ((1, 132), (2, 66), (4, 30), (8, 15))

# An H100 SXM5 80 GB: 1980 MHz SM clock, HBM3 at 2619 MHz over 5120 bits, 50 MiB L2.
H100_SXM = Gpu("sm90", 132, 1.98e9, 2 * 2.619e9 * 5120 / 8, 50 * 2**20, _HOPPER_132_RESIDENT, "NVIDIA H100 80GB HBM3")
# An H200 SXM 141 GB: the same SMs, HBM3e at 3201 MHz over 6144 bits (4.9 TB/s), 60 MiB L2.
H200 = Gpu("sm90", 132, 1.98e9, 2 * 3.201e9 * 6144 / 8, 60 * 2**20, _HOPPER_132_RESIDENT, "NVIDIA H200")
