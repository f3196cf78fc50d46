"""vLLM servers for the runner: command line, environment, start, ready, stop.

One server is one process group (``Server``): spawned in its own session, so that stopping it
ends the API server, EngineCore and any TP workers and nothing else. Its command line
(``server_command``) passes the memory plan's share and KV-cache bytes (memory.py).
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

# Every server, whatever the model. Model-specific settings (VLLM_USE_DEEP_GEMM: 0 for the
# per-tensor models, 1 for deepseek-v4) come from models.model_env via VSERIES_MODEL.json.
ENV_ALWAYS = {
    "NCCL_NVLS_ENABLE": "0",  # NVLink multicast off (device notes)
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "HF_HUB_OFFLINE": "1",  # no network on the host: never wait on the hub
    "TRANSFORMERS_OFFLINE": "1",
    "NO_COLOR": "1",  # plain log lines for logparse
    "VLLM_LOGGING_COLOR": "0",
    "PYTHONUNBUFFERED": "1",
}


def server_command(
    python: str,
    model_dir: Path,
    port: int,
    *,
    quant_args: list[str],
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    share: float,
    kv_bytes: int,
    tp: int,
    capture_sizes: list[int] | None,
    extra: list[str] = (),
) -> list[str]:
    """``vllm serve`` (through ``python3 -m vllm.entrypoints.cli.main``) on 127.0.0.1.
    ``quant_args`` are the model's own arguments (VSERIES_MODEL.json ``serve_args``: the
    quantisation, and for deepseek-v4 the KV-cache dtype); prefix caching is always off."""
    cmd = [
        python, "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir),
        "--host", "127.0.0.1", "--port", str(port),
        "--load-format", "dummy", *quant_args,
        "--max-model-len", str(max_model_len),
        "--max-num-seqs", str(max_num_seqs),
        "--max-num-batched-tokens", str(max_num_batched_tokens),
        "--gpu-memory-utilization", f"{share:.2f}",
        "--kv-cache-memory-bytes", str(kv_bytes),
        "--tensor-parallel-size", str(tp),
        "--seed", "0",
        *([] if "--no-enable-prefix-caching" in quant_args else ["--no-enable-prefix-caching"]),
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
    if capture_sizes:
        cmd += ["--compilation-config", json.dumps({"cudagraph_capture_sizes": capture_sizes})]
    return cmd + list(extra)


def server_env(
    base: dict,
    *,
    pythonpath: list[str],
    compile_dir: Path | None,
    gpus: list[str] | None,
    extra: dict | None = None,
    model_env: dict | None = None,
) -> dict:
    """The environment of one server: ``pythonpath`` first (the hook folder, /root/site, the
    tree), the settings in ENV_ALWAYS, then ``model_env`` (the model's own, from
    VSERIES_MODEL.json, e.g. VLLM_USE_DEEP_GEMM), the compile-log folder,
    CUDA_VISIBLE_DEVICES when ``gpus`` is given, then ``extra`` (the caller's per-tree
    variables) last."""
    env = dict(base)
    env["PYTHONPATH"] = ":".join(str(p) for p in pythonpath if p)
    env.update(ENV_ALWAYS)
    env.update(model_env or {})
    if compile_dir is not None:
        env["VSERIES_COMPILE_LOG_DIR"] = str(compile_dir)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    env.update(extra or {})
    return env


def free_port(preferred: int, taken: set[int] = frozenset()) -> int:
    """``preferred`` when nothing listens there (a server left over from a killed call would),
    else a free port from the OS."""
    for port in (preferred, 0):
        if port in taken:
            continue
        with socket.socket() as sock:
            # as uvicorn binds: a port in TIME_WAIT after the last process is free
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise OSError("no free port")


def health(port: int, timeout: float = 2.0) -> bool:
    """True when GET /health on 127.0.0.1:port answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


class Server:
    """One ``vllm serve`` process group: spawned in its own session, so stop() ends the API
    server, EngineCore and any TP workers (all started by it) and nothing else."""

    def __init__(self, tree: str, port: int, cmd: list[str], env: dict, work: Path):
        self.tree, self.port, self.cmd, self.env, self.work = tree, port, cmd, env, work
        self.proc: subprocess.Popen | None = None
        self.t_spawn: float | None = None  # Unix time (s)
        self.t_ready: float | None = None
        self.log_path = work / "server.log"
        self.compile_dir = work / "compiles"

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.compile_dir.mkdir(exist_ok=True)
        (self.work / "command.json").write_text(
            json.dumps(
                {
                    "cmd": self.cmd,
                    "env": {
                        k: v
                        for k, v in self.env.items()
                        if k in ENV_ALWAYS
                        or k.startswith(
                            (
                                "VLLM",
                                "CUDA",
                                "PYTHONPATH",
                                "VSERIES",
                                "TRITON",
                                "FLASHINFER",
                                "NCCL",
                            )
                        )
                    },
                },
                indent=1,
            )
        )
        self.t_spawn = time.time()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.cmd,
                env=self.env,
                cwd=self.work,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def exited(self) -> int | None:
        """The exit code when the server process has ended, else None."""
        return None if self.proc is None else self.proc.poll()

    def check_ready(self) -> bool:
        """Poll /health once; records t_ready the first time it answers."""
        if self.t_ready is None and self.exited() is None and health(self.port):
            self.t_ready = time.time()
        return self.t_ready is not None

    def startup_s(self) -> float | None:
        """Spawn to first healthy answer (s)."""
        return None if self.t_ready is None else round(self.t_ready - self.t_spawn, 2)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the process group, SIGKILL it when still alive after ``grace_s`` s."""
        if self.proc is None:
            return
        signal_group(self.proc.pid, signal.SIGTERM)
        if not wait_group(self.proc, grace_s):
            signal_group(self.proc.pid, signal.SIGKILL)
            wait_group(self.proc, 10.0)


def stop_all(group: list[Server], grace_s: float = 20.0) -> None:
    """Stop several servers at once: SIGTERM to every group, then wait, SIGKILL what is left."""
    for s in group:
        if s.proc is not None:
            signal_group(s.proc.pid, signal.SIGTERM)
    deadline = time.time() + grace_s
    for s in group:
        if s.proc is None:
            continue
        if not wait_group(s.proc, max(0.5, deadline - time.time())):
            signal_group(s.proc.pid, signal.SIGKILL)
            wait_group(s.proc, 10.0)


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def wait_group(proc: subprocess.Popen, timeout: float) -> bool:
    """Reap the leader and wait until no live (non-zombie) process of its group is left;
    True when done."""
    deadline = time.time() + timeout
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    while time.time() < deadline:
        if not group_alive(proc.pid):
            return True
        time.sleep(0.2)
    return False


def group_alive(pgid: int) -> bool:
    """True while a process of group ``pgid`` runs. Zombies do not count: orphans whose
    reaper is slow (or absent, in some containers) would otherwise look alive forever."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = None
    if entries is None:
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after "pid (comm)": state, ppid, pgrp
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def tail_copy(src: Path, dst: Path, head: int = 150, tail: int = 300) -> None:
    """The first ``head`` and last ``tail`` lines of a server's log (all when short): what
    comes back of it."""
    if not src.exists():
        return
    lines = src.read_text(errors="replace").splitlines()
    if len(lines) > head + tail:
        lines = (
            lines[:head] + [f"... [{len(lines) - head - tail} lines left out] ..."] + lines[-tail:]
        )
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n".join(lines) + "\n")
