"""The results file: JSON lines, appended one record at a time, merged by concatenation.

Record kinds (field ``kind``): ``serve`` (one ``vllm bench serve`` run), ``offline`` (one
``vllm bench throughput`` process), ``startup`` (one server process: start-up seconds and
phases, backend), ``probe`` (first vs again latency at unseen prompt lengths, one server
process), ``compiles`` (Triton compiles of one server process, before and after ready),
``session`` (the command line, host and settings of one runner call). Every record has a
unique ``run_id``; files from several sessions merge by concatenating them (``cat a b >
c``): ``load`` drops repeated ``run_id``s and a torn last line from a killed process.

Resume: a run is done when a ``serve``/``offline`` record with ``ok: true`` has its key
(kind, model, tree, workload, concurrency, process, rep); ``probe`` records are keyed by
(kind, model, tree, process).
"""

import json
import os
from pathlib import Path

RUN_KINDS = ("serve", "offline")


def append(path: Path, rec: dict) -> None:
    """Append one record as a line and flush it to disk (a kill after this keeps it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def load(paths: list[Path]) -> list[dict]:
    """Every record of the files, in order, each ``run_id`` once; unreadable lines skipped."""
    out, seen = [], set()
    for p in paths:
        if not Path(p).exists():
            continue
        for line in Path(p).read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            rid = rec.get("run_id")
            if rid is not None:
                if rid in seen:
                    continue
                seen.add(rid)
            out.append(rec)
    return out


def key(rec: dict) -> tuple:
    """The resume key of a record (see the module docstring)."""
    if rec.get("kind") == "probe":
        return ("probe", rec.get("model"), rec.get("tree"), rec.get("process"))
    return (
        rec.get("kind"),
        rec.get("model"),
        rec.get("tree"),
        rec.get("workload"),
        rec.get("concurrency"),
        rec.get("process"),
        rec.get("rep"),
    )


def done_keys(records: list[dict]) -> set[tuple]:
    """Keys of the successful runs and probes."""
    return {key(r) for r in records if r.get("ok") and r.get("kind") in (*RUN_KINDS, "probe")}
