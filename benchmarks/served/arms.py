"""What a served process measured (its arm: a tree and the MoE backend it asked for) and the
per-arm medians the served report compares. An arm is held to a reference arm: v0.34.0's
default (``base``) unless the report names another (``--against``, e.g. v0.34.0 with TRITON
asked for, untuned or with a tuned configuration file).
"""

from __future__ import annotations

import statistics

BASE = "base"  # v0.34.0 as a user runs it: its own choice of MoE backend


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def tree_of(rec: dict) -> str:
    """The tree a process measured: the patched wheel is the series."""
    return "series" if rec.get("tree") == "wheel" else rec.get("tree", "?")


def arm_of(rec: dict) -> str:
    """What a process measured: its tree, and the MoE backend when one was asked for
    (``--moe-backend``): v0.34.0 with TRITON asked for is an arm of its own, never pooled with
    v0.34.0's default."""
    asked = rec.get("moe_backend") or "auto"
    return tree_of(rec) if asked == "auto" else f"{tree_of(rec)} --moe-backend {asked}"


def held_arms(recs: list[dict], arms: tuple[str, ...] | None = None) -> list[str]:
    """The arms held to the reference: those ``arms`` names that a record measured, or by
    default every series arm (the tree as it is, its decode backend asked for)."""
    seen = {arm_of(r) for r in recs if "error" not in r}
    return sorted(seen & set(arms) if arms else {a for a in seen if a.startswith("series")})


def medians(recs: list[dict], flavour: str, batch: str, arm: str) -> list[float]:
    """Each process's median TPOT of one arm at one flavour and batch size."""
    meds = [
        med(r["tpot_ms"].get(batch, []))
        for r in recs
        if "error" not in r and r["flavour"] == flavour and arm_of(r) == arm
    ]
    return [m for m in meds if m is not None]


def spread(ms: list[float]) -> str:
    return f"{med(ms):.3f} ({min(ms):.3f}-{max(ms):.3f}), n={len(ms)}"


def ref_name(ref: str) -> str:
    """A reference arm in a table's header."""
    return "v0.34.0 default" if ref == BASE else ref
