"""What the layer benchmark predicts for a served arm: layers x (the base's layer time - the
arm's layer time) at M = batch size, from ``bench_moe_layer``'s rows of the variant each
side's MoE experts run (``layer_variant``). A round's folder that holds its own layer runs
(``<round>/moe_layer-*.json`` beside ``<round>/served/``) gives the prediction of the machine
its waves ran on (``beside_layers``).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from vseries import results

SCALE = {"fp8static": "static", "fp8dyn": "dynamic"}
DECODE_BACKEND = "triton_fp8_decode"  # the series' opt-in decode backend (--moe-backend)


def layer_variant(arm: str, flavour: str) -> tuple[str, str] | None:
    """The layer-table (tree, variant) that a served arm's MoE experts run (None: not in
    the layer table): v0.34.0's default is FLASHINFER_CUTLASS with static scales and TRITON
    with dynamic ones; the series' ``auto`` is TRITON with its configs (``general``); its
    decode backend is the layer table's ``default`` of the series tree; TRITON asked for on
    v0.34.0, untuned or with the tune phase's file (tree ``tuned``), that tree's ``default``;
    another tree (a candidate change to v0.34.0, e.g. ``cfp8-quant-one-program``) as v0.34.0's
    own choice, from its own rows."""
    tree, _, asked = arm.partition(" --moe-backend ")
    if tree == "series":
        return {"": ("series", "general"), DECODE_BACKEND: ("series", "default")}.get(asked)
    if asked == "triton":
        return (tree, "default")
    if not asked:
        return (tree, "flashinfer" if flavour == "fp8static" else "default")
    return None


def layer_us(layer_rows: list[dict], shape: str) -> dict:
    """(tree, variant, scale, m) -> median us of the layer rows of ``shape``."""
    runs: dict = {}
    for r in layer_rows:
        if r.get("shape") == shape and r.get("us") is not None:
            runs.setdefault((r["tree"], r["variant"], r["dtype"], int(r["m"])), []).append(r["us"])
    return {k: statistics.median(v) for k, v in runs.items()}


def predicted_us(
    layer: dict, layers: int, flavour: str, arm: str, batch: str, ref: str = "base"
) -> float | None:
    """layers x (the reference arm's layer time - the arm's) at M = batch, from the layer
    table's rows of the variants each side's experts run (None: a side has no row)."""
    lr = layer_variant(ref, flavour)
    kb = layer.get((*lr, SCALE[flavour], int(batch))) if lr else None
    lv = layer_variant(arm, flavour)
    ks = layer.get((*lv, SCALE[flavour], int(batch))) if lv else None
    return layers * (kb - ks) if kb is not None and ks is not None else None


def beside_layers(paths: list[Path], shape: str) -> dict[Path, dict]:
    """A round's folder -> its layer table, for the records at ``<round>/served/*.json``
    whose round also holds ``moe_layer-*.json`` (the layer phase on the same machine)."""
    out = {}
    for d in {p.parent.parent for p in paths if p.parent.name == "served"}:
        files = sorted(d.glob("moe_layer-*.json"))
        if files:
            rows = []
            for f in files:
                head, file_rows = results.load(f)
                rows += [{**r, "tree": head["variant"]} for r in file_rows]
            if table := layer_us(rows, shape):
                out[d] = table
    return out
