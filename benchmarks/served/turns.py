"""Round-robin turns among the engine processes of one wave.

Several engine processes share one GPU; only one may measure at a time, and the trees should
alternate. Each process registers (``join``), waits until the wave is complete (``wait_all``),
then for every measurement takes its turn (``take``), measures, and passes the turn on
(``give``) to the next registered process that is still alive and not finished, in index
order. A process that exits without passing the turn on (a crash) is skipped by the next one
that looks. State lives in a folder: ``state.json`` (whose turn; who joined with which pid;
who is done), guarded by an ``fcntl`` lock on ``lock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path


def _alive(pid: int | None) -> bool:
    if not pid or pid <= 0:  # a process marked gone by its parent (``gone``)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Turns:
    """The turns of process ``index`` of a wave of ``count`` processes, state in ``folder``."""

    def __init__(self, folder: Path, index: int, count: int, poll_s: float = 0.05):
        self.folder, self.index, self.count, self.poll_s = Path(folder), index, count, poll_s
        self.folder.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _state(self):
        with open(self.folder / "lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = self.folder / "state.json"
            state = json.loads(path.read_text()) if path.exists() else {}
            state.setdefault("turn", None)
            state.setdefault("joined", {})
            state.setdefault("done", [])
            yield state
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            tmp.replace(path)

    def join(self) -> None:
        """Register this process (its pid); the first to join holds the first turn."""
        with self._state() as s:
            s["joined"][str(self.index)] = os.getpid()
            if s["turn"] is None:
                s["turn"] = self.index

    def wait_all(self, timeout_s: float) -> list[int]:
        """Wait until every process of the wave joined (or ``timeout_s`` passed, e.g. one
        failed to start); the indices that joined."""
        end = time.monotonic() + timeout_s
        while True:
            with self._state() as s:
                joined = sorted(int(i) for i in s["joined"])
            if len(joined) >= self.count or time.monotonic() > end:
                return joined
            time.sleep(self.poll_s)

    def _next(self, s: dict, after: int) -> int | None:
        """The next live, unfinished process after ``after`` in index order (cyclic)."""
        live = sorted(
            int(i) for i, pid in s["joined"].items() if int(i) not in s["done"] and _alive(pid)
        )
        if not live:
            return None
        later = [i for i in live if i > after]
        return later[0] if later else live[0]

    def take(self, timeout_s: float = 600.0) -> None:
        """Block until it is this process's turn; a holder that died is skipped."""
        end = time.monotonic() + timeout_s
        while True:
            with self._state() as s:
                holder = s["turn"]
                if holder == self.index:
                    return
                pid = s["joined"].get(str(holder)) if holder is not None else None
                if holder is None or holder in s["done"] or pid is None or not _alive(pid):
                    s["turn"] = self._next(s, holder if holder is not None else self.index)
                    if s["turn"] == self.index:
                        return
            if time.monotonic() > end:
                raise TimeoutError(f"process {self.index}: no turn within {timeout_s:.0f} s")
            time.sleep(self.poll_s)

    def gone(self) -> None:
        """Mark this index as joined and finished without a live process: its parent says so
        when the process ended (a crash, a kill), so the wave neither waits for it nor passes
        it the turn."""
        with self._state() as s:
            s["joined"].setdefault(str(self.index), 0)
            if self.index not in s["done"]:
                s["done"].append(self.index)
            if s["turn"] == self.index or s["turn"] is None:
                s["turn"] = self._next(s, self.index)

    def give(self, finished: bool = False) -> None:
        """Pass the turn on; ``finished``: this process takes no more turns."""
        with self._state() as s:
            if finished and self.index not in s["done"]:
                s["done"].append(self.index)
            nxt = self._next(s, self.index)
            s["turn"] = nxt if nxt is not None else self.index


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="mark a process of a wave gone (its parent's call)")
    ap.add_argument("folder", type=Path)
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    a = ap.parse_args(argv)
    Turns(a.folder, a.index, a.count).gone()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
