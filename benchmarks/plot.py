"""Render a ``benchmarks.suite`` result: markdown table + summary, and a PNG plot.

Needs only the JSON (and matplotlib for the plot), so results re-render on any
machine:

    python -m benchmarks.plot benchmarks/results/suite_prefill.json

writes ``suite_prefill.md`` and ``suite_prefill.png`` beside the JSON. The suite
writes both itself after every run.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from pathlib import Path

REFERENCE = "torch.matmul"  # every ratio is against cuBLAS
SUBJECT = "wsgemm"  # the implementation the peak columns are about
SLOW_RATIO = 0.9  # the summary counts shapes where an implementation is slower than this
# suite.py rewrites the JSON after every problem; one cut short lacks the closing fields.
CUT_SHORT = "not recorded (run cut short)"


def timing(result: dict, method: str) -> dict | None:
    return result.get("timings", {}).get(method)


def headline(result: dict) -> dict | None:
    """The timing summary a result is reported with, or None if it was not timed."""
    return timing(result, result.get("method"))


def implementations(report: dict) -> list[str]:
    """Implementations that ran, in the report's order."""
    return [name for name, info in report["implementations"].items() if info["ran"]]


def ratio(row: dict, impl: str) -> float | None:
    """How many times faster ``impl`` ran than torch.matmul on a row (> 1: faster).

    Like for like: graph replays against graph replays, else events against events
    (a row's graph capture can fail for one implementation)."""
    mine, ref = row["results"].get(impl, {}), row["results"].get(REFERENCE, {})
    for method in (row["method"], "events"):
        t_mine, t_ref = timing(mine, method), timing(ref, method)
        if t_mine and t_ref:
            return t_ref["median_ms"] / t_mine["median_ms"]
    return None


def summary(report: dict, impl: str = SUBJECT) -> dict:
    """Geometric mean, minimum and slow count of ``impl``'s ratio to torch.matmul."""
    pairs = [(row["label"], ratio(row, impl)) for row in report["rows"]]
    pairs = [(label, r) for label, r in pairs if r is not None]
    if not pairs:
        return {"shapes": 0}
    worst_label, worst = min(pairs, key=lambda p: p[1])
    return {
        "shapes": len(pairs),
        "geomean": math.exp(sum(math.log(r) for _, r in pairs) / len(pairs)),
        "min": worst,
        "min_label": worst_label,
        "below_slow_ratio": sum(r < SLOW_RATIO for _, r in pairs),
    }


def percent_of(tflops: float, peak: float | None) -> str:
    return f"{100 * tflops / peak:.0f}%" if peak else "-"


def _cell(result: dict | None, row_method: str) -> str:
    if result is None:
        return "-"
    if result["status"] == "wrong":
        return f"WRONG ({result['rel_error']:.1e})" if "rel_error" in result else "WRONG"
    if result["status"] == "error":
        return "error"
    shown = headline(result)
    if shown is None:
        return "-"
    # A failed graph capture leaves this implementation with event timing only.
    return f"{shown['tflops']:.1f}" + ("" if result["method"] == row_method else " (events)")


def _failure_text(result: dict) -> str:
    if result["status"] == "wrong":
        detail = result.get("error") or f"relative error {result.get('rel_error', float('nan')):.2e}"
        return f"wrong result, not timed: {detail}"
    if result["status"] == "error":
        return f"raised, not timed: {result['error']}"
    return f"CUDA-graph capture failed, events timing reported: {result['graph_error']}"


def _timing_text(row: dict, report: dict) -> str:
    if row["method"] == "cuda_graph":
        return f"graph x{report['timing']['graph_calls']}"
    return "events"


def _flush_text(protocol: dict) -> str:
    # Reports from before the read flush recorded only the size of their 512 MiB memset.
    return protocol.get("flush") or f"L2 flushed ({protocol['flush_bytes'] >> 20} MiB write)"


def _graph_rule(protocol: dict) -> str:
    graph = (f"CUDA-graph replays of {protocol['graph_calls']} back-to-back calls on rotating input "
             "copies (\"graph\": launch overhead not counted)")
    events = "CUDA events around single calls (\"events\")"
    if protocol["graph"] == "always":
        return f"Timed as {graph}."
    if protocol["graph"] == "never":
        return f"Timed with {events}."
    return (f"Timed with {events}; rows whose fastest run took under {protocol['graph_below_us']:g} us "
            f"are timed again as {graph}, and reported so.")


def render_markdown(report: dict) -> str:
    env, peak, protocol = report["environment"], report["peak"], report["timing"]
    impls = implementations(report)
    lines = [
        f"# {report['name']}",
        "",
        *([f"**Note.** {report['note']}", ""] if report.get("note") else []),
        f"{env['gpu']} ({env['sms']} SMs), driver {env['driver']}, torch {env['torch']} (CUDA {env['cuda']}), "
        f"CuTe DSL {env['cutlass_dsl']}, wsgemm {env['wsgemm']}, Triton {env.get('triton') or '-'}, "
        f"QuACK {env.get('quack') or '-'}; {env['date']}. Suites: {', '.join(report['suites'])}; {report['dtype']}.",
        "",
        f"Median of {report['reps']} interleaved runs per implementation, {_flush_text(protocol)} before every "
        "run, random normal inputs, each output "
        f"checked against a float32 reference before timing. {_graph_rule(protocol)} TFLOP/s below; "
        "the JSON has p10/p90 and every timing taken.",
        "",
        f"Peak references: measured {peak['measured_tflops']:.1f} TFLOP/s ({peak['measured_what']}); "
        f"datasheet {peak['datasheet_tflops'] or '-'} TFLOP/s ({peak['datasheet_source']}).",
        "",
    ]
    header = ["label", "shape ([L]xMxNxK)", "B"] + impls + [
        f"{SUBJECT} / torch", f"{SUBJECT} % measured peak", f"{SUBJECT} % datasheet", "timing"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in report["rows"]:
        r = ratio(row, SUBJECT)
        mine = headline(row["results"].get(SUBJECT, {}))
        cells = [row["label"], row["shape"], "W.t()" if row["layout"] == "b_weight_t" else "row-major"]
        cells += [_cell(row["results"].get(name), row["method"]) for name in impls]
        cells += [
            "-" if r is None else f"{r:.3f}x",
            percent_of(mine["tflops"], peak["measured_tflops"]) if mine else "-",
            percent_of(mine["tflops"], peak["datasheet_tflops"]) if mine else "-",
            _timing_text(row, report),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Summary", ""]
    for impl in impls:
        if impl == REFERENCE:
            continue
        s = summary(report, impl)
        if not s["shapes"]:
            lines.append(f"- {impl}: no shape timed against torch.matmul.")
            continue
        lines.append(
            f"- {impl} / torch.matmul over {s['shapes']} shapes: geometric mean **{s['geomean']:.3f}x**, "
            f"min {s['min']:.3f}x ({s['min_label']}), {s['below_slow_ratio']} below {SLOW_RATIO}x."
        )
    lines += _config_table(report, impls)
    lines += ["", "## Implementations", ""]
    not_asked = [name for name, info in report["implementations"].items()
                 if not info["ran"] and info["detail"].startswith("skipped (--impls)")]
    lines += [f"- {name}: {info['detail']}" for name, info in report["implementations"].items()
              if name not in not_asked]
    if not_asked:  # their descriptions are in `python -m benchmarks.suite --help` and in reports that ran them
        lines.append(f"- not asked for (--impls): {', '.join(not_asked)}")
    failures = [
        f"- {row['label']} / {name}: {_failure_text(res)}"
        for row in report["rows"]
        for name, res in row["results"].items()
        if res["status"] != "ok" or "graph_error" in res
    ]
    if failures:
        lines += ["", "## Failures", ""] + failures
    if report.get("skipped"):
        lines += ["", f"Not run (time budget of {report['time_budget_s']} s spent): "
                  + ", ".join(report["skipped"]) + "."]
    lines += [
        "",
        f"GPU state before: {report['gpu_before']}; after: {report.get('gpu_after', CUT_SHORT)}. "
        + (f"Wall time {report['elapsed_s']:.0f} s." if "elapsed_s" in report else ""),
        "",
        f"Regenerate: `{report['command']}`; re-render: `python -m benchmarks.plot <this>.json`.",
    ]
    return "\n".join(lines) + "\n"


def _config_table(report: dict, impls: list) -> list[str]:
    """What each wsgemm column ran per row (plan mode and kernel configuration), where
    the run recorded it."""
    named = [name for name in impls if any("config" in row["results"].get(name, {}) for row in report["rows"])]
    if not named:
        return []
    lines = ["", "## Configurations", "", "| label | " + " | ".join(named) + " |", "|" + "---|" * (1 + len(named))]
    for row in report["rows"]:
        cells = [f"`{row['results'].get(name, {}).get('config', '-')}`" for name in named]
        lines.append(f"| {row['label']} | " + " | ".join(cells) + " |")
    return lines


def render_plot(report: dict, path: Path) -> None:
    """TFLOP/s per shape for each implementation (top) and the ratio to torch.matmul (bottom)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never opens a window
    import matplotlib.pyplot as plt

    rows, impls = report["rows"], implementations(report)
    x = list(range(len(rows)))
    # Wide enough for a label per shape, small enough (dpi 80, 5.5 in tall) to stay well
    # under 100 KB: the tree's 12 MiB limit holds every committed plot.
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(min(16, 5 + 0.16 * len(rows)), 5.5),
                                      gridspec_kw={"height_ratios": [3, 2]})
    style = {"marker": "o", "markersize": 3, "linewidth": 1}
    timed = []
    for name in impls:
        shown = [headline(row["results"].get(name, {})) for row in rows]
        tflops = [t["tflops"] if t else math.nan for t in shown]
        timed += [t for t in tflops if t > 0]
        top.plot(x, tflops, label=name, **style)
        if name != REFERENCE:
            ratios = [ratio(row, name) for row in rows]
            bottom.plot(x, [math.nan if r is None else r for r in ratios], label=f"{name} / torch.matmul", **style)
    peak = report["peak"]
    top.axhline(peak["measured_tflops"], color="grey", linestyle=":", linewidth=1, label="measured peak")
    if peak["datasheet_tflops"]:
        top.axhline(peak["datasheet_tflops"], color="black", linestyle=":", linewidth=1, label="datasheet peak")
    if timed and max(timed) > 20 * min(timed):  # decode next to prefill: only a log scale shows both
        top.set_yscale("log")
    top.set_ylabel("TFLOP/s")
    top.set_title(f"{report['name']}: {report['environment']['gpu']}, {report['dtype']}", fontsize=10)
    top.legend(fontsize=7, loc="best")
    top.grid(alpha=0.3)
    bottom.axhline(1.0, color="grey", linewidth=1)
    bottom.axhline(SLOW_RATIO, color="grey", linestyle="--", linewidth=0.8)
    bottom.set_ylabel("ratio to cuBLAS")
    bottom.legend(fontsize=7, loc="best")
    bottom.grid(alpha=0.3)
    bottom.set_xticks(x)
    bottom.set_xticklabels([row["label"] for row in rows], rotation=90, fontsize=6)
    fig.tight_layout()
    rendered = io.BytesIO()
    fig.savefig(rendered, format="png", dpi=80)
    plt.close(fig)
    # A 32-colour palette keeps a plot of ~120 shapes near 55 KB, with no visible loss.
    from PIL import Image  # a matplotlib dependency

    palette = io.BytesIO()
    Image.open(rendered).convert("RGB").quantize(colors=32).save(palette, format="png", optimize=True)
    path.write_bytes(smallest_png(palette.getvalue()))


def smallest_png(png: bytes) -> bytes:
    """``png`` recompressed by zopflipng where the ``zopfli`` package is installed (the
    same pixels, ~13 % fewer bytes, for the tree's 12 MiB limit); as it is elsewhere."""
    try:
        from zopfli.png import optimize
    except ImportError:
        return png
    return optimize(png)


def read_report(json_path: Path) -> dict:
    """A suite result, from ``<name>.json``."""
    return json.loads(Path(json_path).read_text())


def write_outputs(report: dict, json_path: Path) -> tuple[Path, Path]:
    """Write ``<name>.md`` and ``<name>.png`` beside ``json_path`` (``<name>.json``)."""
    stem = json_path.name.removesuffix(".json")
    md_path, png_path = json_path.with_name(f"{stem}.md"), json_path.with_name(f"{stem}.png")
    md_path.write_text(render_markdown(report))
    render_plot(report, png_path)
    return md_path, png_path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.plot", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", type=Path, help="a result JSON written by benchmarks.suite")
    args = p.parse_args(argv)
    report = read_report(args.json)
    for path in write_outputs(report, args.json):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
