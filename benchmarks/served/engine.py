"""One served-decode engine process: vLLM's offline ``LLM`` on a model of one record of
``benchmarks/shapes.py`` (dummy weights, per-tensor FP8: ``--flavour``), as a user starts it
(CUDA graphs, async scheduling; ``--moe-backend auto`` is the oracle's default choice).

It records, as one JSON record:

- ``startup_s``: the engine's construction (compile, CUDA-graph capture, warm-ups, FlashInfer
  autotune where the backend has one);
- ``tokens``: greedy continuations of fixed prompts (the same in every process), for the
  equivalence of trees and backends;
- ``tpot_ms``: per batch size, one value per repetition: the steady-state time per output
  token of ``--output-len`` tokens per sequence (median over the batch's requests of
  (last token - first token) / (tokens - 1), vLLM's own request timestamps), and ``wall_s``
  the generate call's wall time;
- ``trace`` (``--trace-dir``): a torch-profiler trace of decode steps at batch 1 and the
  largest batch, summarised by ``benchmarks.served.trace``.

Measurements take turns with the other processes of the wave (``benchmarks.served.turns``), so
no two engines measure at once and the trees alternate.

    python3 -m benchmarks.served.engine --name series-dyn-1 --flavour fp8dyn \\
        --turns /tmp/wave1 --index 0 --count 4 --out served-series-dyn-1.json

Only ``vllm`` (a tree or the patched wheel) and this workspace need to be importable.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.e2e import models
from benchmarks.served import fit
from benchmarks.served import trace as trace_mod
from benchmarks.served.turns import Turns

# 2: vLLM's default capture sizes have it (3 pads to 4), and the decode backend takes M <= 2
BATCHES = (1, 2, 4, 8, 16)
PROMPT_LEN = 32
EQUIV_PROMPTS, EQUIV_TOKENS = 8, 64


def prompts(n: int, length: int, seed: int, vocab: int = 30000) -> list[list[int]]:
    """Token ids in 1000..min(vocab, 30000): the same prompts for every model whose
    vocabulary holds them (a stand-in's may be smaller)."""
    rng = random.Random(seed)
    top = min(vocab, 30000)
    return [[rng.randrange(min(1000, top // 2), top) for _ in range(length)] for _ in range(n)]


def reps_per_batch(spec: str) -> dict[int, int]:
    """``"1:2,4:2,8:1,16:1"`` -> {1: 2, 4: 2, 8: 1, 16: 1}."""
    out = {}
    for part in spec.split(","):
        b, _, r = part.partition(":")
        out[int(b)] = int(r or 1)
    return out


def schedule(reps: dict[int, int]) -> list[tuple[int, int]]:
    """(batch, repetition) in the order measured: every batch once, then again."""
    return [(b, r) for r in range(max(reps.values())) for b in sorted(reps) if r < reps[b]]


def tpot_of(outputs) -> tuple[float | None, int]:
    """Median over requests of (last - first token time) / (tokens - 1), in ms; tokens."""
    vals, n = [], 0
    for o in outputs:
        m = getattr(o, "metrics", None)
        toks = len(o.outputs[0].token_ids)
        n += toks
        if m is None or toks < 2 or not getattr(m, "last_token_ts", 0):
            continue
        vals.append((m.last_token_ts - m.first_token_ts) / (toks - 1) * 1e3)
    return (round(statistics.median(vals), 4) if vals else None), n


LOGGED = ("MoE backend", "Experts", "autotun", "Autotun", "JIT compil", "attention backend")


BACKEND = re.compile(r"Using (\w+) Fp8 MoE backend")


def log_lines(text: str, limit: int = 20) -> list[str]:
    """The log lines that say which MoE backend and experts class the oracle chose, whether
    FlashInfer autotuned, which attention backend ran, and Triton compiles while serving."""
    keep = [
        ln.strip()[: 2000 if "JIT compil" in ln else 400]  # a compile's binding in full
        for ln in text.splitlines()
        if any(k in ln for k in LOGGED)
    ]
    return keep[:limit]


def gpu_share(args) -> float:
    """``gpu_memory_utilization``: the share asked for, else this process's footprint
    (``fit.footprint_gib``) over the GPU's memory (``--gpu-mib``, from nvidia-smi: the engine
    must not initialise CUDA before vLLM starts its engine process)."""
    if args.gpu_share:
        return args.gpu_share
    need = fit.footprint_gib(args.arch, args.flavour, args.layers, args.kv_gib)
    return round(min(0.95, need * 1024 / args.gpu_mib), 3)


def build_llm(args, model: Path, profile_dir: str | None):
    from vllm import LLM

    extra = {} if args.moe_backend == "auto" else {"moe_backend": args.moe_backend}
    if profile_dir:
        extra["profiler_config"] = {
            "profiler": "torch",
            "torch_profiler_dir": profile_dir,
            "torch_profiler_with_stack": False,
            "torch_profiler_use_gzip": True,
            "torch_profiler_dump_cuda_time_total": False,
            "ignore_frontend": True,
        }
    return LLM(
        model=str(model),
        load_format="dummy",
        quantization="fp8",
        skip_tokenizer_init=True,
        max_model_len=PROMPT_LEN + args.output_len + 64,
        max_num_batched_tokens=args.max_batched_tokens,
        max_num_seqs=max(BATCHES),
        kv_cache_memory_bytes=args.kv_gib << 30,
        # several engines share the GPU: each checks at start that this share is free
        gpu_memory_utilization=gpu_share(args),
        seed=0,
        enable_prefix_caching=False,
        disable_log_stats=False,
        compilation_config={"cudagraph_capture_sizes": list(BATCHES)},
        # a Triton compile while serving is logged with its constexprs, signature and key
        # (only compiles after the warm-up: the monitor starts then), so that the record says
        # which specialisation the warm-up missed
        jit_monitor_verbose=True,
        **extra,
    )


def keep_trace(folder: Path, name: str, keep: Path, stem: str) -> str:
    """Copy the trace file ``name`` (under ``folder``) to ``keep/<stem>.pt.trace.json.gz``,
    gzipped if it is not: the whole trace, host and GPU, for what its summary leaves out."""
    import gzip
    import shutil

    src = next(folder.rglob(name))
    keep.mkdir(parents=True, exist_ok=True)
    dst = keep / f"{stem}.pt.trace.json.gz"
    if src.suffix == ".gz":
        shutil.copyfile(src, dst)
    else:
        with src.open("rb") as f, gzip.open(dst, "wb") as g:
            shutil.copyfileobj(f, g)
    return dst.name


def run(args, save=None) -> dict:
    """The process's record; ``save(rec)`` is called once its timings are in, before the
    trace, so that a process stopped during its trace (the wave's time limit) keeps them."""
    from vllm.inputs import TokensPrompt

    from vllm import SamplingParams

    cfg = models.model_config(args.arch, args.flavour, args.layers)
    vocab = cfg["vocab_size"]
    model = Path(tempfile.mkdtemp(prefix="served-"))
    (model / "config.json").write_text(json.dumps(cfg))
    profile_dir = tempfile.mkdtemp(prefix="trace-") if args.trace else None
    t0 = time.perf_counter()
    llm = build_llm(args, model, profile_dir)
    import vllm

    rec: dict = {
        "name": args.name, "tree": args.tree, "flavour": args.flavour, "arch": args.arch,
        "layers": cfg["num_hidden_layers"], "moe_backend": args.moe_backend,
        "vllm": vllm.__version__, "vllm_file": vllm.__file__,
        "startup_s": round(time.perf_counter() - t0, 1), "output_len": args.output_len,
        "wave_id": Path(args.turns).name.removeprefix("turns-"),
    }  # fmt: skip

    def generate(ps, n):
        sp = SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0, detokenize=False)
        t = time.perf_counter()
        out = llm.generate([TokensPrompt(prompt_token_ids=p) for p in ps], sp, use_tqdm=False)
        return time.perf_counter() - t, out

    generate(prompts(4, PROMPT_LEN, seed=99, vocab=vocab), 64)  # first requests: lazy allocations
    _, out = generate(prompts(EQUIV_PROMPTS, PROMPT_LEN, seed=1, vocab=vocab), EQUIV_TOKENS)
    rec["tokens"] = [list(o.outputs[0].token_ids) for o in out]
    turns = Turns(Path(args.turns), args.index, args.count)
    turns.join()
    rec["wave"] = turns.wait_all(args.wait_s)
    rec["tpot_ms"], rec["wall_s"] = {}, {}
    order = schedule(reps_per_batch(args.reps))
    for j, (bs, rep) in enumerate(order):
        turns.take()
        try:
            dt, out = generate(
                prompts(bs, PROMPT_LEN, seed=100 + rep, vocab=vocab), args.output_len
            )
        finally:
            turns.give(finished=j == len(order) - 1 and not args.trace)
        tpot, _ = tpot_of(out)
        rec["tpot_ms"].setdefault(str(bs), []).append(tpot)
        rec["wall_s"].setdefault(str(bs), []).append(round(dt, 4))
        print(f"{args.name} bs={bs} rep={rep} tpot={tpot} ms wall={dt:.3f} s", flush=True)
    if save is not None:
        save(rec)
    if args.trace:
        turns.take()
        try:
            rec["trace"] = {}
            for bs in (1, max(BATCHES)):
                before = set(Path(profile_dir).rglob("*.json*"))
                llm.start_profile()
                generate(prompts(bs, PROMPT_LEN, seed=7, vocab=vocab), args.trace_tokens)
                llm.stop_profile()
                rec["trace"][str(bs)] = trace_mod.summarise_folder(
                    Path(profile_dir), exclude=before, wait_s=60,
                    decode_steps=args.trace_tokens - 1,
                )  # fmt: skip
                if args.trace_keep and "file" in rec["trace"][str(bs)]:
                    rec["trace"][str(bs)]["kept"] = keep_trace(
                        Path(profile_dir), rec["trace"][str(bs)]["file"], args.trace_keep,
                        f"{args.name}-bs{bs}",
                    )  # fmt: skip
        except Exception as exc:  # a trace must not lose the timings
            rec["trace_error"] = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            turns.give(finished=True)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", required=True, help="this process's name in the tables")
    ap.add_argument("--tree", default="tree", help="base, series, wheel, ...")
    ap.add_argument("--arch", default="qwen3-30b-a3b", help="a record of benchmarks/shapes.py")
    ap.add_argument("--flavour", default="fp8dyn", help="fp8dyn or fp8static")
    ap.add_argument("--layers", type=int, default=fit.DEFAULT_LAYERS)
    ap.add_argument("--moe-backend", default="auto", help="auto (the oracle) or a backend")
    ap.add_argument("--output-len", type=int, default=1024)
    ap.add_argument("--reps", default="1:2,2:1,4:2,8:1,16:1", help="batch:repetitions,...")
    ap.add_argument("--max-batched-tokens", type=int, default=2048)
    ap.add_argument("--kv-gib", type=int, default=2)
    ap.add_argument("--gpu-share", type=float, help="gpu_memory_utilization (default: fit)")
    ap.add_argument("--gpu-mib", type=float, default=143771, help="the GPU's memory (MiB)")
    ap.add_argument("--turns", required=True, help="the wave's folder (benchmarks.served.turns)")
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--wait-s", type=float, default=400.0, help="wait for the wave this long")
    ap.add_argument("--trace", action="store_true", help="also trace decode steps")
    ap.add_argument("--trace-tokens", type=int, default=48)
    ap.add_argument(
        "--trace-keep", type=Path, help="with --trace: keep each trace file in this folder"
    )
    ap.add_argument(
        "--log",
        type=Path,
        help="this process's output file (vLLM logs to stdout): its backend lines",
    )
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        rec = run(args, save=lambda r: write_record(args, r))
    except BaseException as exc:
        # joined and finished at once: the rest of the wave neither waits for it nor
        # passes it the turn
        turns = Turns(Path(args.turns), args.index, args.count)
        turns.join()
        turns.give(finished=True)
        args.out.write_text(
            json.dumps({"name": args.name, "arch": args.arch, "error": repr(exc)[:2000]})
        )
        raise
    write_record(args, rec)
    print(json.dumps({k: v for k, v in rec.items() if k not in ("tokens", "trace")}))
    return 0


def write_record(args, rec: dict) -> None:
    """``rec`` to ``--out``, with the backend and log lines of the process's output."""
    if args.log and args.log.exists():
        rec["log"] = log_lines(args.log.read_text(errors="replace"))
        chosen = [m.group(1) for ln in rec["log"] if (m := BACKEND.search(ln))]
        rec["backend"] = chosen[0] if chosen else None
    args.out.write_text(json.dumps(rec, indent=1))


if __name__ == "__main__":
    sys.exit(main())
