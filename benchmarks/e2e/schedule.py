"""Workloads, presets and the order of the benchmark runs.

Workloads are vLLM's ``random`` dataset (``vllm bench serve --dataset-name random``) with
integer-uniform lengths (``--random-range-ratio`` as a JSON dict, input and output apart):

- ``decode``: input 128, output 128-256 (decode-heavy)
- ``mixed``: input 384-640, output 96-160
- ``prefill``: input 1024-2048, output 16 (prefill-heavy: time to first token)

A cell is (workload, max concurrency). Runs alternate the trees: within one repetition every
cell runs once per tree, back to back, and the tree order is reversed every repetition (and
every other process), so no tree always goes first. ``num_prompts`` is sized for a run of
about ``target_s`` seconds from a rough H200 model (``est_request_rate``), then from the
request rate measured in earlier repetitions of the same cell (``calibrated``).
"""

import json
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    """One random-dataset workload; lengths in tokens."""

    name: str
    input_len: int
    output_len: int
    input_ratio: float
    output_ratio: float

    def input_range(self) -> tuple[int, int]:
        """(lowest, highest) prompt length vLLM samples (vllm/benchmarks/datasets/utils.py)."""
        return (
            math.floor(self.input_len * (1 - self.input_ratio)),
            math.ceil(self.input_len * (1 + self.input_ratio)),
        )

    def output_range(self) -> tuple[int, int]:
        return (
            max(1, math.floor(self.output_len * (1 - self.output_ratio))),
            max(1, math.ceil(self.output_len * (1 + self.output_ratio))),
        )

    def bench_args(self) -> list[str]:
        """The dataset arguments of ``vllm bench serve`` / ``vllm bench throughput``."""
        ratio = json.dumps({"input": self.input_ratio, "output": self.output_ratio})
        return [
            "--dataset-name",
            "random",
            "--random-input-len",
            str(self.input_len),
            "--random-output-len",
            str(self.output_len),
            "--random-range-ratio",
            ratio,
        ]


WORKLOADS = {
    "decode": Workload("decode", 128, 192, 0.0, 0.3333),
    "mixed": Workload("mixed", 512, 128, 0.25, 0.25),
    "prefill": Workload("prefill", 1536, 16, 0.3333, 0.0),
}
CONCURRENCIES = (1, 4, 16, 64)
# Probe: single requests at prompt lengths the warm-up did not use (tokens).
PROBE_LENGTHS = (3, 17, 100, 129, 257, 511, 777, 1000, 1500, 2047)
# deepseek-v4: what patch 3 changes is _fused_inv_rope_fp8_quant_per_head's specialisation on
# num_tokens and scale_stride_k = num_tokens rounded up to 4 (Triton keys an int on "== 1"
# and "divisible by 16"; v1/attention/ops/deepseek_v4_ops/fused_inv_rope_fp8_quant.py
# :198-214). Start-up meets (1, -), (-, -) and (16, 16); (-, 16) first comes with an eager
# prefill of L = 13, 14 or 15 (mod 16) tokens. Every other length of a new size bucket would
# confound it: mHC's n_splits = f(cdiv(L, 64)) (model_executor/layers/mhc.py:273, 665) is a new
# tilelang / DeepGEMM JIT per 64-token bucket. So every length is in the bucket 961..1024
# (n_splits 8 on 132 SMs, not met at start-up), above the largest CUDA-graph capture size
# (eager, exact L tokens). Order: 968 first (== 8 mod 16: no new rope variant; pays the
# bucket's JIT), 1000 (== 8: a control), then 1021 (== 13: the base tree's new variant), 1022
# and 1023 (== 14, 15: the same key, no second compile), 973 (== 13), 1008 (== 0: a control).
PROBE_LENGTHS_DEEPSEEK_V4 = (968, 1000, 1021, 1022, 1023, 973, 1008)
PROBE_BY_ARCH = {"deepseek-v4": PROBE_LENGTHS_DEEPSEEK_V4}


def probe_lengths(arch: str | None) -> tuple[int, ...]:
    """The probe's prompt lengths for ``arch`` (PROBE_BY_ARCH, else PROBE_LENGTHS)."""
    return PROBE_BY_ARCH.get(arch or "", PROBE_LENGTHS)


@dataclass(frozen=True)
class Preset:
    """A schedule: cells, repetitions per process, target seconds per run, processes."""

    cells: tuple[tuple[str, int], ...]
    reps: int
    target_s: float
    processes: int


PRESETS = {
    # every cell: 12 cells x 3 repetitions x trees, ~23 s a run: needs several 10-minute calls
    "full": Preset(tuple((w, c) for w in WORKLOADS for c in CONCURRENCIES), 3, 20.0, 2),
    # one 10-minute call for 2 trees x 2 processes: 2 cells x 2 trees x ~9 s = ~36 s a
    # repetition; 2 repetitions per process are planned in, a 3rd runs when time is left
    # (README.md, "Sizing the quick preset")
    "quick": Preset((("decode", 4), ("prefill", 16)), 3, 5.0, 2),
}

# Rough H200 costs at full depth, per architecture: decode step = a + b * batch (ms),
# prefill = p ms per prompt token. Only used to size num_prompts before a cell has run.
COST = {
    "qwen3-30b-a3b": {"a_ms": 7.0, "b_ms": 0.10, "p_ms": 0.02},
    "mixtral-8x7b": {"a_ms": 9.0, "b_ms": 0.10, "p_ms": 0.05},
    # a guess (nothing measured): 43 layers of 4096 wide, 6 of 256 experts, sparse attention
    "deepseek-v4": {"a_ms": 15.0, "b_ms": 0.15, "p_ms": 0.06},
}


def parse_cells(text: str) -> tuple[tuple[str, int], ...]:
    """``decode:4,prefill:16`` -> (("decode", 4), ("prefill", 16)); ``decode:*`` = every
    concurrency.

    Raises:
        ValueError: an unknown workload or a concurrency below 1.
    """
    cells = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        w, _, c = part.partition(":")
        if w not in WORKLOADS:
            raise ValueError(f"unknown workload {w!r} in {text!r}; known: {', '.join(WORKLOADS)}")
        concs = CONCURRENCIES if c in ("", "*") else (int(c),)
        for n in concs:
            if n < 1:
                raise ValueError(f"concurrency {n} in {text!r}")
            cells.append((w, n))
    return tuple(cells)


def est_request_rate(arch: str, depth: float, w: Workload, c: int) -> float:
    """Requests per second at concurrency ``c`` (``depth`` = layers / full layers): the lower
    of c / request latency and the prefill-bound rate. A guess, good to a factor of ~2."""
    k = COST.get(arch, COST["qwen3-30b-a3b"])
    step_s = (k["a_ms"] + k["b_ms"] * c) * depth / 1e3
    prefill_s = w.input_len * k["p_ms"] * depth / 1e3
    latency = prefill_s + w.output_len * step_s
    return min(c / latency, 1.0 / prefill_s)


def num_prompts(rate: float, target_s: float, c: int) -> int:
    """Prompts for a run of ~target_s s at ``rate`` req/s: at least 2 * c (so that the
    concurrency is reached) and at least 3."""
    return max(3, 2 * c, math.ceil(rate * target_s))


def calibrated(est: float, observed: list[float]) -> float:
    """The request rate to size with: the median observed rate of this cell's earlier runs
    (req/s), else the estimate."""
    if not observed:
        return est
    s = sorted(observed)
    return s[len(s) // 2]


def slowness(rates: dict[tuple, list[float]], tree: str) -> float:
    """How many times longer ``tree``'s runs take than the fastest tree's: over the cells
    (workload, concurrency) where it has runs, the largest ratio of the fastest tree's median
    request rate to its own median. At least 1, and 1 with no runs. ``rates``: (tree,
    workload, concurrency) -> observed req/s. Every tree of a repetition gets the same
    prompts, so a tree several times slower than the others (FlashInfer's untuned tactic
    against Triton at decode: ~4x) needs its timeout and budget check scaled by this where it
    has not yet run a cell. Against the fastest tree, not the median: with two slow trees of
    four the median is a slow one (round 11)."""
    worst = 1.0
    for (t, w, c), own in rates.items():
        mine = calibrated(0.0, own) if t == tree else 0.0
        if mine <= 0:
            continue
        fastest = max(
            calibrated(0.0, rs) for (_, w2, c2), rs in rates.items() if (w2, c2) == (w, c) and rs
        )
        worst = max(worst, fastest / mine)
    return worst


@dataclass(frozen=True)
class Run:
    tree: str
    workload: str
    concurrency: int
    rep: int
    process: int


def plan(trees: list[str], cells, reps: int, process: int) -> list[Run]:
    """The runs of one process, in order: for each repetition, for each cell, each tree; the
    tree order reversed when rep + process is odd."""
    runs = []
    for r in range(reps):
        order = trees if (r + process) % 2 == 0 else trees[::-1]
        for w, c in cells:
            runs += [Run(t, w, c, r, process) for t in order]
    return runs


def max_model_len(cells, probe: tuple[int, ...] = PROBE_LENGTHS, margin: int = 256) -> int:
    """The --max-model-len that fits every prompt + output of the cells and the probe, with
    ``margin`` tokens for the random dataset's re-tokenisation, rounded up to 256."""
    need = max(
        [max(probe) + 1]
        + [WORKLOADS[w].input_range()[1] + WORKLOADS[w].output_range()[1] for w, _ in cells]
    )
    return int(math.ceil((need + margin) / 256) * 256)
