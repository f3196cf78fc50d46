"""The traced processes' tables of the served report: each traced (process, batch)'s decode
step on the GPU timeline, its graph's span beside its TPOT, and per held arm the saving on the
GPU timeline against the layer table's prediction (``benchmarks.served.trace`` made the
figures inside the engine).
"""

from __future__ import annotations

from benchmarks.served.arms import arm_of, held_arms, med
from benchmarks.served.predict import predicted_us


def trace_rows(recs: list[dict]) -> list[list[str]]:
    """One row per traced (process, batch): the decode step on the GPU timeline (under the
    profiler, whose own CPU cost lengthens the period), busy and idle, kernels per step,
    the MoE experts' launches, and the three longest kernels per step."""
    rows = []
    for r in recs:
        for b, t in sorted(r.get("trace", {}).items(), key=lambda kv: int(kv[0])):
            if not t.get("steps"):
                continue
            longest = ", ".join(
                f"{n[:48]} {us:.0f}" for n, us in list(t["longest_kernels_us"].items())[:3]
            )
            launches = ", ".join(f"{n} {c:g}" for n, c in t["launches_per_step"].items())
            rows.append(
                [r["name"], r["tree"], r.get("backend") or r["moe_backend"], b, str(t["steps"]),
                 f"{t['period_us']:.0f}", f"{t['busy_us']:.0f}", f"{t['idle_us']:.0f}",
                 f"{t['kernels_per_step']:g}", launches or "-", longest]
            )  # fmt: skip
    return rows


def _traced(recs: list[dict], flavour: str, batch: str, arm: str) -> list[dict]:
    return [
        r
        for r in recs
        if "error" not in r
        and r["flavour"] == flavour
        and arm_of(r) == arm
        and r.get("trace", {}).get(batch, {}).get("steps")
    ]


def step_rows(recs: list[dict]) -> list[list[str]]:
    """One row per traced (process, batch): the replayed graph's span on the GPU timeline and
    the MoE kernels inside it (kernel times: the profiler lengthens the host's part of a step,
    not the kernels), beside the same process's TPOT measured without the profiler. TPOT -
    graph span is what each step spends outside its graph: the sampler's kernels and the GPU
    waiting for the host (scheduling, input preparation, output). Where it grows as the graph
    shrinks, the host, not the GPU, sets the step."""
    rows = []
    for r in recs:
        for b, t in sorted(r.get("trace", {}).items(), key=lambda kv: int(kv[0])):
            tpot = med(r.get("tpot_ms", {}).get(b, []))
            if not t.get("steps") or tpot is None:
                continue
            rows.append(
                [r["name"], r["tree"], r.get("backend") or r["moe_backend"], r["flavour"], b,
                 f"{t['graph_us']:.0f}", f"{t['moe_us']:.0f}", f"{tpot:.3f}",
                 f"{1e3 * tpot - t['graph_us']:.0f}"]
            )  # fmt: skip
    return rows


def graph_saving_rows(
    recs: list[dict], batches: list[str], layer: dict, held: tuple[str, ...] | None = None
) -> list[list[str]]:
    """Per flavour, series arm and batch with traced processes on both sides: the graph's span
    (median over the traced processes of each side), the saving on the GPU timeline against
    the layer table's prediction, and the TPOT saving of the same processes."""
    rows = []
    ok = [r for r in recs if "error" not in r]
    arms = held_arms(ok, held)
    for fl in sorted({r["flavour"] for r in ok}):
        for arm in arms:
            for b in batches:
                base, ser = _traced(ok, fl, b, "base"), _traced(ok, fl, b, arm)
                if not base or not ser:
                    continue
                gb = med([r["trace"][b]["graph_us"] for r in base])
                gs = med([r["trace"][b]["graph_us"] for r in ser])
                tb = med([med(r["tpot_ms"][b]) for r in base])
                ts = med([med(r["tpot_ms"][b]) for r in ser])
                pred = predicted_us(layer, base[0]["layers"], fl, arm, b)
                names = (
                    ", ".join(r["name"] for r in base) + " v " + ", ".join(r["name"] for r in ser)
                )
                rows.append(
                    [fl, b, arm, names, f"{gb:.0f}", f"{gs:.0f}", f"{gb - gs:.0f}",
                     "-" if pred is None else f"{pred:.0f}", f"{1e3 * (tb - ts):.0f}",
                     "-" if gb - gs <= 0 else f"{100 * 1e3 * (tb - ts) / (gb - gs):.0f}%"]
                )  # fmt: skip
    return rows
