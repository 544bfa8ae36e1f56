"""A CPU model of wsgemm's pipelines: runs on any machine, no GPU.

* :mod:`.mbarrier` -- PTX mbarrier semantics (phases, parity waits, transaction bytes).
* :mod:`.spec`, :mod:`.roles` -- the warp roles of the SM90 kernel (cooperative and
  ping-pong consumers) and the SM100 kernel, written
  like the kernels (same stage/parity functions, same look-ahead policies), with
  optional planted bugs (:class:`Fault`).
* :mod:`.machine`, :mod:`.checker` -- every interleaving of those roles and of the
  asynchronous hardware (TMA bytes landing, MMAs completing), checked for deadlock,
  overwritten or early-read stages and accumulators, and tiles stored exactly once.
* :mod:`.cluster` -- the SM100 kernel's roles over a whole cluster and a 2-CTA pair:
  multicast copies, remote arrivals, the leader's expect_tx of both CTAs' bytes,
  tensor memory allocated per SM, co-resident clusters and CTA exit, checked by the
  same machine and checker.
* :mod:`.reduction` -- partial-order reduction for the exhaustive checker: a persistent
  subset of the steps at each state, enough to enumerate 4x2 clusters.
* :mod:`.residency` -- clusters sharing SMs reduced to their tensor-memory allocations:
  every order of allocations, checked for the deadlock of two clusters each holding
  one SM's columns.
* :mod:`.timeline` -- a discrete-event simulation under assumed latencies, with a
  Gantt chart per look-ahead policy. A model, not a measurement.

``python -m wsgemm.pipeline_sim`` runs all of it and prints a summary; docs/pipeline-sim.md
explains what it proves and what it assumes.
"""

from .checker import CheckResult, Finding, explore_exhaustively, explore_randomly
from .cluster import ClusterFault, ClusterSpec, build_cluster
from .machine import Machine, ProtocolViolation, Violation
from .mbarrier import EarlyArrivalError, Mbarrier, MbarrierError, OverArrivalError, WouldBlock
from .roles import KernelModel, build_kernel
from .spec import Fault, PipelineSpec, Structure, fault_applies
from .timeline import (
    Latencies,
    Timeline,
    compare_policies,
    draw_gantt,
    format_report,
    simulate,
    timeline_spec,
)

__all__ = [
    "CheckResult",
    "ClusterFault",
    "ClusterSpec",
    "EarlyArrivalError",
    "Fault",
    "Finding",
    "KernelModel",
    "Latencies",
    "Machine",
    "Mbarrier",
    "MbarrierError",
    "OverArrivalError",
    "PipelineSpec",
    "ProtocolViolation",
    "Structure",
    "Timeline",
    "Violation",
    "WouldBlock",
    "build_cluster",
    "build_kernel",
    "compare_policies",
    "draw_gantt",
    "explore_exhaustively",
    "explore_randomly",
    "fault_applies",
    "format_report",
    "simulate",
    "timeline_spec",
]
