"""Stand-ins of a vLLM MoE layer for the benchmarks that need one without a model.

``fused_moe_config``: vLLM's ``FusedMoEConfig`` of one unsharded layer (no data or expert
parallelism), bf16 activations, SiLU-and-mul. ``stand_in``: what vLLM's start-up warm-up
(patch 0004, ``vllm.model_executor.warmup.fused_moe_warmup``) reads of a ``FusedMoE`` layer.
``mock_h200`` (from ``vseries.lab.platform``): vLLM's platform as an SM90 H200, for
host-side code (config lookup, the SWAP_AB rule) on a machine without one. vLLM is imported
inside the functions.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from vseries.lab.platform import mock_h200  # noqa: F401  (the contract tests' stand-in)


def fused_moe_config(
    e: int, topk: int, hidden: int, inter: int, max_num_tokens: int = 8192, routing: str = "TopK"
):
    """``FusedMoEConfig`` of a layer of ``e`` experts, top-``topk``, hidden size ``hidden``,
    intermediate size ``inter`` (one rank holds every expert), as vLLM builds it for one GPU
    without parallelism; ``routing``: a ``RoutingMethodType`` name (Qwen3 and Mixtral route
    with ``Renormalize``); the intermediate size's field by either of its names (v0.21.0's
    ``intermediate_size_per_partition``, later ``intermediate_size``)."""
    import dataclasses

    import torch
    from vllm.model_executor.layers.fused_moe import config
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    fields = {f.name for f in dataclasses.fields(config.FusedMoEConfig)}
    size = (
        "intermediate_size" if "intermediate_size" in fields else "intermediate_size_per_partition"
    )
    return config.FusedMoEConfig(
        num_experts=e,
        experts_per_token=topk,
        hidden_dim=hidden,
        num_local_experts=e,
        num_logical_experts=e,
        moe_parallel_config=config.FusedMoEParallelConfig.make_no_parallel(),
        activation=MoEActivation.SILU,
        in_dtype=torch.bfloat16,
        device="cuda",
        routing_method=config.RoutingMethodType[routing],
        max_num_tokens=max_num_tokens,
        **{size: inter},
    )


def stand_in(w13, w2, topk: int, moe_config, **extra: Any) -> SimpleNamespace:
    """The attributes of a ``FusedMoE`` layer the warm-up reads: weights w13 [E, 2I, H] and
    w2 [E, H, I], top-k, no expert map, SiLU, routing weights on the output; ``extra`` adds
    others (``quant_method``, ``layer_name``)."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    return SimpleNamespace(
        w13_weight=w13,
        w2_weight=w2,
        top_k=topk,
        global_num_experts=w13.size(0),
        expert_map=None,
        moe_config=moe_config,
        activation=MoEActivation.SILU,
        apply_router_weight_on_input=False,  # part of the warm-up's layer key
        **extra,
    )
