"""rebase, content-level promises (issue 15, items 2 and 3), on synthetic repos.

Item 2, nothing applied twice: a replay that would add a line the new release already has
elsewhere in the same file stops for a person (a real rebase) or is reported (``--check``),
with the line, its place and upstream's place, instead of carrying it silently. Several
shapes of the fault: a moved import, one hunk taken by upstream and the other's line placed
elsewhere (partly upstreamed), a multi-line block, a file upstream also renamed, a line
upstream re-indented; and lines that must NOT stop it (already twice on the old pin, lines
that say nothing).

Item 3, a conflict is stated only after the patch's contract had its say: the rebase runs the
contract's CPU-decidable part (CUDA hidden) on plain upstream before it asks a person, and
says what it ran; a contract whose GPU part cannot run against plain upstream still decides
by its CPU part.

These tests drive the command line only (``vseries rebase``), so that they run unchanged
against the code before the fix.
"""

import io
import re
import tarfile

import pytest
from conftest import ROOT, git, make_patch, pin_with
from test_rebase import FULL, A, cli, edit, publish, report_of, rows_of

from vseries import apply, patchfile, series
from vseries import pin as pinmod
from vseries.errors import SeriesError

TWICE, SKIPPED, RESOLVED = "adds a line twice", "dropped by --skip", "carried, resolved by hand"
UPSTREAMED = "upstreamed"


@pytest.fixture
def offline(tiny, monkeypatch, tmp_path):
    monkeypatch.setenv("VSERIES_OFFLINE", "1")
    monkeypatch.setenv("VSERIES_CACHE", str(tmp_path / "cache"))
    return tiny


def series_of(ws, *patches, contract: str | None = None) -> None:
    """Make each (edit, subject) a patch on the pin, list them, apply."""
    names = []
    for i, (change, subject) in enumerate(patches, 1):
        p = make_patch(ws / "vllm", ws / "patches", change, subject)
        p = p.rename(ws / "patches" / f"{i:04d}{p.name[4:]}")
        names.append(p.name + (f" contract={contract}" if contract and i == 1 else ""))
    (ws / "patches" / "series").write_text("".join(n + "\n" for n in names))
    apply.apply()


def insert_after(path: str, anchor: str, new: str):
    return edit(path, anchor, anchor + new)


def lines_of(ws, path: str, text: str) -> int:
    return [ln.strip() for ln in (ws / "vllm" / path).read_text().splitlines()].count(text)


# (patch edits, upstream's a.py (and other files), the repeated line, where upstream has it)
SHAPES = {
    "moved import": (
        [(insert_after("a.py", "line 2\n", "import os\n"), "[P] import os")],
        {"a.py": A.replace("line 30\n", "line 30\nimport os\n")},
        "import os",
    ),
    "partly upstreamed, the other hunk's line placed elsewhere": (
        [
            (
                lambda r: (
                    insert_after("a.py", "line 5\n", "use_fast_path = True\n")(r),
                    edit("a.py", "line 30\n", "thirty\n")(r),
                ),
                "[P] fast path and thirty",
            )
        ],
        {
            "a.py": A.replace("line 30\n", "thirty\n").replace(
                "line 20\n", "line 20\nuse_fast_path = True\n"
            )
        },
        "use_fast_path = True",
    ),
    "multi-line block": (
        [(insert_after("a.py", "line 10\n", "def helper():\n    return 42\n"), "[P] helper")],
        {"a.py": A + "def helper():\n    return 42\n"},
        "def helper():",
    ),
    "file renamed upstream too": (
        [(insert_after("a.py", "line 2\n", "import os\n"), "[P] import os")],
        {"pkg/moved_a.py": "# header\n" + A.replace("line 35\n", "line 35\nimport os\n")},
        "import os",
    ),
    "re-indented upstream": (
        [(insert_after("a.py", "line 2\n", "import os\n"), "[P] import os")],
        {"a.py": A.replace("line 25\n", "line 25\nif True:\n    import os\n")},
        "import os",
    ),
}


def publish_shape(index, files: dict[str, str]) -> None:
    publish(index, "0.99.0", {"b.py": "x = 1\n", **files})


def changed_file(files: dict[str, str]) -> str:
    return next(iter(files))


@pytest.mark.parametrize("shape", list(SHAPES))
def test_line_upstream_has_elsewhere_stops_the_rebase(offline, index, shape):
    """Item 2: the replay would leave the line twice; the rebase stops (exit 2, a next:
    line), names the line and both places, and the patch's commit waits on HEAD."""
    patches, files, line = SHAPES[shape]
    series_of(offline, *patches)
    publish_shape(index, files)
    with pytest.raises(SeriesError) as e:
        cli("v0.99.0", "--commit", FULL)
    msg = str(e.value)
    assert "would add lines twice" in msg and f"adds `{line}`" in msg
    assert f"{changed_file(files)} already has at line" in msg
    assert "next:" in msg and "--continue" in msg and "--skip" in msg
    assert lines_of(offline, changed_file(files), line) == 2  # HEAD holds it, to look at
    assert (offline / ".vseries" / "rebase" / "state.json").exists()
    assert cli("--skip") == 0  # dropped: the file keeps upstream's line, once
    assert list(rows_of(report_of(offline)).values()) == [SKIPPED]
    assert lines_of(offline, changed_file(files), line) == 1


@pytest.mark.parametrize("shape", list(SHAPES))
def test_check_reports_a_line_added_twice(offline, index, tmp_path, shape):
    """Item 2, --check: the row says so with evidence, and the exit code is 1."""
    patches, files, line = SHAPES[shape]
    series_of(offline, *patches)
    publish_shape(index, files)
    out = tmp_path / "check.md"
    assert cli("--check", "v0.99.0", "--commit", FULL, "--report", str(out)) == 1
    text = out.read_text()
    assert list(rows_of(text).values()) == [TWICE]
    assert f"adds `{line}`, which {changed_file(files)} already has at line" in text


def test_continue_keeps_both_lines_and_says_so(offline, index):
    patches, files, line = SHAPES["moved import"]
    series_of(offline, *patches)
    publish_shape(index, files)
    with pytest.raises(SeriesError, match="would add lines twice"):
        cli("v0.99.0", "--commit", FULL)
    assert cli("--continue") == 0
    rep = report_of(offline)
    assert list(rows_of(rep).values()) == ["carried clean"]
    assert "kept by the user (--continue)" in rep and "adds `import os`" in rep
    assert lines_of(offline, "a.py", line) == 2
    assert pinmod.load().tag == "v0.99.0"


def test_fixing_the_commit_by_hand_then_continue(offline, index):
    """The person takes the repeated line out of the commit and continues: the rest of the
    patch is carried, the line is there once."""
    line = "use_fast_path = True"
    both = lambda r: (  # noqa: E731
        insert_after("a.py", "line 5\n", line + "\n")(r),
        edit("a.py", "line 35\n", "thirty-five\n")(r),
    )
    series_of(offline, (both, "[P] fast path and thirty-five"))
    publish_shape(index, {"a.py": A.replace("line 20\n", "line 20\n" + line + "\n")})
    with pytest.raises(SeriesError, match="would add lines twice"):
        cli("v0.99.0", "--commit", FULL)
    vdir = offline / "vllm"
    text = (vdir / "a.py").read_text()
    (vdir / "a.py").write_text(text.replace("line 5\n" + line + "\n", "line 5\n", 1))
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qa", "--amend", "--no-edit")
    assert cli("--continue") == 0
    assert list(rows_of(report_of(offline)).values()) == [RESOLVED]
    assert lines_of(offline, "a.py", line) == 1
    assert "thirty-five" in (vdir / "a.py").read_text()


@pytest.mark.parametrize(
    "patch, upstream",
    [
        # the old pin already has "line 7" once; the patch adds it again (on purpose), and
        # upstream did not add one: not upstream's line
        (insert_after("a.py", "line 30\n", "line 7\n"), A.replace("line 1\n", "line one\n")),
        # lines that say nothing are not evidence
        (insert_after("a.py", "line 2\n", "pass\n"), A.replace("line 30\n", "line 30\npass\n")),
    ],
    ids=["already twice on purpose", "a line that says nothing"],
)
def test_lines_that_are_not_upstream_repeats_do_not_stop_it(offline, index, patch, upstream):
    series_of(offline, (patch, "[P] one line"))
    publish_shape(index, {"a.py": upstream})
    assert cli("v0.99.0", "--commit", FULL) == 0
    assert list(rows_of(report_of(offline)).values()) == ["carried clean"]


# ---- item 3: the contract decides before a person is asked ------------------------------------

CONTRACT = """import os, pathlib, pytest
pytestmark = pytest.mark.contract

def tree():
    return pathlib.Path(os.environ["PYTHONPATH"].split(os.pathsep)[0])

def test_twenty_on_the_cpu():
    assert "twenty" in (tree() / "a.py").read_text().splitlines(), "line 20 is not twenty"

@pytest.mark.skipif(os.environ.get("CUDA_VISIBLE_DEVICES") == "", reason="needs a CUDA device")
def test_twenty_on_the_gpu():
    # what a GPU part does against plain upstream (no release kernels built for it)
    raise RuntimeError("CUDA error: no kernel image is available for execution on the device")
"""


def upstream_took_it_and_edited_the_next_line(offline, index, monkeypatch, twenty: str):
    """Patch: line 20 -> twenty. Upstream: line 20 -> ``twenty`` and line 21 edited, so the
    3-way merge conflicts. CUDA_VISIBLE_DEVICES is unset, as on a GPU host."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (offline / "tests").mkdir()
    (offline / "tests" / "contract_a.py").write_text(CONTRACT)
    series_of(
        offline,
        (edit("a.py", "line 20\n", "twenty\n"), "[P] twenty"),
        contract="tests/contract_a.py",
    )
    new = A.replace("line 20\n", twenty).replace("line 21\n", "line 21 edited upstream\n")
    publish_shape(index, {"a.py": new})


def test_contract_cpu_part_decides_a_conflict_before_asking(offline, index, monkeypatch, capsys):
    """Item 3: upstream took the change and edited the adjacent line; the contract's CPU part
    passes on plain upstream, so the patch is upstreamed, not a conflict, even where a GPU
    part of the contract cannot run there; the report says the contract decided."""
    upstream_took_it_and_edited_the_next_line(offline, index, monkeypatch, "twenty\n")
    assert cli("v0.99.0", "--commit", FULL) == 0
    rep = report_of(offline)
    assert list(rows_of(rep).values()) == [UPSTREAMED]
    assert "contract tests/contract_a.py passes on plain v0.99.0" in rep
    assert "decided before asking a person" in rep and "CUDA hidden" in rep
    assert "the patch itself conflicts there" in rep
    assert "upstreamed (contract tests/contract_a.py passes" in capsys.readouterr().out


def test_conflict_says_the_contract_ran_first(offline, index, monkeypatch):
    """Item 3: where the contract's CPU part fails on plain upstream, the conflict stands, and
    the message says the contract ran before the person was asked, and what it said."""
    upstream_took_it_and_edited_the_next_line(offline, index, monkeypatch, "twenty-one\n")
    with pytest.raises(SeriesError) as e:
        cli("v0.99.0", "--commit", FULL)
    msg = str(e.value)
    assert "conflicts on v0.99.0" in msg
    assert "not fully upstream: contract tests/contract_a.py fails on plain v0.99.0" in msg
    assert "checked before stopping: contract tests/contract_a.py ran on plain v0.99.0" in msg
    assert "CUDA hidden" in msg


def test_conflict_without_a_contract_says_nothing_could_decide(offline, index):
    series_of(offline, (edit("a.py", "line 20\n", "twenty\n"), "[P] twenty"))
    new = A.replace("line 20\n", "twenty\n").replace("line 21\n", "line 21 edited\n")
    publish_shape(index, {"a.py": new})
    with pytest.raises(SeriesError) as e:
        cli("v0.99.0", "--commit", FULL)
    assert "0001-P-twenty.patch conflicts on v0.99.0" in str(e.value)
    assert "not checked before stopping: patches/series names no contract" in str(e.value)


@pytest.mark.slow
def test_real_patch_upstreamed_with_an_adjacent_edit_is_decided_by_its_contract(
    ws, pristine, pin, index, monkeypatch, tmp_path
):
    """Item 3 on a real patch: a release that took the FP8 oracle patch in full and edited
    the line next to its first change (so the 3-way merge conflicts) is told upstreamed by the
    patch's CPU-decidable contract (the oracle table), not stopped as a conflict. About 1-2
    minutes (one contract run, a source release of the whole tree)."""
    monkeypatch.setenv("VSERIES_OFFLINE", "1")
    monkeypatch.setenv("VSERIES_CACHE", str(tmp_path / "cache"))
    for extra in ("tests", "vseries", "pyproject.toml"):  # the contract tests and their imports
        (ws / extra).symlink_to(ROOT / extra)
    contract = "tests/contract/test_fp8_oracle.py"
    entry = next(e for e in series.read(ws / "patches" / "series")[1] if e.contract == contract)
    for p in (ws / "patches").glob("*.patch"):
        if p.name != entry.name:
            p.unlink()
    (ws / "patches" / "series").write_text(entry.line() + "\n")
    apply.apply()
    new = tmp_path / "new"
    git(pristine, "worktree", "add", "-q", "--detach", str(new), pin.commit)
    git(new, "apply", str(ws / "patches" / entry.name))
    first = next(
        (path, h)
        for path, hs in patchfile.hunks((ws / "patches" / entry.name).read_text()).items()
        if path.startswith("vllm/")
        for h in hs
    )
    path, hunk = first
    body = (new / path).read_text().splitlines(keepends=True)
    # the context line just above the hunk's first change, where the patched file has it
    text = (ws / "patches" / entry.name).read_text()
    block = text.split(hunk.title + "\n", 1)[1].splitlines()
    before = next(i for i, ln in enumerate(block) if ln[:1] in "+-")
    new_start = int(re.match(r"@@ -\d+(?:,\d+)? \+(\d+)", hunk.title).group(1))
    at = new_start + sum(1 for ln in block[:before] if ln[:1] != "-") - 2
    body[at] = body[at].rstrip("\n") + "  # edited upstream\n"
    (new / path).write_text("".join(body))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for name in git(new, "ls-files", "-co", "--exclude-standard").splitlines():
            tar.add(new / name, f"vllm-0.99.0/{name}", recursive=False)
        version = f"__version__ = '0.99.0'\n__commit_id__ = 'g{FULL[:9]}'\n".encode()
        info = tarfile.TarInfo("vllm-0.99.0/vllm/_version.py")
        info.size = len(version)
        tar.addfile(info, io.BytesIO(version))
    index.files["vllm-0.99.0.tar.gz"] = buf.getvalue()
    index.files["vllm-0.99.0-cp38-abi3-manylinux_2_28_x86_64.whl"] = b"not a wheel"
    out = tmp_path / "check.md"
    assert cli("--check", "v0.99.0", "--commit", FULL, "--report", str(out)) == 0
    rep = out.read_text()
    assert list(rows_of(rep).values()) == [UPSTREAMED], rep
    assert f"contract {contract} passes on plain v0.99.0" in rep
    assert "the patch itself conflicts there" in rep and "decided before asking a person" in rep


# ---- issue 33, item 1: counted against the old pin, statements as well as lines -------------

DICT = "cfg = dict(\n    a=1,\n    b=2,\n)\n"
# (the patch's edit, upstream's files, the file, the line named, its count on HEAD at the stop)
COUNTED = {
    # the old pin has "line 7" once; upstream adds a second copy, the patch a third
    "a line the old pin had once": (
        insert_after("a.py", "line 30\n", "line 7\n"),
        {"a.py": A.replace("line 20\n", "line 20\nline 7\n")},
        "a.py",
        "line 7",
        3,
    ),
    # a multi-line statement in a Python file; upstream wrote it on one line elsewhere
    "a Python statement over several lines": (
        lambda r: (r / "b.py").write_text("x = 1\n" + DICT),
        {"b.py": "cfg = dict(a=1, b=2)\nx = 1\n"},
        "b.py",
        "cfg = dict(",
        None,
    ),
    # the same block in a file that does not parse as Python: compared as a run of lines
    "a block of lines in a file that is not Python": (
        insert_after("a.py", "line 10\n", DICT),
        {"a.py": A + DICT},
        "a.py",
        "cfg = dict(",
        2,
    ),
}


@pytest.mark.parametrize("shape", list(COUNTED))
def test_repeats_are_counted_against_the_old_pin(offline, index, shape):
    """Item 1: the replay would leave a line, or a whole statement, more times than the old
    pin plus the patch intended: the rebase stops and names it (it used to carry it silently:
    three copies of a line the old pin had once; a dict(...) block twice)."""
    change, files, path, first, count = COUNTED[shape]
    series_of(offline, (change, "[P] one more"))
    publish(index, "0.99.0", {"a.py": A, "b.py": "x = 1\n", **files})
    with pytest.raises(SeriesError) as e:
        cli("v0.99.0", "--commit", FULL)
    msg = str(e.value)
    assert "would add lines twice" in msg and f"adds `{first}`" in msg, msg
    assert f"{path} already has at line" in msg
    if count:  # the commit waits on HEAD: the line is there once more than upstream has it
        assert lines_of(offline, path, first) == count


# ---- issue 43, items 1 and 2: the counts said are the counts there ---------------------------

FUNCS = "def {name}():\n    {body}return {n}\n\n\n"


def funcs(*with_limit: str) -> str:
    """f.py: functions e, f, g, h; those named hold ``limit = 64``."""
    return "".join(
        FUNCS.format(name=n, n=i, body="limit = 64\n    " if n in with_limit else "")
        for i, n in enumerate("efgh")
    )


def limit_in_h(ws, index, pin_has: tuple[str, ...]) -> None:
    """The pin's f.py has ``limit = 64`` in ``pin_has``; upstream adds one in g; the patch
    adds one in h."""
    pin_with(ws, {"f.py": funcs(*pin_has)})
    series_of(ws, (lambda r: (r / "f.py").write_text(funcs(*pin_has, "h")), "[P] limit in h"))
    publish(index, "0.99.0", {"a.py": A, "b.py": "x = 1\n", "f.py": funcs(*pin_has, "g")})


@pytest.mark.parametrize(
    "pin_has, now, meant",
    [(("f",), "3 times", "twice"), (("e", "f"), "4 times", "3 times")],
    ids=["item 1: the old pin had it once", "item 2: the old pin had it twice"],
)
def test_a_repeat_says_how_many_times_the_line_would_be_there(offline, index, pin_has, now, meant):
    """Item 1: the old pin has the line in f, upstream adds it in g, the patch in h: the stop
    said "each would be there twice" and "upstream added it" of the pin's own copy; it would
    be there three times. Item 2: with the old pin holding it twice (f, e) the rebase carried
    the line a fourth time, "carried clean", exit 0. Both stop, with the counts there."""
    limit_in_h(offline, index, pin_has)
    with pytest.raises(SeriesError) as e:
        cli("v0.99.0", "--commit", FULL)
    msg = str(e.value)
    assert "would add lines twice" in msg and "adds `limit = 64`" in msg, msg
    assert "each would be there twice" not in msg and "(upstream added it)" not in msg
    said = f"it would be there {now}, where the old pin with the series up to this patch has it"
    assert f"{said} {meant}" in msg
    assert "(upstream added 1 copy)" in msg
    assert lines_of(offline, "f.py", "limit = 64") == len(pin_has) + 2  # the commit, to look at


def test_a_decorator_on_every_test_is_no_repeat(offline, index):
    """What the old rule (a line the old pin had twice or more does not count) was for: a
    decorator on every test. Upstream adds a test with it and the patch adds another with it:
    a decorator qualifies the function after it (compared whole), so no stop, whatever the
    old pin's count."""
    deco = "@pytest.mark.slow\n"
    test = "{deco}def test_{n}():\n    assert {n}\n\n\n"

    def tests(*names: str) -> str:
        return "import pytest\n\n\n" + "".join(test.format(deco=deco, n=n) for n in names)

    pin_with(offline, {"test_x.py": tests("one")})
    series_of(offline, (lambda r: (r / "test_x.py").write_text(tests("one", "mine")), "[P] t"))
    publish(index, "0.99.0", {"a.py": A, "b.py": "x = 1\n", "test_x.py": tests("theirs", "one")})
    assert cli("v0.99.0", "--commit", FULL) == 0
    assert list(rows_of(report_of(offline)).values()) == ["carried clean"]


def test_a_line_the_patch_adds_in_two_hunks_is_counted_where_it_went():
    """Sibling of item 1 (counts the rebase reports): the patch adds the same line in two
    hunks and upstream already has one of them; only that hunk is "already upstream", with
    its one line (both hunks used to be reported, each "1 of 1 changed lines")."""
    from vseries.rebase import diffs

    def patch(*hunks: tuple[int, str]) -> str:
        body = "".join(
            f"@@ -{n},2 +{n},3 @@\n ctx {n}\n+{line}\n ctx {n + 1}\n" for n, line in hunks
        )
        return f"diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n{body}"

    original = patch((10, "x = 1"), (30, "x = 1"), (50, "y = 2"))
    replayed = patch((10, "x = 1"), (50, "y = 2"))
    _, dropped, added = diffs.compare(original, replayed)
    assert dropped == ["a.py: @@ -30,2 +30,3 @@ (1 of 1 changed lines already upstream)"]
    assert added == []
