"""04 -- Inspect the compiled kernel: where does the producer's probe sit in the PTX?

Teaches: how to compile a wsgemm kernel without a GPU (``compile_spec(spec,
keep_artifacts=True)`` returns the PTX), and how to read the producer's k-loop in it:
for each look-ahead policy, the order of the slot acquire's byte announcement
(``mbarrier.arrive.expect_tx``), the TMA copies (``cp.async.bulk.tensor``), the
look-ahead probe (``mbarrier.try_wait`` into a predicate) and the branch that reads
the probe's answer. The SM100 kernel is compiled the same way (compile-only: it has
never run on a Blackwell GPU). ``python -m wsgemm lookahead`` prints the full
excerpts, with SASS when nvdisasm is installed.

Needs: any machine, compile only (no GPU).
Run:   python examples/04_inspect_kernel.py [--arch sm90|sm100|both]
"""

import argparse

from wsgemm import GemmConfig, Lookahead
from wsgemm import config as cfg
from wsgemm.compile import compile_spec
from wsgemm.inspection import LoopExcerpt, producer_loop_ptx


def key_lines(excerpt: LoopExcerpt) -> list[str]:
    """The loop's marked lines, plus the blocking waits (try_wait retry loops), in order."""
    notes = dict(excerpt.events)
    for i, line in enumerate(excerpt.lines):
        if "mbarrier.try_wait" in line and i not in notes:
            notes[i] = "wait: the blocking acquire, a try_wait retry loop"
    return [f"  {i:3}  {excerpt.lines[i].strip()[:72]:72}  <- {notes[i]}" for i in sorted(notes)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=("sm90", "sm100", "both"), default="both")
    arch_arg = parser.parse_args().arch
    arches = ("sm90", "sm100") if arch_arg == "both" else (arch_arg,)
    for arch in arches:
        for policy in Lookahead:
            spec = cfg.make_spec(arch, "bf16", "bf16", "k", "k", "n", GemmConfig(lookahead=policy))
            compiled = compile_spec(spec, keep_artifacts=True)
            excerpt = producer_loop_ptx(compiled.ptx)
            order = " -> ".join(text.split(":")[0] for _, text in excerpt.events)
            print(f"{spec.facts.compile_target} {policy.value}: {len(excerpt.lines)} PTX lines in the "
                  f"producer's k-loop; order: {order}")
            print("\n".join(key_lines(excerpt)) + "\n")
    print("before_copy: the probe of the next slot comes after this slot's announce and before its")
    print("copies, and its predicate is read at the top of the next iteration; after_copy probes")
    print("after the copies; none has no probe, only the blocking wait.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
