# SPDX-License-Identifier: Apache-2.0
"""fused_experts under expert parallelism with dynamic per-tensor FP8, timed under CUDA-graph
replay with 8 routings cycled: the timing a PR body shows a reviewer, who runs it as it is on
any vLLM tree (it imports only torch and vllm).

    python time_fused_experts_ep.py     # one line per shape and token count: median (min-max) us
"""

import functools

import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.fused_moe import fused_experts
from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config

# experts (global), top-k, hidden, intermediate; half the experts are this rank's
SHAPES = {"qwen3-30b-a3b": (128, 8, 2048, 768), "dsv3-tp8": (256, 8, 7168, 256)}
FP8 = torch.float8_e4m3fn


def time_us(calls, reps=30):
    for c in calls:  # compile, size the caches
        c()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(calls))
    times.sort()
    return times[len(times) // 2], times[0], times[-1]


def main():
    torch.manual_seed(0)
    for name, (e, topk, k, i) in SHAPES.items():
        local = e // 2
        w1 = (torch.randn(local, 2 * i, k, device="cuda") / 16).to(FP8)
        w2 = (torch.randn(local, k, i, device="cuda") / 16).to(FP8)
        s = torch.ones(local, device="cuda")
        emap = torch.full((e,), -1, dtype=torch.int32, device="cuda")
        emap[:local] = torch.arange(local, dtype=torch.int32, device="cuda")
        qc = fp8_w8a8_moe_quant_config(w1_scale=s, w2_scale=s, per_act_token_quant=False)
        for m in (1, 2, 3, 4, 8, 16):
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            calls = []
            for _ in range(8):
                tw, ti = torch.topk(torch.randn(m, e, device="cuda").softmax(-1), topk)
                ti = ti.to(torch.int32)
                calls.append(
                    functools.partial(
                        fused_experts, x, w1, w2, tw, ti, global_num_experts=e,
                        expert_map=emap, quant_config=qc,
                    )
                )  # fmt: skip
            med, lo, hi = time_us(calls)
            print(f"{name} M={m}: {med:.1f} us ({lo:.1f}-{hi:.1f})")


if __name__ == "__main__":
    with set_current_vllm_config(VllmConfig()):
        main()
