"""``scripts/test.sh``'s choice of tiers (issue 40, item 2): ``--line <tag>`` runs that kept
line's contract tier alone, as its --help and CONTRIBUTING say; the workspace tier (the tool's
own tests, the same on every line) is refused with --line, pointing to the main line's run."""

import pytest

from vseries import cli, testrun

TAG = "v0.1.0"  # tiers_of does not look the line up; a refusal comes before that


def tiers(*argv: str) -> list[str]:
    return testrun.tiers_of(cli.parser().parse_args(["test", *argv]))


def test_line_runs_that_lines_contract_tier_alone():
    assert tiers("--line", TAG) == ["contract"]
    assert tiers("--line", TAG, "--tier", "upstream") == ["upstream"]
    assert tiers() == list(testrun.TIERS)
    assert tiers("--fast") == ["workspace"]
    assert tiers("--tier", "contract", "--tier", "workspace") == ["contract", "workspace"]


@pytest.mark.parametrize("extra", [["--fast"], ["--tier", "workspace"]])
def test_line_with_the_workspace_tier_is_refused(extra, capsys):
    assert cli.main(["test", "--line", TAG, *extra]) == 2
    err = capsys.readouterr().err
    assert "the workspace tier tests the tool, not a line" in err, err
    assert "\n  next: scripts/test.sh --fast" in err, err


def test_the_run_ends_with_one_verdict_line():
    """A newcomer's trial found no overall verdict: only the exit status said the run passed,
    with one tier "not run" beside two "passed". The last line says it."""
    ran = {"workspace": (True, 1.0), "contract": (True, 2.0), "upstream": (None, 0.1)}
    assert testrun.verdict(ran) == (
        "PASSED: every tier that ran; not run on this host: upstream (exit status 0)"
    )
    assert (
        testrun.verdict({"workspace": (True, 1.0)}) == "PASSED: every tier that ran (exit status 0)"
    )
    failed = {**ran, "contract": (False, 2.0)}
    assert testrun.verdict(failed).startswith("FAILED: contract (exit status 1;")
    assert testrun.verdict({"workspace": (True, 1.0)}, ["contract", "upstream"]) == (
        "PASSED: every tier that ran; left out by --fast: contract, upstream (exit status 0)"
    )
    # only tiers this host cannot run (--tier upstream on a CPU host): nothing was tested
    assert testrun.verdict({"upstream": (None, 0.1)}).startswith("NOT RUN: no tier asked for")
