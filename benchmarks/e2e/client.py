"""Long-lived ``vllm bench serve`` client: imports vLLM once, then runs one benchmark per request.

The runner (serve.py) starts it with a tree's PYTHONPATH and talks JSON lines: one request per
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
import json
import os
import sys
import time
import traceback


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


if __name__ == "__main__":
    sys.exit(main())
