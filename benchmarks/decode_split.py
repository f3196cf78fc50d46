"""A split-K rule for the series' decode kernels to time beside the patch's own
(docs/ROADMAP.md, "Decode at 3-16 tokens").

The patch (``fused_moe_decode.get_decode_config``) sizes split-K from the programs one token
runs (top-k experts x tiles), whatever the batch: on the DeepSeek-V3 TP8 shape (top-8,
intermediate 256 = 8 tiles of 32, 132 SMs) that is 64 programs, so GEMM1 splits K four ways at
every M, also at 4 tokens, whose ~31 distinct experts already give ~250 programs. This rule
counts the programs of the batch instead (at most M x top-k experts, each its tiles), with the
patch's own thresholds, K steps and stages; at one token the two rules agree. It is taken by
patching the name the decode experts class calls (its workspace sizing and its kernel call
both go through it), for the benchmark's variant ``decode16m`` only; the patch is unchanged.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

STEP = 256  # the K step the patch's rule counts splits in (FP8 bytes per row and stage)


def split(programs: int, k: int, num_sms: int) -> int:
    """The patch's doubling rule: split K while the programs leave SMs idle and every split
    keeps 4+ steps of K."""
    s = 1
    while programs * s < num_sms and -(-k // (STEP * s * 2)) >= 4:
        s *= 2
    return s


def by_batch(config: dict[str, int], num_tokens: int, top_k: int, hidden: int, inter: int,
             num_sms: int) -> dict[str, int]:  # fmt: skip
    """``config`` (the patch's, for this batch) with split-K, the GEMM2 K step and the stages
    sized from the batch's programs."""
    slots = num_tokens * top_k  # distinct experts of the batch: at most this many
    split1 = split(slots * -(-inter // config["BLOCK_I"]), hidden, num_sms)
    split2 = split(slots * -(-hidden // config["BLOCK_N"]), inter, num_sms)
    few_steps2 = -(-inter // (STEP * split2)) < 4
    return {
        **config,
        "SPLIT_K1": split1,
        "SPLIT_K2": split2,
        "BLOCK_K2": STEP // 2 if few_steps2 else config["BLOCK_K1"],
        "num_stages": 3 if split1 > 1 else 4,
    }


@contextlib.contextmanager
def config_rule(transform: Callable[..., dict[str, int]]) -> Iterator[None]:
    """The decode experts class runs ``transform(config, num_tokens, top_k, hidden, inter,
    num_sms)`` of the patch's configuration inside the block (the patch is unchanged)."""
    from vllm.model_executor.layers.fused_moe.experts import triton_fp8_decode_moe as d

    patch_rule = d.get_decode_config

    @functools.cache
    def rule(num_tokens: int, top_k: int, hidden: int, inter: int, num_sms: int):
        config = patch_rule(num_tokens, top_k, hidden, inter, num_sms)
        return transform(config, num_tokens, top_k, hidden, inter, num_sms)

    d.get_decode_config = rule
    try:
        yield
    finally:
        d.get_decode_config = patch_rule


def split_by_batch() -> contextlib.AbstractContextManager[None]:
    """The decode experts class sizes split-K by ``by_batch`` inside the block."""
    return config_rule(by_batch)
