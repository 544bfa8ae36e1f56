"""01 -- The mbarrier ring, step by step.

Teaches: how a pair of mbarriers per shared-memory slot (``full[s]``, ``empty[s]``)
hands k-blocks from the TMA producer to the consumers, and which phase parity each
side waits for. The slot and parity come from wsgemm/kernels/common/stages.py, the
functions the kernels call; the barriers are the CPU model of PTX mbarriers
(wsgemm/pipeline_sim/mbarrier.py), so every line printed is what the GPU's barrier words hold.

Needs: any machine (pure Python, no GPU).
Run:   python examples/01_mbarrier_ring.py
"""

from wsgemm.kernels.common.stages import empty_wait_parity, full_wait_parity, ring_lap, stage_index
from wsgemm.pipeline_sim import Mbarrier, OverArrivalError, WouldBlock

STAGES = 2
CONSUMER_WARPS = 4  # one consumer warpgroup; each warp releases a slot with one arrival
STAGE_BYTES = 48 * 1024  # A 128x64 + B 256x64, bf16

full = [Mbarrier.init(1) for _ in range(STAGES)]  # the producer's arrive.expect_tx + TMA bytes
empty = [Mbarrier.init(CONSUMER_WARPS) for _ in range(STAGES)]  # one arrival per consumer warp


def show(old: Mbarrier, new: Mbarrier) -> str:
    done = f"completes phase {old.phase}; " if new.phase > old.phase else ""
    return (f"{done}in phase {new.phase} (parity {new.parity}), {new.pending} of {new.expected} "
            f"arrivals and {new.tx} B pending")


def produce(count: int) -> None:
    s, parity = stage_index(count, STAGES), empty_wait_parity(count, STAGES)
    print(f"producer, k-block {count}: slot {s}, lap {ring_lap(count, STAGES)}; "
          f"wait empty[{s}] for parity {parity}")
    empty[s].wait(parity)  # raises WouldBlock where a GPU thread would wait
    old, full[s] = full[s], full[s].arrive_expect_tx(STAGE_BYTES)
    print(f"  passed; arrive.expect_tx({STAGE_BYTES}) -> full[{s}] {show(old, full[s])}")
    for operand, nbytes in (("A", 16 * 1024), ("B", 32 * 1024)):
        old, full[s] = full[s], full[s].complete_tx(nbytes)
        print(f"  TMA copy of {operand} lands ({nbytes} B) -> full[{s}] {show(old, full[s])}")


def consume(read: int) -> None:
    s, parity = stage_index(read, STAGES), full_wait_parity(read, STAGES)
    print(f"consumer, k-block {read}: wait full[{s}] for parity {parity}")
    full[s].wait(parity)
    old = empty[s]
    for _ in range(CONSUMER_WARPS):
        empty[s] = empty[s].arrive()
    print(f"  passed, MMA done; {CONSUMER_WARPS} warps release -> empty[{s}] {show(old, empty[s])}")


print("A fresh mbarrier is in phase 0, and the phase 'before' it counts as completed:")
print(f"  try_wait(parity 1) = {Mbarrier.init(1).try_wait(1)}, try_wait(parity 0) = {Mbarrier.init(1).try_wait(0)}")
print("So on lap 0 the producer waits for parity 1 and passes at once.\n")

produce(0)
produce(1)
print()
try:
    produce(2)  # slot 0 again, but nobody has released k-block 0 yet
except WouldBlock as blocked:
    print(f"  BLOCKS: {blocked}\n")
consume(0)
produce(2)  # now the consumers' release completed phase 0 of empty[0]: parity 0 passes
consume(1)
consume(2)

print("\nOne arrival too many -- e.g. empty[] initialised with 3 while 4 warps release:")
bar = Mbarrier.init(3)
try:
    for _ in range(4):
        bar = bar.arrive(for_phase=0)  # each warp knows which phase it means, from its counter
except OverArrivalError as error:
    print(f"  {error}")
print("On the GPU nothing complains: the 4th arrival silently counts towards the next phase.")
