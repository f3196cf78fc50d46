"""Experimental (issue 13): the per-tensor FP8 MoE decode layer in ONE persistent kernel.

Not part of any patch. **Measured in H200 round 11, and it loses** (`decode_one_launch_round11.md`,
raw `benchmarks/results/raw/round11/`). It is bit-equal to patch 0005's two kernels on every
case of ``--check`` at grid 132 with ``prefetch="item"`` and ``"early"``, and equal again at
grids 132 and 264 in every timed case (the cross-program wait works; grid 8 not run). But it
is slower on every shape at 1 and 2 tokens: Qwen3-30B-A3B static at one token 22.8 us
against 0005's 21.8 us (38% / 40% of the read roofline), DeepSeek-V3 TP8 33.1 / 26.3 us,
Mixtral-8x7B 121.8 / 99.6 us (its no-prefetch variant 103.6 us); at two tokens 0.65-0.80x.
The launch and tail it removes were small (0005's gap between its two kernels: 0.4-0.9 us a
call), while its own body is slower than 0005's two kernels together (Qwen3 static: 20.2 us
against 10.5 + 7.8 us). Earlier (round 10): at grid 1, bit-equal on the small cases and the
Qwen3 layer at 1-2 tokens, static and dynamic scales.

Patch 0005 runs the layer as two kernels, each with a fixed cost of ~4 us per call on an H200
(``moe_decode.md``, anatomy: Qwen3-30B-A3B static, GEMM1 3.8 us + GEMM2 4.5 us fixed,
streaming at 84-85% of the read bandwidth). Here one launch does both GEMMs:

- items: GEMM1 tiles (slot, intermediate tile, K split) first, then GEMM2 tiles (slot, hidden
  tile, K split), taken round-robin by ``grid`` persistent programs (item = pid + j * grid);
  their bodies are those of ``_moe_decode_w13_kernel`` / ``_moe_decode_w2_kernel`` (patch
  0005's ``fused_moe_decode.py``, whose helpers this module calls);
- every GEMM1 item, skipped ones included, adds one to a done counter (release); a GEMM2 item
  first prefetches its weight tile into L2 (``PREFETCH``; its weights do not depend on
  GEMM1), then waits until the counter holds every GEMM1 item (acquire; items of expert -1
  read no h and do not wait), so GEMM2's launch, routing reads and weight fetch overlap
  GEMM1's tail;
- no deadlock: a program finishes its GEMM1 items before any of its GEMM2 items, and every
  program is resident (``grid`` <= what fits at once: the caller's job); the last program to
  leave (an exit counter) zeroes every counter for the next call.

Triton's interpreter runs programs one after another: there only ``grid = 1`` cannot wait
forever (the tests use it). Shapes and dtypes as ``fused_moe_fp8_decode``.

First run on a GPU (from a tree with patch 0005, e.g. on the H200 host
``cd /root/vllm-series && PYTHONPATH=/root/site:. python3 $WS/benchmarks/moe_decode_fused.py
--check --out F``): ``compare_with_two_kernels`` on the interpreter test's cases and on the
three layer shapes of ``bench_moe_decode.py`` at 1 and 2 tokens, static and dynamic scales, at
grids 1, 8, 132 and 264, each grid in its own process under a timeout.

``_w13_item`` and ``_w2_item`` are copies of the two kernels' bodies (program ids made
arguments, early returns made branches), kept here while the design is unmeasured; if it wins,
patch 0005's kernels become thin wrappers of these two functions, so that one copy remains.
"""

from __future__ import annotations

import os
import time

import torch
from vllm.model_executor.layers.fused_moe import fused_moe_decode as fd
from vllm.triton_utils import tl, triton

_expert_group = fd._expert_group
_dynamic_scale = fd._dynamic_scale


@triton.jit
def _prefetch_l2(ptrs):
    """Ask L2 for the 128-byte lines at ``ptrs`` (any shape); the loads are not waited for."""
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;",
        "=r,l",
        [ptrs],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )


@triton.jit
def _prefetch_w2_tile(
    w2_ptr, e, first, w_row, n_ok, k_begin, k_end, stride_w2e, PREFETCH_LINES: tl.constexpr
):
    """L2 prefetch of one GEMM2 tile's weights (rows ``w_row`` of expert ``e``, K in
    [k_begin, k_end)), only for the item that does the expert's work (``first``)."""
    if (e >= 0) & (first != 0):
        # the 128-byte lines of this tile's weights: [BLOCK_N rows, lines of the split]
        offs_l = tl.arange(0, PREFETCH_LINES) * 128
        ok = n_ok[:, None] & (k_begin + offs_l[None, :] < k_end)
        # lines outside the tile (rows past N, K past the split) ask for the expert's first
        # line instead: a valid, redundant address
        w_e = w2_ptr + e.to(tl.int64) * stride_w2e
        _prefetch_l2(tl.where(ok, w_row[:, None] + k_begin + offs_l[None, :], w_e))


@triton.jit
def _w2_tile(
    pid_n, pid_k, e, w2_ptr, N, inter, stride_w2e, stride_w2n, SPLIT_K2: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K2: tl.constexpr,
):  # fmt: skip
    """A GEMM2 tile's rows ``offs_n`` [BLOCK_N], their K range [k_begin, k_end) of this split
    (``tiles_per_split`` steps of BLOCK_K2) and the row pointers ``w_row`` [BLOCK_N] into
    expert ``e``'s w2 (FP8, K contiguous)."""
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tiles_per_split = tl.cdiv(tl.cdiv(inter, BLOCK_K2), SPLIT_K2)
    k_begin = pid_k * tiles_per_split * BLOCK_K2
    k_end = tl.minimum(k_begin + tiles_per_split * BLOCK_K2, inter)
    w_row = w2_ptr + e.to(tl.int64) * stride_w2e + offs_n.to(tl.int64) * stride_w2n
    return offs_n, tiles_per_split, k_begin, k_end, w_row


@triton.jit
def _prefetch_w2_items(
    first2, n2_items, grid, w2_ptr, topk_ids_ptr, expert_map_ptr, M, topk, N, inter,
    stride_w2e, stride_w2n, N_N_TILES, HAS_EXPERT_MAP: tl.constexpr, SPLIT_K2: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K2: tl.constexpr, BLOCK_T: tl.constexpr,
    BLOCK_P: tl.constexpr, TOPK_P: tl.constexpr, PREFETCH_LINES: tl.constexpr,
):  # fmt: skip
    """``PREFETCH == 2``: before its GEMM1 items, a program asks L2 for the weights of every
    GEMM2 item it will do (item = first2 + j * grid), so that all of GEMM2's weights are in
    flight while GEMM1 runs, not only those of programs whose GEMM1 items end early."""
    for item in range(first2, n2_items, grid):
        _, pid_n, pid_k, e, first, _, _, _ = _item_expert(
            item, N_N_TILES, topk_ids_ptr, expert_map_ptr, M, topk, SPLIT_K2,
            HAS_EXPERT_MAP, BLOCK_T, BLOCK_P, TOPK_P,
        )  # fmt: skip
        offs_n, _, k_begin, k_end, w_row = _w2_tile(
            pid_n, pid_k, e, w2_ptr, N, inter, stride_w2e, stride_w2n, SPLIT_K2, BLOCK_N,
            BLOCK_K2,
        )  # fmt: skip
        _prefetch_w2_tile(w2_ptr, e, first, w_row, offs_n < N, k_begin, k_end, stride_w2e,
                          PREFETCH_LINES)  # fmt: skip


@triton.jit
def _item_expert(
    item, n_tiles, topk_ids_ptr, expert_map_ptr, M, topk, SPLIT: tl.constexpr,
    HAS_EXPERT_MAP: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_P: tl.constexpr,
    TOPK_P: tl.constexpr,
):  # fmt: skip
    """An item's (slot, tile of the slot, K split) -- item = (slot * n_tiles + tile) * SPLIT
    + split -- and its slot's expert group (``_expert_group``)."""
    pid_k = item % SPLIT
    t = item // SPLIT
    e, first, has, kk, match = _expert_group(
        topk_ids_ptr, expert_map_ptr, t // n_tiles, M, topk,
        HAS_EXPERT_MAP, BLOCK_T, BLOCK_P, TOPK_P,
    )  # fmt: skip
    return t // n_tiles, t % n_tiles, pid_k, e, first, has, kk, match


@triton.jit
def _w13_item(
    item, x_ptr, a1_scale_ptr, w1_ptr, w1_scale_ptr, topk_ids_ptr, expert_map_ptr, h_ptr,
    amax_ptr, part1_ptr, count1_ptr, M, topk, K, inter, stride_xm, stride_w1e, stride_w1n,
    stride_hm, N_I_TILES, A_MODE: tl.constexpr, HAS_EXPERT_MAP: tl.constexpr,
    SPLIT_K1: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_K1: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_P: tl.constexpr, TOPK_P: tl.constexpr,
):  # fmt: skip
    """One GEMM1 tile: ``_moe_decode_w13_kernel``'s body for (slot, pid_i, pid_k)."""
    slot, pid_i, pid_k, e, first, has, kk, match = _item_expert(
        item, N_I_TILES, topk_ids_ptr, expert_map_ptr, M, topk, SPLIT_K1,
        HAS_EXPERT_MAP, BLOCK_T, BLOCK_P, TOPK_P,
    )  # fmt: skip
    tile = slot * N_I_TILES + pid_i
    if (e < 0) | (first == 0):
        if pid_k == 0:
            tl.store(amax_ptr + tile, 0.0)
    else:
        if A_MODE == 1:
            a_scale = _dynamic_scale(x_ptr, M, K, stride_xm, 4096)
        else:
            a_scale = tl.load(a1_scale_ptr)
        offs_t = tl.arange(0, BLOCK_T)
        offs_k = tl.arange(0, BLOCK_K1)
        offs_r = tl.arange(0, 2 * BLOCK_I)
        i_idx = pid_i * BLOCK_I + offs_r % BLOCK_I
        row = tl.where(offs_r < BLOCK_I, i_idx, inter + i_idx)
        row_ok = i_idx < inter
        tiles_per_split = tl.cdiv(tl.cdiv(K, BLOCK_K1), SPLIT_K1)
        k_begin = pid_k * tiles_per_split * BLOCK_K1
        w_ptrs = (
            w1_ptr
            + e.to(tl.int64) * stride_w1e
            + row[:, None].to(tl.int64) * stride_w1n
            + offs_k[None, :]
            + k_begin
        )
        x_ptrs = x_ptr + offs_t[None, :].to(tl.int64) * stride_xm + offs_k[:, None] + k_begin
        acc = tl.zeros([2 * BLOCK_I, BLOCK_T], dtype=tl.float32)
        for kt in range(0, tiles_per_split):
            k_ok = (k_begin + kt * BLOCK_K1 + offs_k) < K
            w = tl.load(w_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            xt = tl.load(x_ptrs, mask=k_ok[:, None] & has[None, :], other=0.0)
            if A_MODE == 2:
                xq = xt
            else:
                xq = tl.clamp(xt.to(tl.float32) / a_scale, -448.0, 448.0).to(w.dtype)
            acc = tl.dot(w, xq, acc)
            w_ptrs += BLOCK_K1
            x_ptrs += BLOCK_K1
        last = True
        if SPLIT_K1 > 1:
            tile_elems: tl.constexpr = 2 * BLOCK_I * BLOCK_T
            part = part1_ptr + tile.to(tl.int64) * (SPLIT_K1 * tile_elems)
            offs_tile = offs_r[:, None] * BLOCK_T + offs_t[None, :]
            tl.store(part + pid_k * tile_elems + offs_tile, acc)
            tl.debug_barrier()
            old = tl.atomic_add(count1_ptr + tile, 1, sem="acq_rel", scope="gpu")
            tl.debug_barrier()
            last = old == SPLIT_K1 - 1
            if last:
                acc = tl.zeros([2 * BLOCK_I, BLOCK_T], dtype=tl.float32)
                for s in range(SPLIT_K1):
                    acc += tl.load(part + s * tile_elems + offs_tile, cache_modifier=".cg")
        if last:
            acc = acc * (a_scale * tl.load(w1_scale_ptr + e))
            gate, up = tl.split(tl.permute(tl.reshape(acc, (2, BLOCK_I, BLOCK_T)), (1, 2, 0)))
            h = (gate / (1.0 + tl.exp(-gate)) * up).to(h_ptr.dtype.element_ty)
            offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
            h_mask = (offs_i < inter)[:, None] & has[None, :]
            h_rows = (offs_t * topk + kk).to(tl.int64)
            tl.store(h_ptr + h_rows[None, :] * stride_hm + offs_i[:, None], h, mask=h_mask)
            amax = tl.max(tl.max(tl.where(h_mask, tl.abs(h.to(tl.float32)), 0.0), 1), 0)
            tl.store(amax_ptr + tile, amax)


@triton.jit
def _w2_item(
    item, h_ptr, amax_ptr, a2_scale_ptr, w2_ptr, w2_scale_ptr, topk_ids_ptr, expert_map_ptr,
    topk_weights_ptr, out_ptr, part2_ptr, count2_ptr, sync_ptr, n1_items, M, topk, N, inter,
    num_amax, stride_hm, stride_w2e, stride_w2n, stride_om, N_N_TILES,
    A_MODE: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr, HAS_EXPERT_MAP: tl.constexpr,
    SPLIT_K2: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K2: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_P: tl.constexpr, TOPK_P: tl.constexpr,
    BLOCK_A: tl.constexpr, PREFETCH: tl.constexpr, PREFETCH_LINES: tl.constexpr,
):  # fmt: skip
    """One GEMM2 tile: ``_moe_decode_w2_kernel``'s body for (slot, pid_n, pid_k), after its
    weights' L2 prefetch and the wait for every GEMM1 item."""
    slot, pid_n, pid_k, e, first, has, kk, match = _item_expert(
        item, N_N_TILES, topk_ids_ptr, expert_map_ptr, M, topk, SPLIT_K2,
        HAS_EXPERT_MAP, BLOCK_T, BLOCK_P, TOPK_P,
    )  # fmt: skip
    offs_t = tl.arange(0, BLOCK_T)
    offs_n, tiles_per_split, k_begin, k_end, w_row = _w2_tile(
        pid_n, pid_k, e, w2_ptr, N, inter, stride_w2e, stride_w2n, SPLIT_K2, BLOCK_N, BLOCK_K2
    )  # fmt: skip
    n_ok = offs_n < N
    if PREFETCH == 1:
        _prefetch_w2_tile(w2_ptr, e, first, w_row, n_ok, k_begin, k_end, stride_w2e,
                          PREFETCH_LINES)  # fmt: skip
    if (e < 0) | (first != 0):
        acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
        offs_kp = tl.arange(0, TOPK_P)
        if e < 0:
            has = offs_t == slot // topk
            kk = tl.zeros([BLOCK_T], dtype=tl.int32) + slot % topk
            match = has[:, None] & (offs_kp[None, :] == slot % topk)
        else:
            # wait for every GEMM1 item (h and its tile maxima are then written; items of
            # expert -1 only store zeros and need not wait)
            done = tl.atomic_add(sync_ptr, 0, sem="acquire", scope="gpu")
            while done < n1_items:
                done = tl.atomic_add(sync_ptr, 0, sem="acquire", scope="gpu")
            if A_MODE == 1:
                offs_a = tl.arange(0, BLOCK_A)
                amax = tl.zeros([BLOCK_A], dtype=tl.float32)
                for a0 in range(0, num_amax, BLOCK_A):
                    amax = tl.maximum(
                        amax,
                        tl.load(
                            amax_ptr + a0 + offs_a,
                            mask=a0 + offs_a < num_amax,
                            other=0.0,
                            cache_modifier=".cg",
                        ),
                    )
                a_scale = tl.maximum(tl.max(amax, axis=0) / 448.0, 1.0 / (448.0 * 512.0))
            else:
                a_scale = tl.load(a2_scale_ptr)
            offs_k = tl.arange(0, BLOCK_K2)
            h_rows = (offs_t * topk + kk).to(tl.int64)
            w_ptrs = w_row[:, None] + offs_k[None, :] + k_begin
            h_ptrs = h_ptr + h_rows[None, :] * stride_hm + offs_k[:, None] + k_begin
            for kt in range(0, tiles_per_split):
                k_ok = (k_begin + kt * BLOCK_K2 + offs_k) < inter
                w = tl.load(w_ptrs, mask=n_ok[:, None] & k_ok[None, :], other=0.0)
                ht = tl.load(
                    h_ptrs, mask=k_ok[:, None] & has[None, :], other=0.0, cache_modifier=".cg"
                )
                hq = tl.clamp(ht.to(tl.float32) / a_scale, -448.0, 448.0).to(w.dtype)
                acc = tl.dot(w, hq, acc)
                w_ptrs += BLOCK_K2
                h_ptrs += BLOCK_K2
            acc = acc * (a_scale * tl.load(w2_scale_ptr + e))
            if MUL_ROUTED_WEIGHT:
                rw = tl.load(
                    topk_weights_ptr + offs_t[:, None] * topk + offs_kp[None, :],
                    mask=match,
                    other=0.0,
                )
                acc = acc * tl.sum(rw, axis=1)[None, :]
        contrib = ((offs_t * topk + kk) * SPLIT_K2 + pid_k).to(tl.int64) * N
        tl.store(
            part2_ptr + contrib[None, :] + offs_n[:, None],
            acc,
            mask=n_ok[:, None] & has[None, :],
        )
        repeats = match & (offs_kp[None, :] != kk[:, None])
        if tl.max(tl.max(repeats.to(tl.int32), axis=1), axis=0) > 0:
            rows = ((offs_t[:, None] * topk + offs_kp[None, :]) * SPLIT_K2 + pid_k).to(tl.int64)
            tl.store(
                part2_ptr + rows[None, :, :] * N + offs_n[:, None, None],
                tl.zeros([BLOCK_N, BLOCK_T, TOPK_P], dtype=tl.float32),
                mask=n_ok[:, None, None] & repeats[None, :, :],
            )
        count = tl.sum(match.to(tl.int32), axis=1)
        tl.debug_barrier()
        old = tl.atomic_add(
            count2_ptr + offs_t * N_N_TILES + pid_n, count, mask=has, sem="acq_rel", scope="gpu"
        )
        last = has & (old + count == topk * SPLIT_K2)
        tl.debug_barrier()
        if tl.max(last.to(tl.int32), axis=0) > 0:
            token_part = part2_ptr + (offs_t * (topk * SPLIT_K2)).to(tl.int64) * N
            mask = n_ok[:, None] & last[None, :]
            total = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
            for j in range(0, topk * SPLIT_K2):
                total += tl.load(
                    token_part[None, :] + j * N + offs_n[:, None],
                    mask=mask,
                    other=0.0,
                    cache_modifier=".cg",
                )
            out_rows = offs_t.to(tl.int64) * stride_om
            tl.store(
                out_ptr + out_rows[None, :] + offs_n[:, None],
                total.to(out_ptr.dtype.element_ty),
                mask=mask,
            )


@triton.jit(do_not_specialize=["M", "n1_items", "n2_items", "num_amax", "n_count1", "n_count2"])
def _moe_decode_fused_kernel(
    x_ptr, a1_scale_ptr, w1_ptr, w1_scale_ptr, w2_ptr, w2_scale_ptr, a2_scale_ptr,
    topk_ids_ptr, expert_map_ptr, topk_weights_ptr, h_ptr, amax_ptr, part1_ptr, part2_ptr,
    count1_ptr, count2_ptr, sync_ptr, out_ptr, n1_items, n2_items, n_count1, n_count2,
    M, topk, K, inter, N, num_amax, stride_xm, stride_w1e, stride_w1n, stride_hm,
    stride_w2e, stride_w2n, stride_om, N_I_TILES, N_N_TILES,
    A_MODE: tl.constexpr, A2_MODE: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr,
    HAS_EXPERT_MAP: tl.constexpr, SPLIT_K1: tl.constexpr, SPLIT_K2: tl.constexpr,
    BLOCK_I: tl.constexpr, BLOCK_K1: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K2: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_P: tl.constexpr,
    TOPK_P: tl.constexpr, BLOCK_A: tl.constexpr, PREFETCH: tl.constexpr,
    PREFETCH_LINES: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    grid = tl.num_programs(0)
    # GEMM2 items follow this program's GEMM1 items in the round-robin order
    first2 = (pid - n1_items % grid + grid) % grid
    if PREFETCH == 2:
        _prefetch_w2_items(
            first2, n2_items, grid, w2_ptr, topk_ids_ptr, expert_map_ptr, M, topk, N, inter,
            stride_w2e, stride_w2n, N_N_TILES, HAS_EXPERT_MAP, SPLIT_K2, BLOCK_N, BLOCK_K2,
            BLOCK_T, BLOCK_P, TOPK_P, PREFETCH_LINES,
        )  # fmt: skip
    for item in range(pid, n1_items, grid):
        _w13_item(
            item, x_ptr, a1_scale_ptr, w1_ptr, w1_scale_ptr, topk_ids_ptr, expert_map_ptr,
            h_ptr, amax_ptr, part1_ptr, count1_ptr, M, topk, K, inter, stride_xm, stride_w1e,
            stride_w1n, stride_hm, N_I_TILES, A_MODE, HAS_EXPERT_MAP, SPLIT_K1, BLOCK_I,
            BLOCK_K1, BLOCK_T, BLOCK_P, TOPK_P,
        )  # fmt: skip
        tl.debug_barrier()
        tl.atomic_add(sync_ptr, 1, sem="release", scope="gpu")
    for item in range(first2, n2_items, grid):
        _w2_item(
            item, h_ptr, amax_ptr, a2_scale_ptr, w2_ptr, w2_scale_ptr, topk_ids_ptr,
            expert_map_ptr, topk_weights_ptr, out_ptr, part2_ptr, count2_ptr, sync_ptr,
            n1_items, M, topk, N, inter, num_amax, stride_hm, stride_w2e, stride_w2n,
            stride_om, N_N_TILES, A2_MODE, MUL_ROUTED_WEIGHT, HAS_EXPERT_MAP, SPLIT_K2,
            BLOCK_N, BLOCK_K2, BLOCK_T, BLOCK_P, TOPK_P, BLOCK_A, PREFETCH, PREFETCH_LINES,
        )  # fmt: skip
    # the last program to leave zeroes every counter for the next call
    tl.debug_barrier()
    left = tl.atomic_add(sync_ptr + 32, 1, sem="acq_rel", scope="gpu")
    if left == grid - 1:
        offs = tl.arange(0, 1024)
        for c0 in range(0, n_count1, 1024):
            tl.store(count1_ptr + c0 + offs, 0, mask=c0 + offs < n_count1)
        for c0 in range(0, n_count2, 1024):
            tl.store(count2_ptr + c0 + offs, 0, mask=c0 + offs < n_count2)
        tl.store(sync_ptr, 0)
        tl.store(sync_ptr + 32, 0)


_BUFFERS: dict[torch.device, torch.Tensor] = {}
_RETIRED: list[torch.Tensor] = []  # outgrown buffers stay alive for graphs captured with them


_SYNC = 64  # int32s: done at 0 and left at 32, each on its own 128-byte line


def _counters(device: torch.device, n: int) -> torch.Tensor:
    """int32 [_SYNC + n] zeroed once: [done, .., left, .., counters...] (the kernel leaves them
    zero).
    Never allocated during CUDA graph capture (a captured zero-fill would not run before the
    next eager call): call once eagerly first."""
    buf = _BUFFERS.get(device)
    if buf is None or buf.numel() < n + _SYNC:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("moe_decode_fused: run one call eagerly before graph capture")
        if buf is not None:
            _RETIRED.append(buf)
        buf = torch.zeros(triton.cdiv(n + _SYNC, 4096) * 4096, dtype=torch.int32, device=device)
        _BUFFERS[device] = buf
    return buf


def fused_moe_fp8_decode_one_kernel(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    w1_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    a1_scale: torch.Tensor | None,
    a2_scale: torch.Tensor | None,
    output: torch.Tensor,
    grid: int,
    expert_map: torch.Tensor | None = None,
    config: dict[str, int] | None = None,
    prefetch: str = "item",
) -> torch.Tensor:
    """``fd.fused_moe_fp8_decode`` (same arguments, bf16/fp16 input) in one persistent launch
    of ``grid`` programs, which must all be resident at once on a GPU (1 in Triton's
    interpreter). ``prefetch``: GEMM2's weights into L2 ahead of use: ``"item"`` each
    GEMM2 item before its wait, ``"early"`` every program for all its GEMM2 items before its
    GEMM1 items, ``"none"`` (the only mode in the interpreter, which has no inline PTX).
    ``"early"`` asks for all of GEMM2's weights before GEMM1 streams w1 through L2 (about 50 MB
    on an H200): one token of Qwen3-30B-A3B or DeepSeek-V3 TP8 fits (12-14 MiB of w2),
    Mixtral-8x7B (112 MiB) does not, and its prefetched lines are likely evicted before use;
    the benchmark decides per shape."""
    modes = {"none": 0, "item": 1, "early": 2}
    if not isinstance(prefetch, str) or prefetch not in modes:
        raise ValueError(f"prefetch={prefetch!r}: one of 'none', 'item', 'early'")
    if modes[prefetch] and os.environ.get("TRITON_INTERPRET") == "1":
        raise ValueError(f"prefetch={prefetch!r}: the interpreter has no inline PTX; use 'none'")
    M, K = hidden_states.shape
    topk = topk_ids.size(1)
    inter, N = w2.size(2), w2.size(1)
    assert M <= fd.DECODE_MAX_TOKENS and w1.size(1) == 2 * inter and w1.size(2) == K
    # bf16/fp16 input only (0005's pre-quantized FP8 input is not a mode here), rows by stride
    assert hidden_states.dtype in (torch.bfloat16, torch.float16)
    assert hidden_states.stride(-1) == 1 and output.stride(-1) == 1
    # FP8 weights with K contiguous: the tiles and the prefetch's 128-byte lines assume it
    assert w1.dtype == w2.dtype == FP8 and w1.stride(2) == 1 and w2.stride(2) == 1
    device = hidden_states.device
    if config is None:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        config = fd.get_decode_config(M, topk, N, inter, sms)
    n_i_tiles = triton.cdiv(inter, config["BLOCK_I"])
    n_n_tiles = triton.cdiv(N, config["BLOCK_N"])
    split1, split2 = config["SPLIT_K1"], config["SPLIT_K2"]
    slots = M * topk
    n1_items = slots * n_i_tiles * split1
    n2_items = slots * n_n_tiles * split2
    n_count1, n_count2 = slots * n_i_tiles, M * n_n_tiles
    buf = _counters(device, n_count1 + n_count2)
    sync, count1, count2 = buf[:_SYNC], buf[_SYNC : _SYNC + n_count1], buf[_SYNC + n_count1 :]
    block_t = fd.DECODE_MAX_TOKENS
    h = torch.empty((slots, inter), dtype=output.dtype, device=device)
    amax = torch.empty((slots * n_i_tiles,), dtype=torch.float32, device=device)
    part1 = torch.empty(
        (max(1, n_count1 * split1) if split1 > 1 else 1, 2 * config["BLOCK_I"] * block_t),
        dtype=torch.float32,
        device=device,
    )
    part2 = torch.empty((M, topk, split2, N), dtype=torch.float32, device=device)
    _moe_decode_fused_kernel[(grid,)](
        hidden_states, a1_scale, w1, w1_scale.reshape(-1), w2, w2_scale.reshape(-1), a2_scale,
        topk_ids.contiguous(), expert_map, topk_weights.contiguous(), h, amax, part1, part2,
        count1, count2, sync, output, n1_items, n2_items, n_count1, n_count2,
        M, topk, K, inter, N, amax.numel(), hidden_states.stride(0), w1.stride(0),
        w1.stride(1), h.stride(0), w2.stride(0), w2.stride(1), output.stride(0),
        n_i_tiles, n_n_tiles,
        A_MODE=0 if a1_scale is not None else 1,
        A2_MODE=0 if a2_scale is not None else 1,
        MUL_ROUTED_WEIGHT=True,
        HAS_EXPERT_MAP=expert_map is not None,
        SPLIT_K1=split1, SPLIT_K2=split2,
        BLOCK_I=config["BLOCK_I"], BLOCK_K1=config["BLOCK_K1"],
        BLOCK_N=config["BLOCK_N"], BLOCK_K2=config["BLOCK_K2"],
        BLOCK_T=block_t,
        BLOCK_P=max(16, triton.next_power_of_2(fd.DECODE_MAX_TOKENS * topk)),
        TOPK_P=max(2, triton.next_power_of_2(topk)),
        BLOCK_A=1024,
        PREFETCH=modes[prefetch],
        # lines of 128 bytes in one split of a weight row (a power of two for tl.arange)
        # (1 without a prefetch: no variant of its own)
        PREFETCH_LINES=triton.next_power_of_2(
            triton.cdiv(triton.cdiv(triton.cdiv(inter, config["BLOCK_K2"]), split2)
                        * config["BLOCK_K2"], 128)
        ) if modes[prefetch] else 1,
        num_warps=config["num_warps"],
        num_stages=config["num_stages"],
        # a cooperative launch fails (too large) where the grid cannot be resident at once,
        # instead of spinning forever
        **({"launch_cooperative_grid": True} if device.type == "cuda" else {}),
    )  # fmt: skip
    return output


# ---------------------------------------------------------------------------------------------
# Same output as patch 0005's two kernels, bit for bit: the interpreter test (grid 1, CPU) and
# the first run on a GPU (``python benchmarks/moe_decode_fused.py --check``) share this.

FP8 = torch.float8_e4m3fn

# (M, E, top-k, K, I, static scales, seed, (SPLIT_K1, SPLIT_K2) or None, expert map)
SMALL_CASES = (
    (1, 16, 4, 256, 96, True, 0, None, False),
    (2, 16, 4, 256, 96, False, 1, None, False),
    (2, 16, 4, 192, 64, False, 2, None, True),
    (1, 16, 4, 1024, 256, True, 3, (4, 2), False),
    (3, 8, 2, 1088, 200, False, 4, (2, 1), False),  # odd K and I
)
# the layer shapes of bench_moe_decode.py at 1 and 2 tokens (GPU only: too slow to interpret)
LAYER_CASES = tuple(
    (m, e, topk, k, i, static, 10 + m, None, False)
    for (e, topk, k, i) in ((128, 8, 2048, 768), (256, 8, 7168, 256), (8, 2, 4096, 14336))
    for m in (1, 2)
    for static in (True, False)
)


def compare_with_two_kernels(
    m: int,
    e: int,
    topk: int,
    k: int,
    i: int,
    static: bool,
    seed: int,
    split: tuple[int, int] | None = None,
    ep: bool = False,
    device: str = "cpu",
    grid: int = 1,
    prefetch: str = "none",
    sms: int = 132,
) -> None:
    """One layer on fresh random inputs (bf16 x of [m, k]; FP8 w1 [e, 2i, k], w2 [e, k, i];
    fp32 per-expert weight scales; a token choosing an expert twice and one slot of expert -1;
    ``ep``: every other expert local) through 0005's two kernels and through the one launch of
    ``grid`` programs, twice (the second call starts from the counters the first one left).
    Raises AssertionError unless both calls equal the two kernels bit for bit and the
    counters are left zero. Equal, not close: both sum the same tiles in the same order."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w1 = (torch.randn(e, 2 * i, k, generator=g) * 0.5).to(FP8)
    w2 = (torch.randn(e, k, i, generator=g) * 0.5).to(FP8)
    s1 = torch.rand(e, generator=g) * 0.01 + 0.005
    s2 = torch.rand(e, generator=g) * 0.01 + 0.005
    ids = torch.stack([torch.randperm(e, generator=g)[:topk] for _ in range(m)]).to(torch.int32)
    ids[0, -1] = ids[0, 0]  # a token that chooses an expert twice
    ids[-1, min(1, topk - 1)] = -1  # no expert
    tw = torch.rand(m, topk, generator=g)
    a1 = torch.full((1,), 0.02) if static else None
    a2 = torch.full((1,), 0.05) if static else None
    emap = None
    if ep:
        emap = torch.full((e,), -1, dtype=torch.int32)
        local = torch.arange(0, e, 2)
        emap[local] = torch.arange(local.numel(), dtype=torch.int32)
        w1, w2, s1, s2 = w1[local], w2[local], s1[local], s2[local]
    x, w1, w2, s1, s2, ids, tw = (t.to(device) for t in (x, w1, w2, s1, s2, ids, tw))
    a1, a2, emap = (None if t is None else t.to(device) for t in (a1, a2, emap))
    cfg = fd.get_decode_config(m, topk, k, i, sms)
    if split:
        cfg = dict(cfg, SPLIT_K1=split[0], SPLIT_K2=split[1], BLOCK_K1=128, BLOCK_K2=128)
    two = torch.full((m, k), float("nan"), dtype=torch.bfloat16, device=device)
    fd.fused_moe_fp8_decode(x, w1, w2, s1, s2, tw, ids, a1, a2, two, expert_map=emap, config=cfg)
    for call in range(2):
        out = torch.full((m, k), float("nan"), dtype=torch.bfloat16, device=device)
        fused_moe_fp8_decode_one_kernel(
            x,
            w1,
            w2,
            s1,
            s2,
            tw,
            ids,
            a1,
            a2,
            out,
            grid=grid,
            expert_map=emap,
            config=cfg,
            prefetch=prefetch,
        )
        if device != "cpu":
            torch.cuda.synchronize()
        assert (_BUFFERS[out.device] == 0).all(), f"call {call}: counters not left zero"
        assert not two.isnan().any() and two.abs().max() > 0, "two kernels: NaN or all zero"
        diff = (out.float() - two.float()).abs().max().item()
        assert torch.equal(out, two), f"call {call}: differs from the two kernels by {diff}"


def _check_one_grid(grid: int, prefetch: str) -> None:
    """Every case at one grid on the current GPU; prints one line per case."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for c in SMALL_CASES + LAYER_CASES:
        t0 = time.monotonic()
        compare_with_two_kernels(*c, device="cuda", grid=grid, prefetch=prefetch, sms=sms)
        s = time.monotonic() - t0
        print(f"grid {grid} prefetch {prefetch} case {c}: equal ({s:.1f} s)", flush=True)


def main() -> int:
    """``--check``: the first run on a GPU. Each grid in its own process under ``--timeout``
    seconds (a grid that is not all resident would spin; the cooperative launch should refuse
    it instead, and the timeout catches it if not). Exit status 0 only if every grid passed."""
    import argparse
    import json
    import subprocess
    import sys

    ap = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with 0005 on this GPU")
    # the grids whose programs wait on each other first: grid 1 only checks the item bodies
    ap.add_argument("--grids", type=int, nargs="+", default=[132, 264, 8, 1])
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per grid")
    ap.add_argument("--one-grid", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--prefetch", choices=("none", "item", "early"), default="item")
    ap.add_argument("--out", help="JSON file for the outcomes")
    args = ap.parse_args()
    if args.one_grid is not None:
        _check_one_grid(args.one_grid, args.prefetch)
        return 0
    if not args.check:
        ap.error("nothing to do: give --check")
    results = []
    # each grid's lines go to a log file as they are printed, so that a caller's timeout
    # still shows how far a grid got (the JSON only has grids that ended)
    log_path = (args.out or "moe_decode_fused-check.json") + f".{args.prefetch}.log"
    for grid in args.grids:
        cmd = [sys.executable, __file__, "--one-grid", str(grid), "--prefetch", args.prefetch]
        t0 = time.monotonic()
        with open(log_path, "a") as log:
            log.write(f"=== grid {grid} prefetch {args.prefetch}\n")
            log.flush()
            try:
                p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout)
                outcome = "passed" if p.returncode == 0 else f"failed (exit {p.returncode})"
            except subprocess.TimeoutExpired:
                outcome = f"timed out after {args.timeout:.0f} s"
        with open(log_path) as log:
            tail = log.read().rsplit(f"=== grid {grid} prefetch", 1)[-1][-1500:]
        seconds = round(time.monotonic() - t0, 1)
        print(f"=== grid {grid}: {outcome} ({seconds} s)\n{tail}", flush=True)
        results.append(
            {
                "grid": grid,
                "prefetch": args.prefetch,
                "outcome": outcome,
                "seconds": seconds,
                "tail": tail,
            }
        )
        if args.out:  # after every grid: a caller's timeout keeps what ran
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
    return 0 if all(r["outcome"] == "passed" for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
