"""Partial-order reduction for :func:`.checker.explore_exhaustively`: at each state,
explore only a *persistent set* of the enabled steps, and merge states that differ
only in a probe's token that cannot change what its role does.

Most interleavings of a cluster differ only in the order of steps that do not affect
each other -- CTA 3's epilogue storing a tile and CTA 5's copy landing -- and every
order of those reaches the same states. A set of enabled steps is *persistent* when no
sequence of steps outside it can touch (or enable, or disable) any step in it; exploring
only such a set at each state still reaches every state in which nothing can happen,
and (see below) every violation. How a set is found, from a seed step:

* **Processes.** Each role, TMA copy in flight, MMA queue and commit on its way steps on
  its own. The set holds whole processes: the next step of each one in it.
* **Footprints.** Every op reads or writes resources: barriers, slots, accumulators,
  tensor-memory state per CTA and SM, exit flags, stores. A few updates commute and
  are marked so: the contributions to one barrier phase (arrivals, ``expect_tx``,
  landed bytes) when the programs deliver exactly what the barrier counts -- then only
  the last completes the phase, whatever the order -- and the copies, landings and MMA
  completions of one k-block in a slot.
* **Reach.** For the processes outside the set, how far each can get without a step of
  the set: a wait passes only if every contribution its phase still needs is within
  reach. Whatever the outside does is within that reach.
* **Closure.** A process outside the set whose reachable steps conflict with a step in
  it joins the set; so does, for a wait or probe in the set whose answer would change if
  its phase completed, one holder of a contribution to that phase (then it cannot
  complete); and for a disabled step, whatever could enable it. The last op of a role
  may exit its CTA, which arrivals there conflict with. The smallest set over all seeds
  is explored.

**Tokens.** A probe's answer (the role's token) matters only at the Wait that reads it,
and only if the barrier's next phase could complete before that Wait; when it cannot,
a true token and a false one make the role do the same, so the token is cleared and the
two states are one; and a probe whose answer cannot matter is independent of the
barrier it reads.

**Why the verdict is the same.** (1) Every state in which nothing can happen -- a
deadlock, or the end, where the stores are checked -- is reached: a step of a persistent
set stays enabled along any sequence of outside steps, so such a state lies on a path
through one of the set's steps (P. Godefroid, *Partial-Order Methods for the
Verification of Concurrent Systems*, 1996). (2) A violation is raised by one step in the state
before it; the steps commuted past it touch nothing it reads, so it raises the same
violation there; and when a step of the chosen set itself raises, every enabled step of
that state is explored, so no other violation hides behind it. (3) Remembering states
is sound because the state graph has no cycles (every step advances a program counter,
lands a copy, completes an MMA or delivers a commit) and the set chosen depends only on
the state. (4) Cleared tokens are never read before a probe overwrites them or the Wait
passes anyway, so merged states have the same futures. Tests run both explorers on the
small configurations (1x1, 2x1, one CTA of each kernel, every planted bug) and require
the same verdict and the same kinds of violation, and check on sampled states that each
chosen set is persistent by enumerating the outside sequences.
"""

from __future__ import annotations

from collections import defaultdict

from .machine import Machine, Step
from .ops import (
    Arrive,
    ArriveExpectTx,
    Commit,
    IssueMma,
    PassTurn,
    ReadAccumulator,
    StoreTile,
    TmaLoad,
    TmemAlloc,
    TmemDealloc,
    TryWait,
    Wait,
    WaitMmas,
    WaitTmemAllocated,
    WaitTurn,
)
from .roles import KernelModel

# An access footprint: (reads, writes, adds) as bit masks. Two footprints conflict
# unless each touches the other's resources only by reads against reads, or by adds
# against adds of the same version (see _Resources.add).
Mask = tuple[int, int, int]
NOTHING: Mask = (0, 0, 0)


def _union(a: Mask, b: Mask) -> Mask:
    return a[0] | b[0], a[1] | b[1], a[2] | b[2]


def _conflict(a: Mask, b: Mask) -> bool:
    ar, aw, aa = a
    br, bw, ba = b
    return bool(aw & (br | bw | ba) or ar & (bw | ba) or aa & (br | bw))


class _Resources:
    """Bit positions: one per version of each resource (a barrier's phases, the
    k-blocks a slot holds in turn, the tiles of an accumulator), one for the rest."""

    def __init__(self):
        self.bits: dict[tuple, int] = {}
        self.of: dict[tuple, int] = defaultdict(int)  # resource -> mask of all its versions
        self.frozen = False  # set once every version is known: "all versions" masks are final

    def bit(self, resource: tuple, version=None) -> int:
        key = (resource, version)
        if key not in self.bits:
            assert not (self.frozen and version is not None), f"unknown version {key}"
            self.bits[key] = 1 << len(self.bits)
            self.of[resource] |= self.bits[key]
        return self.bits[key]

    def read(self, resource: tuple) -> Mask:
        return self.all(resource), 0, 0

    def write(self, resource: tuple) -> Mask:
        return 0, self.all(resource), 0

    def add(self, resource: tuple, version) -> Mask:
        """A commuting update of one version: it commutes with the same update of the
        same version and conflicts with everything else on the resource."""
        mine = self.bit(resource, version)
        return self.all(resource) & ~mine, 0, mine

    def all(self, resource: tuple) -> int:
        if resource not in self.of:
            self.bit(resource)
        return self.of[resource]


class Reduction:
    """The reduction for one model. What it knows statically: each op's footprint (its
    own, and that of the hardware work it starts), who contributes to each barrier
    phase, which phases are exactly accounted, and where each token is read."""

    def __init__(self, kernel: KernelModel):
        self.kernel = kernel
        k = kernel
        # Collect versions first so that masks of "all versions" are complete.
        contributions: dict[tuple[int, int], list] = defaultdict(list)  # (b, p) -> [(role, pc)]
        arrivals: dict[tuple[int, int], int] = defaultdict(int)
        announced: dict[tuple[int, int], int] = defaultdict(int)
        landed: dict[tuple[int, int], int] = defaultdict(int)
        res = self.res = _Resources()
        for role, program in enumerate(k.programs):
            for pc, op in enumerate(program):
                for b, p, n_arrive, n_announce, n_land in _contributions(op):
                    contributions[(b, p)].append((role, pc))
                    arrivals[(b, p)] += n_arrive
                    announced[(b, p)] += n_announce
                    landed[(b, p)] += n_land
                    res.bit(("barrier", b), p)
                if isinstance(op, TmaLoad):
                    for slot, _ in op.destinations:
                        res.bit(("slot", slot), op.kblock)
                if isinstance(op, IssueMma):
                    for a in (op.acc, *op.peer_accs):
                        res.bit(("acc", a), op.tile)
        res.frozen = True
        self.contributors = {bp: tuple(sorted(set(v))) for bp, v in contributions.items()}
        self.exact = {bp for bp in contributions
                      if arrivals[bp] == k.barrier_counts[bp[0]] and announced[bp] == landed[bp]}
        # Per role and pc: the op's own footprint, and that of the work it starts.
        self.own: list[list[Mask]] = []
        self.spawned: list[list[Mask]] = []
        for role, program in enumerate(k.programs):
            own, spawned = [], []
            for pc, op in enumerate(program):
                mine, later = self._op(role, op)
                own.append(mine)
                spawned.append(later)
            self.own.append(own)
            self.spawned.append(spawned)
        # A role's last op exits its CTA if the CTA's other roles have finished.
        self.exit_mask = [res.write(("exited", cta)) for cta in range(k.cta_count)]
        self.roles_of_cta = [tuple(k.roles_of(cta)) for cta in range(k.cta_count)]
        self.barrier_read = [[op.barrier if isinstance(op, (TryWait, Wait)) else None for op in program]
                             for program in k.programs]
        self.contributes = [[tuple((b, p) for b, p, *_ in _contributions(op))
                             if isinstance(op, (Arrive, ArriveExpectTx)) else () for op in program]
                            for program in k.programs]
        self.blocking = [[isinstance(op, (Wait, TmemAlloc, WaitTmemAllocated, WaitMmas, WaitTurn)) for op in program]
                         for program in k.programs]
        # Where the token is read next: the pc of the Wait that reads it before a probe
        # overwrites it (None: dead there).
        self.token_reader = []
        for program in k.programs:
            reader = [None] * (len(program) + 1)
            for pc in reversed(range(len(program))):
                op = program[pc]
                if isinstance(op, Wait) and op.unless_token:
                    reader[pc] = pc
                elif not isinstance(op, TryWait):
                    reader[pc] = reader[pc + 1]
            self.token_reader.append(reader)
        # The pc of the last probe before each pc (None: none since the start).
        self.last_probe = []
        for program in k.programs:
            last, before = None, []
            for pc, op in enumerate(program):
                before.append(last)
                if isinstance(op, TryWait):
                    last = pc
            self.last_probe.append(before)
        self._segments: dict[tuple[int, int, int], Mask] = {}
        self._hardware: dict = {}

    # -- footprints of ops ------------------------------------------------------------------

    def _contribution(self, b: int, p: int) -> Mask:
        if (b, p) in self.exact:
            return self.res.add(("barrier", b), p)
        return self.res.write(("barrier", b))

    def _alive(self, barriers=(), slots=()) -> Mask:
        k, res = self.kernel, self.res
        mask = NOTHING
        for cta in {k.barrier_cta[b] for b in barriers} | {k.slot_cta(s) for s in slots}:
            mask = _union(mask, res.read(("exited", cta)))
        return mask

    def landing(self, slot: int, kblock: int, barrier: int, phase: int) -> Mask:
        return _union(_union(self.res.add(("slot", slot), kblock), self._contribution(barrier, phase)),
                      self._alive([barrier], [slot]))

    def arrival(self, barriers, phase: int) -> Mask:
        mask = self._alive(barriers)
        for b in barriers:
            mask = _union(mask, self._contribution(b, phase))
        return mask

    def completion(self, queue: int, slots, kblock: int, accs, tiles) -> Mask:
        res = self.res
        mask = res.write(("completed", queue))
        for s in slots:
            mask = _union(mask, res.add(("slot", s), kblock))
        for a, t in zip(accs, tiles):
            mask = _union(mask, res.add(("acc", a), t))
        return mask

    def _op(self, role: int, op) -> tuple[Mask, Mask]:
        """(own footprint, footprint of the hardware work it starts) of ``op``."""
        k, res, u = self.kernel, self.res, _union
        if isinstance(op, (TryWait, Wait)):
            return NOTHING, NOTHING  # barrier reads are tracked apart (barrier_read)
        if isinstance(op, (Arrive, ArriveExpectTx)):
            return self.arrival([op.barrier], op.phase), NOTHING
        if isinstance(op, TmaLoad):
            mine = NOTHING
            later = NOTHING
            for slot, barrier in op.destinations:
                mine = u(mine, res.add(("slot", slot), op.kblock))
                later = u(later, self.landing(slot, op.kblock, barrier, op.phase))
            return mine, later
        if isinstance(op, IssueMma):
            q = k.role_queues[role]
            slots = (op.slot, *op.peer_slots)
            accs = (op.acc, *op.peer_accs)
            mine = res.write(("issued", q))
            for s in slots:
                mine = u(mine, res.read(("slot", s)))
            for a in accs:
                cta = k.acc_cta(a)
                if cta is not None:
                    mine = u(mine, res.read(("tmem_state", cta)))
                if op.first:
                    mine = u(mine, res.write(("acc", a)))
            return mine, self.completion(q, slots, op.kblock, accs, [op.tile] * len(accs))
        if isinstance(op, Commit):
            return res.read(("issued", k.role_queues[role])), self.arrival(op.barriers, op.phase)
        if isinstance(op, WaitMmas):
            return res.read(("completed", k.role_queues[role])), NOTHING
        if isinstance(op, ReadAccumulator):
            cta = k.acc_cta(op.acc)
            mine = res.write(("acc", op.acc))
            if cta is not None:
                mine = u(mine, res.read(("tmem_state", cta)))
            return mine, NOTHING
        if isinstance(op, StoreTile):
            mine = res.write(("store", op.tile, op.part))
            if op.reads_accumulator:
                mine = u(mine, res.write(("acc", op.acc)))
            return mine, NOTHING
        if isinstance(op, WaitTurn):
            return res.read(("turns",)), NOTHING
        if isinstance(op, PassTurn):
            return res.write(("turns",)), NOTHING
        if isinstance(op, TmemAlloc):
            mine = u(res.write(("tmem_free", op.sm)), res.write(("tmem_state", op.cta)))
            permit = res.write if op.relinquish else res.read
            return u(mine, permit(("relinquished", op.cta))), NOTHING
        if isinstance(op, WaitTmemAllocated):
            mine = NOTHING
            for c in op.ctas:
                mine = u(mine, res.read(("tmem_state", c)))
            return mine, NOTHING
        if isinstance(op, TmemDealloc):
            mine = NOTHING
            for c in op.pair:
                mine = u(u(mine, res.write(("tmem_state", c))), res.write(("tmem_free", k.cta_sm[c])))
            return mine, NOTHING
        raise TypeError(f"no footprint for {type(op).__name__}")

    def persistent(self, machine: Machine, steps: list[Step]) -> list[Step]:
        """A persistent subset of ``steps``, the enabled steps of ``machine`` (in their
        order): the smallest closure over all seeds."""
        return _persistent(machine, self, steps)

    def forget_tokens(self, machine: Machine) -> None:
        """Clear every true token that cannot change what its role does: one no op reads
        before a probe overwrites it, and one whose Wait would pass anyway -- the phase it
        waits for has completed, and the barrier's current phase cannot complete before
        the role reaches that Wait. States that differ only there behave alike and
        become one state."""
        state = None
        for role, pc in enumerate(machine.pcs):
            if not machine.tokens[role]:
                continue
            reader = self.token_reader[role][pc]
            if reader is None:
                machine.tokens[role] = False
                continue
            wait = self.kernel.programs[role][reader]
            barrier = machine.barriers[wait.barrier]
            if not barrier.test_wait(wait.parity):
                continue
            if state is None:
                state = _State(machine, self, [])
            if state.held_back_until(wait.barrier, role, reader):
                machine.tokens[role] = False

    def segment(self, role: int, start: int, end: int) -> tuple[Mask, int]:
        """Footprint of ops ``start:end`` of ``role`` and of the work they start, and
        the barriers they wait on or probe (a bit per barrier)."""
        key = (role, start, end)
        found = self._segments.get(key)
        if found is None:
            mask = NOTHING
            read = 0
            for pc in range(start, end):
                mask = _union(_union(mask, self.own[role][pc]), self.spawned[role][pc])
                if self.barrier_read[role][pc] is not None:
                    read |= 1 << self.barrier_read[role][pc]
            found = self._segments[key] = (mask, read)
        return found

    def hardware(self, step: Step) -> Mask:
        """Footprint of a TMA copy landing or a commit arriving."""
        mask = self._hardware.get(step)
        if mask is None:
            c = step.arg
            if step.kind == "tma":
                mask = self.landing(c.slot, c.kblock, c.barrier, c.phase)
            else:
                mask = self.arrival(c.barriers, c.phase)
            self._hardware[step] = mask
        return mask


def _contributions(op):
    """(barrier, phase, arrivals, announced bytes, landed bytes) that ``op`` or the
    hardware work it starts delivers."""
    if isinstance(op, Arrive):
        yield op.barrier, op.phase, op.count, 0, 0
    elif isinstance(op, ArriveExpectTx):
        yield op.barrier, op.phase, 1, op.nbytes, 0
    elif isinstance(op, Commit):
        for b in op.barriers:
            yield b, op.phase, 1, 0, 0
    elif isinstance(op, TmaLoad):
        for _, b in op.destinations:
            yield b, op.phase, 0, 0, op.nbytes


class _Process:
    """One thing that steps on its own at a state: a role, a TMA copy in flight, an MMA
    queue, a commit on its way."""

    __slots__ = ("step", "role", "now", "whole", "queue", "contributes", "reads")

    def __init__(self, step, role, now, whole, queue=None, contributes=(), reads=None):
        self.step = step  # the enabled step, or None if its next step is disabled
        self.role = role  # role index, or None for hardware
        self.now = now  # footprint of its next step (barrier reads apart)
        self.whole = whole  # hardware: footprint of all its steps
        self.queue = queue  # a commit: the MMA queue whose completions enable it
        self.contributes = contributes  # the (barrier, phase)s its next step arrives on
        self.reads = reads  # the barrier its next step waits on or probes, if any


class _State:
    """The processes of one machine state and what the closure needs of them."""

    def __init__(self, machine: Machine, fp: Reduction, steps: list[Step]):
        self.m = machine
        self.fp = fp
        self._moot = None
        self._remaining_at: dict[int, tuple] = {}
        self.parity = [b.phase & 1 for b in machine.barriers]  # test_wait(P) is parity != P
        kernel = machine.kernel
        enabled_roles = {s.arg for s in steps if s.kind == "role"}
        self.procs: list[_Process] = []
        self.role_proc: dict[int, int] = {}
        for role, program in enumerate(kernel.programs):
            pc = machine.pcs[role]
            if pc < len(program):
                self.role_proc[role] = len(self.procs)
                op = program[pc]
                reads = fp.barrier_read[role][pc]
                if isinstance(op, Wait) and op.unless_token and machine.tokens[role]:
                    reads = None  # skipped: the token answers
                self.procs.append(_Process(Step("role", role) if role in enabled_roles else None, role,
                                           fp.own[role][pc], None, contributes=fp.contributes[role][pc],
                                           reads=reads))
        self.hw_by_phase: dict[tuple[int, int], list[int]] = defaultdict(list)
        for c in sorted(machine.copies_in_flight):
            step = Step("tma", c)
            mask = fp.hardware(step)
            self.hw_by_phase[(c.barrier, c.phase)].append(len(self.procs))
            self.procs.append(_Process(step, None, mask, mask, contributes=((c.barrier, c.phase),)))
        self.queue_proc: dict[int, int] = {}
        for q, groups in enumerate(machine.mma_queues):
            if groups:
                self.queue_proc[q] = len(self.procs)
                masks = [fp.completion(q, g.slots, g.kblock, g.accs, [machine.accumulators[a].tile for a in g.accs])
                         for g in groups]
                whole = NOTHING
                for mask in masks:
                    whole = _union(whole, mask)
                self.procs.append(_Process(Step("mma", q), None, masks[0], whole))
        for c in sorted(machine.commits_in_flight):
            step = Step("commit", c)
            mask = fp.hardware(step)
            on = machine.mmas_completed[c.queue] >= c.after
            for b in c.barriers:
                self.hw_by_phase[(b, c.phase)].append(len(self.procs))
            self.procs.append(_Process(step if on else None, None, mask, mask, queue=c.queue,
                                       contributes=tuple((b, c.phase) for b in c.barriers)))

    @property
    def moot_probes(self) -> set[int]:
        """Roles whose next op is a probe whose answer does not matter."""
        if self._moot is None:
            self._moot = {p.role for p in self.procs if p.role is not None and p.step is not None
                          and isinstance(self.m.kernel.programs[p.role][self.m.pcs[p.role]], TryWait)
                          and self.probe_is_moot(p.role)}
        return self._moot

    # -- which steps can happen without the chosen processes ------------------------------

    def outside_reach(self, chosen: set[int], cap: tuple[int, int] | None = None) -> dict[int, int]:
        """For every role outside ``chosen``: how far it can get (exclusive op index)
        while no process in ``chosen`` takes a step (and role ``cap[0]`` stops before
        op ``cap[1]``). An over-approximation: a blocking op counts as passable unless
        what it needs is provably out of reach."""
        m, fp = self.m, self.fp
        reach = {r: m.pcs[r] for r, i in self.role_proc.items() if i not in chosen}
        ends = {r: len(m.kernel.programs[r]) for r in reach}
        if cap is not None:
            ends[cap[0]] = cap[1]
        changed = True
        while changed:
            changed = False
            for r in reach:
                while reach[r] < ends[r]:
                    k = reach[r]
                    if fp.blocking[r][k] and not self._passable(r, k, chosen, reach):
                        break
                    reach[r] = k + 1
                    changed = True
        return reach

    def held_back_until(self, b: int, role: int, pc: int, later: int = 0) -> bool:
        """Can phase ``later`` after the current one of ``b`` complete only after
        ``role`` passes op ``pc``?"""
        q = self.m.barriers[b].phase + later
        if (b, q) not in self.fp.contributors:
            return True  # nothing arrives for it: it never completes
        if (b, q) not in self.fp.exact:
            return False
        reach = self.outside_reach(set(), cap=(role, pc))
        m = self.m
        for r, k in self.fp.contributors.get((b, q), ()):
            if k >= m.pcs[r] and not (r in reach and k < reach[r]):
                return True
        return False

    def probe_is_moot(self, role: int) -> bool:
        """Does the answer of ``role``'s probe (its next op) not matter: whatever it
        answers, the Wait that reads the token behaves the same? A true answer
        matters only if the barrier's next phase could complete before that Wait."""
        m, fp = self.m, self.fp
        pc = m.pcs[role]
        probe = m.kernel.programs[role][pc]
        reader = fp.token_reader[role][pc + 1]
        if reader is None:
            return True  # nothing reads it
        wait = m.kernel.programs[role][reader]
        if (wait.barrier, wait.parity) != (probe.barrier, probe.parity):
            return False
        now = m.barriers[probe.barrier].test_wait(probe.parity)
        # True now: it stays true until the current phase completes. False now: it
        # turns true when the current phase completes, and then matters unless the
        # phase after it is held back.
        return self.held_back_until(probe.barrier, role, reader, later=0 if now else 1)

    def _remaining(self, b: int, q: int):
        """Processes holding a contribution to phase ``q`` of barrier ``b`` not yet
        delivered: (role, pc) of role ops, and indices of hardware processes."""
        if q == self.m.barriers[b].phase:
            found = self._remaining_at.get(b)
            if found is None:
                found = self._remaining_at[b] = self._remaining_now(b, q)
            return found
        return self._remaining_now(b, q)

    def _remaining_now(self, b: int, q: int):
        pcs = self.m.pcs
        roles = [(role, pc) for role, pc in self.fp.contributors.get((b, q), ()) if pc >= pcs[role]]
        return roles, self.hw_by_phase.get((b, q), [])

    def _can_fire(self, i: int, chosen) -> bool:
        """Can hardware process ``i`` take its step without ``chosen``?"""
        if i in chosen:
            return False
        p = self.procs[i]
        return p.step is not None or p.queue is None or self.queue_proc.get(p.queue) not in chosen

    def _held_back(self, b: int, chosen, reach, but: int | None = None) -> bool:
        """Is a contribution to the current phase of ``b`` (other than process ``but``'s
        next step) out of reach without ``chosen``? Then that phase cannot complete."""
        m = self.m
        roles, hardware = self._remaining(b, m.barriers[b].phase)
        for role, pc in roles:
            if pc < reach.get(role, -1):
                continue
            if but is not None and self.role_proc[role] == but and pc == m.pcs[role]:
                continue
            return True
        for i in hardware:
            if i != but and not self._can_fire(i, chosen):
                return True
        return False

    def _phase_can_complete(self, b: int, chosen, reach) -> bool:
        """Can the current phase of barrier ``b`` complete without ``chosen``?"""
        if (b, self.m.barriers[b].phase) not in self.fp.exact:
            return bool(self._writers(self.fp.res.all(("barrier", b)), chosen, reach))
        return not self._held_back(b, chosen, reach)

    def _writers(self, bits: int, chosen, reach) -> set[int]:
        """Processes outside ``chosen`` that (within their reach) write or add to ``bits``."""
        fp, m = self.fp, self.m
        out = set()
        for r, end in reach.items():
            (_, w, a), _ = fp.segment(r, m.pcs[r], end)
            if (w | a) & bits:
                out.add(self.role_proc[r])
        for i, p in enumerate(self.procs):
            if p.role is None and self._can_fire(i, chosen) and (p.whole[1] | p.whole[2]) & bits:
                out.add(i)
        return out

    def _passable(self, r: int, k: int, chosen, reach) -> bool:
        m, fp = self.m, self.fp
        op = m.kernel.programs[r][k]
        if isinstance(op, Wait):
            if self.parity[op.barrier] != op.parity:  # its phase has completed
                return True
            if op.unless_token and self._token_may_be_true(r, k, op, chosen, reach):
                return True
            return self._phase_can_complete(op.barrier, chosen, reach)
        if k == m.pcs[r] and op.ready(m, r):
            return True
        res = fp.res
        if isinstance(op, TmemAlloc):
            return bool(self._writers(res.all(("tmem_free", op.sm)), chosen, reach))
        if isinstance(op, WaitTmemAllocated):
            return bool(self._writers(sum(res.all(("tmem_state", c)) for c in op.ctas), chosen, reach))
        if isinstance(op, WaitMmas):
            # Passes once at most ``pending`` of the role's MMAs are in flight: those in
            # flight now and those it issues before, less what completes meanwhile.
            q = m.kernel.role_queues[r]
            if self.queue_proc.get(q) not in chosen:
                return True
            issued = sum(isinstance(x, IssueMma) for x in m.kernel.programs[r][m.pcs[r]:k])
            return len(m.mma_queues[q]) + issued <= op.pending
        if isinstance(op, WaitTurn):
            return bool(self._writers(res.all(("turns",)), chosen, reach))
        raise TypeError(type(op).__name__)

    def _token_may_be_true(self, r, k, op, chosen, reach) -> bool:
        """Can the token hold true when ``op`` (the Wait at ``k``) reads it: from a probe
        between the role's pc and ``k`` that may see the phase completed, or already?"""
        m = self.m
        j = self.fp.last_probe[r][k]
        if j is None or j < m.pcs[r]:
            return m.tokens[r]
        probe = m.kernel.programs[r][j]
        if (probe.barrier, probe.parity) != (op.barrier, op.parity):
            return True
        return self._phase_can_complete(op.barrier, chosen, reach)

    # -- the closure --------------------------------------------------------------------

    def _last(self, role: int) -> bool:
        return self.m.pcs[role] == len(self.m.kernel.programs[role]) - 1

    def _may_exit(self, role: int, chosen, reach) -> bool:
        """Can ``role``'s last op be the one that exits its CTA: can every other role of
        the CTA finish without ``chosen``?"""
        m = self.m
        for other in self.fp.roles_of_cta[m.kernel.role_cta[role]]:
            if other == role or m.pcs[other] == len(m.kernel.programs[other]):
                continue
            if reach.get(other) != len(m.kernel.programs[other]):
                return False
        return True

    def _hold_back_one(self, b: int, chosen, reach, but: int | None = None) -> set[int] | None:
        """Processes to add so that the current phase of ``b`` cannot complete without
        ``chosen`` (nothing if it cannot already): one holder of a contribution if the
        phase is exactly accounted, else every writer of ``b``. With ``but``, a
        contribution other than that process's next step; None if there is none."""
        m, fp = self.m, self.fp
        q = m.barriers[b].phase
        if (b, q) not in fp.exact:
            return self._writers(fp.res.all(("barrier", b)), chosen, reach) if but is None else None
        if self._held_back(b, chosen, reach, but):
            return set()
        roles, hardware = self._remaining(b, q)
        for i in hardware:
            if i != but:
                return {i}
        for role, pc in roles:
            i = self.role_proc[role]
            if not (i == but and pc == m.pcs[role]):
                return {i}
        return None if but is not None else set()

    def closure(self, seed: int, limit: int | None) -> list[int] | None:
        """Processes that must be explored together with ``seed`` (None: more enabled
        ones than ``limit``)."""
        chosen = {seed}
        procs, fp, m = self.procs, self.fp, self.m
        moot = self.moot_probes
        while True:
            reach = self.outside_reach(chosen)
            outside = {}
            reads = {}  # outside process -> barriers it may wait on or probe (bits)
            for r, end in reach.items():
                mask, read = fp.segment(r, m.pcs[r], end)
                if end == len(m.kernel.programs[r]) and self._may_exit(r, chosen, reach):
                    mask = _union(mask, fp.exit_mask[m.kernel.role_cta[r]])
                i = self.role_proc[r]
                outside[i] = mask
                reads[i] = read
            for i, p in enumerate(procs):
                if p.role is None and self._can_fire(i, chosen):
                    outside[i] = p.whole
            added = set()
            for i in chosen:
                p = procs[i]
                if p.step is None:
                    added |= self._enablers(i, chosen, reach)
                    continue
                now = p.now
                if p.role is not None and self._last(p.role) and self._may_exit(p.role, chosen, reach):
                    now = _union(now, fp.exit_mask[m.kernel.role_cta[p.role]])
                for j, mask in outside.items():
                    if _conflict(now, mask):
                        added.add(j)
                if p.reads is not None and not (p.role in moot):
                    # Its answer (or whether it waits) changes if the phase completes meanwhile.
                    added |= self._hold_back_one(p.reads, chosen, reach)
                for b, phase in p.contributes:
                    # It changes what waits and probes of b see only if it completes the phase.
                    readers = {j for j, read in reads.items() if read >> b & 1}
                    if not readers:
                        continue
                    if phase != m.barriers[b].phase:
                        added |= readers
                        continue
                    other = self._hold_back_one(b, chosen, reach, but=i)
                    added |= readers if other is None else other
            added -= chosen
            if not added:
                break
            chosen |= added
            if limit is not None and sum(procs[i].step is not None for i in chosen) >= limit:
                return None
        return sorted(i for i in chosen if procs[i].step is not None)

    def _enablers(self, i: int, chosen, reach) -> set[int]:
        """For a disabled process in ``chosen`` that the outside could enable: processes
        to add so that it cannot be (empty if it cannot be already)."""
        p, m, fp = self.procs[i], self.m, self.fp
        if p.role is None:  # a commit waiting for its MMAs
            q = self.queue_proc.get(p.queue)
            return set() if q is None or q in chosen else {q}
        r = p.role
        k = m.pcs[r]
        if not self._passable(r, k, chosen, reach):
            return set()
        op = m.kernel.programs[r][k]
        if isinstance(op, Wait):
            return self._hold_back_one(op.barrier, chosen, reach)
        if isinstance(op, WaitMmas):
            return {self.queue_proc[m.kernel.role_queues[r]]}
        res = fp.res
        if isinstance(op, TmemAlloc):
            return self._writers(res.all(("tmem_free", op.sm)), chosen, reach)
        if isinstance(op, WaitTmemAllocated):
            return self._writers(sum(res.all(("tmem_state", c)) for c in op.ctas), chosen, reach)
        if isinstance(op, WaitTurn):
            return self._writers(res.all(("turns",)), chosen, reach)
        raise TypeError(type(op).__name__)


def _persistent(machine: Machine, fp: Reduction, steps: list[Step]) -> list[Step]:
    if len(steps) <= 1:
        return steps
    state = _State(machine, fp, steps)
    best = None
    for seed, p in enumerate(state.procs):
        if p.step is None:
            continue
        found = state.closure(seed, None if best is None else len(best))
        if found is not None and (best is None or len(found) < len(best)):
            best = found
            if len(best) == 1:
                break
    return [state.procs[i].step for i in best]
