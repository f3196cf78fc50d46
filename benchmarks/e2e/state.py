"""What changes while a runner call works through its plan: the runs done (resumed ones
included), the sizing of the next runs, the note the records carry; each record made here."""

from dataclasses import dataclass

from benchmarks.e2e import records, schedule
from benchmarks.e2e.plan import Plan


@dataclass
class State:
    """The state of one runner call. ``note`` and ``bench_subprocess`` start as the plan's and
    change when the in-process bench client fails (every later run is its own process, and
    the records say so)."""

    plan: Plan
    sizing: schedule.Sizing
    done: set[tuple]
    note: str
    bench_subprocess: bool

    @classmethod
    def start(cls, plan: Plan) -> "State":
        """The state at the start: the runs done and the rates seen in the resumed files and
        the results file (runs of this model only)."""
        recs = records.read([*plan.resume, plan.results])
        sizing = plan.sizing()
        for r in recs:
            v = r.vllm if isinstance(r, records.Serve) and r.ok else {}
            if r.model == plan.model.name and v.get("duration") and v.get("completed"):
                sizing.observe(r.tree, r.workload, r.concurrency, v["completed"], v["duration"])
        return cls(plan, sizing, records.done_keys(recs), plan.note, plan.bench_subprocess)

    def reload_done(self) -> None:
        """The runs done, read again from the files (after a session)."""
        self.done = records.done_keys(records.read([*self.plan.resume, self.plan.results]))

    def record(self, rec: records.Record) -> records.Record:
        """Fill in what every record carries and append it to the results file (flushed)."""
        m = self.plan.model
        rec.session, rec.model, rec.arch, rec.tp, rec.note = (
            self.plan.session,
            m.name,
            m.shape.name,
            self.plan.tp,
            self.note,
        )
        rec.flavour, rec.layers = m.manifest.get("flavour"), m.layers
        records.append(self.plan.results, rec)
        return rec

    def tree_fields(self, tree: str) -> dict:
        """The fields of a TreeRecord that name the tree: what it carries, its extra
        environment, the backend expected."""
        meta = next(t.meta for t in self.plan.trees if t.name == tree)
        return {
            "tree": tree,
            "tree_head": meta.get("head"),
            "tree_patches": meta.get("patches"),
            "tree_env": dict(self.plan.tree_env.get(tree, {})),
            "backend_expected": self.plan.expect_backend.get(tree),
        }

    def todo(self, process: int) -> tuple[list[schedule.Run], list[str]]:
        """(runs, trees to probe) of one process that are not done yet."""
        p, model = self.plan, self.plan.model.name
        runs = [
            r
            for r in schedule.plan(list(p.tree_names), p.cells, p.reps, process)
            if (p.kind, model, r.tree, r.workload, r.concurrency, r.process, r.rep) not in self.done
        ]
        probes = (
            []
            if p.offline or not p.probe_lengths
            else [n for n in p.tree_names if ("probe", model, n, process) not in self.done]
        )
        return runs, probes

    def work_left(self) -> dict[int, tuple[list[schedule.Run], list[str]]]:
        """{process: (runs, probes)} still to do. A process whose first --min-reps repetitions
        and probe are done is complete: its later repetitions only run in the same server
        process, when time is left (more data: raise --processes)."""
        out = {}
        for p in range(self.plan.processes):
            runs, probes = self.todo(p)
            if probes or any(r.rep < self.plan.min_reps for r in runs):
                out[p] = (runs, probes)
        return out
