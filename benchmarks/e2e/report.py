"""Tables and a plot from the end-to-end results (JSON lines written by serve.py).

    python -m benchmarks.e2e.report RESULTS.jsonl [MORE.jsonl ...] [--ref base]
        [--out benchmarks/results/e2e.md]

Files from several sessions are read together (records are de-duplicated by ``run_id``).
For each (model, workload, concurrency, metric, tree): median and min-max over every
repetition and process; the ratio of each tree to the reference tree, oriented so that > 1
means the tree is better (throughput: tree / ref; latency: ref / tree), as the median of the
ratios of runs paired by (session, process, repetition) (the two trees ran back to back) and
their min-max; and the verdict of the non-overlap rule (compare.py). Also start-up seconds and
phases per tree, Triton compiles after ready per tree (kernel names and token counts),
first-vs-again latency at unseen prompt lengths, the MoE backend each tree logged, and the GPU
clock range. Writes OUT (Markdown) and OUT with .png (ratio with min-max bars, one panel per
metric).
"""

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from benchmarks import plots
from benchmarks.e2e import records
from benchmarks.e2e.compare import (
    OFFLINE_METRICS,
    RULE,
    SERVE_METRICS,
    collect,
    fmt,
    metric_table,
    spread,
)
from benchmarks.e2e.records import Compiles, Probe, Record, Run, Serve, Session, Startup
from vseries import results


def order(trees: list[str], t: str) -> int:
    return trees.index(t) if t in trees else len(trees)


def by_tree(recs: list[Record], cls: type) -> dict:
    """{(model, tree): [records of ``cls``]}."""
    out = defaultdict(list)
    for r in recs:
        if isinstance(r, cls):
            out[(r.model, r.tree)].append(r)
    return out


def startup_table(recs: list[Record], trees: list[str]) -> str:
    head = ["model", "tree", "processes (ready/all)", "start-up s", "model load s"]
    head += ["torch.compile s", "graph capture s", "init engine s", "warm-up span s"]
    head += ["fused-MoE warm-up s", "MoE backend", "fallback"]
    rows = []
    by = by_tree(recs, Startup)
    for model, tree in sorted(by, key=lambda k: (k[0], order(trees, k[1]))):
        rs: list[Startup] = by[(model, tree)]
        ok = [r for r in rs if r.ok]

        def ph(name, rs=ok):
            return spread([r.phases[name] for r in rs if r.phases.get(name)], 1)

        backends = sorted({str(r.backend) for r in rs})
        fb = sorted({str(r.fallback) for r in rs if r.fallback is not None})
        rows.append(
            [
                model,
                tree,
                f"{len(ok)}/{len(rs)}",
                spread([r.startup_s for r in ok if r.startup_s], 1),
            ]
            + [ph(n) for n in ("model_load_s", "torch_compile_s", "graph_capture_s")]
            + [ph(n) for n in ("init_engine_s", "warmup_span_s", "moe_warmup_s")]
            + [", ".join(backends), ", ".join(fb) or "-"]
        )
    return results.markdown_table(head, rows)


def compile_section(recs: list[Record], trees: list[str]) -> str:
    by = by_tree(recs, Compiles)
    if not by:
        return "No compile records."
    head = ["model", "tree", "processes", "compiles after ready per process", "before ready"]
    head += ["jit_monitor lines", "kernels after ready: count [token counts] (median ms)"]
    rows = []
    for model, tree in sorted(by, key=lambda k: (k[0], order(trees, k[1]))):
        rs: list[Compiles] = by[(model, tree)]
        kern: dict = defaultdict(lambda: {"n": 0, "tokens": set(), "ms": []})
        for r in rs:
            for c in r.after_ready:
                k = kern[c.kernel]
                k["n"] += 1
                k["tokens"].add(c.fc_num_tokens)
                if c.duration_ms is not None:
                    k["ms"].append(c.duration_ms)
        desc = "; ".join(
            f"{name}: {k['n']} [{', '.join(str(t) for t in sorted(k['tokens'], key=str))}]"
            f" ({fmt(statistics.median(k['ms']), 0) if k['ms'] else '-'} ms)"
            for name, k in sorted(kern.items(), key=lambda kv: -kv[1]["n"])
        )
        jm = sorted({k for r in rs for k in r.jit_monitor_kernels})
        rows.append(
            [model, tree, len(rs), spread([r.compiles_after_ready for r in rs], 0)]
            + [
                spread([r.compiles_before_ready for r in rs], 0),
                f"{len(jm)}: {', '.join(jm) or '-'}",
            ]
            + [desc or "none"]
        )
    errs = sorted({e for rs in by.values() for r in rs for e in r.hook_errors})
    note = f"\n\nCompile hook errors: {'; '.join(errs)}" if errs else ""
    return results.markdown_table(head, rows) + note


def probe_table(recs: list[Record], trees: list[str]) -> str:
    by = defaultdict(lambda: defaultdict(lambda: {"first": [], "again": []}))
    for r in recs:
        if isinstance(r, Probe):
            for row in r.lengths:
                d = by[(r.model, row.len)][r.tree]
                for w in ("first", "again"):
                    if getattr(row, f"{w}_ms") is not None:
                        d[w].append(getattr(row, f"{w}_ms"))
    if not by:
        return "No probe records."
    ts = sorted({t for v in by.values() for t in v}, key=lambda t: order(trees, t))
    head = ["model", "prompt tokens"] + [f"{t} {w} ms" for t in ts for w in ("first", "again")]
    rows = []
    for model, L in sorted(by):
        cells = [model, str(L)]
        for t in ts:
            d = by[(model, L)].get(t, {"first": [], "again": []})
            cells += [spread(d["first"], 1), spread(d["again"], 1)]
        rows.append(cells)
    return results.markdown_table(head, rows)


def lengths_table(recs: list[Record]) -> str:
    """Run lengths (s) and prompts per run, per model, workload and concurrency."""
    by = defaultdict(lambda: {"s": [], "n": []})
    for r in recs:
        if isinstance(r, Serve) and r.ok:
            d = by[(r.model, r.workload, r.concurrency)]
            if isinstance(r.vllm.get("duration"), int | float):
                d["s"].append(r.vllm["duration"])
            d["n"].append(r.num_prompts or 0)
    if not by:
        return "No serving runs."
    head = ["model", "workload", "conc", "run s", "prompts per run"]
    rows = [[m, w, c, spread(d["s"], 1), spread(d["n"], 0)] for (m, w, c), d in sorted(by.items())]
    return results.markdown_table(head, rows)


def failures(recs: list[Record], limit: int = 10) -> str:
    bad = [r for r in recs if r.kind in (*records.RUN_KINDS, "startup", "probe") and not r.ok]
    if not bad:
        return "None."
    out = []
    for r in bad[:limit]:
        err = r.failure()
        err = err.strip().splitlines()[-1][:200] if err.strip() else "?"
        where = f"{r.workload} c={r.concurrency}" if isinstance(r, Run) else " c="
        out.append(f"- {r.kind} {r.tree} p{r.process} {where}: {err}")
    if len(bad) > limit:
        out.append(f"- ... {len(bad) - limit} more")
    return "\n".join(out)


def clocks_line(recs: list[Record]) -> str:
    vals = defaultdict(list)
    for r in recs:
        if not isinstance(r, Serve):
            continue
        for c in (r.clocks_before, r.clocks_after):
            for g in c if isinstance(c, list) else []:
                for f in ("clocks_sm", "clocks_mem", "temperature_gpu", "power_draw"):
                    if isinstance(g.get(f), int | float):
                        vals[f].append(g[f])
    if not vals:
        return "No GPU clocks recorded."
    unit = {"clocks_sm": "MHz", "clocks_mem": "MHz", "temperature_gpu": "C", "power_draw": "W"}
    return "; ".join(f"{f} {min(v):.0f}-{max(v):.0f} {unit[f]}" for f, v in vals.items())


def plot(points: list[dict], path: Path) -> bool:
    """Ratio with min-max bars, one panel per metric; False when there is nothing to plot."""
    if not points:
        return False
    metrics = list(dict.fromkeys(p["metric"] for p in points))
    cats = sorted({(p["model"], p["workload"], p["concurrency"]) for p in points})
    trees = list(dict.fromkeys(p["tree"] for p in points))
    ncol = min(4, len(metrics))
    nrow = (len(metrics) + ncol - 1) // ncol
    fig, axes = plots.grid(nrow, ncol, (4.2, 3.4))
    for ax, metric in zip(axes.flat, metrics, strict=False):
        for j, t in enumerate(trees):
            ps = [p for p in points if p["metric"] == metric and p["tree"] == t]
            xs = [cats.index((p["model"], p["workload"], p["concurrency"])) + 0.15 * j for p in ps]
            ys = [p["ratio"] for p in ps]
            err = [[p["ratio"] - p["lo"] for p in ps], [p["hi"] - p["ratio"] for p in ps]]
            ax.errorbar(xs, ys, yerr=err, fmt="o", capsize=3, label=t)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_title(metric, fontsize=9)
        ax.set_xticks(range(len(cats)))
        ax.set_xticklabels([f"{m[:10]}\n{w} c{c}" for m, w, c in cats], fontsize=6, rotation=45)
        ax.set_ylabel("ratio to reference (>1 better)", fontsize=7)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    plots.save(fig, path)
    return True


def commands_section(sessions: list[Session]) -> list[str]:
    """A line per session: its command line and GPUs, its trees, server command, memory plan."""
    lines = []
    for s in sessions:
        lines.append(f"- session `{s.session}` (GPUs {s.gpus}): `{' '.join(s.argv)}`")
        lines.append(
            "  - trees: "
            + ", ".join(
                f"{t} = {m.get('dir')} (head {str(m.get('head'))[:12]}, patches "
                f"{len(m.get('patches') or [])})"
                for t, m in s.trees.items()
            )
        )
        if s.server_cmd_example:
            lines.append(f"  - server: `{' '.join(s.server_cmd_example)}`")
        if s.memory_plan:
            lines.append(f"  - {s.memory_plan}")
    return lines


def stand_ins(recs: list[Record], sessions: list[Session]) -> list[str]:
    """The notes the records carry, the backends that were not the expected one, the trees
    without VSERIES_TREE.json."""
    notes = sorted({r.note for r in recs if r.note})
    fallbacks = sorted(
        {
            (r.model, r.tree, r.backend, r.backend_expected)
            for r in recs
            if isinstance(r, Startup | Run) and r.fallback
        }
    )
    missing = sorted({t for s in sessions for t, m in s.trees.items() if m.get("missing")})
    lines = [f"- note: {n}" for n in notes]
    lines += [
        f"- {m} tree {t}: logged MoE backend {b}, expected {e} (fallback)"
        for m, t, b, e in fallbacks
    ]
    lines += [f"- tree {t}: no VSERIES_TREE.json, git head unknown" for t in missing]
    return lines or ["- none recorded"]


def build(files: list[Path], ref: str, out: Path, command: str) -> str:
    recs = records.read(files)
    sessions = [r for r in recs if isinstance(r, Session)]
    trees = list(
        dict.fromkeys(
            [ref]
            + [t for s in sessions for t in s.trees]
            + [r.tree for r in recs if getattr(r, "tree", None)]
        )
    )
    serve_groups = collect(recs, "serve", SERVE_METRICS)
    off_groups = collect(recs, "offline", OFFLINE_METRICS)
    serve_md, points = metric_table(serve_groups, SERVE_METRICS, ref, trees)
    off_md, off_points = metric_table(off_groups, OFFLINE_METRICS, ref, trees)
    png = out.with_suffix(".png")
    out.parent.mkdir(parents=True, exist_ok=True)
    plotted = plot(points + off_points, png)
    failed = [r for r in recs if r.kind in records.RUN_KINDS and not r.ok]
    lines = [
        "# End-to-end serving on the H200: trees compared to " + f"`{ref}`",
        "",
        f"Made by `{command}` from {len(recs)} records ({len(sessions)} session(s)).",
        "",
        f"**Rule.** {RULE}",
        "",
        "n = runs/processes (server instances). Runs that failed are not counted "
        f"({len(failed)} failed).",
        "",
        "## Commands",
        "",
        *commands_section(sessions),
        "",
        "## Start-up (spawn to /health ready, s, all trees' servers starting at once; phases "
        "as vLLM logged them)",
        "",
        startup_table(recs, trees),
        "",
        "## Serving (`vllm bench serve`)",
        "",
        serve_md if points or serve_groups else "No serving runs.",
        "",
    ]
    if off_groups:
        lines += ["## Offline (`vllm bench throughput`)", "", off_md, ""]
    if plotted:
        lines += [f"![ratios]({png.name})", ""]
    lines += [
        "## Triton compiles during serving (after /health ready)",
        "",
        compile_section(recs, trees),
        "",
        "## First request at an unseen prompt length vs again (1 output token)",
        "",
        probe_table(recs, trees),
        "",
        "## Run lengths",
        "",
        lengths_table(recs),
        "",
        "## GPU clocks over all runs",
        "",
        clocks_line(recs),
        "",
        "## Failures (first 10)",
        "",
        failures(recs),
        "",
        "## Stand-ins and fallbacks",
        "",
        *stand_ins(recs, sessions),
    ]
    text = "\n".join(lines) + "\n"
    out.write_text(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--ref", default="base", help="the reference tree (base)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/e2e.md"))
    a = ap.parse_args(argv)
    # checked before anything is written: --out defaults to the committed table
    missing = [str(f) for f in a.files if not f.is_file()]
    if missing:
        ap.error(f"no such file: {', '.join(missing)}")
    recs = records.read(a.files)
    if not recs:
        ap.error(f"no records in {', '.join(map(str, a.files))} (JSON lines of benchmarks/e2e)")
    trees = {t for r in recs for t in [getattr(r, "tree", None), *getattr(r, "trees", [])] if t}
    if a.ref not in trees:
        ap.error(f"--ref {a.ref}: no records of that tree; present: {', '.join(sorted(trees))}")
    cmd = "python benchmarks/e2e/report.py " + " ".join(
        [*map(str, a.files), "--ref", a.ref, "--out", str(a.out)]
    )
    text = build(a.files, a.ref, a.out, cmd)
    png = a.out.with_suffix(".png")
    plotted = f"]({png.name})" in text  # the page links its plot only when it drew one
    print(f"wrote {a.out}" + (f" and {png}" if plotted else " (nothing to plot)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
