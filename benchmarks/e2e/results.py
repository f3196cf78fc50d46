"""The results file: JSON lines, appended one record at a time, merged by concatenation.

Record kinds (field ``kind``): ``serve`` (one ``vllm bench serve`` run), ``offline`` (one
``vllm bench throughput`` process), ``startup`` (one server process: start-up seconds and
phases, backend), ``probe`` (first vs again latency at unseen prompt lengths, one server
process), ``compiles`` (Triton compiles of one server process, before and after ready),
``session`` (the command line, host and settings of one runner call). Every record has a
unique ``run_id``; files from several sessions merge by concatenating them (``cat a b >
c``): ``load`` (``vseries.results.read_lines``) drops repeated ``run_id``s and a torn last
line from a killed process; ``append`` is ``vseries.results.append_line``.

Resume: a run is done when a ``serve``/``offline`` record with ``ok: true`` has its key
(kind, model, tree, workload, concurrency, process, rep); ``probe`` records are keyed by
(kind, model, tree, process).
"""

from vseries.results import append_line as append
from vseries.results import read_lines as load

__all__ = ["RUN_KINDS", "append", "done_keys", "key", "load"]

RUN_KINDS = ("serve", "offline")


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
