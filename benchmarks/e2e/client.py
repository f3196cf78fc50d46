"""The bench client, both sides of its protocol: a long-lived ``vllm bench serve`` process
that imports vLLM once, then runs one benchmark per request (``main``, run as a script in a
tree's environment: the standard library and vLLM only), and the runner's handle on it
(``Client``), with its fallback of one ``vllm bench serve`` process per run
(``bench_subprocess``).

The runner starts this file with a tree's PYTHONPATH and talks JSON lines: one request per
line on stdin, one reply per line on the file descriptor that was stdout at start; vLLM's own
printing (its arguments, the result table) is sent to stderr, which the runner logs.

Requests:
  ``{"cmd": "ping"}`` -> ``{"ok": true, "vllm_file": ..., "import_s": ...}``
  ``{"cmd": "bench", "argv": [...]}`` -> the arguments of ``vllm bench serve``, parsed by the
      parser that command builds (``vllm.benchmarks.serve.add_cli_args`` on vLLM's
      ``FlexibleArgumentParser``, as vllm/entrypoints/cli/benchmark/serve.py does) and run
      with ``await vllm.benchmarks.serve.main_async(args)``, which returns the result dict
      that ``vllm bench serve --save-result`` would write (per-request lists dropped unless
      ``--save-detailed``). Reply ``{"ok": true, "result": {...}, "t_start": s, "t_end": s}``
      (Unix seconds) or ``{"ok": false, "error": traceback}``.
  ``{"cmd": "quit"}`` -> exits.
"""

import asyncio
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path


def _jsonable(o):
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # everything vLLM prints goes to stderr, even from C
    sys.stdout = sys.stderr
    t0 = time.time()
    from vllm.benchmarks.serve import add_cli_args, main_async
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    import_s = round(time.time() - t0, 2)

    def reply(obj: dict) -> None:
        proto.write(json.dumps(obj, default=_jsonable) + "\n")
        proto.flush()

    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            reply({"ok": False, "error": f"not JSON: {line[:200]!r}"})
            continue
        cmd = req.get("cmd")
        if cmd == "quit":
            break
        if cmd == "ping":
            import vllm

            reply({"ok": True, "vllm_file": vllm.__file__, "import_s": import_s})
            continue
        if cmd != "bench":
            reply({"ok": False, "error": f"unknown cmd {cmd!r}"})
            continue
        start = time.time()
        try:
            parser = FlexibleArgumentParser(prog="vllm bench serve")
            add_cli_args(parser)
            args = parser.parse_args(req["argv"])
            result = asyncio.run(main_async(args))
            reply({"ok": True, "result": result, "t_start": start, "t_end": time.time()})
        except BaseException as e:  # SystemExit from argparse too
            reply(
                {
                    "ok": False,
                    "error": "".join(traceback.format_exception(e))[-4000:],
                    "t_start": start,
                    "t_end": time.time(),
                }
            )
        sys.stderr.flush()
    return 0


class Client:
    """The runner's handle on one client process (this file run by ``python`` with ``env``,
    the tree's PYTHONPATH; its stderr in ``work/client.log``): started on the first request,
    and again after it timed out or exited."""

    def __init__(self, python: str, env: dict, work: Path):
        self.python, self.env, self.work = python, env, work
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()
        self.pinged: dict | None = None

    def command(self) -> list[str]:
        return [self.python, str(Path(__file__).resolve())]

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        with open(self.work / "client.log", "ab") as err:
            self.proc = subprocess.Popen(
                self.command(),
                env=self.env,
                cwd=self.work,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                bufsize=1,
                start_new_session=True,
            )
        self.lines = queue.Queue()
        threading.Thread(target=_read, args=(self.proc, self.lines), daemon=True).start()

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

    def bench(self, argv: list[str], timeout: float) -> dict:
        """One ``vllm bench serve`` run with ``argv``: {"ok", "result", "t_start", "t_end"}."""
        return self.request({"cmd": "bench", "argv": argv}, timeout)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


def _read(proc: subprocess.Popen, q: queue.Queue) -> None:
    for line in proc.stdout:
        q.put(line)
    q.put(None)


def bench_subprocess(python: str, env: dict, work: Path, argv: list[str], timeout: float) -> dict:
    """One ``vllm bench serve`` process (the fallback when the client fails): the same
    arguments, the result read back from --save-result's file; the reply ``Client.bench``
    gives."""
    d = work / "bench-results"
    d.mkdir(parents=True, exist_ok=True)
    name = f"r-{uuid.uuid4().hex[:8]}.json"
    cmd = [python, "-m", "vllm.entrypoints.cli.main", "bench", "serve", *argv]
    cmd += ["--save-result", "--result-dir", str(d), "--result-filename", name]
    start = time.time()
    with open(work / "client.log", "ab") as err:
        try:
            p = subprocess.run(cmd, env=env, cwd=work, stdout=err, stderr=err, timeout=timeout)
        except subprocess.TimeoutExpired:
            error = f"bench timed out after {timeout:.0f} s"
            return {"ok": False, "error": error, "t_start": start, "t_end": time.time()}
    f = d / name
    if p.returncode != 0 or not f.exists():
        error = f"vllm bench serve exited {p.returncode}"
        return {"ok": False, "error": error, "t_start": start, "t_end": time.time()}
    return {"ok": True, "result": json.loads(f.read_text()), "t_start": start, "t_end": time.time()}


if __name__ == "__main__":
    sys.exit(main())
