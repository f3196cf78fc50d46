"""The GPU host scripts find their trees where lib.sh says ($TREE_ROOT/vllm-<tree>), so that
the trees CONTRIBUTING.md links by hand on a host with a package index serve as well as the
staged ones; and a tree holding only vLLM's vllm/ and tests/ leaves `benchmarks` to the
workspace, as CONTRIBUTING.md says."""

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

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
        ({"PHASES": "served", "WAVES": "6 61"}, "no wave '61' (waves: 1 2 3 "),
        ({"BUDGET": "10m"}, "BUDGET=10m is not a whole number"),
        ({"ROUNDS": "two"}, "ROUNDS=two is not a whole number"),
        ({"BUDGET": "900"}, "BUDGET=900: a call ends at 600 s"),
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
    assert not out.exists() and not r.exists()


def test_moved_stops_when_assembly_fails_and_still_returns_what_it_has(tmp_path):
    """Parts missing on the host: assemble.sh fails, and moved.sh stops there (it ran every
    phase on no trees before) with the log and the tarball of what the host holds."""
    out, r, trees = tmp_path / "out", tmp_path / "r", tmp_path / "trees"
    trees.mkdir()
    if Path("/root/stage/p1/assemble.sh").exists():
        pytest.skip("this host has staged parts")
    p = subprocess.run(
        ["bash", "benchmarks/h200/moved.sh"],
        cwd=ROOT, env={**os.environ, "OUT": str(out), "R": str(r), "TREE_ROOT": str(trees)},
        capture_output=True, text=True,
    )  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr
    assert "!!! assemble failed: send the parts it names again" in p.stdout
    assert "===" not in p.stdout  # no step ran
    assert (out / "moved.tar.gz").exists() and (out / "log-moved.txt").exists()
    assert not any(trees.iterdir())


def test_staging_again_replaces_its_parts_and_keeps_the_wheel_and_flashinfer_parts(tmp_path):
    """stage.py removed its whole output folder, with w1 (wheel_parts.py) and pf (FlashInfer's
    module, 14 minutes to build): now only its own parts p<N> and ps are replaced."""
    src = tmp_path / "tree"
    (src / "vllm").mkdir(parents=True)
    (src / "vllm" / "__init__.py").write_text("")
    wheel = tmp_path / "vllm-0.0.1-cp38-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vllm/_C.abi3.so", b"\0" * 64)
        z.writestr("vllm-0.0.1.dist-info/METADATA", "Name: vllm\n")
    out = tmp_path / "stage"
    for kept in ("w1", "pf", "p9", "ps"):
        (out / kept).mkdir(parents=True)
        (out / kept / "x").write_text(kept)
    p = subprocess.run(
        [sys.executable, "benchmarks/h200/stage.py", "--src", f"series={src}",
         "--wheel", str(wheel), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(d.name for d in out.iterdir()) == ["p1", "pf", "w1"]
    assert (out / "w1" / "x").read_text() == "w1" and "kept in" in p.stdout


def _moved_on_stubs(tmp_path, trees_named, stub_body, **env_extra):
    """moved.sh on empty stub trees (``trees_named``) with ``python3`` a bash stub
    (``stub_body``); returns its stdout, its results folder and the trees' root."""
    out, r, trees, stub = (tmp_path / d for d in ("out", "r", "trees", "bin"))
    for t in trees_named:
        (trees / f"vllm-{t}").mkdir(parents=True, exist_ok=True)
    stub.mkdir()
    (stub / "python3").write_text("#!/bin/bash\n" + stub_body)
    (stub / "python3").chmod(0o755)
    env = {**os.environ, "OUT": str(out), "R": str(r), "TREE_ROOT": str(trees),
           "PATH": f"{stub}:{os.environ['PATH']}", "BUDGET": "60", **env_extra}  # fmt: skip
    p = subprocess.run(["bash", "benchmarks/h200/moved.sh"], cwd=ROOT, env=env,
                       capture_output=True, text=True)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout, r, trees


def _epcost(tmp_path, **env_extra):
    """moved.sh's epcost phase on stub trees (base, series, broken) with a stub python3 that
    writes --out's file (not for the tree named 'broken') and prints its arguments."""
    stub = (
        'prev=""\nfor a in "$@"; do\n'
        '  [ "$prev" = --out ] && [[ "$a" != *broken* ]] && echo "{}" > "$a"\n'
        '  prev=$a\ndone\necho "stub: $*"\n'
    )
    return _moved_on_stubs(tmp_path, ("base", "series", "broken"), stub, PHASES="epcost",
                           **env_extra)  # fmt: skip


def test_quant_serves_the_cuda_form_from_its_library_without_touching_the_base(tmp_path):
    """The CUDA form of the one-launch quantization is a change to common.cu, which the release
    wheel cannot take: its tree is a copy of the base whose ops.scaled_fp8_quant calls the
    library of part pq and holds the patch's tests (even where the base's files are links, the
    base stays as it was); vLLM's own test_fp8_quant.py runs there, bench_fp8_quant
    --one-block on the base and vLLM's benchmarks/kernels/benchmark_quant.py on the base, a
    control and the candidate."""
    call = "            torch.ops._C.dynamic_scaled_fp8_quant(output, input, scale)\n"
    shared = tmp_path / "shared_custom_ops.py"
    shared.write_text("import torch\n" + call)
    ops = tmp_path / "trees" / "vllm-base" / "vllm" / "_custom_ops.py"
    ops.parent.mkdir(parents=True)
    ops.symlink_to(shared)
    # the patch's test file, at the pin, linked into the base as assemble.sh's trees link
    pin_test = "tests/kernels/quantization/test_fp8_quant.py"
    shared_test = tmp_path / "shared_test_fp8_quant.py"
    shared_test.write_text((ROOT / "vllm" / pin_test).read_text())
    (tmp_path / "trees" / "vllm-base" / pin_test).parent.mkdir(parents=True)
    (tmp_path / "trees" / "vllm-base" / pin_test).symlink_to(shared_test)
    so = tmp_path / "fp8_one_block.so"
    so.write_bytes(b"")
    (tmp_path / "fp8_one_block-ptxas.txt").write_text("Used 50 registers\n")
    (tmp_path / "fp8_control.so").write_bytes(b"")
    stub = f'[ "$1" = - ] && exec {sys.executable} "$@"\necho "stub in $PWD: $*"\n'
    stdout, r, trees = _moved_on_stubs(
        tmp_path, ("base", "series"), stub, PHASES="quant", ROUNDS="1",
        QUANT_CAND="patches/candidates/fp8-quant-one-block.patch", QUANT_SO=str(so),
    )  # fmt: skip
    # the build's ptxas report travels with the results
    assert (r / "fp8_one_block-ptxas.txt").read_text() == "Used 50 registers\n"
    made = (trees / "vllm-cfp8-quant-one-block" / "vllm" / "_custom_ops.py").read_text()
    assert "torch.ops._vseries_fp8.dynamic_scaled_fp8_quant(output, input, scale)" in made
    assert f"torch.ops.load_library({str(so)!r})" in made
    assert shared.read_text() == "import torch\n" + call
    # the candidate's own tests are in its tree, the base's file as it was
    made_test = (trees / "vllm-cfp8-quant-one-block" / pin_test).read_text()
    assert "def test_dynamic_per_tensor_fp8_quant_small_input_one_launch(" in made_test
    assert shared_test.read_text() == (ROOT / "vllm" / pin_test).read_text()
    ran = [line for line in stdout.splitlines() if line.startswith("stub in")]
    assert ran[0].startswith(f"stub in {trees}/vllm-cfp8-quant-one-block: -m pytest")
    assert "tests/kernels/quantization/test_fp8_quant.py" in ran[0]
    # its own tests on the base with its test file: the contract fails there
    assert ran[1].startswith(f"stub in {trees}/vllm-cfp8-quant-one-block-before: -m pytest")
    assert "-k one_block or one_launch" in ran[1]
    before = (trees / "vllm-cfp8-quant-one-block-before" / pin_test).read_text()
    assert before == made_test
    assert (trees / "vllm-cfp8-quant-one-block-before" / "vllm" / "_custom_ops.py").is_symlink()
    assert ran[2].startswith(f"stub in {trees}/vllm-base: -m benchmarks.bench_fp8_quant")
    assert f"--one-block {so}" in ran[2]
    # across the limit, bf16 and float32
    assert ran[3].startswith(f"stub in {trees}/vllm-base: -m benchmarks.bench_fp8_quant")
    assert f"--one-block {so} --sweep" in ran[3]
    # vLLM's own benchmark of the op (the PR's command) on both trees, base first
    upstream = [line for line in ran if "benchmarks/kernels/benchmark_quant.py" in line]
    # with the control between: the pin's own common.cu through the same library
    trio = ("base", "cfp8-quant-one-block-control", "cfp8-quant-one-block")
    assert [line.split(":")[0] for line in upstream] == [
        f"stub in {trees}/vllm-{t}" for t in trio * 2
    ]
    control = trees / "vllm-cfp8-quant-one-block-control" / "vllm" / "_custom_ops.py"
    assert f"torch.ops.load_library({str(tmp_path / 'fp8_control.so')!r})" in control.read_text()
    assert all("--quant-dtype fp8" in line and "--hidden-size 2048" in line for line in upstream)


def test_epcost_compares_the_trees_it_timed(tmp_path):
    """The epcost phase once compared a fixed list of four files and stopped when a call timed
    fewer trees (EP_TREES): its table now names the trees timed in this call, and a tree
    whose timing wrote nothing is left out."""
    stdout, r, _ = _epcost(tmp_path, EP_TREES="base broken series")
    compare = [
        line for line in stdout.splitlines() if line.startswith("stub:") and "--compare" in line
    ]
    assert compare == [
        f"stub: -P -m benchmarks.ep_nan --compare {r}/epcost-base.json {r}/epcost-series.json"
    ]


def test_epcost_takes_a_candidate_patch_by_path(tmp_path):
    """EP_PATCHES names a series patch by number or any patch file by path (a candidate form of
    a fix, patches/candidates/): the tree is p<the file's name> and is timed like the others."""
    stdout, r, trees = _epcost(
        tmp_path, EP_PATCHES="patches/candidates/0004-zero-fill.patch",
        EP_TREES="base p0004-zero-fill",
    )  # fmt: skip
    assert (trees / "vllm-p0004-zero-fill").is_dir()
    assert "--variant p0004-zero-fill --time-only" in stdout
    assert f"--compare {r}/epcost-base.json {r}/epcost-p0004-zero-fill.json" in stdout
    # a candidate must also pass what 0004 passes: its tests and ep_nan.py's numerics
    assert "test_moe_series.py -k ep_dynamic_tensor_scale or int8_dynamic_per_tensor" in stdout
    assert f"--variant p0004-zero-fill --out {r}/ep_nan-p0004-zero-fill.json" in stdout


def test_branches_runs_each_test_plan_on_the_branch_and_before_it(tmp_path):
    """moved.sh's `branches` phase: for a staged PR branch (tree pr0004), the pytest commands
    of patch 0004's Test Plan run on the branch, then on v0.34.0 with the branch's test files
    copied in (a copy of base, pr0004-before), where the fix's tests must fail."""
    test_moe = tmp_path / "trees" / "vllm-pr0004" / "tests" / "kernels" / "moe" / "test_moe.py"
    test_moe.parent.mkdir(parents=True)
    test_moe.write_text("# the branch's tests\n")
    stdout, _, trees = _moved_on_stubs(
        tmp_path, ("base", "series", "pr0004"), 'echo "stub in $PWD: $*"\n', PHASES="branches"
    )
    ran = [line for line in stdout.splitlines() if line.startswith("stub in")]
    plan = "tests/kernels/moe/test_moe.py -k ep_dynamic_tensor_scale or int8_dynamic_per_tensor"
    assert [line.split(":", 1)[0] for line in ran] == [
        f"stub in {trees}/vllm-pr0004",
        f"stub in {trees}/vllm-pr0004-before",
    ]
    assert all(plan in line for line in ran), ran
    copied = trees / "vllm-pr0004-before" / "tests" / "kernels" / "moe" / "test_moe.py"
    assert copied.read_text() == "# the branch's tests\n"


def test_kbench_runs_on_the_branch_alone_where_staged(tmp_path):
    """A review asked for 0003's benchmark output from its branch alone, three runs: the kbench
    phase runs it in tree pr0003 when staged (else the series), KBENCH_RUNS times."""
    stdout, _, trees = _moved_on_stubs(
        tmp_path, ("base", "series", "pr0003"), 'echo "stub in $PWD: $*"\n',
        PHASES="kbench", KBENCH_RUNS="2",
    )  # fmt: skip
    ran = [line for line in stdout.splitlines() if line.startswith("stub in")]
    assert len(ran) == 2
    for line in ran:
        assert line.startswith(f"stub in {trees}/vllm-pr0003: benchmarks/kernels/")
        assert line.endswith("--batch-sizes 1 2 3 4")


def test_epcost_rounds_time_the_trees_in_turns(tmp_path):
    """A review asked for interleaved runs per tree: EP_ROUNDS=2 times base, p0004, base,
    p0004, each run its own file and column."""
    stdout, r, _ = _epcost(tmp_path, EP_PATCHES="0004", EP_TREES="base series", EP_ROUNDS="2")
    timed = [line.split("--variant ")[1].split()[0] for line in stdout.splitlines()
             if line.startswith("stub:") and "--time-only" in line]  # fmt: skip
    assert timed == ["base.r1", "series.r1", "base.r2", "series.r2"]
    assert (
        f"--compare {r}/epcost-base.r1.json {r}/epcost-series.r1.json "
        f"{r}/epcost-base.r2.json {r}/epcost-series.r2.json"
    ) in stdout


def test_branches_runs_the_named_branches_in_their_order(tmp_path):
    """A round short of time once spent itself on 0003's long test file and reached 0004 with
    11 s left: BRANCHES="0004 0003" runs 0004 first; a named branch not staged is said, not
    fatal."""
    stdout, _, trees = _moved_on_stubs(
        tmp_path, ("base", "series", "pr0003", "pr0004"), 'echo "stub in $PWD: $*"\n',
        PHASES="branches", BRANCHES="0004 0009 0003",
    )  # fmt: skip
    ran = [line.split(":", 1)[0] for line in stdout.splitlines() if line.startswith("stub in")]
    assert ran[:2] == [f"stub in {trees}/vllm-pr0004", f"stub in {trees}/vllm-pr0004-before"]
    assert ran[2:] and all(r.startswith(f"stub in {trees}/vllm-pr0003") for r in ran[2:])
    assert "!!! no branch tree" in stdout and "send part pb0009" in stdout


@pytest.mark.parametrize(
    "patch", sorted((ROOT / "patches" / "candidates").glob("*.patch")), ids=lambda p: p.name
)
def test_candidate_patch_file_headers_are_whole(patch):
    """moved.sh applies a candidate with `git apply`, which takes a damaged `diff --git` line
    on trust from the ---/+++ lines after it; a reviewer's tools do not."""
    heads = [x for x in patch.read_text().splitlines() if x.startswith("diff --git")]
    assert heads, f"{patch.name} holds no file"
    bad = [x for x in heads if not re.fullmatch(r"diff --git a/(\S+) b/\1", x)]
    assert not bad, f"{patch.name}: damaged file headers {bad}"
