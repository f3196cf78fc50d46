"""The PR template's checklist, ticked only where the workspace holds the evidence.

vLLM's template (v0.34.0) asks, among others, "I used vLLM's ``/pr-checklist`` skill
(Mandatory for agents)" and four review boxes (Design Fit, Testing and Validation, Code
Quality and Style, Pull Request Contents). A box is ticked here only on evidence:

- AI assistance: the patch has an AI ``Co-authored-by`` trailer (vLLM's AGENTS.md asks for
  one on AI-assisted commits).
- ``/pr-checklist`` and the four review boxes: a report of the skill run on this PR,
  ``docs/upstream/checklist/<slug>.md`` (slug: the PR branch's name after ``pr/``), made for
  the patch as it is now. The report names the patch's ``patch-id:`` (``git patch-id
  --stable`` of the patch file, which ``scripts/prs.sh`` prints when it is missing or stale)
  and has one ``## <box name>`` section per review box whose first line is ``met: ...`` or
  ``not met: ...``. A stale report ticks nothing: the patch changed since it was written.

vLLM's AGENTS.md also asks every AI-assisted PR to say why it is not a duplicate of open
work: ``agents_gaps`` names a message that does not (no ``## Relation to open work``).
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

FOLDER = "docs/upstream/checklist"
SKILL = "/pr-checklist"
AI_COAUTHOR = re.compile(r"\b(Claude|Copilot|Codex|Gemini)\b", re.I)
PATCH_ID = re.compile(r"^patch-id:\s*([0-9a-f]{40})\s*$", re.M)
SECTION = re.compile(r"^## (.+?)\s*\n+\s*(not met|met)\b", re.M | re.I)
BOX = re.compile(r"^- \[ \] (.*)$", re.M)
NAMED = re.compile(r"\*\*(.+?):\*\*")
RELATION = re.compile(r"^#+\s*Relation to open work\s*$", re.M | re.I)


@dataclass
class Review:
    """What a /pr-checklist report says about the patch it names.

    Attributes:
        path: the report, relative to the workspace root.
        patch_id: the patch it was written for.
        met: the review boxes it finds met, by name.
        current: it was written for the patch as it is now.
    """

    path: str
    patch_id: str = ""
    met: set[str] = field(default_factory=set)
    current: bool = False


def report_path(slug: str) -> str:
    return f"{FOLDER}/{slug}.md"


def read(root: Path, slug: str, patch_id: str) -> Review | None:
    """The report of the PR whose branch is ``pr/<slug>`` (None when there is none)."""
    rel = report_path(slug)
    p = root / rel
    if not p.is_file():
        return None
    text = p.read_text(errors="replace")
    m = PATCH_ID.search(text)
    said = m.group(1) if m else ""
    met = {s.group(1).strip() for s in SECTION.finditer(text) if s.group(2).lower() == "met"}
    return Review(rel, said, met, current=bool(said) and said == patch_id)


def ticked(block: str, ai: bool, review: Review | None) -> str:
    """The template's checklist block with the boxes the evidence backs ticked (module
    doc); every other box as the template has it."""

    def tick(m: re.Match) -> str:
        text = m.group(1)
        named = NAMED.search(text)
        yes = (
            (ai and text.startswith("AI assistance was used"))
            or (review is not None and review.current and SKILL in text)
            or (
                review is not None
                and review.current
                and named is not None
                and named.group(1) in review.met
            )
        )
        return f"- [x] {text}" if yes else m.group(0)

    return BOX.sub(tick, block)


def is_ai(coauthors: list[str]) -> bool:
    """Whether a Co-authored-by trailer names an AI assistant."""
    return any(AI_COAUTHOR.search(c) for c in coauthors)


def note(review: Review | None, slug: str, patch_id: str) -> str:
    """One line for checks.txt: which review ticks the boxes, or what to do for it."""
    if review is None:
        return (
            f"/pr-checklist: no report ({report_path(slug)}); its boxes stay unticked. Run "
            f"vLLM's pr-checklist skill on this PR and write the report there (patch-id: "
            f"{patch_id})"
        )
    if not review.current:
        return (
            f"/pr-checklist: {review.path} is for another version of the patch (patch-id "
            f"{review.patch_id or 'missing'}, now {patch_id}); its boxes stay unticked: run "
            "the skill again"
        )
    return f"/pr-checklist: {review.path} (current); met: {', '.join(sorted(review.met)) or '-'}"


def review_boxes(block: str) -> list[str]:
    """The names of the template checklist's review boxes (``- [ ] **Name:** ...``)."""
    return [n.group(1) for m in BOX.finditer(block) if (n := NAMED.search(m.group(1)))]


def unmet(review: Review | None, slug: str, patch_id: str, boxes: list[str]) -> list[str]:
    """What keeps a PR from being ready on the review's evidence (empty when a current
    report of the skill finds every review box of the template met): vLLM's template asks
    the submitter to confirm each box, and a box the skill does not find met is work left,
    whatever the mechanical checks say. A template without review boxes asks nothing."""
    if not boxes:
        return []
    if review is None or not review.current:
        return [note(review, slug, patch_id)]
    missing = [b for b in boxes if b not in review.met]
    if not missing:
        return []
    return [
        f"/pr-checklist: {review.path} does not find met: {', '.join(missing)} (its sections "
        "say what is missing; do that, run the skill again and update the report)"
    ]


def agents_gaps(message: str, coauthors: list[str]) -> list[str]:
    """What vLLM's AGENTS.md asks of an AI-assisted PR description that the patch message
    lacks (empty for a message without an AI co-author)."""
    if not is_ai(coauthors) or RELATION.search(message):
        return []
    return [
        "vLLM's AGENTS.md asks an AI-assisted PR to say why it is not a duplicate of open "
        "work: the message has no '## Relation to open work' section (the open PRs searched "
        "for and how this one differs; git -C vllm commit --amend, then scripts/refresh.sh)"
    ]
