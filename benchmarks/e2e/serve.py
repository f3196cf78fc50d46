"""End-to-end runner on the H200: one ``vllm serve`` per tree on one GPU, benchmark runs that
alternate the trees, Triton compiles during serving, start-up phases; resumable JSON lines.

    python3 benchmarks/e2e/serve.py --model /root/e2e-models/qwen3-30b-a3b-fp8static-L48 \\
        --trees base series --out /tmp/out/r/e2e --budget-s 500 [--quick] [--dry-run]

For each process index (``--processes``), it starts one server per tree at once (ports
8100+i on 127.0.0.1, ``--load-format dummy``, a per-server ``--kv-cache-memory-bytes`` and
``--gpu-memory-utilization`` share, see servers.py), waits for ``/health``, records the
start-up seconds (spawn to ready), the phases vLLM logged and the MoE backend, probes single
requests at unseen prompt lengths (first vs again), runs the schedule (schedule.py: trees
alternate, order reversed every repetition) through one long-lived client process that calls
vLLM's own ``vllm bench serve`` code (client.py), records GPU clocks before and after each
run, then stops the servers and reads every Triton compile they logged (compile_hook.py,
installed as sitecustomize.py). Each result is a JSON line in ``--results``
(results.py); ``--resume FILE`` (repeatable; the results file itself always counts) skips
runs already done, so several calls or sessions fill one matrix. ``--budget-s`` stops
cleanly (servers killed, results flushed) before the caller's time limit: every step is
skipped when its expected cost does not fit; what is skipped is left for a later call.

``--offline-throughput`` runs ``vllm bench throughput`` instead (one process per run, since
it owns the engine), trees alternating the same way. ``--dry-run`` prints every command and
the schedule and starts nothing. Paths in the records are as given on the command line.
"""

import argparse
import json
import os
import queue
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from benchmarks import gpu
from benchmarks.e2e import logparse, models, results, schedule, servers

HERE = Path(__file__).resolve().parent
RESERVE_S = 30.0  # kept for stopping servers and flushing, on top of every estimate
RUN_OVERHEAD_S = 4.0  # per bench run: dataset sampling, ready check, warm-up requests
STOP_S = 15.0  # stopping the servers of one process and reading their logs
PROBE_S = 0.75  # per probe request (a prefill of <= 2047 tokens, maybe a JIT compile)


def log(msg: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Budget:
    """Seconds left before the caller's limit, less RESERVE_S."""

    def __init__(self, budget_s: float):
        self.t0, self.budget_s = time.monotonic(), budget_s

    def left(self) -> float:
        return self.budget_s - RESERVE_S - (time.monotonic() - self.t0)

    def fits(self, cost_s: float) -> bool:
        return cost_s <= self.left()


# ----------------------------------------------------------------------------- arguments


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", type=Path, required=True, help="a directory written by models.py")
    ap.add_argument(
        "--trees",
        nargs="+",
        required=True,
        metavar="NAME[=DIR]",
        help="trees to compare, the first is the reference (base); DIR defaults to "
        "<tree-root>/vllm-NAME",
    )
    ap.add_argument("--tree-root", default="/root", help="where the staged trees are (/root)")
    ap.add_argument(
        "--site",
        default="/root/site",
        help="extra wheels folder put on PYTHONPATH after the hook folder ('' for none)",
    )
    ap.add_argument("--python", default=sys.executable, help="interpreter for servers and client")
    ap.add_argument(
        "--out",
        type=Path,
        required=True,
        help="folder for results, log tails, compile logs (what comes back)",
    )
    ap.add_argument(
        "--work", type=Path, default=None, help="folder for full server logs (default OUT/work)"
    )
    ap.add_argument("--results", type=Path, default=None, help="JSONL file (OUT/results.jsonl)")
    ap.add_argument(
        "--resume",
        type=Path,
        action="append",
        default=[],
        help="earlier results whose finished runs are skipped (repeatable)",
    )
    ap.add_argument(
        "--quick", action="store_true", help="the quick preset (same as --preset quick)"
    )
    ap.add_argument("--preset", choices=list(schedule.PRESETS), default="full")
    ap.add_argument(
        "--cells",
        default=None,
        help="override the preset's cells, e.g. "
        "decode:1,decode:16,prefill:* (workload:concurrency)",
    )
    ap.add_argument("--reps", type=int, default=None, help="repetitions per process")
    ap.add_argument("--target-s", type=float, default=None, help="seconds per benchmark run")
    ap.add_argument("--processes", type=int, default=None, help="server processes per tree")
    ap.add_argument(
        "--min-reps",
        type=int,
        default=2,
        help="repetitions kept in the budget for each later process",
    )
    ap.add_argument(
        "--probe-lengths",
        default=None,
        help="prompt lengths of the first-vs-again probe, e.g. 3,17,100 ('' for no probe; "
        "default: schedule.probe_lengths of the model's arch)",
    )
    ap.add_argument("--budget-s", type=float, default=540.0, help="stop cleanly after this")
    ap.add_argument("--startup-timeout-s", type=float, default=420.0)
    ap.add_argument(
        "--startup-estimate-s",
        type=float,
        default=180.0,
        help="start-up seconds assumed until one was measured",
    )
    ap.add_argument("--tensor-parallel-size", type=int, default=1)
    ap.add_argument("--gpus", default=None, help="GPU indices to use, e.g. 0,1 (default: all)")
    ap.add_argument("--port-base", type=int, default=8100)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="default: what every workload and the probe need, at least the model's "
        "max_model_len in VSERIES_MODEL.json",
    )
    ap.add_argument(
        "--capture-sizes",
        default="1,2,4,8,16,32,64",
        help="CUDA graph capture sizes ('' for vLLM's default list)",
    )
    ap.add_argument(
        "--kv-tokens",
        type=int,
        default=None,
        help="KV cache size in tokens (default: max concurrency x longest request)",
    )
    ap.add_argument(
        "--tree-env",
        action="append",
        default=[],
        metavar="TREE:KEY=VALUE",
        help="extra environment for one tree's servers (repeatable)",
    )
    ap.add_argument(
        "--expect-backend",
        action="append",
        default=[],
        metavar="TREE=BACKEND",
        help="the MoE backend a tree should log; any other is marked a fallback",
    )
    ap.add_argument("--note", default="", help="text recorded in every record (stand-ins)")
    ap.add_argument(
        "--fresh-triton-cache",
        action="store_true",
        help="each server process gets an empty TRITON_CACHE_DIR (cold compiles)",
    )
    ap.add_argument(
        "--cache-root",
        type=Path,
        default=None,
        help="VLLM_CACHE_ROOT=DIR/<tree> for each tree (torch.compile cache per tree, kept "
        "between processes; default: vLLM's ~/.cache/vllm shared by all)",
    )
    ap.add_argument(
        "--offline-throughput",
        action="store_true",
        help="run vllm bench throughput, one process per run, instead of serving",
    )
    ap.add_argument("--offline-prompts", type=int, default=512)
    ap.add_argument(
        "--bench-subprocess",
        action="store_true",
        help="run each benchmark as its own 'vllm bench serve' process (slower; "
        "the fallback if the in-process client fails)",
    )
    ap.add_argument(
        "--force-memory", action="store_true", help="start even if the plan does not fit"
    )
    ap.add_argument("--dry-run", action="store_true", help="print the commands, start nothing")
    a = ap.parse_args(argv)
    preset = schedule.PRESETS["quick" if a.quick else a.preset]
    a.preset = "quick" if a.quick else a.preset
    a.cells = schedule.parse_cells(a.cells) if a.cells else preset.cells
    a.reps = a.reps or preset.reps
    a.target_s = a.target_s or preset.target_s
    a.processes = a.processes or preset.processes
    if a.probe_lengths is not None:  # None: the model's arch decides (Ctx)
        a.probe_lengths = [int(x) for x in a.probe_lengths.split(",") if x.strip()]
    a.capture_sizes = [int(x) for x in a.capture_sizes.split(",") if x.strip()]
    a.results = a.results or a.out / "results.jsonl"
    a.work = a.work or a.out / "work"
    a.tree_env = _tree_kv(a.tree_env, ":")
    a.expect_backend = _tree_kv(a.expect_backend, "=", nested=False)
    return a


def _tree_kv(items: list[str], sep: str, nested: bool = True) -> dict:
    """``TREE:KEY=VALUE`` -> {tree: {key: value}}; with nested=False ``TREE=V`` -> {tree: v}."""
    out: dict = {}
    for item in items:
        tree, s, rest = item.partition(sep)
        if not s or not tree or not rest:
            raise SystemExit(f"serve: bad value {item!r}")
        if nested:
            k, s2, v = rest.partition("=")
            if not s2 or not k:
                raise SystemExit(f"serve: bad value {item!r} (want TREE:KEY=VALUE)")
            out.setdefault(tree, {})[k] = v
        else:
            out[tree] = rest
    return out


def model_env_of(manifest: dict, arch: str | None) -> dict:
    """The model's server environment: VSERIES_MODEL.json's ``env``; for a directory written
    before the manifest had one, models.model_env of its arch, else VLLM_USE_DEEP_GEMM=0
    (what every server got before the setting became per-model)."""
    if "env" in manifest:
        return dict(manifest["env"])
    if arch in models.ARCHS:
        return models.model_env(arch)
    return {"VLLM_USE_DEEP_GEMM": "0"}


def resolve_trees(specs: list[str], root: str) -> list[tuple[str, Path]]:
    """``NAME[=DIR]`` -> (name, dir); the first is the reference tree."""
    out = []
    for s in specs:
        name, sep, d = s.partition("=")
        out.append((name, Path(d) if sep else Path(root) / f"vllm-{name}"))
    if len({n for n, _ in out}) != len(out):
        raise SystemExit("serve: a tree is named twice")
    return out


def tree_meta(name: str, d: Path) -> dict:
    """VSERIES_TREE.json of a staged tree (trees.py writes it into vllm/, which travels), or
    a record saying it is missing."""
    for f in (d / "vllm" / "VSERIES_TREE.json", d / "VSERIES_TREE.json"):
        if f.exists():
            try:
                return json.loads(f.read_text())
            except ValueError:
                break
    return {"name": name, "head": None, "patches": None, "missing": f"no VSERIES_TREE.json in {d}"}


# ----------------------------------------------------------------------------- the plan


class Ctx:
    """Everything a session needs: arguments, model, trees, records, the memory plan."""

    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.session = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        self.model_dir = a.model
        self.cfg = json.loads((a.model / "config.json").read_text())
        mf = a.model / "VSERIES_MODEL.json"
        self.manifest = json.loads(mf.read_text()) if mf.exists() else {}
        self.model = a.model.name
        self.arch = self.manifest.get("arch", self.cfg.get("model_type"))
        if a.probe_lengths is None:
            a.probe_lengths = list(schedule.probe_lengths(self.arch))
        self.model_env = model_env_of(self.manifest, self.arch)
        self.depth = self.cfg["num_hidden_layers"] / self.manifest.get(
            "full_layers", self.cfg["num_hidden_layers"]
        )
        self.tok_vocab = self.manifest.get("tokenizer", {}).get("vocab", 32000)
        self.trees = resolve_trees(a.trees, a.tree_root)
        self.meta = {n: tree_meta(n, d) for n, d in self.trees}
        self.records = results.load([*a.resume, a.results])
        self.done = results.done_keys(self.records)
        self.max_model_len = a.max_model_len or max(
            schedule.max_model_len(
                tuple((w, 1) for w in schedule.WORKLOADS), tuple(a.probe_lengths) or (1,)
            ),
            self.manifest.get("max_model_len") or 0,
        )
        self.gpus = a.gpus.split(",") if a.gpus else gpu.visible()
        self.tp = a.tensor_parallel_size
        self.gpu_groups = servers.assign_gpus(len(self.trees), self.tp, self.gpus)
        kv_tokens = a.kv_tokens or max(
            [self.max_model_len]
            + [
                c
                * (schedule.WORKLOADS[w].input_range()[1] + schedule.WORKLOADS[w].output_range()[1])
                for w, c in a.cells
            ]
        )
        self.kv_tokens = int(kv_tokens * 1.1)
        self.kv_bytes = servers.kv_cache_bytes(self.cfg, self.kv_tokens, self.tp)
        self.mem = servers.memory_plan(
            self.cfg,
            len(self.trees),
            self.tp,
            self.gpus,
            self.kv_bytes,
            gpu.total_bytes() if not a.dry_run else gpu.H200_BYTES,
        )
        self.quant_args = self.manifest.get("serve_args", ["--quantization", "fp8"])
        # (tree, workload, concurrency) -> observed req/s of this model, resumed records
        # included; a cell's rate pools every tree's (``rate``)
        self.tree_rates: dict[tuple, list[float]] = {}
        for r in self.records:
            v = r.get("vllm") or {}
            mine = r.get("kind") == "serve" and r.get("ok") and r.get("model") == self.model
            if mine and v.get("duration") and v.get("completed"):
                key = (r["tree"], r["workload"], r["concurrency"])
                self.tree_rates.setdefault(key, []).append(v["completed"] / v["duration"])
        self.nprompts: dict[tuple, int] = {}  # (workload, concurrency, process, rep) -> n
        self.startups: list[float] = []

    def common(self) -> dict:
        """Fields every record carries."""
        return {
            "session": self.session,
            "model": self.model,
            "arch": self.arch,
            "flavour": self.manifest.get("flavour"),
            "layers": self.cfg["num_hidden_layers"],
            "tp": self.tp,
            "note": self.a.note,
        }

    def tree_fields(self, tree: str) -> dict:
        m = self.meta[tree]
        return {
            "tree": tree,
            "tree_head": m.get("head"),
            "tree_patches": m.get("patches"),
            "tree_env": self.a.tree_env.get(tree, {}),
            "backend_expected": self.a.expect_backend.get(tree),
        }

    def record(self, rec: dict) -> dict:
        rec = {"run_id": uuid.uuid4().hex, **self.common(), **rec}
        results.append(self.a.results, rec)
        return rec

    def todo(self, process: int) -> tuple[list[schedule.Run], list[str]]:
        """(runs, trees to probe) of one process that are not done yet."""
        runs = [
            r
            for r in schedule.plan([n for n, _ in self.trees], self.a.cells, self.a.reps, process)
            if (self.kind(), self.model, r.tree, r.workload, r.concurrency, r.process, r.rep)
            not in self.done
        ]
        probes = (
            []
            if self.a.offline_throughput or not self.a.probe_lengths
            else [n for n, _ in self.trees if ("probe", self.model, n, process) not in self.done]
        )
        return runs, probes

    def work_left(self) -> dict[int, tuple[list[schedule.Run], list[str]]]:
        """{process: (runs, probes)} still to do. A process whose first --min-reps repetitions
        and probe are done is complete: its later repetitions only run in the same server
        process, when time is left (more data: raise --processes)."""
        out = {}
        for p in range(self.a.processes):
            runs, probes = self.todo(p)
            if probes or any(r.rep < self.a.min_reps for r in runs):
                out[p] = (runs, probes)
        return out

    def kind(self) -> str:
        return "offline" if self.a.offline_throughput else "serve"

    def rate(self, w: str, c: int) -> float:
        """Request rate (req/s) a cell's prompts are sized for: the fastest tree's median over
        its observed runs of the cell (resumed ones included), else the schedule's estimate.
        Sized for the fastest tree, every tree's run lasts at least ``--target-s``; a slower
        tree's longer run is costed by ``tree_run_cost``. While some of this session's trees
        have no run of the cell yet, each observed tree's median counts at its speed scaled
        by its ``schedule.slowness`` (how much slower than the fastest tree it ran in other
        cells): in round 12 the first mixed c=64 run was the base's (FlashInfer, ~4x slower),
        and sizing the next repetition at its rate gave the Triton trees 3-s runs."""
        est = schedule.est_request_rate(self.arch, self.depth, schedule.WORKLOADS[w], c)
        observed = {
            t: schedule.calibrated(est, rs)
            for (t, w2, c2), rs in self.tree_rates.items()
            if (w2, c2) == (w, c) and rs
        }
        if not observed:
            return est
        if all(n in observed for n, _ in self.trees):
            return max(observed.values())
        return max(r * schedule.slowness(self.tree_rates, t) for t, r in observed.items())

    def prompts(self, w: str, c: int) -> int:
        return schedule.num_prompts(self.rate(w, c), self.a.target_s, c)

    def prompts_for(self, run: schedule.Run) -> int:
        """num_prompts of a run, fixed at the first tree's run of its repetition so that
        every tree of the repetition gets the same prompts."""
        k = (run.workload, run.concurrency, run.process, run.rep)
        if k not in self.nprompts:
            self.nprompts[k] = self.prompts(run.workload, run.concurrency)
        return self.nprompts[k]

    def tree_run_cost(self, run: schedule.Run) -> float:
        """Seconds of one tree's run: its prompts at the tree's own observed rate in this cell,
        else at the cell's rate slowed by how much slower the tree ran elsewhere
        (``schedule.slowness``); the timeout is 4x this."""
        k = (run.workload, run.concurrency, run.process, run.rep)
        n = self.nprompts.get(k) or self.prompts(run.workload, run.concurrency)
        own = self.tree_rates.get((run.tree, run.workload, run.concurrency))
        if own:
            rate = schedule.calibrated(0.0, own)
        else:
            rate = self.rate(run.workload, run.concurrency) / schedule.slowness(
                self.tree_rates, run.tree
            )
        return n / rate + RUN_OVERHEAD_S

    def probe_cost(self, n_trees: int) -> float:
        """Seconds of the probe: PROBE_S per request, two requests per length and tree."""
        return len(self.a.probe_lengths) * 2 * n_trees * PROBE_S

    def startup_est(self) -> float:
        return max(self.startups) if self.startups else self.a.startup_estimate_s

    def server_gpus(self, i: int) -> list[str] | None:
        """CUDA_VISIBLE_DEVICES of server i: only set with several GPUs or tensor parallel."""
        return self.gpu_groups[i] if len(self.gpus) > 1 or self.tp > 1 else None

    def server_env(self, tree: str, tree_dir: Path, gpus, compile_dir, work: Path) -> dict:
        hook = work / "hook"
        extra = dict(self.a.tree_env.get(tree, {}))
        if self.a.fresh_triton_cache:
            extra.setdefault("TRITON_CACHE_DIR", str(work / "triton-cache"))
        if self.a.cache_root is not None:
            extra.setdefault("VLLM_CACHE_ROOT", str(self.a.cache_root / tree))
        return servers.server_env(
            os.environ,
            pythonpath=[str(hook), self.a.site, str(tree_dir)],
            compile_dir=compile_dir,
            gpus=gpus,
            extra=extra,
            model_env=self.model_env,
        )

    def server_cmd(self, port: int) -> list[str]:
        return servers.server_command(
            self.a.python,
            self.model_dir,
            port,
            quant_args=self.quant_args,
            max_model_len=self.max_model_len,
            max_num_seqs=self.a.max_num_seqs,
            max_num_batched_tokens=self.a.max_num_batched_tokens,
            share=self.mem["share"],
            kv_bytes=self.kv_bytes,
            tp=self.tp,
            capture_sizes=self.a.capture_sizes,
        )

    def bench_argv(self, tree: str, port: int, run: schedule.Run) -> list[str]:
        """Arguments of ``vllm bench serve`` for one run (the same prompts for every tree of
        a repetition: the seed depends on process and repetition only)."""
        w = schedule.WORKLOADS[run.workload]
        c = run.concurrency
        return [
            "--backend", "openai", "--endpoint", "/v1/completions",
            "--host", "127.0.0.1", "--port", str(port),
            "--model", str(self.model_dir), "--tokenizer", str(self.model_dir),
            *w.bench_args(),
            "--num-prompts", str(self.prompts_for(run)),
            "--max-concurrency", str(c), "--request-rate", "inf",
            "--seed", str(1000 + 100 * run.process + run.rep),
            "--temperature", "0", "--ignore-eos",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--num-warmups", str(min(c, 8)), "--ready-check-timeout-sec", "60",
            "--disable-tqdm", "--label", tree,
        ]  # fmt: skip

    def offline_argv(self, w: str, out_json: Path) -> list[str]:
        """``vllm bench throughput`` for one workload. v0.21.0's throughput tool passes
        --random-range-ratio to the dataset unparsed, so it gets one float (the larger ratio)."""
        wl = schedule.WORKLOADS[w]
        return [
            self.a.python, "-m", "vllm.entrypoints.cli.main", "bench", "throughput",
            "--model", str(self.model_dir), "--tokenizer", str(self.model_dir),
            "--dataset-name", "random", "--random-input-len", str(wl.input_len),
            "--random-output-len", str(wl.output_len),
            "--random-range-ratio", str(max(wl.input_ratio, wl.output_ratio)),
            "--num-prompts", str(self.a.offline_prompts), "--seed", "0",
            "--load-format", "dummy",
            *[x for x in self.quant_args if x != "--no-enable-prefix-caching"],
            "--max-model-len", str(self.max_model_len), "--max-num-seqs", str(self.a.max_num_seqs),
            "--max-num-batched-tokens", str(self.a.max_num_batched_tokens),
            "--gpu-memory-utilization", "0.85", "--kv-cache-memory-bytes", str(self.kv_bytes),
            "--tensor-parallel-size", str(self.tp), "--no-enable-prefix-caching",
            *self.compilation_args(),
            "--output-json", str(out_json),
        ]  # fmt: skip

    def compilation_args(self) -> list[str]:
        sizes = self.a.capture_sizes
        return (
            ["--compilation-config", json.dumps({"cudagraph_capture_sizes": sizes})]
            if sizes
            else []
        )


# ----------------------------------------------------------------------------- the client


class Client:
    """The long-lived bench client process (client.py), or none with --bench-subprocess."""

    def __init__(self, ctx: Ctx, tree_dir: Path, work: Path):
        self.ctx, self.tree_dir, self.work = ctx, tree_dir, work
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()
        self.pinged: dict | None = None

    def env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = ":".join(p for p in [self.ctx.a.site, str(self.tree_dir)] if p)
        env.update(servers.ENV_ALWAYS)
        return env

    def command(self) -> list[str]:
        return [self.ctx.a.python, str(HERE / "client.py")]

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        with open(self.work / "client.log", "ab") as err:
            self.proc = subprocess.Popen(
                self.command(),
                env=self.env(),
                cwd=self.work,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                bufsize=1,
                start_new_session=True,
            )
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()

    @staticmethod
    def _read(proc, q) -> None:
        for line in proc.stdout:
            q.put(line)
        q.put(None)

    def request(self, obj: dict, timeout: float) -> dict:
        """Send one request; the reply, or {"ok": False, "error": ...} on timeout or exit (the
        client is then killed and restarted on the next request)."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        try:
            self.proc.stdin.write(json.dumps(obj) + "\n")
            self.proc.stdin.flush()
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            return {"ok": False, "error": f"client timed out after {timeout:.0f} s"}
        except OSError as e:
            self.stop()
            return {"ok": False, "error": f"client pipe: {e!r}"}
        if line is None:
            self.stop()
            return {"ok": False, "error": f"client exited; see {self.work / 'client.log'}"}
        return json.loads(line)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                servers._signal_group(self.proc.pid, 9)
                self.proc.wait()
        self.proc = None


def bench_subprocess(ctx: Ctx, client: Client, argv: list[str], timeout: float) -> dict:
    """One ``vllm bench serve`` process (--bench-subprocess): the same arguments, result read
    back from --save-result's file."""
    d = client.work / "bench-results"
    d.mkdir(parents=True, exist_ok=True)
    name = f"r-{uuid.uuid4().hex[:8]}.json"
    cmd = [
        ctx.a.python,
        "-m",
        "vllm.entrypoints.cli.main",
        "bench",
        "serve",
        *argv,
        "--save-result",
        "--result-dir",
        str(d),
        "--result-filename",
        name,
    ]
    start = time.time()
    with open(client.work / "client.log", "ab") as err:
        try:
            p = subprocess.run(
                cmd, env=client.env(), cwd=client.work, stdout=err, stderr=err, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return {
                "ok": False,
                "error": f"bench timed out after {timeout:.0f} s",
                "t_start": start,
                "t_end": time.time(),
            }
    f = d / name
    if p.returncode != 0 or not f.exists():
        return {
            "ok": False,
            "error": f"vllm bench serve exited {p.returncode}",
            "t_start": start,
            "t_end": time.time(),
        }
    return {"ok": True, "result": json.loads(f.read_text()), "t_start": start, "t_end": time.time()}


# ----------------------------------------------------------------------------- probe


def probe_ids(length: int, which: str, process: int, vocab: int) -> list[int]:
    """Deterministic prompt token ids (100 .. vocab-1) for the probe; ``which`` = first/again
    gives two different prompts of the same length."""
    rng = random.Random(f"{length}-{which}-{process}")
    return [rng.randrange(100, vocab) for _ in range(length)]


def complete_once(port: int, model: str, ids: list[int], timeout: float = 120.0) -> float:
    """One completion of 1 token for a token-id prompt; latency in ms (request to full reply)."""
    body = json.dumps({"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0})
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
    )
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        r.read()
    return (time.perf_counter() - t0) * 1e3


# ----------------------------------------------------------------------------- one process


def tail_copy(src: Path, dst: Path, head: int = 150, tail: int = 300) -> None:
    """The first ``head`` and last ``tail`` lines of a log (all when short)."""
    if not src.exists():
        return
    lines = src.read_text(errors="replace").splitlines()
    if len(lines) > head + tail:
        lines = (
            lines[:head] + [f"... [{len(lines) - head - tail} lines left out] ..."] + lines[-tail:]
        )
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n".join(lines) + "\n")


def compile_records(compile_dir: Path) -> list[dict]:
    out = []
    for f in sorted(compile_dir.glob("compiles-*.jsonl")):
        for line in f.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return sorted(out, key=lambda r: r.get("t", 0))


def summarize_compiles(recs: list[dict], t_ready: float | None, phases: list) -> dict:
    """Compiles before and after ready; each after-ready compile with its kernel, token count,
    duration and the phase (probe / run) it happened in."""
    ok = [r for r in recs if "kernel" in r]
    after = [r for r in ok if t_ready is not None and r["t"] >= t_ready]

    def phase(t):
        for t0, t1, label in phases:
            if t0 <= t <= t1:
                return label
        return "idle"

    return {
        "compiles_total": len(ok),
        "compiles_before_ready": len(ok) - len(after),
        "compiles_after_ready": len(after),
        "after_ready": [
            {
                "kernel": r["kernel"],
                "fc_num_tokens": r.get("fc_num_tokens"),
                "fc_num_actual_tokens": r.get("fc_num_actual_tokens"),
                "duration_ms": r.get("duration_ms"),
                "rank": r.get("rank"),
                "pid": r.get("pid"),
                "t_after_ready_s": round(r["t"] - t_ready, 3),
                "phase": phase(r["t"]),
                "spec": (r.get("spec") or "")[:300],
            }
            for r in after
        ],
        "before_ready_by_kernel": _count(r["kernel"] for r in ok if r not in after),
        "hook_errors": [r["hook_error"] for r in recs if "hook_error" in r][:5],
        "hook_pids": sorted({r.get("pid") for r in recs}),
    }


def _count(names) -> dict:
    out: dict = {}
    for n in names:
        out[n] = out.get(n, 0) + 1
    return out


def install_hook(work: Path) -> Path:
    """``work/hook/sitecustomize.py`` = compile_hook.py."""
    d = work / "hook"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "compile_hook.py", d / "sitecustomize.py")
    return d


class ProcessRun:
    """One process index: the servers of every tree, the probe, the runs, the stop."""

    def __init__(self, ctx: Ctx, process: int, client: Client, budget: Budget):
        self.ctx, self.p, self.client, self.budget = ctx, process, client, budget
        self.servers: dict[str, servers.Server] = {}
        self.instance: dict[str, str] = {}
        self.backend: dict[str, str | None] = {}
        self.phases: dict[str, list] = {}
        self.dead: set[str] = set()

    def start(self) -> list[str]:
        """Start every tree's server at once and wait for them; returns the ready trees."""
        ctx = self.ctx
        for i, (tree, tree_dir) in enumerate(ctx.trees):
            inst = f"{ctx.session}-{tree}-p{self.p}"
            work = ctx.a.work / ctx.model / inst
            install_hook(work)
            port = servers.free_port(
                ctx.a.port_base + i, taken={x.port for x in self.servers.values()}
            )
            if port != ctx.a.port_base + i:
                log(f"p{self.p} {tree}: port {ctx.a.port_base + i} is busy, using {port}")
            env = ctx.server_env(tree, tree_dir, ctx.server_gpus(i), work / "compiles", work)
            s = servers.Server(tree, port, ctx.server_cmd(port), env, work)
            s.start()
            self.servers[tree], self.instance[tree], self.phases[tree] = s, inst, []
            log(f"p{self.p} {tree}: server pid {s.proc.pid} port {port} (log {s.log_path})")
        deadline = time.monotonic() + min(ctx.a.startup_timeout_s, self.budget.left() - STOP_S)
        last = time.monotonic()
        while time.monotonic() < deadline:
            pending = [
                s for s in self.servers.values() if not s.check_ready() and s.exited() is None
            ]
            if not pending:
                break
            if time.monotonic() - last > 15:
                last = time.monotonic()
                for s in pending:
                    tail = [x for x in s.log_text()[-4000:].splitlines() if x.strip()]
                    log(
                        f"p{self.p} waiting for {s.tree} ({time.time() - s.t_spawn:.0f} s): "
                        f"{tail[-1][:160] if tail else ''}"
                    )
            time.sleep(1.0)
        ready = []
        for tree, s in self.servers.items():
            parsed = logparse.parse(s.log_text())
            self.backend[tree] = logparse.backend(parsed)
            exp = ctx.a.expect_backend.get(tree)
            status = (
                "ready"
                if s.t_ready
                else (f"exited {s.exited()}" if s.exited() is not None else "not ready in time")
            )
            if s.t_ready:
                ready.append(tree)
                ctx.startups.append(s.startup_s())
            ctx.record(
                {
                    "kind": "startup",
                    "ok": bool(s.t_ready),
                    "process": self.p,
                    "instance": self.instance[tree],
                    **ctx.tree_fields(tree),
                    "status": status,
                    "startup_s": s.startup_s(),
                    "t_spawn": s.t_spawn,
                    "t_ready": s.t_ready,
                    "backend": self.backend[tree],
                    "fallback": None
                    if exp is None or self.backend[tree] is None
                    else self.backend[tree] != exp,
                    "phases": {
                        k: v for k, v in parsed.items() if k not in ("errors", "warmup_lines")
                    },
                    "warmup_lines": parsed["warmup_lines"],
                    "errors": parsed["errors"],
                    "server_cmd": s.cmd,
                    "share": ctx.mem["share"],
                    "kv_bytes": ctx.kv_bytes,
                    "max_model_len": ctx.max_model_len,
                    "gpus": s.env.get("CUDA_VISIBLE_DEVICES"),
                }
            )
            took = s.startup_s() or round(time.time() - s.t_spawn)
            log(f"p{self.p} {tree}: {status} after {took} s, MoE backend {self.backend[tree]}")
        return ready

    def probe(self, trees: list[str]) -> None:
        ctx, lengths = self.ctx, self.ctx.a.probe_lengths
        order = trees if self.p % 2 == 0 else trees[::-1]
        cost = ctx.probe_cost(len(trees))
        if not self.budget.fits(cost + STOP_S):
            log(f"p{self.p}: no time for the probe ({cost:.0f} s)")
            return
        res: dict[str, list] = {t: [] for t in trees}
        errors: dict[str, str] = {}
        for L in lengths:
            row: dict[str, dict] = {t: {"len": L} for t in trees}
            for which in ("first", "again"):
                ids = probe_ids(L, which, self.p, ctx.tok_vocab)
                for t in order:
                    if t in errors:
                        continue
                    s = self.servers[t]
                    t0 = time.time()
                    try:
                        row[t][f"{which}_ms"] = round(
                            complete_once(s.port, str(ctx.model_dir), ids), 2
                        )
                    except OSError as e:
                        errors[t] = f"len {L} {which}: {e!r}"
                    self.phases[t].append((t0, time.time(), f"probe len={L} {which}"))
            for t in trees:
                res[t].append(row[t])
        for t in trees:
            ctx.record(
                {
                    "kind": "probe",
                    "ok": t not in errors,
                    "process": self.p,
                    "instance": self.instance[t],
                    **ctx.tree_fields(t),
                    "backend": self.backend.get(t),
                    "lengths": res[t],
                    "error": errors.get(t),
                }
            )
            log(
                f"p{self.p} {t} probe: "
                + ", ".join(
                    f"{r['len']}:{r.get('first_ms', '-')}/{r.get('again_ms', '-')}" for r in res[t]
                )
            )

    def run(self, run: schedule.Run, reserve: float = 0.0) -> bool:
        """One benchmark run; False when it does not fit the budget less ``reserve`` seconds
        (the caller stops)."""
        ctx = self.ctx
        cost = ctx.tree_run_cost(run)
        if not self.budget.fits(cost + STOP_S + reserve):
            return False
        s = self.servers[run.tree]
        if s.exited() is not None:
            if run.tree not in self.dead:
                self.dead.add(run.tree)
                log(f"p{self.p} {run.tree}: the server has exited ({s.exited()}); its runs wait")
            return True
        argv = ctx.bench_argv(run.tree, s.port, run)
        n = int(argv[argv.index("--num-prompts") + 1])
        timeout = max(60.0, 4 * cost)
        timeout = min(timeout, max(10.0, self.budget.left() - STOP_S))
        clocks_before = gpu.clocks()
        if ctx.a.bench_subprocess:
            reply = bench_subprocess(ctx, self.client, argv, timeout)
        else:
            reply = self.client.request({"cmd": "bench", "argv": argv}, timeout)
        clocks_after = gpu.clocks()
        t_start, t_end = reply.get("t_start", time.time()), reply.get("t_end", time.time())
        self.phases[run.tree].append(
            (t_start, t_end, f"{run.workload} c={run.concurrency} rep {run.rep}")
        )
        res = reply.get("result") or {}
        vllm_fields = {k: v for k, v in res.items() if not isinstance(v, list | dict)}
        ok = bool(reply.get("ok")) and res.get("completed", 0) > 0 and not res.get("failed")
        exp = ctx.a.expect_backend.get(run.tree)
        ctx.record(
            {
                "kind": "serve",
                "ok": ok,
                "process": self.p,
                "rep": run.rep,
                "instance": self.instance[run.tree],
                "workload": run.workload,
                "concurrency": run.concurrency,
                "num_prompts": n,
                **ctx.tree_fields(run.tree),
                "backend": self.backend.get(run.tree),
                "fallback": None
                if exp is None or self.backend.get(run.tree) is None
                else self.backend[run.tree] != exp,
                "clocks_before": clocks_before,
                "clocks_after": clocks_after,
                "t_start": t_start,
                "t_end": t_end,
                "vllm": vllm_fields,
                "bench_argv": argv,
                "error": None
                if ok
                else (reply.get("error") or f"failed {res.get('failed')}")[-2000:],
            }
        )
        if ok and res.get("duration"):
            rate = res["completed"] / res["duration"]
            ctx.tree_rates.setdefault((run.tree, run.workload, run.concurrency), []).append(rate)
        g = res.get
        log(
            f"p{self.p} rep {run.rep} {run.workload} c={run.concurrency} {run.tree}: "
            + (
                f"{g('output_throughput', 0):.0f} tok/s, TTFT p50 {g('median_ttft_ms', 0):.1f}"
                f" ms, TPOT p50 {g('median_tpot_ms', 0):.2f} ms, {g('duration', 0):.1f} s"
                if ok
                else f"FAILED: {(reply.get('error') or '')[-300:]}"
            )
        )
        return True

    def stop(self) -> None:
        ctx = self.ctx
        servers.stop_all(list(self.servers.values()))
        for tree, s in self.servers.items():
            inst = self.instance[tree]
            parsed = logparse.parse(s.log_text())
            recs = compile_records(s.compile_dir)
            summary = summarize_compiles(recs, s.t_ready, self.phases[tree])
            ctx.record(
                {
                    "kind": "compiles",
                    "ok": s.t_ready is not None,
                    "process": self.p,
                    "instance": inst,
                    **ctx.tree_fields(tree),
                    "backend": self.backend.get(tree),
                    "jit_monitor_kernels": parsed["jit_monitor_kernels"],
                    "jit_monitor_active": parsed["jit_monitor_active"],
                    "autotune_kernels": parsed["autotune_kernels"],
                    **summary,
                }
            )
            tail_copy(s.log_path, ctx.a.out / "logs" / ctx.model / f"{inst}.log.txt")
            if recs:
                dst = ctx.a.out / "compiles" / ctx.model / f"{inst}.jsonl"
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_text("".join(json.dumps(r) + "\n" for r in recs))
            log(
                f"p{self.p} {tree}: {summary['compiles_after_ready']} Triton compiles after ready "
                f"({_count(r['kernel'] for r in summary['after_ready'])}); jit_monitor logged "
                f"{len(parsed['jit_monitor_kernels'])}"
            )


# ----------------------------------------------------------------------------- sessions


def process_need(ctx: Ctx, runs: list, probes: list, min_reps: int) -> float:
    """Seconds one process needs at least: start-up, probe, its runs of the first
    ``min_reps`` repetitions, stop."""
    first = sum(ctx.tree_run_cost(r) for r in runs if r.rep < min_reps)
    return ctx.startup_est() + ctx.probe_cost(len(probes)) + first + STOP_S


def reserve_for_later(ctx: Ctx, later: list, left: float, min_reps: int) -> float:
    """Seconds to keep for the later processes ``later`` ([(index, (runs, probes))], in
    order) out of ``left``: the needs (``process_need``) of those that fit one after another;
    none once one does not fit, since it would not start. Keeping time for a process that
    cannot start only idles the GPU: round 12 stopped a process with 110 s left, kept for
    one that needed 168 s."""
    kept = 0.0
    for _, (runs, probes) in later:
        need = process_need(ctx, runs, probes, min_reps)
        if kept + need > left:
            break
        kept += need
    return kept


def serve_session(ctx: Ctx, budget: Budget) -> int:
    """Every process index with work left, in order. A process runs its first ``--min-reps``
    repetitions while they fit the budget, and later repetitions only while the time left also
    covers what the later processes that can still start need for their first ``--min-reps``
    (``reserve_for_later``); what does not fit is left for a later call (--resume)."""
    a = ctx.a
    todo = ctx.work_left()
    if not todo:
        log("nothing to do: every run and probe is in the results already")
        return 0
    client = Client(ctx, ctx.trees[0][1], a.work / ctx.model / f"{ctx.session}-client")
    if not a.bench_subprocess:
        client.start()
    failed = 0
    items = list(todo.items())
    try:
        for i, (p, (runs, probes)) in enumerate(items):
            first_cost = ctx.tree_run_cost(runs[0]) if runs else 0.0
            need = ctx.startup_est() + ctx.probe_cost(len(probes)) + first_cost + STOP_S
            if not budget.fits(need):
                log(f"p{p}: {budget.left():.0f} s left, a process needs ~{need:.0f} s: stopping")
                break
            pr = ProcessRun(ctx, p, client, budget)
            try:
                ready = pr.start()
                if not ready:
                    failed += 1
                    continue
                if not a.bench_subprocess and client.proc is not None and client.pinged is None:
                    client.pinged = client.request({"cmd": "ping"}, timeout=120)
                    log(f"client: {client.pinged}")
                    if not client.pinged.get("ok"):
                        log(
                            "!!! the in-process bench client failed; falling back to one "
                            "'vllm bench serve' process per run (--bench-subprocess)"
                        )
                        a.bench_subprocess = True
                        a.note = (a.note + "; " if a.note else "") + "bench-subprocess fallback"
                probes = [t for t in probes if t in ready]
                if probes:
                    pr.probe(probes)
                for run in runs:
                    if run.tree not in ready:
                        continue
                    # the first min_reps repetitions of every process are its own; later ones
                    # only run when the later processes' first min_reps still fit
                    later = 0.0
                    if run.rep >= a.min_reps:
                        later = reserve_for_later(ctx, items[i + 1 :], budget.left(), a.min_reps)
                    if not pr.run(run, reserve=later):
                        log(
                            f"p{p}: stopping runs with {budget.left():.0f} s left "
                            f"({later:.0f} s kept for later processes); the rest waits"
                        )
                        break
            finally:
                pr.stop()
    finally:
        client.stop()
    ctx.done = results.done_keys(results.load([*a.resume, a.results]))
    left = sum(len(runs) for runs, _ in ctx.work_left().values())
    log(f"session {ctx.session} done; {left} runs still to do (resume with --resume {a.results})")
    return 1 if failed and failed == len(todo) else 0


def offline_session(ctx: Ctx, budget: Budget) -> int:
    """vllm bench throughput: for each repetition, each workload, each tree (order reversed
    every repetition), one process."""
    a = ctx.a
    names = [n for n, _ in ctx.trees]
    dirs = dict(ctx.trees)
    workloads = list(dict.fromkeys(w for w, _ in a.cells))
    for r in range(a.reps):
        order = names if r % 2 == 0 else names[::-1]
        for w in workloads:
            for tree in order:
                if ("offline", ctx.model, tree, w, 0, r, r) in ctx.done:
                    continue
                cost = ctx.startup_est() + 60
                if not budget.fits(cost):
                    log(f"offline: {budget.left():.0f} s left, a run needs ~{cost:.0f} s: stopping")
                    return 0
                inst = f"{ctx.session}-{tree}-offline-r{r}-{w}"
                work = a.work / ctx.model / inst
                install_hook(work)
                out_json = work / "throughput.json"
                cmd = ctx.offline_argv(w, out_json)
                env = ctx.server_env(tree, dirs[tree], ctx.gpus[: ctx.tp], work / "compiles", work)
                (work / "compiles").mkdir(parents=True, exist_ok=True)
                t0 = time.time()
                timeout = max(30.0, budget.left())
                with open(work / "server.log", "ab") as f:
                    try:
                        proc = subprocess.Popen(
                            cmd,
                            env=env,
                            cwd=work,
                            stdout=f,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        )
                        rc = proc.wait(timeout=timeout)
                    except subprocess.TimeoutExpired:
                        servers._signal_group(proc.pid, 9)
                        proc.wait()
                        rc = "timeout"
                text = (work / "server.log").read_text(errors="replace")
                parsed = logparse.parse(text)
                data = json.loads(out_json.read_text()) if out_json.exists() else {}
                m = re.search(
                    r"Throughput: ([\d.]+) requests/s, ([\d.]+) total tokens/s, "
                    r"([\d.]+) output tokens/s",
                    text,
                )
                if m:
                    data["output_tokens_per_second"] = float(m[3])
                ok = rc == 0 and bool(data)
                recs = compile_records(work / "compiles")
                exp = a.expect_backend.get(tree)
                be = logparse.backend(parsed)
                ctx.record(
                    {
                        "kind": "offline",
                        "ok": ok,
                        "process": r,
                        "rep": r,
                        "instance": inst,
                        "workload": w,
                        "concurrency": 0,
                        "num_prompts": a.offline_prompts,
                        **ctx.tree_fields(tree),
                        "backend": be,
                        "fallback": None if exp is None or be is None else be != exp,
                        "t_start": t0,
                        "t_end": time.time(),
                        "wall_s": round(time.time() - t0, 2),
                        "vllm": data,
                        "phases": {
                            k: v for k, v in parsed.items() if k not in ("errors", "warmup_lines")
                        },
                        "errors": parsed["errors"],
                        "cmd": cmd,
                        "returncode": rc,
                        "compiles_total": len([x for x in recs if "kernel" in x]),
                    }
                )
                ctx.startups.append(time.time() - t0)
                tail_copy(work / "server.log", a.out / "logs" / ctx.model / f"{inst}.log.txt")
                rps, otps = (
                    data.get("requests_per_second", 0),
                    data.get("output_tokens_per_second", 0),
                )
                log(
                    f"offline rep {r} {w} {tree}: rc {rc}, {rps:.2f} req/s, "
                    f"{otps:.0f} output tok/s, backend {be}"
                )
    return 0


def dry_run(ctx: Ctx) -> int:
    a = ctx.a
    print(ctx.mem["text"])
    print(
        f"model {ctx.model} ({ctx.arch}, {ctx.cfg['num_hidden_layers']} layers); trees: "
        + ", ".join(f"{n}={d} (head {ctx.meta[n].get('head')})" for n, d in ctx.trees)
    )
    print(
        f"max-model-len {ctx.max_model_len}, KV {ctx.kv_tokens} tokens = {ctx.kv_bytes} bytes, "
        f"GPUs {ctx.gpus}, budget {a.budget_s:.0f} s; done already: {len(ctx.done)} keys"
    )
    print(
        f"nvidia-smi --query-gpu={','.join(gpu.CLOCK_FIELDS)} --format=csv,noheader,nounits"
        "   # before and after every run"
    )
    if a.offline_throughput:
        for w in dict.fromkeys(w for w, _ in a.cells):
            for tree, d in ctx.trees:
                env = ctx.server_env(
                    tree, d, ctx.gpus[: ctx.tp], Path("WORK/compiles"), Path("WORK")
                )
                cmd = shlex.join(ctx.offline_argv(w, Path("WORK/throughput.json")))
                print(f"[offline {w} {tree}] {_envline(env, tuple(ctx.model_env))} {cmd}")
        return 0
    client = Client(ctx, ctx.trees[0][1], Path("WORK"))
    print(f"[client] PYTHONPATH={client.env()['PYTHONPATH']} {shlex.join(client.command())}")
    for p, (runs, probes) in ctx.work_left().items():
        print(f"--- process {p}")
        for i, (tree, d) in enumerate(ctx.trees):
            port = a.port_base + i
            env = ctx.server_env(tree, d, ctx.server_gpus(i), Path("WORK/compiles"), Path("WORK"))
            print(
                f"[server {tree}] {_envline(env, tuple(ctx.model_env))} "
                f"{shlex.join(ctx.server_cmd(port))}"
            )
            print(f"[health {tree}] GET http://127.0.0.1:{port}/health until 200")
        for tree in probes:
            print(
                f"[probe {tree}] POST /v1/completions max_tokens=1, token-id prompts of "
                f"{a.probe_lengths}, each first then again"
            )
        for run in runs:
            port = a.port_base + [n for n, _ in ctx.trees].index(run.tree)
            print(
                f"[run p{p} rep {run.rep} {run.workload} c={run.concurrency} {run.tree} "
                f"~{ctx.tree_run_cost(run):.0f} s] vllm bench serve "
                f"{shlex.join(ctx.bench_argv(run.tree, port, run))}"
            )
        print("[stop] SIGTERM the process group of each server (SIGKILL after 20 s)")
    return 0


def _envline(env: dict, shown: tuple = ()) -> str:
    """``KEY=VALUE ...`` of the settings the runner makes: the fixed ones, ``shown`` (the
    model's), and any other key that is not in this process's environment."""
    keys = [
        "PYTHONPATH",
        "CUDA_VISIBLE_DEVICES",
        "VSERIES_COMPILE_LOG_DIR",
        "TRITON_CACHE_DIR",
        *servers.ENV_ALWAYS,
        *shown,
    ]
    extra = [k for k in env if k not in os.environ and k not in keys]
    return " ".join(f"{k}={shlex.quote(env[k])}" for k in [*keys, *extra] if k in env)


class Terminated(BaseException):
    """SIGTERM (e.g. from ``timeout``): unwinds so that every ``finally`` stops its servers."""


def _on_sigterm(signum, frame):
    raise Terminated()


def main(argv=None) -> int:
    a = parse_args(argv)
    ctx = Ctx(a)
    if not ctx.mem["fits"] and not a.force_memory and not a.offline_throughput:
        print(
            f"serve: {ctx.mem['text']}\n  use --layers in models.py, fewer trees, or "
            "--force-memory",
            file=sys.stderr,
        )
        return 2
    if a.dry_run:
        return dry_run(ctx)
    budget = Budget(a.budget_s)
    a.out.mkdir(parents=True, exist_ok=True)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
    for n, m in ctx.meta.items():
        if m.get("missing"):
            log(f"warning: tree {n}: {m['missing']} (its git head is not recorded)")
    log(ctx.mem["text"])
    ctx.record(
        {
            "kind": "session",
            "ok": True,
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "trees": {n: {"dir": str(d), **ctx.meta[n]} for n, d in ctx.trees},
            "preset": a.preset,
            "cells": a.cells,
            "reps": a.reps,
            "target_s": a.target_s,
            "processes": a.processes,
            "budget_s": a.budget_s,
            "gpus": ctx.gpus,
            "clocks": gpu.clocks(),
            "memory_plan": ctx.mem["text"],
            "server_cmd_example": ctx.server_cmd(a.port_base),
            "model_env": ctx.model_env,
            "probe_lengths": a.probe_lengths,
            "offline": a.offline_throughput,
        }
    )
    try:
        if a.offline_throughput:
            return offline_session(ctx, budget)
        return serve_session(ctx, budget)
    except Terminated:
        log("terminated: servers stopped, results kept")
        return 3
    finally:
        log(f"results: {a.results} ({budget.left() + RESERVE_S:.0f} s of the budget left)")


if __name__ == "__main__":
    sys.exit(main())
