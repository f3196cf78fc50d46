"""The GPU host scripts find their trees where lib.sh says ($TREE_ROOT/vllm-<tree>), so that
the trees CONTRIBUTING.md links by hand on a host with a package index serve as well as the
staged ones; and a tree holding only vLLM's vllm/ and tests/ leaves `benchmarks` to the
workspace, as CONTRIBUTING.md says."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT

HOST_SCRIPTS = ["moved.sh", "run.sh", "kernels.sh"]


@pytest.mark.parametrize("script", HOST_SCRIPTS)
def test_host_scripts_reach_the_trees_through_tree_dir(script):
    text = (ROOT / "benchmarks" / "h200" / script).read_text()
    code = [x for x in text.splitlines() if not x.lstrip().startswith("#")]
    named = [x.strip() for x in code if "/root/vllm-" in x]
    assert not named, f"{script} names a tree folder instead of $(tree_dir NAME): {named}"


def imported_in(tree_root, tree: str) -> list[str]:
    """Where `vllm` and `benchmarks` come from in a step lib.sh runs inside TREE."""
    probe = (
        "import os, vllm, benchmarks; "
        "print(os.path.realpath(vllm.__file__)); print(benchmarks.__file__)"
    )
    step = f'run_in {tree} 110 python3 -c "{probe}"'
    out = subprocess.run(
        [
            "bash",
            "-c",
            f". benchmarks/h200/lib.sh; deadline=$((SECONDS + 120)); {step}",
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "TREE_ROOT": str(tree_root),
            "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        },
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [x for x in out.splitlines() if x.startswith("/")]


@pytest.mark.slow
def test_a_linked_tree_serves_the_host_scripts(tmp_path):
    src = ROOT / "vllm"
    if not (src / "vllm" / "__init__.py").exists():
        pytest.skip("vllm/ is not materialised (scripts/setup.sh)")
    (tmp_path / "vllm-series").mkdir()
    for part in ("vllm", "tests"):  # the recipe of CONTRIBUTING.md "Run the GPU tiers"
        (tmp_path / "vllm-series" / part).symlink_to(src / part)
    assert imported_in(tmp_path, "series") == [
        str((src / "vllm" / "__init__.py").resolve()),
        str(ROOT / "benchmarks" / "__init__.py"),
    ]
    (tmp_path / "vllm-whole").symlink_to(src)  # the whole checkout: vLLM's benchmarks/ shadows
    assert imported_in(tmp_path, "whole")[1] == str(src / "benchmarks" / "__init__.py")


def test_a_served_wave_runs_in_the_parts_that_fit_the_gpu(tmp_path):
    """served.sh asks benchmarks.served.fit how the wave fits the GPU that nvidia-smi reports
    and starts each part as a wave of its own (served_part, stubbed here): six 24-layer engines
    on an 80 GiB H100 run as waves 3a and 3b of three."""
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 81559\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    specs = " ".join(
        f"{t}{i}:{tree}:fp8dyn" for i in (1, 2, 3) for t, tree in (("b", "base"), ("s", "series"))
    )
    script = (
        f". benchmarks/h200/served.sh; ws={ROOT}; R={tmp_path}; "
        'served_part() { echo "part $1 limit $2: ${*:3}"; }; '
        f"served_wave 3 270 {specs}"
    )
    out = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        env={
            **os.environ,
            "PATH": f"{tmp_path}:{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        },
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.splitlines() == [
        "part 3a limit 270: b1:base:fp8dyn s1:series:fp8dyn b2:base:fp8dyn",
        "part 3b limit 270: s2:series:fp8dyn b3:base:fp8dyn s3:series:fp8dyn",
    ]
    assert "runs in 2 parts" in out.stderr


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"PHASES": "check sweeep"}, "no phase 'sweeep' (phases: check tests "),
        ({"PHASES": "served", "WAVES": "6 14"}, "no wave '14' (waves: 1 2 3 "),
    ],
)
def test_moved_refuses_a_misspelt_phase_or_wave_before_doing_anything(tmp_path, env, says):
    """A GPU call with a misspelt phase or wave ran nothing and cost the call: moved.sh now
    stops at once (exit 2), naming what it knows, before it writes or assembles anything."""
    out, r = tmp_path / "out", tmp_path / "r"
    p = subprocess.run(
        ["bash", "benchmarks/h200/moved.sh"],
        cwd=ROOT, env={**os.environ, **env, "OUT": str(out), "R": str(r)},
        capture_output=True, text=True,
    )  # fmt: skip
    assert p.returncode == 2 and says in p.stderr, p.stdout + p.stderr
    assert "sweep" in p.stderr or "13" in p.stderr  # the lists are the file's case labels
    assert not out.exists() and not r.exists()
