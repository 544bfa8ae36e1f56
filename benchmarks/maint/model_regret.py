"""How far the cost model's pick is from the fastest plan timed, over every committed
sweep and autotune run: a check of a cost-model change on the CPU before it costs GPU
time, and the yardstick its constants were fitted by (docs/tuning-log/cost-model.md).

    python -m benchmarks.maint.model_regret
    python -m benchmarks.maint.model_regret --set FIXUP_S=3e-6 --worst 20
    python -m benchmarks.maint.model_regret --half tune      # the half the constants were fitted on
    python -m benchmarks.maint.model_regret --half held-out  # the half they were not

Reads every report under ``benchmarks/results/`` (``tuning-log/`` included) that holds
``sweep_configs`` results or ``autotune.json`` runs, keeps each problem with a
``B = W.t()`` weight (bf16) timed in at least two plans, rates every timed plan with
:func:`wsgemm.tuning.cost.estimate_seconds` on the GPU the report names (an H100 SXM or
an H200; reports that name none ran on an H200; ``--gpu`` keeps one kind), and prints the
*regret*: the time of the plan the model rates fastest over the fastest
timed, in single calls and in CUDA-graph replays, as geometric means, with the
problems more than 5 % off. ``--set`` overrides a constant of ``wsgemm.tuning.cost``.
The problems split into two halves by a hash of their shape: the constants were
fitted on ``tune`` and are reported on ``held-out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re

from wsgemm import GemmConfig
from wsgemm.tuning import H100_SXM, H200, Gpu, Problem
from wsgemm.tuning import cost

from benchmarks import RESULTS


# sweep_configs' grid labels ("swap 128x80 c1x2 split2") and GemmConfig.short() names,
# with a "model#N" prefix or "swap "/"direct " before them in some reports.
GRID_LABEL = re.compile(r"^(swap )?(\d+)x(\d+) c(\d)x(\d)(?: split(\d+))?$")
SHORT_LABEL = re.compile(r"^(?:model#\d+(?: twin)? )?(swap |direct )?(\d+)x(\d+)x(\d+)_c(\d)x(\d)_s(\w+)_e(\d)_"
                         r"(along_m|along_n)_w(\d+)_(\w+?)((?:_2cta|_split\d+|_streamk|_swapab|_pdl|_pingpong|_[ab]early)*)$")


def parse_label(label: str, default_plan: str | None = None) -> GemmConfig | None:
    """The plan a report's label names; ``None`` for one the model does not rate (ping-pong
    consumers, reads before the wait, baselines)."""
    if label == "default" and default_plan:
        label = default_plan
    match = GRID_LABEL.match(label)
    if match:
        swap, tm, tn, cm, cn, split = match.groups()
        return GemmConfig(tile_m=int(tm), tile_n=int(tn), cluster_m=int(cm), cluster_n=int(cn),
                          split_k=int(split or 1), swap_ab=bool(swap))
    match = SHORT_LABEL.match(label)
    if not match:
        return None
    swap, tm, tn, tk, cm, cn, stages, epi, _, swizzle, _, flags = match.groups()
    if any(flag in flags for flag in ("pingpong", "2cta", "early")):
        return None
    split = re.search(r"_split(\d+)", flags)
    return GemmConfig(tile_m=int(tm), tile_n=int(tn), tile_k=int(tk), cluster_m=int(cm), cluster_n=int(cn),
                      stages=None if stages == "auto" else int(stages), epi_stages=int(epi), swizzle=int(swizzle),
                      split_k=int(split.group(1)) if split else 1, stream_k="_streamk" in flags,
                      swap_ab="_swapab" in flags or (swap or "").strip() == "swap")


def gpu_named(name: str) -> Gpu:
    """The planner's numbers for the GPU a report names: an H100 SXM or, as the older
    reports that name none ran, an H200."""
    return H100_SXM if "H100" in (name or "") else H200


def timed_problems(tree, source: str, found: list, gpu: Gpu = H200) -> None:
    """Append every problem in ``tree``: (source, (m, n, k), {plan: (single us, graph us)}, GPU),
    the GPU the report's ``environment`` names."""
    if isinstance(tree, list):
        for item in tree:
            timed_problems(item, source, found, gpu)
        return
    if not isinstance(tree, dict):
        return
    if isinstance(tree.get("environment"), dict) and tree["environment"].get("gpu"):
        gpu = gpu_named(tree["environment"]["gpu"])
    if "shape" in tree and isinstance(tree.get("us"), (dict, list)):  # a sweep_configs shape
        shape = tree["shape"] if isinstance(tree["shape"], list) else [int(v) for v in str(tree["shape"]).split("x")]
        if len(shape) != 3 or tree.get("b", "W.t()") != "W.t()":
            return
        graph = dict(tree.get("graph_us") or {})
        plans = {}
        for label, times in dict(tree["us"]).items():
            plan = None if label.startswith("base") else parse_label(label, tree.get("default_plan"))
            if plan is None:
                continue
            single = times[0] if isinstance(times, list) else times
            replay = graph.get(label)
            replay = replay[0] if isinstance(replay, list) else replay
            if plan not in plans or single < plans[plan][0]:
                plans[plan] = (single, replay)
        if len(plans) >= 2:
            found.append((source, tuple(shape), plans, gpu))
        return
    for key, value in tree.items():
        if _autotune_entry(key, value):  # "GPU|sm90|bf16->bf16|kkn|m<=X|n=N|k=K|l=1": {"ms": {...}}
            fields = key.split("|")
            if fields[2] != "bf16->bf16" or fields[3] != "kkn" or fields[7] != "l=1":
                continue
            shape = (int(value.get("m") or fields[4][3:]), int(fields[5][2:]), int(fields[6][2:]))
            graph = value.get("timing") == "graph"
            plans = {plan: (None, ms * 1000) if graph else (ms * 1000, None)
                     for plan, ms in ((parse_label(label), ms) for label, ms in value["ms"].items())
                     if plan is not None and ms}
            if len(plans) >= 2:
                found.append((source, shape, plans, gpu_named(fields[0])))
        else:
            timed_problems(value, source, found, gpu)


def _autotune_entry(key, value) -> bool:
    return isinstance(key, str) and key.count("|") == 7 and isinstance(value, dict) and "ms" in value \
        and key.split("|")[0].endswith(("H200", "H100 80GB HBM3"))


def load_problems() -> list:
    found = []
    for path in sorted(RESULTS.rglob("*.json")):
        try:
            tree = json.loads(path.read_text())
        except ValueError:
            continue
        timed_problems(tree, path.relative_to(RESULTS).as_posix(), found)
    return found


def held_out(shape) -> bool:
    """The half of the problems the cost model's constants were not fitted on."""
    return int(hashlib.md5(repr(tuple(shape)).encode()).hexdigest(), 16) % 2 == 1


def regrets(problems, graph: bool, rate=None) -> list:
    """(regret, source, shape, plan the model picks, fastest timed) per problem."""
    rate = rate or (lambda problem, plan, gpu: cost.estimate_seconds(problem, plan, gpu))
    rows = []
    for source, shape, plans, gpu in problems:
        times = {plan: t[1] if graph else t[0] for plan, t in plans.items()}
        times = {plan: t for plan, t in times.items() if t}
        if len(times) < 2:
            continue
        problem = Problem(*shape, can_swap=True)
        pick = min(times, key=lambda plan: rate(problem, plan, gpu))
        fastest = min(times, key=times.get)
        rows.append((times[pick] / times[fastest], source, shape, pick, fastest))
    return rows


def label(c: GemmConfig) -> str:
    return (("swap " if c.swap_ab else "") + f"{c.tile_m}x{c.tile_n}" + (f"x{c.tile_k}" if c.tile_k != 64 else "")
            + f" c{c.cluster_m}x{c.cluster_n}" + (f" split{c.split_k}" if c.split_k > 1 else "")
            + (f" w{c.swizzle}" if c.swizzle > 1 else "") + (" stream-K" if c.stream_k else "")
            + (f" s{c.stages}" if c.stages else ""))


def geometric_mean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a constant of wsgemm.tuning.cost to change, e.g. FIXUP_S=3e-6 (repeatable)")
    p.add_argument("--worst", type=int, default=10, help="list this many of the worst problems")
    p.add_argument("--half", choices=("all", "tune", "held-out"), default="all")
    p.add_argument("--gpu", choices=("all", "h100", "h200"), default="all",
                   help="only the reports that ran on this GPU")
    args = p.parse_args(argv)
    for item in args.set:
        name, _, value = item.partition("=")
        if not hasattr(cost, name) or not name.isupper():
            p.error(f"--set {item}: wsgemm.tuning.cost has no constant {name!r}")
        setattr(cost, name, float(value))
    cost.ring_stages.cache_clear()
    problems = load_problems()
    if args.gpu != "all":
        wanted = H100_SXM if args.gpu == "h100" else H200
        problems = [item for item in problems if item[3] == wanted]
    if args.half != "all":
        problems = [item for item in problems if held_out(item[1]) == (args.half == "held-out")]
    print(f"{len(problems)} problems, {sum(len(item[2]) for item in problems)} timed plans")
    for graph in (False, True):
        rows = regrets(problems, graph)
        off = [row for row in rows if row[0] > 1.05]
        print(f"{'graph replays' if graph else 'single calls'}: {len(rows)} problems, the model's pick "
              f"{geometric_mean(row[0] for row in rows):.4f}x the fastest timed (geometric mean), "
              f"{len(off)} more than 5 % off")
        for regret, source, shape, pick, fastest in sorted(rows, key=lambda row: -row[0])[:args.worst]:
            print(f"  {regret:.3f}  {'x'.join(map(str, shape)):16s} picks {label(pick):28s} "
                  f"fastest {label(fastest):28s} {source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
