"""Served decode in one engine process: greedy tokens and decode throughput (issues 31, 34).

One process of vLLM's offline engine (``LLM``) on a model of one record of
``benchmarks/shapes.py`` with dummy weights quantised to per-tensor FP8 (``--flavour``), token-id
prompts (no tokenizer), CUDA graphs as served. It records

- ``tokens``: the greedy continuations of fixed prompts (the same prompts in every process),
  for the equivalence of two processes (decode path on vs off, patched wheel vs staged tree);
- ``decode``: output tokens per second of ``--reps`` repetitions at each batch size (one
  sequence, four sequences: small-batch decode), each repetition 128 prompt + 128 output
  tokens per sequence (the one prefill step is inside the time);
- ``startup_s``: the engine's construction.

``--compare`` joins processes: for each, its own medians (processes are listed, never
averaged), the ratio of medians to the first file's, and how many continuations match the
first file's token for token (and where the first difference is).

    python -m benchmarks.served_decode --variant series --out s.json            # decode path on
    python -m benchmarks.served_decode --variant series-off --moe-backend triton --out o.json
    python -m benchmarks.served_decode --compare o.json s.json --md served.md

Only ``vllm`` (a tree or the patched wheel) needs to be importable.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.e2e import models

BATCHES = (1, 4)
PROMPT, OUTPUT = 128, 128
EQUIV_PROMPTS, EQUIV_TOKENS = 8, 48


def _prompts(n: int, length: int, seed: int) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(1000, 30000) for _ in range(length)] for _ in range(n)]


def run(args: argparse.Namespace) -> dict:
    """One engine process: start-up, equivalence tokens, decode repetitions."""
    cfg = models.model_config(args.arch, args.flavour, args.layers)
    model = Path(tempfile.mkdtemp(prefix="served-decode-"))
    (model / "config.json").write_text(json.dumps(cfg))
    t0 = time.perf_counter()
    from vllm.inputs import TokensPrompt

    from vllm import LLM, SamplingParams

    extra = {} if args.moe_backend == "auto" else {"moe_backend": args.moe_backend}
    llm = LLM(
        model=str(model),
        load_format="dummy",
        quantization="fp8",
        skip_tokenizer_init=True,
        max_model_len=1024,
        gpu_memory_utilization=0.85,
        max_num_seqs=16,
        seed=0,
        enable_prefix_caching=False,
        compilation_config={"cudagraph_capture_sizes": [1, 2, 4, 8, 16]},
        **extra,
    )
    import vllm

    rec = {
        "variant": args.variant,
        "vllm": vllm.__version__,
        "vllm_file": vllm.__file__,
        "arch": args.arch,
        "flavour": args.flavour,
        "layers": cfg["num_hidden_layers"],
        "moe_backend": args.moe_backend,
        "startup_s": round(time.perf_counter() - t0, 1),
    }

    def generate(prompts, tokens):
        sp = SamplingParams(max_tokens=tokens, ignore_eos=True, temperature=0.0, detokenize=False)
        ps = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        t = time.perf_counter()
        out = llm.generate(ps, sp, use_tqdm=False)
        return time.perf_counter() - t, [list(o.outputs[0].token_ids) for o in out]

    generate(_prompts(4, PROMPT, seed=99), OUTPUT)  # warm-up
    rec["tokens"] = generate(_prompts(EQUIV_PROMPTS, 64, seed=1), EQUIV_TOKENS)[1]
    rec["decode"] = {}
    for bs in BATCHES:
        rates = []
        for rep in range(args.reps):
            dt, out = generate(_prompts(bs, PROMPT, seed=100 + rep), OUTPUT)
            rates.append(round(sum(map(len, out)) / dt, 1))
        rec["decode"][str(bs)] = rates
    return rec


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(paths: list[Path]) -> str:
    """Markdown: one row per process, medians and ranges, ratio to the first, token match."""
    recs = [json.loads(p.read_text()) for p in paths]
    ref = recs[0]
    head = ["process", "vllm", "moe_backend", "startup s"]
    for bs in BATCHES:
        head += [f"{bs} seq tok/s median (range)", f"{bs} seq vs first"]
    head += ["greedy continuations equal to the first's"]
    rows = []
    for p, r in zip(paths, recs, strict=True):
        row = [f"{r['variant']} ({p.name})", r["vllm"], r["moe_backend"], str(r["startup_s"])]
        for bs in BATCHES:
            xs, ref_xs = r["decode"][str(bs)], ref["decode"][str(bs)]
            med = statistics.median(xs)
            row += [
                f"{med:.1f} ({min(xs):.1f}-{max(xs):.1f})",
                f"{med / statistics.median(ref_xs):.3f}x",
            ]
        diffs = [_first_difference(a, b) for a, b in zip(ref["tokens"], r["tokens"], strict=True)]
        same = sum(d is None for d in diffs)
        where = sorted(d for d in diffs if d is not None)
        row.append(
            f"{same} of {len(diffs)}"
            + (f" (first difference at token {', '.join(map(str, where))})" if where else "")
        )
        rows.append(row)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", default="tree", help="a name for this process's tree")
    ap.add_argument("--arch", default="qwen3-30b-a3b", help="a record of benchmarks/shapes.py")
    ap.add_argument("--flavour", default="fp8static", help="fp8static or fp8dyn")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--moe-backend", default="auto", help="auto (the oracle) or a backend name")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", nargs="+", type=Path, metavar="JSON")
    ap.add_argument("--md", type=Path, help="with --compare: write the table there too")
    args = ap.parse_args(argv)
    if args.compare:
        text = compare(args.compare)
        print(text)
        if args.md:
            args.md.write_text(text)
        return 0
    if args.out is None:
        ap.error("--out is required without --compare")
    rec = run(args)
    args.out.write_text(json.dumps(rec, indent=1))
    print(json.dumps({k: v for k, v in rec.items() if k != "tokens"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
