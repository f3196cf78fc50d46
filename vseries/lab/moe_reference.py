"""The float32 reference of a per-tensor FP8 MoE layer that the contracts hold a tree's kernels
to, and the verdicts on their rows (one place for the contracts that check layer numerics)."""

from __future__ import annotations

from collections.abc import Callable

import torch

FP8 = torch.float8_e4m3fn


def quantise(t: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """``t`` through per-tensor FP8 and back, as vLLM quantises (``scaled_fp8_quant``): a given
    scale, or max|t| / 448; values times the reciprocal scale (a zero scale gives zeros)."""
    s = scale if scale is not None else t.abs().max() / 448
    inv = torch.where(s == 0, 0.0, 1.0 / s)
    return (t * inv).clamp(-448, 448).to(FP8).float() * s


def layer(w1, w2, s1, s2, x, tw, ti, expert_map=None, a1=None, a2=None):
    """The layer in float32 on the dequantised FP8 weights (``w1`` [E, 2I, K] gate rows then
    up rows, ``w2`` [E, K, I], per-expert scales ``s1``, ``s2``), each GEMM's input quantised
    per tensor (``a1``, ``a2``: static scales, None: dynamic), the intermediate rounded to the
    activation dtype where the kernels store it. A top-k id of -1, or one ``expert_map`` sends
    elsewhere, adds nothing. Returns (output [M, K] fp32, intermediate [M, top-k, I])."""
    inter, topk = w2.size(2), ti.size(1)
    loc = ti.long() if expert_map is None else expert_map[ti.long().clamp(min=0)].long()
    loc[ti < 0] = -1
    valid, loc = loc >= 0, loc.clamp(min=0)
    xq = quantise(x.float(), a1)
    h = torch.zeros(*ti.shape, inter, device=x.device)
    for k in range(topk):
        gu = torch.einsum("mh,mnh->mn", xq, w1[loc[:, k]].float() * s1[loc[:, k], None, None])
        h[:, k] = torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]
    h = (h * valid[..., None]).to(x.dtype).float()
    hq = quantise(h, a2)
    out = torch.zeros(x.shape, device=x.device)
    for k in range(topk):
        y = torch.einsum("mi,mhi->mh", hq[:, k], w2[loc[:, k]].float() * s2[loc[:, k], None, None])
        out += y * (tw[:, k].float() * valid[:, k])[:, None]
    return out, h


def verdicts(rows: list[dict], tol: float, what: Callable[[dict], str]) -> list[str]:
    """What is wrong with each row (keys ``raised`` when the call raised, else ``finite``,
    ``err`` = max |err| / max |ref| and, where a token has no local expert,
    ``remote_token_zero``), in words that start with ``what(row)``; empty when every row
    holds."""
    bad = []
    for r in rows:
        if "raised" in r:
            bad.append(f"{what(r)}: the call raised: {r['raised']}")
        elif not r["finite"]:
            bad.append(f"{what(r)}: output not finite (NaN/inf: a row left unwritten?)")
        elif not r.get("remote_token_zero", True):
            bad.append(f"{what(r)}: the token routed only to other ranks has output")
        elif not r["err"] < tol:
            bad.append(f"{what(r)}: max |err| / max |ref| = {r['err']:.3f} >= {tol}")
    return bad
