"""Served decode records -> tables: every process listed, then per flavour and batch size the
trees' medians, their ratio, and the saving the layer table predicts.

    python -m benchmarks.served.report served-*.json --layer moe_layer-*.json \\
        --md served.md --json served.json

A record is one engine process (``benchmarks.served.engine``). Per process and batch size:
the median of its repetitions (and their range). Per arm (a tree, and the ``--moe-backend``
asked for, if any): the median of its processes' medians and the range of those medians
(processes differ; none is averaged away). Each series arm is held to v0.34.0's default (or
to each arm ``--against`` names, a table each: v0.34.0 with TRITON asked for, untuned or with
a tuned configuration file): the series as it is (``auto``) and with its decode backend asked
for (``--moe-backend triton_fp8_decode``). The prediction: layers x (the reference's layer
time - the arm's layer time) at M = batch size, from the layer benchmark's rows
(``bench_moe_layer``, the variant each arm's MoE experts run: ``layer_variant``), shape
``--shape``. Where a record's round folder (``<round>/served/<name>.json``) also holds
``moe_layer-*.json`` (the layer phase run on the same machine), each of its waves is also held
to that machine's prediction.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

from benchmarks.served.arms import (
    BASE,
    arm_of,
    first_difference,
    held_arms,
    med,
    medians,
    ref_name,
    spread,
)
from benchmarks.served.predict import (
    beside_layers,
    layer_us,
    predicted_us,
)
from benchmarks.served.traced import graph_saving_rows, step_rows, trace_rows
from vseries import results


def process_rows(recs: list[dict], batches: list[str], ref: str = BASE) -> list[list[str]]:
    # Dummy weights give near-flat logits: a near-tie can take either greedy token in two
    # processes of one tree. A process's continuation counts as equal when it is that
    # prompt's continuation in another process of the reference arm (v0.34.0's default unless
    # --against names another) of the flavour (its own run-to-run forms); a difference is
    # shown against the first such process.
    bases: dict[str, list[dict]] = {}
    for r in recs:
        if arm_of(r) == ref and "tokens" in r:
            bases.setdefault(r["flavour"], []).append(r)
    rows = []
    for r in recs:
        if "error" in r:
            rows.append([r["name"], "-", "-", "failed: " + r["error"][:120]] + [""] * len(batches))
            continue
        backend = r.get("backend") or r["moe_backend"]
        cells = [r["name"], r["tree"], backend, str(r["startup_s"])]
        for b in batches:
            xs = [x for x in r["tpot_ms"].get(b, []) if x is not None]
            cells.append(f"{med(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})" if xs else "-")
        others = [b for b in bases.get(r["flavour"], []) if b is not r]
        if not others:
            cells.append("-")
        else:
            same = sum(any(b["tokens"][i] == t for b in others) for i, t in enumerate(r["tokens"]))
            n = len(r["tokens"])
            d = [
                first_difference(a, t)
                for a, t in zip(others[0]["tokens"], r["tokens"], strict=True)
            ]
            cells.append(f"{same}/{n}" + ("" if same == n else f" (first at {d})"))
        rows.append(cells)
    return rows


WAVE_LINE = re.compile(r"^=== wave (\S+): \d+ engines, [^:]*: (.*)$")


def waves_from_log(text: str) -> dict[str, str]:
    """Process name -> its wave, from moved.sh's log (``=== wave 1: 6 engines, 300s, at 19s:
    bd1:base:fp8dyn ...``): for records written before the engine kept its wave's name."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if m := WAVE_LINE.match(line.strip()):
            for spec in m.group(2).split():
                out.setdefault(spec.split(":")[0], m.group(1))
    return out


def wave_of(rec: dict, waves: dict[str, str]) -> str | None:
    return rec.get("wave_id") or waves.get(rec.get("name", ""))


def per_wave(
    recs: list[dict], flavour: str, batch: str, arm: str, waves: dict, ref: str = BASE
) -> str:
    """The reference arm (v0.34.0's default) against ``arm`` inside each wave (processes
    started together): the ratio of the medians of the wave's processes, and how many of each
    side it holds."""
    cells = []
    for w in sorted({wave_of(r, waves) for r in recs} - {None}):
        here = [r for r in recs if wave_of(r, waves) == w]
        base, other = medians(here, flavour, batch, ref), medians(here, flavour, batch, arm)
        if base and other:
            cells.append(f"{w}: {med(base) / med(other):.3f}x ({len(base)} v {len(other)})")
    return ", ".join(cells) or "-"


def summary(
    recs: list[dict],
    batches: list[str],
    layer: dict,
    waves: dict | None = None,
    ref: str = BASE,
    held: tuple[str, ...] | None = None,
) -> list[list[str]]:
    """Per flavour, held arm (``held_arms``) and batch size: the reference arm against the
    arm."""
    rows = []
    ok = [r for r in recs if "error" not in r]
    flavours = sorted({r["flavour"] for r in ok})
    arms = held_arms(ok, held)
    for fl in flavours:
        for arm in arms:
            for b in batches:
                base, ser = medians(recs, fl, b, ref), medians(recs, fl, b, arm)
                if not base or not ser:
                    continue
                mb, ms = med(base), med(ser)
                layers = next(r["layers"] for r in ok if r["flavour"] == fl)
                pred_us = predicted_us(layer, layers, fl, arm, b, ref)
                pred = None if pred_us is None else pred_us / 1e3
                saved = mb - ms
                wins = sum(m < min(base) for m in ser)
                rows.append(
                    [fl, b, spread(base), arm, spread(ser), f"{mb / ms:.3f}x", f"{saved:.3f}",
                     "-" if pred is None else f"{pred:.3f}",
                     "-" if not pred else f"{100 * saved / pred:.0f}%",
                     f"{wins} of {len(ser)}", per_wave(recs, fl, b, arm, waves or {}, ref)]
                )  # fmt: skip
    return rows


def backend_rows(recs: list[dict], batches: list[str]) -> list[list[str]]:
    """v0.34.0's default against each backend asked for on v0.34.0 (``--moe-backend``), per
    flavour and batch size: what the oracle's choice is worth on the base alone."""
    rows = []
    asked = sorted({arm_of(r) for r in recs if "error" not in r} - {"base", "series"})
    for arm in (a for a in asked if a.startswith("base ")):
        for fl in sorted({r["flavour"] for r in recs if "error" not in r}):
            for b in batches:
                base, other = medians(recs, fl, b, "base"), medians(recs, fl, b, arm)
                if not base or not other:
                    continue
                wins = sum(m < min(base) for m in other)
                rows.append(
                    [fl, b, spread(base), arm, spread(other), f"{med(base) / med(other):.3f}x",
                     f"{wins} of {len(other)}"]
                )  # fmt: skip
    return rows


def same_machine_rows(
    recs: list[dict],
    batches: list[str],
    beside: dict,
    waves: dict,
    ref: str = BASE,
    held: tuple[str, ...] | None = None,
) -> list[list[str]]:
    """Per wave whose round holds its own layer table: the reference arm (v0.34.0's default)
    against each series arm inside the wave, and the saving that machine's layer table
    predicts."""
    rows = []
    by_wave: dict = {}
    for r in recs:
        d = r.get("_round")
        if "error" not in r and d in beside and (w := wave_of(r, waves)):
            by_wave.setdefault((d, w), []).append(r)
    for (d, w), here in sorted(by_wave.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        arms = held_arms(here, held)
        for fl in sorted({r["flavour"] for r in here}):
            for arm in arms:
                for b in batches:
                    base, ser = medians(here, fl, b, ref), medians(here, fl, b, arm)
                    pred = predicted_us(beside[d], here[0]["layers"], fl, arm, b, ref)
                    if not base or not ser or pred is None:
                        continue
                    saved = med(base) - med(ser)
                    rows.append(
                        [d.name, w, fl, b, arm, f"{med(base):.3f}", f"{med(ser):.3f}",
                         f"{saved:.3f}", f"{pred / 1e3:.3f}",
                         "-" if pred <= 0 else f"{100 * saved * 1e3 / pred:.0f}%"]
                    )  # fmt: skip
    return rows


def arm_header(held: tuple[str, ...] | None) -> str:
    """The arm column's header: "series arm" by default, "arm" under ``--arms``."""
    return "series arm" if held is None else "arm"


def comparison(
    recs: list[dict],
    batches: list[str],
    layer: dict,
    beside: dict,
    waves: dict | None,
    ref: str,
    held: tuple[str, ...] | None = None,
) -> str:
    """Every held arm (the series', or those ``held`` names) against the reference arm
    ``ref``: over all processes, then inside each wave whose round holds its own layer
    table."""
    n, d = ref_name(ref), ("default" if ref == BASE else "reference")
    a = arm_header(held)
    table = results.markdown_table(
        ["flavour", "batch", f"{n} TPOT ms (range of processes)", a,
         "its TPOT ms", f"{d} / it", "saved ms", "predicted ms (layers x layer saving)",
         "saved / predicted", f"its processes faster than every {d} one",
         f"{d} / it inside each wave (processes of each)"],
        summary(recs, batches, layer, waves, ref, held),
    )  # fmt: skip
    sm = same_machine_rows(recs, batches, beside, waves or {}, ref, held) if beside else []
    if sm:
        table += "\n\n" + results.markdown_table(
            ["round", "wave", "flavour", "batch", a, f"{d} TPOT ms",
             "its TPOT ms", "saved ms", "predicted ms (that machine's layer table)",
             "saved / predicted"],
            sm,
        )  # fmt: skip
    return table


def build(
    paths: list[Path],
    layer_paths: list[Path],
    shape: str,
    waves: dict | None = None,
    refs: tuple[str, ...] = (BASE,),
    held: tuple[str, ...] | None = None,
) -> tuple[str, list[dict]]:
    recs, layer_rows = read_inputs(paths, layer_paths, shape)
    batches = sorted({b for r in recs for b in r.get("tpot_ms", {})}, key=int)
    layer = layer_us(layer_rows, shape)
    beside = beside_layers(paths, shape)
    table1 = results.markdown_table(
        ["process", "tree", "MoE backend", "start-up s"]
        + [f"TPOT ms, batch {b}: median (range)" for b in batches]
        + [f"greedy continuations equal to a {'base' if refs[0] == BASE else refs[0]} process's"],
        process_rows(recs, batches, refs[0]),
    )
    table2 = "\n\n".join(comparison(recs, batches, layer, beside, waves, r, held) for r in refs)
    br = backend_rows(recs, batches)
    if br:
        table2 += "\n\n" + results.markdown_table(
            ["flavour", "batch", "v0.34.0 default TPOT ms (range of processes)", "against",
             "its TPOT ms", "default / it", "its processes faster than every default one"],
            br,
        )  # fmt: skip
    tr = trace_rows(recs)
    table3 = results.markdown_table(
        ["process", "tree", "MoE backend", "batch", "steps", "step us (profiled)",
         "GPU busy us", "GPU idle us", "kernels", "MoE experts' launches per step",
         "longest kernels, us per step"],
        tr,
    )  # fmt: skip
    sr = step_rows(recs)
    if sr:
        table3 += "\n\n" + results.markdown_table(
            ["process", "tree", "MoE backend", "flavour", "batch", "graph span us (profiled)",
             "MoE kernels us", "TPOT ms (not profiled)", "TPOT - graph span us"],
            sr,
        )  # fmt: skip
        gr = graph_saving_rows(recs, batches, layer, held)
        if gr:
            table3 += "\n\n" + results.markdown_table(
                ["flavour", "batch", arm_header(held),
                 "traced processes (default v arm)",
                 "default's graph us", "arm's graph us", "saved on the GPU timeline us",
                 "predicted us (layers x layer saving)", "saved in TPOT us",
                 "TPOT saving / graph saving"],
                gr,
            )  # fmt: skip
    slim = [{k: v for k, v in r.items() if k not in ("tokens", "_round")} for r in recs]
    return table1 + "\n\n" + table2 + ("\n\n" + table3 if tr else ""), slim


# what a record has: its name, then its error (a failed process) or its tree and flavour
RECORD_KEYS = ("name", "tree", "flavour")
DEFAULT_ARCH = "qwen3-30b-a3b"  # the engine's default, and the records' before they said it


def read_inputs(
    records: list[Path], layer: list[Path], shape: str
) -> tuple[list[dict], list[dict]]:
    """(the engines' records, the layer rows, each with its file's tree): every record an
    engine's record, every --layer file a layer result file holding rows of ``shape``.

    Raises:
        ValueError: which file is missing, not JSON, or of another kind; or which shapes the
            layer files hold.
    """
    recs = []
    for p in records:
        r = results.read_json(p)
        need = RECORD_KEYS[:1] if isinstance(r, dict) and "error" in r else RECORD_KEYS
        missing = [k for k in need if k not in r] if isinstance(r, dict) else RECORD_KEYS
        if missing:
            raise ValueError(
                f"{p}: not a served engine's record (no {', '.join(missing)}; "
                "benchmarks/served/engine.py writes them)"
            )
        # the round's folder (records at <round>/served/), for its own layer table
        recs.append({**r, "_round": p.parent.parent if p.parent.name == "served" else None})
    # one model per report: records of other models (the arch each engine served; error
    # records and the records written before the engine kept it are Qwen3-30B-A3B's)
    archs = {r.get("arch", DEFAULT_ARCH) for r in recs}
    recs = [r for r in recs if r.get("arch", DEFAULT_ARCH) == shape]
    if records and not recs:
        raise ValueError(
            f"--shape {shape}: no engine record of it; the records hold " + ", ".join(sorted(archs))
        )
    rows = []
    for p in layer:
        head, file_rows = results.load(p)
        if head.get("bench") not in (None, "moe_layer") or not isinstance(head.get("variant"), str):
            raise ValueError(f"--layer {p}: not a bench_moe_layer result file")
        rows += [{**r, "tree": head["variant"]} for r in file_rows]
    shapes = {str(r.get("shape")) for r in rows}
    if layer and shape not in shapes:
        raise ValueError(
            f"--shape {shape}: the layer files hold no rows of it; present: "
            + ", ".join(sorted(shapes))
        )
    return recs, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--layer", nargs="*", type=Path, default=[], help="bench_moe_layer JSON")
    ap.add_argument(
        "--shape", default=DEFAULT_ARCH, help="the model (benchmarks/shapes.py) of the report"
    )
    ap.add_argument("--md", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--against",
        nargs="+",
        default=[BASE],
        metavar="ARM",
        help="the arms each series arm is held to, a table each (default: v0.34.0's own "
        "choice, 'base'); e.g. 'base --moe-backend triton' 'tuned --moe-backend triton'",
    )
    ap.add_argument(
        "--arms",
        nargs="+",
        metavar="ARM",
        help="the arms held to the references (default: every series arm); e.g. "
        "'cfp8-quant-one-program', a candidate's tree",
    )
    ap.add_argument(
        "--waves-log", type=Path, help="moved.sh's log: each process's wave (older records)"
    )
    a = ap.parse_args(argv)
    waves = {}
    if a.waves_log:
        if not a.waves_log.is_file():
            ap.error(f"--waves-log {a.waves_log}: no such file")
        raw = a.waves_log.read_bytes()
        waves = waves_from_log(
            (gzip.decompress(raw) if a.waves_log.suffix == ".gz" else raw).decode(errors="replace")
        )
    try:
        text, slim = build(
            a.records, a.layer, a.shape, waves, tuple(a.against), tuple(a.arms or ()) or None
        )
    except ValueError as e:  # read_inputs: a file or selector it cannot use, before any write
        ap.error(str(e))
    print(text)
    if a.md:
        a.md.write_text(text)
    if a.json:
        a.json.write_text(json.dumps(slim, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
