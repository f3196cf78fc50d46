"""The records of the results file, as dataclasses: what the runner writes, what the report
and the resume read.

The file is JSON lines (``vseries.results.append_line``: one record appended and flushed at a
time; ``read_lines``: each ``run_id`` once, so files merge by concatenation); each line is a
record's ``to_dict`` and ``parse`` makes the record again (fields a line lacks, from an older
runner, are None; fields it has that the record does not know are dropped). Kinds (field
``kind``): ``Serve`` (one ``vllm bench serve`` run), ``Offline`` (one ``vllm bench
throughput`` process), ``Startup`` (one server process: start-up seconds and phases, backend),
``Probe`` (first vs again latency at unseen prompt lengths, one server process), ``Compiles``
(Triton compiles of one server process, before and after ready), ``Session`` (the command
line, host and settings of one runner call).

Resume: a run is done when a ``serve``/``offline`` record with ``ok: true`` has its key
(kind, model, tree, workload, concurrency, process, rep); ``probe`` records are keyed by
(kind, model, tree, process).
"""

import dataclasses
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from vseries import results

RUN_KINDS = ("serve", "offline")


@dataclass(kw_only=True)
class Record:
    """What every record carries: its id, whether it succeeded, and the session and model."""

    kind: ClassVar[str] = ""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    ok: bool | None = None
    session: str | None = None
    model: str | None = None
    arch: str | None = None
    flavour: str | None = None
    layers: int | None = None
    tp: int | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **dataclasses.asdict(self)}


@dataclass(kw_only=True)
class TreeRecord(Record):
    """A record of one tree's server process (or offline process): the tree and what it
    carries, the process index and instance, the MoE backend logged and the one expected."""

    tree: str | None = None
    tree_head: str | None = None
    tree_patches: list[str] | None = None
    tree_env: dict[str, str] = field(default_factory=dict)
    backend_expected: str | None = None
    process: int | None = None
    instance: str | None = None
    backend: str | None = None

    def failure(self) -> str:
        """Why it failed, in a few words ("?" when it did not say)."""
        return str(getattr(self, "error", None) or "?")


@dataclass(kw_only=True)
class Startup(TreeRecord):
    kind: ClassVar[str] = "startup"
    status: str | None = None
    startup_s: float | None = None
    t_spawn: float | None = None
    t_ready: float | None = None
    fallback: bool | None = None
    phases: dict[str, Any] = field(default_factory=dict)
    warmup_lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    server_cmd: list[str] = field(default_factory=list)
    share: float | None = None
    kv_bytes: int | None = None
    max_model_len: int | None = None
    gpus: str | None = None

    def failure(self) -> str:
        return self.status or "; ".join(self.errors) or "?"


@dataclass(kw_only=True)
class ProbeLength:
    """One prompt length of the probe: latency (ms) of the first request and of another of
    the same length."""

    len: int
    first_ms: float | None = None
    again_ms: float | None = None


@dataclass(kw_only=True)
class Probe(TreeRecord):
    kind: ClassVar[str] = "probe"
    lengths: list[ProbeLength] = field(default_factory=list)
    error: str | None = None


@dataclass(kw_only=True)
class Run(TreeRecord):
    """One benchmark run of a cell: its repetition, workload, concurrency and prompts, what
    vLLM's tool returned (``vllm``: its own result fields) and when."""

    rep: int | None = None
    workload: str | None = None
    concurrency: int | None = None
    num_prompts: int | None = None
    fallback: bool | None = None
    t_start: float | None = None
    t_end: float | None = None
    vllm: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class Serve(Run):
    kind: ClassVar[str] = "serve"
    clocks_before: list[dict] | dict | None = None
    clocks_after: list[dict] | dict | None = None
    bench_argv: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass(kw_only=True)
class Offline(Run):
    kind: ClassVar[str] = "offline"
    wall_s: float | None = None
    phases: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    returncode: int | str | None = None
    compiles_total: int | None = None

    def failure(self) -> str:
        return "; ".join(self.errors) or "?"


@dataclass(kw_only=True)
class Compile:
    """One Triton compile after the server was ready (compile_hook.py's line, summarised)."""

    kernel: str
    fc_num_tokens: int | None = None
    fc_num_actual_tokens: int | None = None
    duration_ms: float | None = None
    rank: int | None = None
    pid: int | None = None
    t_after_ready_s: float | None = None
    phase: str | None = None
    spec: str | None = None


@dataclass(kw_only=True)
class Compiles(TreeRecord):
    kind: ClassVar[str] = "compiles"
    jit_monitor_kernels: list[str] = field(default_factory=list)
    jit_monitor_active: bool | None = None
    autotune_kernels: list[str] = field(default_factory=list)
    compiles_total: int = 0
    compiles_before_ready: int = 0
    compiles_after_ready: int = 0
    after_ready: list[Compile] = field(default_factory=list)
    before_ready_by_kernel: dict[str, int] = field(default_factory=dict)
    hook_errors: list[str] = field(default_factory=list)
    hook_pids: list[int | None] = field(default_factory=list)


@dataclass(kw_only=True)
class Session(Record):
    kind: ClassVar[str] = "session"
    argv: list[str] = field(default_factory=list)
    cwd: str | None = None
    trees: dict[str, dict] = field(default_factory=dict)  # name -> dir + VSERIES_TREE.json
    preset: str | None = None
    cells: list | None = None
    reps: int | None = None
    target_s: float | None = None
    processes: int | None = None
    budget_s: float | None = None
    gpus: list[str] = field(default_factory=list)
    clocks: list[dict] | dict | None = None
    memory_plan: str | None = None
    server_cmd_example: list[str] = field(default_factory=list)
    model_env: dict[str, str] = field(default_factory=dict)
    probe_lengths: list[int] = field(default_factory=list)
    offline: bool | None = None


KINDS = {c.kind: c for c in (Serve, Offline, Startup, Probe, Compiles, Session)}
NESTED = {"lengths": ProbeLength, "after_ready": Compile}


def parse(d: dict) -> Record | None:
    """The record of one line; None for a kind this runner does not know."""
    cls = KINDS.get(d.get("kind"))
    if cls is None:
        return None
    known = {f.name for f in dataclasses.fields(cls)}
    kw = {k: v for k, v in d.items() if k in known and v is not None}
    for name, item in NESTED.items():
        if name in kw:
            fields = {f.name for f in dataclasses.fields(item)}
            kw[name] = [item(**{k: v for k, v in x.items() if k in fields}) for x in kw[name]]
    return cls(**kw)


def read(paths: Iterable[Path]) -> list[Record]:
    """Every record of the files, in order, each ``run_id`` once."""
    return [r for r in map(parse, results.read_lines(paths)) if r is not None]


def append(path: Path, rec: Record) -> None:
    """Append one record to the results file and flush it to disk."""
    results.append_line(path, rec.to_dict())


def key(rec: Record) -> tuple:
    """The resume key of a run or probe (see the module docstring); other records are their
    own."""
    if isinstance(rec, Probe):
        return ("probe", rec.model, rec.tree, rec.process)
    if isinstance(rec, Run):
        return (rec.kind, rec.model, rec.tree, rec.workload, rec.concurrency, rec.process, rec.rep)
    return (rec.kind, rec.run_id)


def done_keys(recs: Iterable[Record]) -> set[tuple]:
    """Keys of the successful runs and probes."""
    return {key(r) for r in recs if r.ok and r.kind in (*RUN_KINDS, "probe")}
