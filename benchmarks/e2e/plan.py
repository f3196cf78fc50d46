"""The runner's plan: its command line, read once into a frozen ``Plan`` (with the model, the
trees and the memory plan it implies) that every other part of the runner reads."""

import argparse
import json
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from benchmarks import gpu, shapes
from benchmarks.e2e import memory, names, schedule


def parser(description: str = "") -> argparse.ArgumentParser:
    """The runner's command line (``description``: serve.py's)."""
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.e2e.serve",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        "default: the model record's probe_lengths)",
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
    return ap


def tree_kv(items: list[str], sep: str, nested: bool = True) -> dict:
    """``TREE:KEY=VALUE`` -> {tree: {key: value}}; with nested=False ``TREE=V`` -> {tree: v}.

    Raises:
        ValueError: an item not of that form.
    """
    out: dict = {}
    for item in items:
        tree, s, rest = item.partition(sep)
        if not s or not tree or not rest:
            raise ValueError(f"bad value {item!r}")
        if nested:
            k, s2, v = rest.partition("=")
            if not s2 or not k:
                raise ValueError(f"bad value {item!r} (want TREE:KEY=VALUE)")
            out.setdefault(tree, {})[k] = v
        else:
            out[tree] = rest
    return out


def model_env_of(manifest: Mapping, shape: shapes.ModelShape) -> dict:
    """The model's server environment: VSERIES_MODEL.json's ``env``; for a directory written
    before the manifest had one, its record's."""
    return dict(manifest.get("env", shape.env))


@dataclass(frozen=True)
class Model:
    """A model directory written by models.py: its config, manifest (VSERIES_MODEL.json) and
    record (``benchmarks/shapes.py``), and what the runner takes from them."""

    dir: Path
    cfg: Mapping
    manifest: Mapping
    shape: shapes.ModelShape
    env: Mapping[str, str]

    @classmethod
    def read(cls, d: Path) -> "Model":
        """Raises:
        OSError, ValueError: no readable config.json, or an architecture without a record
            (a directory written before VSERIES_MODEL.json named it: write it again)."""
        cfg = json.loads((d / "config.json").read_text())
        mf = d / "VSERIES_MODEL.json"
        manifest = json.loads(mf.read_text()) if mf.exists() else {}
        try:
            shape = shapes.get(manifest.get("arch", cfg.get("model_type")), served=True)
        except ValueError as e:
            raise ValueError(
                f"{d}: {e}; write the directory again: python -m benchmarks.e2e.models --out "
                f"{d.parent} --arch ARCH"
            ) from e
        return cls(d, cfg, manifest, shape, MappingProxyType(model_env_of(manifest, shape)))

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def layers(self) -> int:
        return self.cfg["num_hidden_layers"]

    @property
    def depth(self) -> float:
        """layers / full layers: the share of a full model's work per token."""
        return self.layers / self.manifest.get("full_layers", self.layers)

    @property
    def vocab(self) -> int:
        return self.manifest.get("tokenizer", {}).get("vocab", 32000)

    @property
    def serve_args(self) -> tuple[str, ...]:
        return tuple(self.manifest.get("serve_args", ["--quantization", "fp8"]))


@dataclass(frozen=True)
class Tree:
    """A staged tree: its name (names.py's rule), folder and VSERIES_TREE.json."""

    name: str
    dir: Path
    meta: Mapping


@dataclass(frozen=True)
class Plan:
    """Everything one runner call was told and what follows from it; read-only."""

    session: str
    argv: tuple[str, ...]
    model: Model
    trees: tuple[Tree, ...]
    out: Path
    work: Path
    results: Path
    resume: tuple[Path, ...]
    preset: str
    cells: tuple[tuple[str, int], ...]
    reps: int
    target_s: float
    processes: int
    min_reps: int
    probe_lengths: tuple[int, ...]
    budget_s: float
    startup_timeout_s: float
    startup_estimate_s: float
    tp: int
    gpus: tuple[str, ...]
    gpu_groups: tuple[tuple[str, ...], ...]
    port_base: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    capture_sizes: tuple[int, ...]
    kv_tokens: int
    kv_bytes: int
    mem: Mapping
    tree_env: Mapping[str, Mapping[str, str]]
    expect_backend: Mapping[str, str]
    note: str
    fresh_triton_cache: bool
    cache_root: Path | None
    offline: bool
    offline_prompts: int
    bench_subprocess: bool
    force_memory: bool
    dry_run: bool
    python: str
    site: str

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> "Plan":
        """Raises:
        ValueError: a bad --cells / --tree-env / --expect-backend, a tree named twice, a
            model directory without a record (Model.read), too few GPUs for the TP size."""
        preset = schedule.PRESETS["quick" if a.quick else a.preset]
        model = Model.read(a.model)
        cells = schedule.parse_cells(a.cells) if a.cells else preset.cells
        probe = (
            model.shape.probe_lengths
            if a.probe_lengths is None
            else tuple(int(x) for x in a.probe_lengths.split(",") if x.strip())
        )
        specs = [names.parse_spec(s, a.tree_root) for s in a.trees]
        trees = tuple(Tree(n, d, MappingProxyType(names.read_meta(n, d))) for n, d in specs)
        if len({t.name for t in trees}) != len(trees):
            raise ValueError("a tree is named twice")
        max_model_len = a.max_model_len or max(
            schedule.max_model_len(tuple((w, 1) for w in schedule.WORKLOADS), probe or (1,)),
            model.manifest.get("max_model_len") or 0,
        )
        longest = {
            w: x.input_range()[1] + x.output_range()[1] for w, x in schedule.WORKLOADS.items()
        }
        need = max([max_model_len] + [c * longest[w] for w, c in cells])
        kv_tokens = int((a.kv_tokens or need) * 1.1)
        tp = a.tensor_parallel_size
        gpus = tuple(a.gpus.split(",") if a.gpus else gpu.visible())
        kv_bytes = memory.kv_cache_bytes(model.cfg, kv_tokens, tp)
        total = gpu.H200_BYTES if a.dry_run else gpu.total_bytes()
        weights = model.shape.weight_bytes(model.cfg)
        mem = memory.memory_plan(weights, len(trees), tp, list(gpus), kv_bytes, total)
        return cls(
            session=time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6],
            argv=tuple(sys.argv),
            model=model,
            trees=trees,
            out=a.out,
            work=a.work or a.out / "work",
            results=a.results or a.out / "results.jsonl",
            resume=tuple(a.resume),
            preset="quick" if a.quick else a.preset,
            cells=cells,
            reps=a.reps or preset.reps,
            target_s=a.target_s or preset.target_s,
            processes=a.processes or preset.processes,
            min_reps=a.min_reps,
            probe_lengths=probe,
            budget_s=a.budget_s,
            startup_timeout_s=a.startup_timeout_s,
            startup_estimate_s=a.startup_estimate_s,
            tp=tp,
            gpus=gpus,
            gpu_groups=tuple(map(tuple, memory.assign_gpus(len(trees), tp, list(gpus)))),
            port_base=a.port_base,
            max_num_seqs=a.max_num_seqs,
            max_num_batched_tokens=a.max_num_batched_tokens,
            max_model_len=max_model_len,
            capture_sizes=tuple(int(x) for x in a.capture_sizes.split(",") if x.strip()),
            kv_tokens=kv_tokens,
            kv_bytes=kv_bytes,
            mem=MappingProxyType(mem),
            tree_env=MappingProxyType(tree_kv(a.tree_env, ":")),
            expect_backend=MappingProxyType(tree_kv(a.expect_backend, "=", nested=False)),
            note=a.note,
            fresh_triton_cache=a.fresh_triton_cache,
            cache_root=a.cache_root,
            offline=a.offline_throughput,
            offline_prompts=a.offline_prompts,
            bench_subprocess=a.bench_subprocess,
            force_memory=a.force_memory,
            dry_run=a.dry_run,
            python=a.python,
            site=a.site,
        )

    @property
    def tree_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.trees)

    @property
    def kind(self) -> str:
        """The kind of this call's run records."""
        return "offline" if self.offline else "serve"

    def sizing(self, rates: dict | None = None) -> schedule.Sizing:
        """The sizing of this call's runs, seeded with ``rates`` observed before."""
        return schedule.Sizing(
            cost=self.model.shape.cost,
            depth=self.model.depth,
            trees=self.tree_names,
            target_s=self.target_s,
            probe_lengths=self.probe_lengths,
            startup_estimate_s=self.startup_estimate_s,
            rates=rates or {},
        )

    def server_gpus(self, i: int) -> list[str] | None:
        """CUDA_VISIBLE_DEVICES of server i: only set with several GPUs or tensor parallel."""
        return list(self.gpu_groups[i]) if len(self.gpus) > 1 or self.tp > 1 else None


def parse(argv: list[str] | None = None, description: str = "") -> Plan:
    """The plan of a command line; argparse's usage error (exit 2) for a bad one."""
    ap = parser(description)
    a = ap.parse_args(argv)
    try:
        return Plan.from_args(a)
    except (ValueError, OSError) as e:
        ap.error(str(e))
