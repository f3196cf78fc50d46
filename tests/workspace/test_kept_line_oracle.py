"""The kept v0.21.0 line's FP8 oracle patch: its own vLLM test file, run as the PR tool runs a
patch's tests (CPU host, CUDA hidden), on the line's pin with its series applied (issue 43,
item 5: the log line's reason names what decided, over every SM90 selection)."""

import os

import pytest
from conftest import ROOT, clone_pinned, line_site

from vseries import am, git, pytestrun, series
from vseries import pin as pinmod
from vseries.prs.checks import Checks, run_tests

LINE = ROOT / "lines" / "v0.21.0"
TEST = "tests/kernels/moe/test_fp8_oracle_hopper_default.py"


@pytest.mark.slow
def test_the_kept_line_s_oracle_log_names_what_decided(tmp_path, pristine_of, monkeypatch):
    """About a minute on 2 cores (the vLLM import). The 576-row test fails on the patch as it
    was before issue 43 (30 rows named the wrong deciding rule, or none)."""
    if not (LINE / "upstream.toml").exists():
        pytest.skip("no kept line v0.21.0")
    pin = pinmod.load(LINE / "upstream.toml")
    tree = tmp_path / "vllm"
    clone_pinned(pristine_of(pin), tree, pin.commit)
    _, entries = series.read(LINE / "patches" / "series")
    for e in entries:
        am.am(tree, LINE / "patches" / e.name)
        assert not git.in_progress(tree), e.name
    # the line's own packages after what run_tests puts on PYTHONPATH (it runs the main line's
    # patches, whose venv has what they need, and takes no more folders): the line's
    # environment, as its contract runs have it
    site, real = line_site(LINE.name), pytestrun.run

    def in_the_lines_environment(args, cwd, pythonpath=(), env=None, **kw):
        env = dict(env or {})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), *site]))
        return real(args, cwd, pythonpath, env, **kw)

    monkeypatch.setattr(pytestrun, "run", in_the_lines_environment)
    checks = Checks()
    run_tests(tree, [TEST], checks)
    assert not checks.problems and not checks.failed, checks.problems
    decided = [n for n in checks.passed if "test_hopper_log_names_what_decided" in n]
    assert len(decided) == 8 and len(checks.passed) == 190, checks.passed
