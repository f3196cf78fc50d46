"""How the report compares two trees: the metrics, the pairing of back-to-back runs, the
ratios, and the verdict (the non-overlap rule, else the sign test over the pairs)."""

import math
import statistics
from collections import defaultdict

from benchmarks.e2e.records import Record, Run
from vseries import results

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


def stats(vals: list[float]) -> tuple[float, float, float]:
    return statistics.median(vals), min(vals), max(vals)


def fmt(v: float | None, nd: int = 2) -> str:
    if v is None:
        return "-"
    return f"{v:.{nd}f}" if abs(v) < 1000 else f"{v:.0f}"


def spread(vals: list[float], nd: int = 2) -> str:
    """``median (min-max)``, or "-" without values."""
    if not vals:
        return "-"
    m, lo, hi = stats(vals)
    return f"{fmt(m, nd)} ({fmt(lo, nd)}-{fmt(hi, nd)})"


def collect(recs: list[Record], kind: str, metrics) -> dict:
    """{(model, workload, concurrency, metric): {tree: [(value, pair key, instance)]}} of the
    successful runs of ``kind``."""
    out: dict = defaultdict(lambda: defaultdict(list))
    for r in recs:
        if not isinstance(r, Run) or r.kind != kind or not r.ok:
            continue
        for field, _, _ in metrics:
            v = r.vllm.get(field)
            if isinstance(v, int | float):
                k = (r.model, r.workload, r.concurrency, field)
                out[k][r.tree].append((float(v), (r.session, r.process, r.rep), r.instance))
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
        ratios_m = stats(ratios) if ratios else (None, None, None)
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


def cell(vals: list) -> str:
    """``median (min-max) n=runs/processes`` of (value, pair, instance) tuples."""
    if not vals:
        return "-"
    inst = len({i for _, _, i in vals})
    return f"{spread([v for v, _, _ in vals])} n={len(vals)}/{inst}p"


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
    rows, points = [], []
    order = [f for f, _, _ in metrics]
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2], order.index(k[3]))):
        model, w, c, field = key
        lab, hi = labels[field]
        by_tree = groups[key]
        refv = by_tree.get(ref, [])
        cells = [model, w, str(c), lab, cell(refv)]
        for t in others:
            tv = by_tree.get(t, [])
            if not tv or not refv:
                cells += [cell(tv), "-", "-", "-"]
                continue
            cmp = compare(refv, tv, hi)
            m, lo, hi_ = cmp["ratio"]
            star = "" if cmp["paired"] else " (unpaired)"
            cells += [
                cell(tv),
                f"{fmt(m, 3)} ({fmt(lo, 3)}-{fmt(hi_, 3)}){star}",
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
        rows.append(cells)
    return results.markdown_table(head, rows), points
