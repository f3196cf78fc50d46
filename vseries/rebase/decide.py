"""How the rebase classes a patch: one pure function of the evidence, no git, no files.

    decide(Evidence) -> Decision(cls, evidence sentences, action)

The classes, in the order the checks run:

- upstreamed: the patch applies in reverse on the new release; or its patch-id equals that
  of upstream's own change to the same files between the two releases; or ``git am -3``
  finds nothing left to change; or its contract (the part that decides on the CPU) passes on
  plain new upstream, even where the patch conflicts or still applies textually.
- conflict: the 3-way merge conflicts and the contract does not show upstream keeps it
  (the contract ran first, and the sentences say what it said). Action: stop for a person.
- adds a line twice: the replay adds lines that the new release already has elsewhere in
  the same file (upstream took them, at another place): carrying them silently would leave
  them twice. Action: stop for a person, unless the user continued with them.
- partly upstreamed: upstream went part of the way (a line the patch changes is half
  changed upstream), or the 3-way merge dropped some changed lines because the new release
  already has them, or the contract's tests that fail on the old pin pass on new upstream.
- carried, resolved by hand / carried with 3-way merge / carried clean.
- dropped by --skip (or its commit taken out by hand at a stop on lines twice).
- upstreamed, too, at a stop on lines twice where nothing is left once the repeated lines are
  out (--continue --drop-repeats, or the commit emptied by hand).

A change to "how rebase decides upstreamed" goes here (and its test in
tests/workspace/test_decide.py); how the evidence is gathered is evidence.py/contracts.py.
"""

from dataclasses import dataclass, field

from vseries.rebase.evidence import Evidence

UPSTREAMED, PARTLY = "upstreamed", "partly upstreamed"
CLEAN, THREE_WAY = "carried clean", "carried with 3-way merge"
RESOLVED = "carried, resolved by hand"
CONFLICT, SKIPPED = "conflict", "dropped by --skip"
TWICE = "adds a line twice"
CARRIED = (CLEAN, THREE_WAY, RESOLVED, PARTLY)

DROP, CARRY, STOP = "drop", "carry", "stop"


@dataclass
class Decision:
    """The class of a patch, the sentences that justify it (each checkable by a git or
    pytest command; a sentence with a newline has details below its first line), and what
    the engine does: drop (not carried), carry (its commit stays), stop (a person decides)."""

    cls: str
    evidence: list[str] = field(default_factory=list)
    action: str = CARRY


def _contract_line(ev: Evidence, lead_fail: str) -> list[str]:
    """The sentence about a contract that did not pass (fail or undecided)."""
    if ev.verdict is None:
        return []
    kind, said = ev.verdict
    if kind == "fail":
        return [f"{lead_fail}: contract {ev.contract} fails on plain {ev.tag} ({said})"]
    return [f"contract could not decide: {said}"]


def _kept_line(ev: Evidence) -> list[str]:
    if not ev.kept:
        return []
    return [
        f"partly upstream by the contract: {', '.join(ev.kept)} fail on "
        f"{ev.old_tag} and pass on plain {ev.tag}"
    ]


def _asked_first(ev: Evidence) -> str:
    """What was tried before a person is asked (issue: a conflict is stated only after the
    patch's contract had its say)."""
    if ev.verdict is not None:
        return (
            f"checked before stopping: contract {ev.contract} ran on plain {ev.tag} with "
            "CUDA hidden (its part that decides on the CPU) and did not show the change there"
        )
    if ev.contract:
        return f"not checked before stopping: contract {ev.contract} was not run (--no-contracts)"
    return "not checked before stopping: patches/series names no contract for this patch"


def decide(ev: Evidence) -> Decision:
    """Class one patch from its evidence (see the module doc for the rules)."""
    if ev.skipped:
        after = "a conflict" if ev.am == "conflict" else "a stop on lines it would add twice"
        how = "(its commit taken out of vllm/ by hand)" if ev.resolved else "with --skip"
        return Decision(SKIPPED, [f"dropped by the user {how} after {after}"], DROP)
    if ev.emptied:
        said = "\n".join(f"  {r}" for r in ev.repeated)
        return Decision(
            UPSTREAMED,
            [
                f"nothing of the patch is left once the lines {ev.tag} already has elsewhere "
                f"in the same file are taken out ({ev.emptied}); upstream has them:\n{said}"
            ],
            DROP,
        )
    found = []
    if ev.reverse_applies:
        found.append(
            f"applies in reverse on {ev.tag} (git apply -R --check): the change is already there"
        )
    if ev.same_patch_id:
        found.append(
            f"upstream's own diff {ev.old_tag}..{ev.tag} of the same "
            "files has the patch's patch-id (git patch-id --stable)"
        )
    if found:
        return Decision(UPSTREAMED, found, DROP)
    passes = ev.verdict is not None and ev.verdict[0] == "pass"
    if ev.am == "conflict":
        if passes:
            return Decision(
                UPSTREAMED,
                [
                    f"contract {ev.contract} passes on plain {ev.tag} ({ev.verdict[1]})",
                    "the patch itself conflicts there:\n" + ev.conflict,
                    "decided before asking a person: the contract's part that decides on the "
                    "CPU (run with CUDA hidden) keeps the patch's promise on plain "
                    f"{ev.tag}, so the conflict needs no fix",
                ],
                DROP,
            )
        return Decision(
            CONFLICT,
            [
                f"conflicts on {ev.tag}:\n" + ev.conflict,
                *_contract_line(ev, "not fully upstream"),
                *_kept_line(ev),
                _asked_first(ev),
            ],
            STOP,
        )
    if ev.am == "nothing":
        return Decision(
            UPSTREAMED,
            [
                f"git am -3 on {ev.tag}: the 3-way merge leaves nothing to change "
                '("No changes -- Patch already applied")'
            ],
            DROP,
        )
    return _carried(ev, passes)


def _carried(ev: Evidence, passes: bool) -> Decision:
    """A patch that is now a commit on the new release (clean, 3-way, partly upstreamed, by
    hand), or dropped again when its contract shows plain upstream already keeps it."""
    if passes:
        return Decision(
            UPSTREAMED,
            [
                f"contract {ev.contract} passes on plain {ev.tag} "
                f"({ev.verdict[1]}); the patch still applied textually and is dropped"
            ],
            DROP,
        )
    out: list[str] = []
    if ev.taken:  # the replay starts from lines upstream wrote on the way to the patch's
        cls = PARTLY
        out += [f"{ev.tag} already went part of the way: it has `{ln.strip()}`" for ln in ev.taken]
        out.append(
            "the rest is carried (the refreshed patch changes only that)"
            + ("; the conflict was resolved by hand" if ev.resolved else "")
        )
    elif ev.resolved or ev.added:
        cls = RESOLVED
        out.append(
            "the conflict was resolved by hand; see the range-diff"
            + (
                ""
                if ev.added or ev.dropped
                else "; the patch's own changed lines "
                "are unchanged, only the code around them differs"
            )
        )
    elif ev.dropped:
        cls = PARTLY
        how = (
            "taken out with --drop-repeats" if ev.repeats_dropped else "dropped by the 3-way merge"
        )
        out += [f"already on {ev.tag}, so {how}: {d}" for d in ev.dropped]
        out.append("the rest is carried (the refreshed patch holds only what is still missing)")
    else:
        cls = THREE_WAY if ev.threeway else CLEAN
    out += ev.moved
    out += _contract_line(ev, "still needed")
    if ev.kept:  # upstream keeps part of the contract: partly upstreamed, the rest carried
        cls = PARTLY
        out += _kept_line(ev)
    if ev.repeated:
        said = "\n".join(f"  {r}" for r in ev.repeated)
        if ev.ported:
            out.append(
                f"the port, written against {ev.tag}, adds lines that {ev.tag} also has "
                f"elsewhere in the same file (its author's, so kept):\n{said}"
            )
        elif ev.repeats_kept:
            out.append(
                "kept by the user (--continue) although the new release already has these "
                f"lines elsewhere in the same file:\n{said}"
            )
        else:
            return Decision(
                TWICE,
                [
                    f"the replay would add lines that {ev.tag} already has elsewhere in the "
                    f"same file, more times than on {ev.old_tag} with the series up to this "
                    f"patch:\n{said}",
                    f"without them the patch would be {cls}",
                    *out,
                ],
                STOP,
            )
    return Decision(cls, out, CARRY)
