"""What every kernel builder derives from its :class:`wsgemm.config.KernelSpec`.

The SM90 and SM100 builders differ in their warp roles; the dtypes, operand layouts,
ring depths, cluster shape, look-ahead policy and the scheduler walk are the same
and live here once.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda_driver
import cutlass
import cutlass.cute as cute
import cutlass.tensor_utils

from ... import config as cfg
from ... import hardware
from . import scheduler

CUTLASS_DTYPES = {"fp16": cutlass.Float16, "bf16": cutlass.BFloat16, "fp32": cutlass.Float32}


class GemmKernelBase:
    """Spec-derived attributes shared by the kernel builders."""

    arch: str = ""

    def __init__(self, spec: cfg.KernelSpec):
        if spec.arch != self.arch:
            raise ValueError(f"{type(self).__name__} needs an {self.arch} spec, got {spec.arch}")
        self.spec = spec
        c = spec.config
        self.config = c
        self.ab_dtype = CUTLASS_DTYPES[spec.ab_dtype]
        self.d_dtype = CUTLASS_DTYPES[spec.out_dtype]
        self.acc_dtype = cutlass.Float32
        self.pair = cfg.cta_pair(c)  # CTAs sharing one MMA (SM100 cta_group::2), else 1
        self.num_stages = c.stages
        self.epi_stages = c.epi_stages
        self.cluster_shape_mnk = (c.cluster_m, c.cluster_n, 1)
        self.along_m = c.raster == cfg.Raster.ALONG_M
        self.lookahead = c.lookahead
        # LayoutEnum speaks of rows: "row major" A/B means K-major, "row major" D N-major.
        L = cutlass.tensor_utils.LayoutEnum
        self.a_layout = L.ROW_MAJOR if spec.a_major == "k" else L.COL_MAJOR
        self.b_layout = L.ROW_MAJOR if spec.b_major == "k" else L.COL_MAJOR
        self.d_layout = L.ROW_MAJOR if spec.d_major == "n" else L.COL_MAJOR

    @staticmethod
    def swizzled_buffer(dtype, layout):
        """Shared-storage field type of one swizzled buffer (A, B or D) holding
        ``layout``: aligned to a whole swizzle atom, since the swizzle XORs address
        bits that an offset inside an atom would change."""
        return cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(layout)],
                                 hardware.SWIZZLE_ATOM_ALIGNMENT_BYTES]

    @cute.jit
    def call_with_epilogue(
        self,
        mA_torch: cute.Tensor,
        mB_torch: cute.Tensor,
        mD_torch: cute.Tensor,
        flags: cute.Tensor,
        partials: cute.Tensor,
        bias: cute.Tensor,
        alpha: cutlass.Float32,
        num_clusters: cutlass.Int32,
        stream: cuda_driver.CUstream,
    ):
        """Host side of a kernel with a fused epilogue (``spec.epilogue``): also takes
        the bias, (batches or 1, length), and ``alpha``. ``flags`` and ``partials`` are
        the split-K / stream-K workspace where the spec has one, else D again; D also
        stands in for a bias the epilogue does not add."""
        self.launch(mA_torch, mB_torch, mD_torch, flags, partials, bias, alpha, num_clusters, stream)

    @staticmethod
    def shared_storage(fields: dict):
        """The CTA's shared-storage struct with ``fields`` (name: field type), in order.
        Built here, outside the DSL's rewriting of jit functions, where a field present
        only for some specs (a class-body ``if``) would become a runtime branch."""
        return cute.struct(type("SharedStorage", (), {"__annotations__": dict(fields)}))

    @staticmethod
    def bias_buffer(elems: int):
        """Shared-storage field type of the fused epilogue's fp32 bias stretch."""
        return cute.struct.Align[cute.struct.MemRange[cutlass.Float32, elems], 16]

    @cute.jit
    def tile_of(self, work, sched):
        """(m, n, batch) tile of work item ``work`` for this CTA, in units of the MMA tile
        along M (a 2-CTA pair shares one tile) and of the CTA tile along N."""
        clusters_m, clusters_n, _, cta_m, cta_n, _, _ = sched
        c_m, c_n, batch = scheduler.cluster_coord_of_work(
            work, clusters_m, clusters_n, self.along_m, self.config.swizzle
        )
        tile_m = c_m * self.config.cluster_m + cta_m
        return tile_m // self.pair, c_n * self.config.cluster_n + cta_n, batch
