"""End-to-end runner on the H200: one ``vllm serve`` per tree on one GPU, benchmark runs that
alternate the trees, Triton compiles during serving, start-up phases; resumable JSON lines.

    python3 -m benchmarks.e2e.serve --model /root/e2e-models/qwen3-30b-a3b-fp8static-L48 \\
        --trees base series --out /tmp/out/r/e2e --budget-s 500 [--quick] [--dry-run]

For each process index (``--processes``), it starts one server per tree at once (ports
8100+i on 127.0.0.1, ``--load-format dummy``, a per-server ``--kv-cache-memory-bytes`` and
``--gpu-memory-utilization`` share, see memory.py), waits for ``/health``, records the
start-up seconds (spawn to ready), the phases vLLM logged and the MoE backend, probes single
requests at unseen prompt lengths (first vs again), runs the schedule (schedule.py: trees
alternate, order reversed every repetition) through one long-lived client process that calls
vLLM's own ``vllm bench serve`` code (client.py), records GPU clocks before and after each
run, then stops the servers and reads every Triton compile they logged (compiles.py). Each
result is a JSON line in ``--results`` (records.py); ``--resume FILE`` (repeatable; the
results file itself always counts) skips runs already done, so several calls or sessions fill
one matrix. ``--budget-s`` stops cleanly (servers killed, results flushed) before the caller's
time limit: every step is skipped when its expected cost does not fit; what is skipped is left
for a later call.

``--offline-throughput`` runs ``vllm bench throughput`` instead (one process per run, since
it owns the engine), trees alternating the same way. ``--dry-run`` prints every command and
the schedule and starts nothing. Paths in the records are as given on the command line.

Where the parts are: plan.py (the command line, read once into a frozen Plan), state.py (the
runs done, the sizing), runs.py (the server processes and the runs), commands.py (command
lines), servers.py (processes), client.py (the bench client, both sides), records.py (the
results file).
"""

import os
import shlex
import signal
import sys
import threading
from pathlib import Path

from benchmarks import gpu
from benchmarks.e2e import client, commands, records
from benchmarks.e2e.plan import parse
from benchmarks.e2e.runs import ProcessRun, log, offline_run
from benchmarks.e2e.schedule import RESERVE_S, STOP_S, Budget
from benchmarks.e2e.state import State


def serve_session(st: State, budget: Budget) -> int:
    """Every process index with work left, in order. A process runs its first ``--min-reps``
    repetitions while they fit the budget, and later repetitions only while the time left also
    covers what the later processes that can still start need for their first ``--min-reps``
    (``Sizing.reserve_for_later``); what does not fit is left for a later call (--resume)."""
    plan, sizing = st.plan, st.sizing
    todo = st.work_left()
    if not todo:
        log("nothing to do: every run and probe is in the results already")
        return 0
    work = plan.work / plan.model.name / f"{plan.session}-client"
    bench = client.Client(plan.python, commands.client_env(plan, plan.trees[0].dir), work)
    if not st.bench_subprocess:
        bench.start()
    failed = 0
    items = list(todo.items())
    try:
        for i, (p, (runs, probes)) in enumerate(items):
            first_cost = sizing.run_cost(runs[0]) if runs else 0.0
            need = sizing.startup_est() + sizing.probe_cost(len(probes)) + first_cost + STOP_S
            if not budget.fits(need):
                log(f"p{p}: {budget.left():.0f} s left, a process needs ~{need:.0f} s: stopping")
                break
            pr = ProcessRun(st, p, bench, budget)
            try:
                ready = pr.start()
                if not ready:
                    failed += 1
                    continue
                if not st.bench_subprocess and bench.proc is not None and bench.pinged is None:
                    check_client(st, bench)
                probes = [t for t in probes if t in ready]
                if probes:
                    pr.probe(probes)
                for run in runs:
                    if run.tree not in ready:
                        continue
                    # the first min_reps repetitions of every process are its own; later ones
                    # only run when the later processes' first min_reps still fit
                    later = 0.0
                    if run.rep >= plan.min_reps:
                        later = sizing.reserve_for_later(
                            items[i + 1 :], budget.left(), plan.min_reps
                        )
                    if not pr.run(run, reserve=later):
                        log(
                            f"p{p}: stopping runs with {budget.left():.0f} s left "
                            f"({later:.0f} s kept for later processes); the rest waits"
                        )
                        break
            finally:
                pr.stop()
    finally:
        bench.stop()
    st.reload_done()
    left = sum(len(runs) for runs, _ in st.work_left().values())
    resume = f"resume with --resume {plan.results}"
    log(f"session {plan.session} done; {left} runs still to do ({resume})")
    return 1 if failed and failed == len(todo) else 0


def check_client(st: State, bench: client.Client) -> None:
    """Ping the in-process bench client once the servers are up; when it fails, every later
    run is its own ``vllm bench serve`` process, and the records' note says so."""
    bench.pinged = bench.request({"cmd": "ping"}, timeout=120)
    log(f"client: {bench.pinged}")
    if not bench.pinged.get("ok"):
        log(
            "!!! the in-process bench client failed; falling back to one "
            "'vllm bench serve' process per run (--bench-subprocess)"
        )
        st.bench_subprocess = True
        st.note = (st.note + "; " if st.note else "") + "bench-subprocess fallback"


def offline_session(st: State, budget: Budget) -> int:
    """vllm bench throughput: for each repetition, each workload, each tree (order reversed
    every repetition), one process."""
    plan = st.plan
    names = list(plan.tree_names)
    dirs = {t.name: t.dir for t in plan.trees}
    for r in range(plan.reps):
        order = names if r % 2 == 0 else names[::-1]
        for w in dict.fromkeys(w for w, _ in plan.cells):
            for tree in order:
                if ("offline", plan.model.name, tree, w, 0, r, r) in st.done:
                    continue
                cost = st.sizing.startup_est() + 60
                if not budget.fits(cost):
                    log(f"offline: {budget.left():.0f} s left, a run needs ~{cost:.0f} s: stopping")
                    return 0
                offline_run(st, tree, dirs[tree], w, r, budget)
    return 0


def dry_run(st: State) -> int:
    """Print the memory plan, every command of the work left, and start nothing."""
    plan = st.plan
    model_keys = tuple(plan.model.env)
    print(plan.mem["text"])
    print(
        f"model {plan.model.name} ({plan.model.shape.name}, {plan.model.layers} layers); trees: "
        + ", ".join(f"{t.name}={t.dir} (head {t.meta.get('head')})" for t in plan.trees)
    )
    print(
        f"max-model-len {plan.max_model_len}, KV {plan.kv_tokens} tokens = {plan.kv_bytes} bytes, "
        f"GPUs {list(plan.gpus)}, budget {plan.budget_s:.0f} s; done already: {len(st.done)} keys"
    )
    print(
        f"nvidia-smi --query-gpu={','.join(gpu.CLOCK_FIELDS)} --format=csv,noheader,nounits"
        "   # before and after every run"
    )
    work = Path("WORK")
    if plan.offline:
        for w in dict.fromkeys(w for w, _ in plan.cells):
            for t in plan.trees:
                gpus = list(plan.gpus[: plan.tp])
                env = commands.server_env(plan, t.name, t.dir, gpus, work / "compiles", work)
                cmd = shlex.join(commands.offline_argv(plan, w, work / "throughput.json"))
                print(f"[offline {w} {t.name}] {commands.envline(env, model_keys)} {cmd}")
        return 0
    bench = client.Client(plan.python, commands.client_env(plan, plan.trees[0].dir), work)
    print(f"[client] PYTHONPATH={bench.env['PYTHONPATH']} {shlex.join(bench.command())}")
    for p, (runs, probes) in st.work_left().items():
        print(f"--- process {p}")
        for i, t in enumerate(plan.trees):
            port = plan.port_base + i
            env = commands.server_env(
                plan, t.name, t.dir, plan.server_gpus(i), work / "compiles", work
            )
            print(
                f"[server {t.name}] {commands.envline(env, model_keys)} "
                f"{shlex.join(commands.server_cmd(plan, port))}"
            )
            print(f"[health {t.name}] GET http://127.0.0.1:{port}/health until 200")
        for tree in probes:
            print(
                f"[probe {tree}] POST /v1/completions max_tokens=1, token-id prompts of "
                f"{list(plan.probe_lengths)}, each first then again"
            )
        for run in runs:
            port = plan.port_base + plan.tree_names.index(run.tree)
            argv = commands.bench_argv(plan, run.tree, port, run, st.sizing.prompts_for(run))
            print(
                f"[run p{p} rep {run.rep} {run.workload} c={run.concurrency} {run.tree} "
                f"~{st.sizing.run_cost(run):.0f} s] vllm bench serve {shlex.join(argv)}"
            )
        print("[stop] SIGTERM the process group of each server (SIGKILL after 20 s)")
    return 0


class Terminated(BaseException):
    """SIGTERM (e.g. from ``timeout``): unwinds so that every ``finally`` stops its servers."""


def on_sigterm(signum, frame):
    raise Terminated()


def session_record(st: State) -> records.Session:
    plan = st.plan
    return records.Session(
        ok=True,
        argv=list(plan.argv),
        cwd=os.getcwd(),
        trees={t.name: {"dir": str(t.dir), **t.meta} for t in plan.trees},
        preset=plan.preset,
        cells=[list(c) for c in plan.cells],
        reps=plan.reps,
        target_s=plan.target_s,
        processes=plan.processes,
        budget_s=plan.budget_s,
        gpus=list(plan.gpus),
        clocks=gpu.clocks(),
        memory_plan=plan.mem["text"],
        server_cmd_example=commands.server_cmd(plan, plan.port_base),
        model_env=dict(plan.model.env),
        probe_lengths=list(plan.probe_lengths),
        offline=plan.offline,
    )


def main(argv=None) -> int:
    plan = parse(argv, __doc__)
    if not plan.mem["fits"] and not plan.force_memory and not plan.offline:
        print(
            f"serve: {plan.mem['text']}\n  use --layers in models.py, fewer trees, or "
            "--force-memory",
            file=sys.stderr,
        )
        return 2
    st = State.start(plan)
    if plan.dry_run:
        return dry_run(st)
    budget = Budget(plan.budget_s)
    plan.out.mkdir(parents=True, exist_ok=True)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_sigterm)
    for t in plan.trees:
        if t.meta.get("missing"):
            log(f"warning: tree {t.name}: {t.meta['missing']} (its git head is not recorded)")
    log(plan.mem["text"])
    st.record(session_record(st))
    try:
        if plan.offline:
            return offline_session(st, budget)
        return serve_session(st, budget)
    except Terminated:
        log("terminated: servers stopped, results kept")
        return 3
    finally:
        log(f"results: {plan.results} ({budget.left() + RESERVE_S:.0f} s of the budget left)")


if __name__ == "__main__":
    sys.exit(main())
