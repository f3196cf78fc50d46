"""Tables and a plot from the end-to-end results (JSON lines written by serve.py).

    python benchmarks/e2e/report.py RESULTS.jsonl [MORE.jsonl ...] [--ref base]
        [--out benchmarks/results/e2e.md]

Files from several sessions are read together (records are de-duplicated by ``run_id``).
For each (model, workload, concurrency, metric, tree): median and min-max over every
repetition and process; the ratio of each tree to the reference tree, oriented so that > 1
means the tree is better (throughput: tree / ref; latency: ref / tree), as the median of the
ratios of runs paired by (session, process, repetition) (the two trees ran back to back) and
their min-max; and the verdict of the non-overlap rule. Also start-up seconds and phases per
tree, Triton compiles after ready per tree (kernel names and token counts), first-vs-again
latency at unseen prompt lengths, the MoE backend each tree logged, and the GPU clock range.
Writes OUT (Markdown) and OUT with .png (ratio with min-max bars, one panel per metric).
"""

import argparse
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from benchmarks.e2e import results

# (field of the vLLM result, label, higher is better)
SERVE_METRICS = [
    ("output_throughput", "output tok/s", True),
    ("request_throughput", "requests/s", True),
    ("median_ttft_ms", "TTFT p50 ms", False),
    ("p99_ttft_ms", "TTFT p99 ms", False),
    ("median_tpot_ms", "TPOT p50 ms", False),
    ("p99_tpot_ms", "TPOT p99 ms", False),
    ("median_itl_ms", "ITL p50 ms", False),
    ("p99_itl_ms", "ITL p99 ms", False),
]
OFFLINE_METRICS = [
    ("requests_per_second", "offline requests/s", True),
    ("tokens_per_second", "offline tokens/s", True),
    ("output_tokens_per_second", "offline output tok/s", True),
]
RULE = (
    "A difference is called only when the ranges do not overlap: the tree's min-max over all "
    "its runs lies wholly above (better) or below (worse) the reference's min-max. Otherwise "
    "'=' (within noise). Ratios > 1 mean the tree is better (throughput: tree / reference; "
    "latency: reference / tree); the ratio shown is the median of per-pair ratios, pairs being "
    "the runs of the two trees in the same session, process and repetition (back to back), "
    "with the min-max of those ratios. Where the ranges overlap, the paired runs are also "
    "counted: 'paired' gives how many pairs the tree won and lost, with the exact two-sided "
    "sign test's p; a difference is then called only at p < 0.05 ('better (sign test)' / "
    "'worse (sign test)'), which takes at least 6 pairs all one way: 5 of 5 (p = 0.0625) is "
    "shown, not called."
)


def _stats(vals: list[float]) -> tuple[float, float, float]:
    return statistics.median(vals), min(vals), max(vals)


def _fmt(v: float | None, nd: int = 2) -> str:
    if v is None:
        return "-"
    return f"{v:.{nd}f}" if abs(v) < 1000 else f"{v:.0f}"


def _range(vals: list[float], nd: int = 2) -> str:
    if not vals:
        return "-"
    m, lo, hi = _stats(vals)
    return f"{_fmt(m, nd)} ({_fmt(lo, nd)}-{_fmt(hi, nd)})"


def collect(recs: list[dict], kind: str, metrics) -> dict:
    """{(model, workload, concurrency, metric): {tree: [(value, pair key, instance)]}}."""
    out: dict = defaultdict(lambda: defaultdict(list))
    for r in recs:
        if r.get("kind") != kind or not r.get("ok"):
            continue
        v = r.get("vllm") or {}
        for field, _, _ in metrics:
            if isinstance(v.get(field), int | float):
                k = (r["model"], r["workload"], r["concurrency"], field)
                pair = (r.get("session"), r.get("process"), r.get("rep"))
                out[k][r["tree"]].append((float(v[field]), pair, r.get("instance")))
    return out


def sign_test_p(wins: int, losses: int) -> float:
    """Exact two-sided sign test: the probability, with no difference (each pair won with
    probability 1/2; ties left out), of a split at least as uneven as wins : losses."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def compare(ref: list, tree: list, higher: bool) -> dict:
    """Ratios (> 1: tree better), the paired wins and losses, and the verdict of one metric:
    the non-overlap rule, else the sign test over the paired runs (see RULE)."""
    rv, tv = [x[0] for x in ref], [x[0] for x in tree]
    ref_by_pair = {p: v for v, p, _ in ref}
    ratios = []
    for v, p, _ in tree:
        if p in ref_by_pair and v > 0 and ref_by_pair[p] > 0:
            ratios.append(v / ref_by_pair[p] if higher else ref_by_pair[p] / v)
    if not ratios and rv and tv:  # nothing paired: ratio of medians, range of the extremes
        m = statistics.median(tv) / statistics.median(rv)
        lo, hi = min(tv) / max(rv), max(tv) / min(rv)
        ratios_m = (m, lo, hi) if higher else (1 / m, 1 / hi, 1 / lo)
        paired = False
    else:
        ratios_m = _stats(ratios) if ratios else (None, None, None)
        paired = True
    wins, losses = sum(r > 1 for r in ratios), sum(r < 1 for r in ratios)
    p = sign_test_p(wins, losses)
    verdict = "="
    if rv and tv:
        if min(tv) > max(rv):
            verdict = "better" if higher else "worse"
        elif max(tv) < min(rv):
            verdict = "worse" if higher else "better"
        elif p < 0.05:
            verdict = "better (sign test)" if wins > losses else "worse (sign test)"
    return {
        "ratio": ratios_m,
        "paired": paired,
        "n_pairs": len(ratios),
        "wins": wins,
        "losses": losses,
        "sign_p": p,
        "verdict": verdict,
    }


def metric_table(groups: dict, metrics, ref: str, trees: list[str]) -> tuple[str, list]:
    """Markdown rows per (model, workload, concurrency, metric) and plot points."""
    labels = {f: (lab, hi) for f, lab, hi in metrics}
    others = [t for t in trees if t != ref]
    head = ["model", "workload", "conc", "metric", f"{ref} median (min-max) n"]
    for t in others:
        head += [
            f"{t} median (min-max) n",
            f"{t}/{ref} ratio (min-max)",
            "paired: won/lost, p",
            "verdict",
        ]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    points = []
    order = [f for f, _, _ in metrics]
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2], order.index(k[3]))):
        model, w, c, field = key
        lab, hi = labels[field]
        by_tree = groups[key]
        refv = by_tree.get(ref, [])
        cells = [model, w, str(c), lab, _cell(refv)]
        for t in others:
            tv = by_tree.get(t, [])
            if not tv or not refv:
                cells += [_cell(tv), "-", "-", "-"]
                continue
            cmp = compare(refv, tv, hi)
            m, lo, hi_ = cmp["ratio"]
            star = "" if cmp["paired"] else " (unpaired)"
            cells += [
                _cell(tv),
                f"{_fmt(m, 3)} ({_fmt(lo, 3)}-{_fmt(hi_, 3)}){star}",
                f"{cmp['wins']}/{cmp['losses']}, p={cmp['sign_p']:.3g}" if cmp["n_pairs"] else "-",
                cmp["verdict"],
            ]
            if m is not None:
                points.append(
                    {
                        "model": model,
                        "workload": w,
                        "concurrency": c,
                        "metric": lab,
                        "tree": t,
                        "ratio": m,
                        "lo": lo,
                        "hi": hi_,
                    }
                )
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows), points


def _cell(vals: list) -> str:
    if not vals:
        return "-"
    inst = len({i for _, _, i in vals})
    return f"{_range([v for v, _, _ in vals])} n={len(vals)}/{inst}p"


def startup_table(recs: list[dict], trees: list[str]) -> str:
    rows = [
        "| model | tree | processes (ready/all) | start-up s | model load s | torch.compile s | "
        "graph capture s | init engine s | warm-up span s | fused-MoE warm-up s | MoE backend | "
        "fallback |",
        "|" + "---|" * 12,
    ]
    by = defaultdict(list)
    for r in recs:
        if r.get("kind") == "startup":
            by[(r["model"], r["tree"])].append(r)
    for model, tree in sorted(by, key=lambda k: (k[0], _order(trees, k[1]))):
        rs = by[(model, tree)]
        ok = [r for r in rs if r.get("ok")]

        def ph(name, rs=ok):
            return _range([r["phases"][name] for r in rs if (r.get("phases") or {}).get(name)], 1)

        backends = sorted({str(r.get("backend")) for r in rs})
        fb = sorted({str(r.get("fallback")) for r in rs if r.get("fallback") is not None})
        rows.append(
            f"| {model} | {tree} | {len(ok)}/{len(rs)} | "
            f"{_range([r['startup_s'] for r in ok if r.get('startup_s')], 1)} | "
            f"{ph('model_load_s')} | {ph('torch_compile_s')} | {ph('graph_capture_s')} | "
            f"{ph('init_engine_s')} | {ph('warmup_span_s')} | {ph('moe_warmup_s')} | "
            f"{', '.join(backends)} | "
            f"{', '.join(fb) or '-'} |"
        )
    return "\n".join(rows)


def _order(trees: list[str], t: str) -> int:
    return trees.index(t) if t in trees else len(trees)


def compile_section(recs: list[dict], trees: list[str]) -> str:
    by = defaultdict(list)
    for r in recs:
        if r.get("kind") == "compiles":
            by[(r["model"], r["tree"])].append(r)
    if not by:
        return "No compile records."
    rows = [
        "| model | tree | processes | compiles after ready per process | before ready | "
        "jit_monitor lines | kernels after ready: count [token counts] (median ms) |",
        "|" + "---|" * 7,
    ]
    for model, tree in sorted(by, key=lambda k: (k[0], _order(trees, k[1]))):
        rs = by[(model, tree)]
        kern: dict = defaultdict(lambda: {"n": 0, "tokens": set(), "ms": []})
        for r in rs:
            for c in r.get("after_ready", []):
                k = kern[c["kernel"]]
                k["n"] += 1
                k["tokens"].add(c.get("fc_num_tokens"))
                if c.get("duration_ms") is not None:
                    k["ms"].append(c["duration_ms"])
        desc = "; ".join(
            f"{name}: {k['n']} [{', '.join(str(t) for t in sorted(k['tokens'], key=str))}]"
            f" ({_fmt(statistics.median(k['ms']), 0) if k['ms'] else '-'} ms)"
            for name, k in sorted(kern.items(), key=lambda kv: -kv[1]["n"])
        )
        jm = sorted({k for r in rs for k in r.get("jit_monitor_kernels", [])})
        rows.append(
            f"| {model} | {tree} | {len(rs)} | "
            f"{_range([r.get('compiles_after_ready', 0) for r in rs], 0)} | "
            f"{_range([r.get('compiles_before_ready', 0) for r in rs], 0)} | "
            f"{len(jm)}: {', '.join(jm) or '-'} | {desc or 'none'} |"
        )
    errs = sorted({e for r in by.values() for x in r for e in x.get("hook_errors", [])})
    note = f"\n\nCompile hook errors: {'; '.join(errs)}" if errs else ""
    return "\n".join(rows) + note


def probe_table(recs: list[dict], trees: list[str]) -> str:
    by = defaultdict(lambda: defaultdict(lambda: {"first": [], "again": []}))
    for r in recs:
        if r.get("kind") == "probe":
            for row in r.get("lengths", []):
                d = by[(r["model"], row["len"])][r["tree"]]
                for w in ("first", "again"):
                    if row.get(f"{w}_ms") is not None:
                        d[w].append(row[f"{w}_ms"])
    if not by:
        return "No probe records."
    ts = sorted({t for v in by.values() for t in v}, key=lambda t: _order(trees, t))
    head = ["model", "prompt tokens"] + [f"{t} {w} ms" for t in ts for w in ("first", "again")]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model, L in sorted(by):
        cells = [model, str(L)]
        for t in ts:
            d = by[(model, L)].get(t, {"first": [], "again": []})
            cells += [_range(d["first"], 1), _range(d["again"], 1)]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def lengths_table(recs: list[dict]) -> str:
    """Run lengths (s) and prompts per run, per model, workload and concurrency."""
    by = defaultdict(lambda: {"s": [], "n": []})
    for r in recs:
        if r.get("kind") == "serve" and r.get("ok"):
            d = by[(r["model"], r["workload"], r["concurrency"])]
            if isinstance((r.get("vllm") or {}).get("duration"), int | float):
                d["s"].append(r["vllm"]["duration"])
            d["n"].append(r.get("num_prompts") or 0)
    if not by:
        return "No serving runs."
    rows = ["| model | workload | conc | run s | prompts per run |", "|---|---|---|---|---|"]
    for (m, w, c), d in sorted(by.items()):
        rows.append(f"| {m} | {w} | {c} | {_range(d['s'], 1)} | {_range(d['n'], 0)} |")
    return "\n".join(rows)


def failures(recs: list[dict], limit: int = 10) -> str:
    bad = [
        r
        for r in recs
        if r.get("kind") in (*results.RUN_KINDS, "startup", "probe") and not r.get("ok")
    ]
    if not bad:
        return "None."
    out = []
    for r in bad[:limit]:
        err = r.get("error") or r.get("status") or "; ".join(r.get("errors") or []) or "?"
        err = err.strip().splitlines()[-1][:200] if err.strip() else "?"
        out.append(
            f"- {r['kind']} {r.get('tree')} p{r.get('process')} {r.get('workload', '')} "
            f"c={r.get('concurrency', '')}: {err}"
        )
    if len(bad) > limit:
        out.append(f"- ... {len(bad) - limit} more")
    return "\n".join(out)


def clocks_line(recs: list[dict]) -> str:
    vals = defaultdict(list)
    for r in recs:
        for k in ("clocks_before", "clocks_after"):
            c = r.get(k)
            if isinstance(c, list):
                for g in c:
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = list(dict.fromkeys(p["metric"] for p in points))
    cats = sorted({(p["model"], p["workload"], p["concurrency"]) for p in points})
    trees = list(dict.fromkeys(p["tree"] for p in points))
    ncol = min(4, len(metrics))
    nrow = (len(metrics) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.4 * nrow), squeeze=False)
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def build(files: list[Path], ref: str, out: Path, command: str) -> str:
    recs = results.load(files)
    sessions = [r for r in recs if r.get("kind") == "session"]
    trees = list(
        dict.fromkeys(
            [ref]
            + [t for s in sessions for t in s.get("trees", {})]
            + [r["tree"] for r in recs if r.get("tree")]
        )
    )
    serve_groups = collect(recs, "serve", SERVE_METRICS)
    off_groups = collect(recs, "offline", OFFLINE_METRICS)
    serve_md, points = metric_table(serve_groups, SERVE_METRICS, ref, trees)
    off_md, off_points = metric_table(off_groups, OFFLINE_METRICS, ref, trees)
    png = out.with_suffix(".png")
    out.parent.mkdir(parents=True, exist_ok=True)
    plotted = plot(points + off_points, png)
    notes = sorted({r.get("note") for r in recs if r.get("note")})
    fallbacks = sorted(
        {
            (r.get("model"), r.get("tree"), r.get("backend"), r.get("backend_expected"))
            for r in recs
            if r.get("fallback")
        }
    )
    missing = sorted(
        {t for s in sessions for t, m in s.get("trees", {}).items() if m.get("missing")}
    )
    failed = [r for r in recs if r.get("kind") in results.RUN_KINDS and not r.get("ok")]
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
    ]
    for s in sessions:
        lines.append(
            f"- session `{s.get('session')}` (GPUs {s.get('gpus')}): "
            f"`{' '.join(s.get('argv', []))}`"
        )
        lines.append(
            "  - trees: "
            + ", ".join(
                f"{t} = {m.get('dir')} (head {str(m.get('head'))[:12]}, patches "
                f"{len(m.get('patches') or [])})"
                for t, m in s.get("trees", {}).items()
            )
        )
        if s.get("server_cmd_example"):
            lines.append(f"  - server: `{' '.join(s['server_cmd_example'])}`")
        if s.get("memory_plan"):
            lines.append(f"  - {s['memory_plan']}")
    lines += [
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
    ]
    lines += [f"- note: {n}" for n in notes] or []
    lines += [
        f"- {m} tree {t}: logged MoE backend {b}, expected {e} (fallback)"
        for m, t, b, e in fallbacks
    ]
    lines += [f"- tree {t}: no VSERIES_TREE.json, git head unknown" for t in missing]
    if not (notes or fallbacks or missing):
        lines.append("- none recorded")
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
    cmd = "python benchmarks/e2e/report.py " + " ".join(
        [*map(str, a.files), "--ref", a.ref, "--out", str(a.out)]
    )
    build(a.files, a.ref, a.out, cmd)
    png = a.out.with_suffix(".png")
    print(f"wrote {a.out}" + (f" and {png}" if png.exists() else " (nothing to plot)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
