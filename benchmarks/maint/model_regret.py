"""How far the throughput model's pick is from the fastest plan timed, over every
committed sweep: a check of a model change on the CPU before it costs GPU time.

    python benchmarks/model_regret.py
    python benchmarks/model_regret.py --set split_fixup_per_extra_split_s=0 --worst 20

Reads the ``sweep_configs.py`` results under ``benchmarks/results/``, its archive
included (any JSON that holds them, however nested), keeps each problem with a ``B = W.t()`` weight timed in
at least two plans the model can rate (labels such as ``swap 128x80 c1x2 split2``,
and ``default`` / ``model#`` labels in the short config form, ring depth ignored), and
rates each plan with :func:`wsgemm.heuristics.estimate_seconds` (``--set`` changes a
``ThroughputModel`` rate). A problem's *regret* is the time of the plan the model
rates fastest over the fastest timed, in single calls and in graph replays; printed:
their geometric means and the problems more than 5 % off. By default the plain rates:
the plan families the default path weighs with their own measured gains are rated as
any other plan, so their regrets show what those gains correct. ``--ranked`` takes
instead the plan :func:`wsgemm.heuristics.ranked_sm90_configs` puts first (the
families and their gains, the swap decision), as the launch policy runs it, on the
problems where that plan was timed (not the tuned table's winners).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import result_files  # noqa: E402
from wsgemm import heuristics  # noqa: E402

SMS = 132  # the H200 the sweeps ran on
# sweep_configs.grid's labels, and GemmConfig.short() (the default path's plan)
GRID_LABEL = re.compile(r"^(swap )?(\d+)x(\d+) c(\d)x(\d)(?: split(\d+))?$")
SHORT_LABEL = re.compile(r"^(?:model#\d+(?: twin)? )?(swap |direct )?(\d+)x(\d+)x64_c(\d)x(\d)_s\d+_e\d_along_m_w1"
                         r"_before_copy(?:_split(\d+))?(?:_pdl)?$")


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the model tells plans apart by (``GemmConfig``'s tile, cluster, split, swap)."""

    swap_ab: bool
    tile_m: int
    tile_n: int
    cluster_m: int
    cluster_n: int
    split_k: int

    def __str__(self) -> str:
        return (("swap " if self.swap_ab else "") + f"{self.tile_m}x{self.tile_n} c{self.cluster_m}x{self.cluster_n}"
                + (f" split{self.split_k}" if self.split_k > 1 else ""))


def parse_label(label: str, default_plan: str | None) -> Plan | None:
    """The plan a sweep label names, or None for one the model does not rate apart
    (ring depths, bands, stream-K, ping-pong, the baseline package)."""
    if label == "default" and default_plan:
        label = default_plan
    for pattern in (GRID_LABEL, SHORT_LABEL):
        match = pattern.match(label)
        if match:
            swap, tm, tn, cm, cn, split = match.groups()
            return Plan(swap is not None and swap.strip() == "swap", int(tm), int(tn), int(cm), int(cn),
                        int(split or 1))
    return None


def timed_problems(tree, source: str, found: list) -> None:
    """Append every swept problem in ``tree``: (source, (m, n, k), {plan: (single us, graph us)})."""
    if isinstance(tree, list):
        for item in tree:
            timed_problems(item, source, found)
        return
    if not isinstance(tree, dict):
        return
    if "shape" in tree and isinstance(tree.get("us"), (dict, list)):
        shape = tree["shape"] if isinstance(tree["shape"], list) else [int(v) for v in str(tree["shape"]).split("x")]
        if len(shape) != 3 or tree.get("b", "W.t()") != "W.t()":
            return
        graph = dict(tree.get("graph_us") or {})
        plans = {}
        for label, times in dict(tree["us"]).items():
            plan = None if label.startswith("base") else parse_label(label, tree.get("default_plan"))
            single = times[0] if isinstance(times, list) else times
            if plan and (plan not in plans or single < plans[plan][0]):
                plans[plan] = (single, graph.get(label))
        if len(plans) >= 2:
            found.append((source, tuple(shape), plans))
        return
    for value in tree.values():
        timed_problems(value, source, found)


def load_sweeps(folder: Path = result_files.RESULTS) -> list:
    """Every swept problem of the reports in ``folder``, archived ones included."""
    found = []
    for name, data in result_files.reports(folder):
        try:
            tree = json.loads(data)
        except ValueError:
            continue
        timed_problems(tree, name, found)
    return found


def rated_seconds(shape, plan: Plan, model: heuristics.ThroughputModel) -> float:
    m, n, k = shape
    kernel_m, kernel_n = (n, m) if plan.swap_ab else (m, n)
    # Split token tiles load the weight and the tokens side by side (NOTES section 50).
    overlap = plan.swap_ab and plan.split_k > 1 and m > heuristics.SWAP_AB_MAX_M
    return heuristics.estimate_seconds(kernel_m, kernel_n, k, 1, SMS, plan.tile_m, plan.tile_n, plan.split_k, model,
                                       cluster_m=plan.cluster_m, cluster_n=plan.cluster_n,
                                       split_paths_overlap=overlap)


def ranked_pick(shape, timed, model: heuristics.ThroughputModel) -> Plan | None:
    """The plan the default path's ranking puts first for ``shape``, as the launch
    policy runs it (clusters of 8, pairs of tall swaps in 4s, ...), if it was timed."""
    m, n, k = shape
    _, config = heuristics.ranked_sm90_configs(m, n, k, 1, SMS, can_swap=True, model=model)[0]
    kernel_m, kernel_n = (n, m) if config.swap_ab else (m, n)
    config = heuristics.as_launched("sm90", config, kernel_m, kernel_n, k, 1, SMS, "bf16", "bf16")
    if config.stream_k or config.pingpong:
        return None  # timed under labels the model does not rate apart
    plan = Plan(config.swap_ab, config.tile_m, config.tile_n, config.cluster_m, config.cluster_n, config.split_k)
    return plan if plan in timed else None


def regrets(problems, model, graph: bool, ranked: bool = False):
    """(regret, source, shape, plan the model picks, fastest timed) per problem."""
    rows = []
    for source, shape, plans in problems:
        times = {plan: t[1] if graph else t[0] for plan, t in plans.items()}
        times = {plan: t for plan, t in times.items() if t}
        if len(times) < 2:
            continue
        if ranked:
            pick = ranked_pick(shape, times, model)
            if pick is None:
                continue
        else:
            pick = min(times, key=lambda plan: rated_seconds(shape, plan, model))
        fastest = min(times, key=times.get)
        rows.append((times[pick] / times[fastest], source, shape, pick, fastest))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", action="append", default=[], metavar="RATE=VALUE",
                   help="a ThroughputModel field to change, e.g. split_fixup_s=2e-6 (repeatable)")
    p.add_argument("--worst", type=int, default=10, help="list this many of the worst problems")
    p.add_argument("--ranked", action="store_true",
                   help="pick as heuristics.ranked_sm90_configs ranks (plan families and their gains)")
    args = p.parse_args(argv)
    changes = {}
    for item in args.set:
        name, _, value = item.partition("=")
        if not hasattr(heuristics.H200, name):
            p.error(f"--set {item}: ThroughputModel has no rate {name!r}")
        changes[name] = float(value)
    model = dataclasses.replace(heuristics.H200, **changes)
    problems = load_sweeps()
    print(f"{len(problems)} swept problems, {sum(len(p[2]) for p in problems)} timed plans the model rates")
    for graph in (False, True):
        rows = regrets(problems, model, graph, args.ranked)
        mean = math.exp(sum(math.log(r[0]) for r in rows) / len(rows))
        off = [r for r in rows if r[0] > 1.05]
        print(f"{'graph replays' if graph else 'single calls'}: {len(rows)} problems, the model's pick "
              f"{mean:.4f}x the fastest timed (geometric mean), {len(off)} more than 5 % off")
        for regret, source, shape, pick, fastest in sorted(rows, key=lambda r: -r[0])[:args.worst]:
            print(f"  {regret:.3f}  {'x'.join(map(str, shape)):16s} picks {str(pick):24s} "
                  f"fastest {str(fastest):24s} {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
