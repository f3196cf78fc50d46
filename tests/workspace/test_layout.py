"""The house rules of vseries/, held against its code (vseries.lab.imports reads the imports):
small modules, a base layer that imports no verb, no private names taken across modules, no
import cycle, a --help that says what each verb does, and CONTRIBUTING.md naming every
module once in its picture. The benchmark annex (benchmarks/) keeps the same rules (size,
no cycle, no private names across modules), edits no sys.path, and the tool never reaches
into it: vseries imports no benchmarks module and loads no code by file path, so the arrows
between the two run one way (benchmarks -> vseries)."""

import ast
import re

import pytest
from conftest import ROOT

from vseries import cli
from vseries.lab import imports

FOUND = imports.modules()
ANNEX = imports.modules(ROOT / "benchmarks")
MOST_LINES = 450
# the shared base layer: what the verbs have in common, never a verb itself
BASE = {
    "vseries",
    "vseries.errors",
    "vseries.workspace",
    "vseries.host",
    "vseries.pytestrun",
    "vseries.git",
    "vseries.pin",
    "vseries.fetch",
    "vseries.patchfile",
    "vseries.release",
    "vseries.series",
    "vseries.retired",
    "vseries.image",
    "vseries.am",
    "vseries.worktree",
    "vseries.results",
    "vseries.linesite",
}
# public functions of a verb that other verbs call (anything else across verbs is refused)
VERB_API = {
    ("vseries.apply", "vseries.materialise"),  # ensure(): vllm/ is there
    ("vseries.build", "vseries.materialise"),
    ("vseries.testrun", "vseries.contract"),  # the contract tier
    ("vseries.testrun", "vseries.upstream"),  # the upstream tier
    ("vseries.rebase.contracts", "vseries.contract"),  # run_one(): a contract on a tree
    ("vseries.rebase.finish", "vseries.refresh"),  # refresh(prune=True) after the move
    ("vseries.prs.record", "vseries.refresh"),  # refresh() after the trailer changed
}


def verb_of(name: str) -> str:
    """The verb a module belongs to (its package for rebase/, prs/, lab/)."""
    parts = name.split(".")
    return ".".join(parts[:2])


@pytest.mark.parametrize("name", sorted(FOUND))
def test_module_is_small(name):
    assert FOUND[name].lines <= MOST_LINES, f"{name} has {FOUND[name].lines} lines"


def test_no_cycle_and_base_imports_no_verb():
    imports.layers(FOUND)  # raises on a cycle
    for name in BASE:
        bad = {d for d in FOUND[name].imports if d not in BASE}
        assert not bad, f"base module {name} imports {sorted(bad)}"


def test_no_private_name_crosses_a_module():
    taken = {n: m.private for n, m in FOUND.items() if m.private}
    assert taken == {}


def test_verbs_use_the_base_their_own_package_and_declared_verb_api_only():
    for name, mod in FOUND.items():
        if name in BASE or name.startswith(("vseries.lab", "vseries.cli", "vseries.__main__")):
            continue
        for dep in mod.imports:
            same = verb_of(dep) == verb_of(name)
            assert dep in BASE or same or (name, dep) in VERB_API, f"{name} imports {dep}"


def test_lab_is_not_used_by_the_tool():
    for name, mod in FOUND.items():
        if not name.startswith("vseries.lab"):
            assert not {d for d in mod.imports if d.startswith("vseries.lab")}, name


def test_every_verb_help_says_what_it_does():
    sub = next(a for a in cli.parser()._actions if a.dest == "verb")
    for verb, p in sub.choices.items():
        assert p.description and len(p.description) > 40, f"{verb} --help says too little"


def test_contributing_pictures_every_module_once():
    """CONTRIBUTING.md's "Layout" block has one line per module, "name (lines): job"."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    block = text.split("<!-- layout -->")[1].split("<!-- /layout -->")[0]
    listed = re.findall(r"^\s*(?:[│├└─ ]*)([\w.]+/?(?:[\w.]+)?\.py)\b", block, re.M)
    have = {str(m.path.relative_to(ROOT / "vseries")) for m in FOUND.values()}
    assert sorted(listed) == sorted(set(listed)), "a module is listed twice"
    assert set(listed) == have, (
        f"missing: {sorted(have - set(listed))}; gone: {sorted(set(listed) - have)}"
    )


@pytest.mark.parametrize("name", sorted(ANNEX))
def test_annex_module_is_small(name):
    assert ANNEX[name].lines <= MOST_LINES, f"{name} has {ANNEX[name].lines} lines"


def test_annex_has_no_cycle_and_no_private_name_across_modules():
    imports.layers(ANNEX)  # raises on a cycle
    assert {n: m.private for n, m in ANNEX.items() if m.private} == {}


def path_edits(tree: ast.AST) -> list[int]:
    """Lines that change sys.path (sys.path.insert/append/extend/remove, or sys.path = ...)."""
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("insert", "append", "extend", "remove")
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "path"
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "sys"
        ):
            out.append(node.lineno)
        if isinstance(node, ast.Assign | ast.AugAssign) and "sys.path" in ast.unparse(node)[:12]:
            out.append(node.lineno)
    return sorted(out)


def test_annex_edits_no_sys_path():
    """The annex is a package (the editable install here, the workspace on PYTHONPATH on the
    H200 host): a module that edits sys.path hides how it is found."""
    assert path_edits(ast.parse("import sys\nsys.path.insert(0, 'x')\nsys.path = []")) == [2, 3]
    edits = {n: path_edits(ast.parse(m.path.read_text())) for n, m in ANNEX.items()}
    assert {n: lines for n, lines in edits.items() if lines} == {}


def reaches_annex(tree: ast.AST) -> list[int]:
    """Lines that import benchmarks or load code by file path (exec, runpy, importlib's
    spec_from_file_location / exec_module / run_path)."""
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        loads = (isinstance(node, ast.Name) and node.id in ("exec", "runpy")) or (
            isinstance(node, ast.Attribute)
            and node.attr in ("spec_from_file_location", "exec_module", "run_path")
        )
        if loads or any(n.split(".")[0] == "benchmarks" for n in names):
            out.append(node.lineno)
    return out


def test_the_tool_does_not_reach_into_the_annex():
    """No vseries module imports benchmarks or loads code by file path: the annex depends on
    the tool, never the other way round (prs once exec'd benchmarks/harness.py by its path)."""
    sample = "import importlib.util\nfrom benchmarks import harness\n"
    sample += "importlib.util.spec_from_file_location('h', 'p')"
    assert reaches_annex(ast.parse(sample)) == [2, 3]
    found = {n: reaches_annex(ast.parse(m.path.read_text())) for n, m in FOUND.items()}
    assert {n: lines for n, lines in found.items() if lines} == {}
