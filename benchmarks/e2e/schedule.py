"""Workloads, presets and the order of the benchmark runs.

Workloads are vLLM's ``random`` dataset (``vllm bench serve --dataset-name random``) with
integer-uniform lengths (``--random-range-ratio`` as a JSON dict, input and output apart):

- ``decode``: input 128, output 128-256 (decode-heavy)
- ``mixed``: input 384-640, output 96-160
- ``prefill``: input 1024-2048, output 16 (prefill-heavy: time to first token)

A cell is (workload, max concurrency). Runs alternate the trees: within one repetition every
cell runs once per tree, back to back, and the tree order is reversed every repetition (and
every other process), so no tree always goes first. ``num_prompts`` is sized for a run of
about ``target_s`` seconds from a rough H200 model (``est_request_rate``, from the model's
record: ``benchmarks/shapes.py`` ``cost``), then from the request rate measured in earlier
repetitions of the same cell (``calibrated``). ``Sizing`` holds that for one session: the
rates seen so far, the prompts of each repetition, what a run, a probe and a server process
cost in seconds; ``Budget`` the seconds left.
"""

import json
import math
import time
from dataclasses import dataclass, field

from benchmarks.shapes import PROBE_LENGTHS, Cost


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

    def longest(self) -> int:
        """Tokens of its longest request: the longest prompt and output."""
        return self.input_range()[1] + self.output_range()[1]

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


def est_request_rate(cost: Cost, depth: float, w: Workload, c: int) -> float:
    """Requests per second at concurrency ``c`` of a model of the record's ``cost``
    (``depth`` = layers / full layers): the lower of c / request latency and the
    prefill-bound rate. A guess, good to a factor of ~2."""
    step_s = (cost.a_ms + cost.b_ms * c) * depth / 1e3
    prefill_s = w.input_len * cost.p_ms * depth / 1e3
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
    need = max([max(probe) + 1] + [WORKLOADS[w].longest() for w, _ in cells])
    return int(math.ceil((need + margin) / 256) * 256)


RESERVE_S = 30.0  # kept for stopping servers and flushing, on top of every estimate
RUN_OVERHEAD_S = 4.0  # per bench run: dataset sampling, ready check, warm-up requests
STOP_S = 15.0  # stopping the servers of one process and reading their logs
# a `vllm bench serve` process (--bench-subprocess) imports vLLM before its run: 10-20 s on a
# GPU host, up to a minute on a busy 2-core one; its run's timeout allows this much more
BENCH_START_S = 300.0
PROBE_S = 0.75  # per probe request (a prefill of <= 2047 tokens, maybe a JIT compile)


class Budget:
    """Seconds left before the caller's limit, less RESERVE_S."""

    def __init__(self, budget_s: float):
        self.t0, self.budget_s = time.monotonic(), budget_s

    def left(self) -> float:
        return self.budget_s - RESERVE_S - (time.monotonic() - self.t0)

    def fits(self, cost_s: float) -> bool:
        return cost_s <= self.left()


@dataclass
class Sizing:
    """The sizes and costs of one session's runs. ``rates``: (tree, workload, concurrency) ->
    observed req/s of this model (resumed records included, then each run as it ends:
    ``observe``); a cell's rate pools every tree's (``rate``). ``nprompts``: (workload,
    concurrency, process, rep) -> the prompts of that repetition; ``startups``: seconds of
    each server start-up seen."""

    cost: Cost
    depth: float
    trees: tuple[str, ...]
    target_s: float
    probe_lengths: tuple[int, ...]
    startup_estimate_s: float
    rates: dict[tuple, list[float]] = field(default_factory=dict)
    nprompts: dict[tuple, int] = field(default_factory=dict)
    startups: list[float] = field(default_factory=list)

    def observe(self, tree: str, w: str, c: int, completed: int, duration: float) -> None:
        """A run of ``completed`` requests in ``duration`` seconds."""
        self.rates.setdefault((tree, w, c), []).append(completed / duration)

    def rate(self, w: str, c: int) -> float:
        """Request rate (req/s) a cell's prompts are sized for: the fastest tree's median over
        its observed runs of the cell (resumed ones included), else the estimate. Sized for
        the fastest tree, every tree's run lasts at least ``target_s``; a slower tree's longer
        run is costed by ``run_cost``. While some of this session's trees have no run of the
        cell yet, each observed tree's median counts at its speed scaled by its ``slowness``
        (how much slower than the fastest tree it ran in other cells): in round 12 the first
        mixed c=64 run was the base's (FlashInfer, ~4x slower), and sizing the next repetition
        at its rate gave the Triton trees 3-s runs."""
        est = est_request_rate(self.cost, self.depth, WORKLOADS[w], c)
        observed = {
            t: calibrated(est, rs)
            for (t, w2, c2), rs in self.rates.items()
            if (w2, c2) == (w, c) and rs
        }
        if not observed:
            return est
        if all(n in observed for n in self.trees):
            return max(observed.values())
        return max(r * slowness(self.rates, t) for t, r in observed.items())

    def prompts(self, w: str, c: int) -> int:
        return num_prompts(self.rate(w, c), self.target_s, c)

    def prompts_for(self, run: Run) -> int:
        """num_prompts of a run, fixed at the first tree's run of its repetition so that
        every tree of the repetition gets the same prompts."""
        k = (run.workload, run.concurrency, run.process, run.rep)
        if k not in self.nprompts:
            self.nprompts[k] = self.prompts(run.workload, run.concurrency)
        return self.nprompts[k]

    def run_cost(self, run: Run) -> float:
        """Seconds of one tree's run: its prompts at the tree's own observed rate in this cell,
        else at the cell's rate slowed by how much slower the tree ran elsewhere
        (``slowness``); the timeout is 4x this."""
        k = (run.workload, run.concurrency, run.process, run.rep)
        n = self.nprompts.get(k) or self.prompts(run.workload, run.concurrency)
        own = self.rates.get((run.tree, run.workload, run.concurrency))
        if own:
            rate = calibrated(0.0, own)
        else:
            rate = self.rate(run.workload, run.concurrency) / slowness(self.rates, run.tree)
        return n / rate + RUN_OVERHEAD_S

    def probe_cost(self, n_trees: int) -> float:
        """Seconds of the probe: PROBE_S per request, two requests per length and tree."""
        return len(self.probe_lengths) * 2 * n_trees * PROBE_S

    def startup_est(self) -> float:
        """The slowest start-up seen so far, else the estimate given."""
        return max(self.startups) if self.startups else self.startup_estimate_s

    def process_need(self, runs: list[Run], probes: list[str], min_reps: int) -> float:
        """Seconds one process needs at least: start-up, probe, its runs of the first
        ``min_reps`` repetitions, stop."""
        first = sum(self.run_cost(r) for r in runs if r.rep < min_reps)
        return self.startup_est() + self.probe_cost(len(probes)) + first + STOP_S

    def reserve_for_later(self, later: list, left: float, min_reps: int) -> float:
        """Seconds to keep for the later processes ``later`` ([(index, (runs, probes))], in
        order) out of ``left``: the needs (``process_need``) of those that fit one after
        another; none once one does not fit, since it would not start. Keeping time for a
        process that cannot start only idles the GPU: round 12 stopped a process with 110 s
        left, kept for one that needed 168 s."""
        kept = 0.0
        for _, (runs, probes) in later:
            need = self.process_need(runs, probes, min_reps)
            if kept + need > left:
                break
            kept += need
        return kept
