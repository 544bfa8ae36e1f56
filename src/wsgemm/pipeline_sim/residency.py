"""Tensor memory as a per-SM resource: CTAs of several clusters on the same SMs.

The ring model (:mod:`.machine`) follows one CTA. What it leaves out is that the SM100
kernel's CTAs allocate tensor memory from a pool each SM has once (512 columns), and that
CTAs of *different* clusters may share an SM when shared memory leaves room. A CTA's
``tcgen05.alloc`` then waits until enough columns are free, and columns are freed only
when a CTA ends its persistent loop. A CTA of a cluster cannot end its loop before every
CTA of its cluster has allocated: its ring's slots are released by the MMAs of the CTAs
it multicasts to (``stages.release_mask``), and an MMA warp starts only after its CTA's
allocation. So two clusters that each got the columns of one SM and wait for the other
SM's never finish.

This module explores every order of allocations over the SMs one cluster spans, with as
many co-resident clusters as shared memory allows (``config.ctas_per_sm``), and reports
the first order that deadlocks. ``config.make_spec`` refuses the configurations that can
(see ``config._check_tmem_per_sm``); :func:`check` shows why, on a spec built without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import config as cfg


@dataclass(frozen=True)
class Residency:
    """CTAs sharing SMs: ``clusters`` co-resident clusters of ``cluster_size`` CTAs, CTA
    ``i`` of every cluster on SM ``i``, each allocating ``columns`` of the SM's
    ``tmem_columns``."""

    clusters: int
    cluster_size: int
    columns: int
    tmem_columns: int = 512

    @classmethod
    def of(cls, spec: cfg.KernelSpec) -> "Residency":
        """The residency of an SM100 kernel spec, from its shared-memory footprint."""
        budget = cfg.smem_budget(spec)
        return cls(cfg.ctas_per_sm(budget, spec.facts), spec.config.cluster_size, cfg.tmem_columns(spec),
                   spec.facts.tmem_columns)


@dataclass(frozen=True)
class ResidencyResult:
    states: int
    deadlock: tuple[str, ...] | None  # the steps to a deadlock, or None

    @property
    def safe(self) -> bool:
        return self.deadlock is None


WAITING, ALLOCATED, DONE = 0, 1, 2


def check(r: Residency) -> ResidencyResult:
    """Every interleaving of the CTAs' allocations and completions, breadth first."""
    ctas = [(cluster, sm) for cluster in range(r.clusters) for sm in range(r.cluster_size)]

    def free(state, sm):
        held = sum(r.columns for (c, s), pc in zip(ctas, state) if s == sm and pc == ALLOCATED)
        return r.tmem_columns - held

    def steps(state):
        for i, ((cluster, sm), pc) in enumerate(zip(ctas, state)):
            if pc == WAITING and free(state, sm) >= r.columns:
                yield i, "allocates"
            elif pc == ALLOCATED and all(state[j] != WAITING for j, (c, _) in enumerate(ctas) if c == cluster):
                yield i, "finishes and frees"

    start = tuple(WAITING for _ in ctas)
    seen = {start: ()}
    frontier = [start]
    while frontier:
        nxt = []
        for state in frontier:
            moves = list(steps(state))
            if not moves and any(pc != DONE for pc in state):
                blocked = [f"cluster {c} CTA on SM {s} waits for {r.columns} columns ({free(state, s)} free)"
                           for (c, s), pc in zip(ctas, state) if pc == WAITING]
                return ResidencyResult(len(seen), seen[state] + tuple(blocked))
            for i, what in moves:
                child = state[:i] + (state[i] + 1,) + state[i + 1:]
                if child not in seen:
                    cluster, sm = ctas[i]
                    seen[child] = seen[state] + (f"cluster {cluster} CTA on SM {sm} {what}",)
                    nxt.append(child)
        frontier = nxt
    return ResidencyResult(len(seen), None)
