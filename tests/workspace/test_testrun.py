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
