"""The benchmark runs and the server processes they run on: one process index of every tree
(``ProcessRun``: start the servers at once, probe, run the cells, stop and read the logs) and
one ``vllm bench throughput`` process (``offline_run``). Each step makes its record."""

import json
import random
import re
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

from benchmarks import gpu
from benchmarks.e2e import client, commands, compiles, logparse, records, schedule, servers
from benchmarks.e2e.schedule import STOP_S, Budget
from benchmarks.e2e.state import State


def log(msg: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", flush=True)


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


def phases_of(parsed: dict) -> dict:
    """logparse.parse's start-up phases (its errors and warm-up lines are fields of their own)."""
    return {k: v for k, v in parsed.items() if k not in ("errors", "warmup_lines")}


def fallback(expected: str | None, backend: str | None) -> bool | None:
    """Whether the MoE backend logged is another than the one expected (None: not known)."""
    return None if expected is None or backend is None else backend != expected


class ProcessRun:
    """One process index: the servers of every tree, the probe, the runs, the stop."""

    def __init__(self, st: State, process: int, bench: client.Client, budget: Budget):
        self.st, self.plan, self.p, self.client, self.budget = st, st.plan, process, bench, budget
        self.servers: dict[str, servers.Server] = {}
        self.instance: dict[str, str] = {}
        self.backend: dict[str, str | None] = {}
        self.phases: dict[str, list] = {}
        self.dead: set[str] = set()

    def start(self) -> list[str]:
        """Start every tree's server at once and wait for them; returns the ready trees."""
        plan = self.plan
        for i, tree in enumerate(plan.trees):
            inst = f"{plan.session}-{tree.name}-p{self.p}"
            work = plan.work / plan.model.name / inst
            compiles.install_hook(work)
            want = plan.port_base + i
            port = servers.free_port(want, taken={x.port for x in self.servers.values()})
            if port != want:
                log(f"p{self.p} {tree.name}: port {want} is busy, using {port}")
            gpus = plan.server_gpus(i)
            env = commands.server_env(plan, tree.name, tree.dir, gpus, work / "compiles", work)
            s = servers.Server(tree.name, port, commands.server_cmd(plan, port), env, work)
            s.start()
            self.servers[tree.name], self.instance[tree.name] = s, inst
            self.phases[tree.name] = []
            log(f"p{self.p} {tree.name}: server pid {s.proc.pid} port {port} (log {s.log_path})")
        self.wait_ready()
        ready = []
        for tree, s in self.servers.items():
            parsed = logparse.parse(s.log_text())
            self.backend[tree] = logparse.backend(parsed)
            status = (
                "ready"
                if s.t_ready
                else (f"exited {s.exited()}" if s.exited() is not None else "not ready in time")
            )
            if s.t_ready:
                ready.append(tree)
                self.st.sizing.startups.append(s.startup_s())
            fields = self.st.tree_fields(tree)
            self.st.record(
                records.Startup(
                    ok=bool(s.t_ready),
                    process=self.p,
                    instance=self.instance[tree],
                    **fields,
                    status=status,
                    startup_s=s.startup_s(),
                    t_spawn=s.t_spawn,
                    t_ready=s.t_ready,
                    backend=self.backend[tree],
                    fallback=fallback(fields["backend_expected"], self.backend[tree]),
                    phases=phases_of(parsed),
                    warmup_lines=parsed["warmup_lines"],
                    errors=parsed["errors"],
                    server_cmd=s.cmd,
                    share=plan.mem["share"],
                    kv_bytes=plan.kv_bytes,
                    max_model_len=plan.max_model_len,
                    gpus=s.env.get("CUDA_VISIBLE_DEVICES"),
                )
            )
            took = s.startup_s() or round(time.time() - s.t_spawn)
            log(f"p{self.p} {tree}: {status} after {took} s, MoE backend {self.backend[tree]}")
        return ready

    def wait_ready(self) -> None:
        """Poll every server's /health until all answer or exited, or the start-up time (and
        the budget less the stop) is up; say what each pending one logs every 15 s."""
        timeout = min(self.plan.startup_timeout_s, self.budget.left() - STOP_S)
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline:
            pending = [
                s for s in self.servers.values() if not s.check_ready() and s.exited() is None
            ]
            if not pending:
                return
            if time.monotonic() - last > 15:
                last = time.monotonic()
                for s in pending:
                    tail = [x for x in s.log_text()[-4000:].splitlines() if x.strip()]
                    log(
                        f"p{self.p} waiting for {s.tree} ({time.time() - s.t_spawn:.0f} s): "
                        f"{tail[-1][:160] if tail else ''}"
                    )
            time.sleep(1.0)

    def probe(self, trees: list[str]) -> None:
        """First vs again at each probe length, trees alternating; a Probe record per tree."""
        lengths, model = self.plan.probe_lengths, self.plan.model
        order = trees if self.p % 2 == 0 else trees[::-1]
        cost = self.st.sizing.probe_cost(len(trees))
        if not self.budget.fits(cost + STOP_S):
            log(f"p{self.p}: no time for the probe ({cost:.0f} s)")
            return
        res: dict[str, list] = {t: [] for t in trees}
        errors: dict[str, str] = {}
        for L in lengths:
            row = {t: records.ProbeLength(len=L) for t in trees}
            for which in ("first", "again"):
                ids = probe_ids(L, which, self.p, model.vocab)
                for t in order:
                    if t in errors:
                        continue
                    t0 = time.time()
                    try:
                        ms = complete_once(self.servers[t].port, str(model.dir), ids)
                        setattr(row[t], f"{which}_ms", round(ms, 2))
                    except OSError as e:
                        errors[t] = f"len {L} {which}: {e!r}"
                    self.phases[t].append((t0, time.time(), f"probe len={L} {which}"))
            for t in trees:
                res[t].append(row[t])
        for t in trees:
            self.st.record(
                records.Probe(
                    ok=t not in errors,
                    process=self.p,
                    instance=self.instance[t],
                    **self.st.tree_fields(t),
                    backend=self.backend.get(t),
                    lengths=res[t],
                    error=errors.get(t),
                )
            )
            said = ", ".join(f"{r.len}:{r.first_ms or '-'}/{r.again_ms or '-'}" for r in res[t])
            log(f"p{self.p} {t} probe: {said}")

    def run(self, run: schedule.Run, reserve: float = 0.0) -> bool:
        """One benchmark run; False when it does not fit the budget less ``reserve`` seconds
        (the caller stops)."""
        st = self.st
        cost = st.sizing.run_cost(run)
        if not self.budget.fits(cost + STOP_S + reserve):
            return False
        s = self.servers[run.tree]
        if s.exited() is not None:
            if run.tree not in self.dead:
                self.dead.add(run.tree)
                log(f"p{self.p} {run.tree}: the server has exited ({s.exited()}); its runs wait")
            return True
        n = st.sizing.prompts_for(run)
        argv = commands.bench_argv(self.plan, run.tree, s.port, run, n)
        timeout = max(60.0, 4 * cost)
        if st.bench_subprocess:  # a new process per run, which imports vLLM first
            timeout += schedule.BENCH_START_S
        timeout = min(timeout, max(10.0, self.budget.left() - STOP_S))
        clocks_before = gpu.clocks()
        if st.bench_subprocess:
            c = self.client
            reply = client.bench_subprocess(c.python, c.env, c.work, argv, timeout)
        else:
            reply = self.client.bench(argv, timeout)
        clocks_after = gpu.clocks()
        t_start, t_end = reply.get("t_start", time.time()), reply.get("t_end", time.time())
        self.phases[run.tree].append(
            (t_start, t_end, f"{run.workload} c={run.concurrency} rep {run.rep}")
        )
        res = reply.get("result") or {}
        ok = bool(reply.get("ok")) and res.get("completed", 0) > 0 and not res.get("failed")
        fields = st.tree_fields(run.tree)
        backend = self.backend.get(run.tree)
        st.record(
            records.Serve(
                ok=ok,
                process=self.p,
                rep=run.rep,
                instance=self.instance[run.tree],
                workload=run.workload,
                concurrency=run.concurrency,
                num_prompts=n,
                **fields,
                backend=backend,
                fallback=fallback(fields["backend_expected"], backend),
                clocks_before=clocks_before,
                clocks_after=clocks_after,
                t_start=t_start,
                t_end=t_end,
                vllm={k: v for k, v in res.items() if not isinstance(v, list | dict)},
                bench_argv=argv,
                error=None if ok else (reply.get("error") or f"failed {res.get('failed')}")[-2000:],
            )
        )
        if ok and res.get("duration"):
            st.sizing.observe(
                run.tree, run.workload, run.concurrency, res["completed"], res["duration"]
            )
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
        """Stop every server; a Compiles record per tree, its log tail and compile lines."""
        plan = self.plan
        servers.stop_all(list(self.servers.values()))
        for tree, s in self.servers.items():
            inst = self.instance[tree]
            parsed = logparse.parse(s.log_text())
            recs = compiles.read(s.compile_dir)
            summary = compiles.summarize(recs, s.t_ready, self.phases[tree])
            self.st.record(
                records.Compiles(
                    ok=s.t_ready is not None,
                    process=self.p,
                    instance=inst,
                    **self.st.tree_fields(tree),
                    backend=self.backend.get(tree),
                    jit_monitor_kernels=parsed["jit_monitor_kernels"],
                    jit_monitor_active=parsed["jit_monitor_active"],
                    autotune_kernels=parsed["autotune_kernels"],
                    **summary,
                )
            )
            servers.tail_copy(s.log_path, plan.out / "logs" / plan.model.name / f"{inst}.log.txt")
            if recs:
                dst = plan.out / "compiles" / plan.model.name / f"{inst}.jsonl"
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_text("".join(json.dumps(r) + "\n" for r in recs))
            kernels = dict(Counter(c.kernel for c in summary["after_ready"]))
            log(
                f"p{self.p} {tree}: {summary['compiles_after_ready']} Triton compiles after ready "
                f"({kernels}); jit_monitor logged {len(parsed['jit_monitor_kernels'])}"
            )


THROUGHPUT = re.compile(
    r"Throughput: ([\d.]+) requests/s, ([\d.]+) total tokens/s, ([\d.]+) output tokens/s"
)


def offline_run(st: State, tree: str, tree_dir: Path, w: str, r: int, budget: Budget) -> None:
    """One ``vllm bench throughput`` process of ``tree`` on workload ``w`` (repetition ``r``),
    within the budget; an Offline record."""
    plan = st.plan
    inst = f"{plan.session}-{tree}-offline-r{r}-{w}"
    work = plan.work / plan.model.name / inst
    compiles.install_hook(work)
    out_json = work / "throughput.json"
    cmd = commands.offline_argv(plan, w, out_json)
    env = commands.server_env(
        plan, tree, tree_dir, list(plan.gpus[: plan.tp]), work / "compiles", work
    )
    (work / "compiles").mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(work / "server.log", "ab") as f:
        proc = subprocess.Popen(
            cmd, env=env, cwd=work, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=max(30.0, budget.left()))
        except subprocess.TimeoutExpired:
            servers.signal_group(proc.pid, 9)
            proc.wait()
            rc = "timeout"
    text = (work / "server.log").read_text(errors="replace")
    parsed = logparse.parse(text)
    data = json.loads(out_json.read_text()) if out_json.exists() else {}
    if m := THROUGHPUT.search(text):
        data["output_tokens_per_second"] = float(m[3])
    fields = st.tree_fields(tree)
    be = logparse.backend(parsed)
    st.record(
        records.Offline(
            ok=rc == 0 and bool(data),
            process=r,
            rep=r,
            instance=inst,
            workload=w,
            concurrency=0,
            num_prompts=plan.offline_prompts,
            **fields,
            backend=be,
            fallback=fallback(fields["backend_expected"], be),
            t_start=t0,
            t_end=time.time(),
            wall_s=round(time.time() - t0, 2),
            vllm=data,
            phases=phases_of(parsed),
            errors=parsed["errors"],
            cmd=cmd,
            returncode=rc,
            compiles_total=len([x for x in compiles.read(work / "compiles") if "kernel" in x]),
        )
    )
    st.sizing.startups.append(time.time() - t0)
    servers.tail_copy(work / "server.log", plan.out / "logs" / plan.model.name / f"{inst}.log.txt")
    rps, otps = data.get("requests_per_second", 0), data.get("output_tokens_per_second", 0)
    log(
        f"offline rep {r} {w} {tree}: rc {rc}, {rps:.2f} req/s, {otps:.0f} output tok/s, "
        f"backend {be}"
    )
