"""The benchmarks on a CPU host: one harness (benchmarks/harness.py) for every benchmark's
result file, report.py reading new and older files alike, and every benchmark script
importable, with --help, and refusing a host without CUDA (exit 2)."""

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, line_site

from benchmarks import report, shapes
from vseries import results

BENCH = ROOT / "benchmarks"

SCRIPTS = ["bench_swap_ab.py", "bench_fp8_oracle.py", "bench_rope_nospec.py", "tune_swap_ab.py"]
SCRIPTS += [
    "swap_ab_modes.py",
    "bench_moe_decode.py",
    "moe_decode_anatomy.py",
    "bench_fp8_quant.py",
    "tune_fused_moe.py",
]


def result_file(path, variant: str, us: float) -> None:
    rows = [
        results.Row("x", "qwen3-30b-a3b", "fp8", 1, variant, us, us - 1, us + 1, 1000, 40.0),
        results.Row("x", "qwen3-30b-a3b", "fp8", 4, variant, us * 2, us, us * 3, 2000, 41.0),
        results.failed("x", "qwen3-30b-a3b", "fp8", 16, variant, RuntimeError("out of memory")),
    ]
    head = {"bench": "x", "variant": variant, "command": "bench", "gpu": "NVIDIA H200"}
    results.write(path, {**head, "read_bandwidth_Bps": 4.2e12}, rows)


def test_the_harness_imports_without_torch():
    code = "import sys; import benchmarks.harness; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_load_reads_new_and_older_files_into_one_schema(tmp_path):
    result_file(tmp_path / "new.json", "base", 10.0)
    head, rows = results.load(tmp_path / "new.json")
    assert head["bench"] == "x" and [r["m"] for r in rows] == [1, 4, 16]
    assert rows[2]["us"] is None and rows[2]["error"] == "RuntimeError: out of memory"
    old = {
        "bench": "swap-ab",
        "variant": "base",
        "device": "NVIDIA H200",
        "read_bw_GBps": 4200.0,
        "rows": [{"case": "q", "dtype": "fp8", "batch": 8, "us": 5.0}],
    }
    (tmp_path / "old.json").write_text(json.dumps(old))
    head, rows = results.load(tmp_path / "old.json")
    assert (head["gpu"], head["read_bandwidth_Bps"]) == ("NVIDIA H200", 4.2e12)
    assert rows == [
        {"shape": "q", "dtype": "fp8", "m": 8, "us": 5.0, "bench": "swap-ab", "variant": "base"}
    ]
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a result file"):
        results.load(tmp_path / "bad.json")


def test_report_table_from_harness_files(tmp_path):
    result_file(tmp_path / "base.json", "base", 10.0)
    result_file(tmp_path / "patched.json", "patched", 8.0)
    rows, metas = report.load([tmp_path / "base.json", tmp_path / "patched.json"])
    text, variants = report.table(rows, "base")
    assert variants == ["base", "patched"]
    assert "| qwen3-30b-a3b | fp8 | 1 | 10.0 | 8.0 | 1.250x | 40 | 40 |" in text
    assert "| qwen3-30b-a3b | fp8 | 16 | - | - | - | - | - |" in text  # failed: no ratio
    assert metas[0]["gpu"] == "NVIDIA H200"


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_script_has_help(script):
    p = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True, cwd="/"
    )
    assert p.returncode == 0 and "usage:" in p.stdout, p.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "script", ["bench_swap_ab.py", "bench_fp8_oracle.py", "bench_fp8_quant.py"]
)
def test_benchmark_refuses_a_host_without_cuda(script, tmp_path):
    if subprocess.run(
        [sys.executable, "-c", "import torch, sys; sys.exit(torch.cuda.is_available())"]
    ).returncode:
        pytest.skip("this host has CUDA")
    out = tmp_path / "r.json"
    p = subprocess.run(
        [sys.executable, str(BENCH / script), "--variant", "base", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert p.returncode == 2, p.stderr[-2000:]


def test_moe_decode_report_shows_where_the_time_goes(tmp_path):
    """Rows with a per-kernel profile (bench_moe_decode.py --breakdown-batches) get the
    "Where the time goes" table: span, gaps and each kernel's time, largest first, with
    C++ template and argument lists cut from the names; files without them get none."""

    def rows(variant_us: dict, kernels: dict | None) -> list:
        out = []
        for variant, us in variant_us.items():
            extra = {"kernels_us": kernels} if kernels and variant == "default" else {}
            out.append(
                results.Row(
                    "moe-decode",
                    "qwen3-30b-a3b",
                    "fp8_per_tensor_static",
                    1,
                    variant,
                    us,
                    us - 1,
                    us + 1,
                    37756928,
                    40.0,
                    extra,
                )
            )
        return out

    head = {
        "bench": "moe-decode",
        "command": "bench",
        "gpu": "NVIDIA H200",
        "time": "t",
        "clocks": "c",
        "tree": {"head": "abc"},
        "read_bandwidth_Bps": 4.38e12,
    }
    base_k = {
        "void vllm::moe::topk_sum<float, 8>(float*, int)": 2.5,
        "fused_moe_kernel": 11.25,
        "span": 29.0,
        "gaps": 15.25,
    }
    series_k = {
        "_moe_decode_w13_kernel": 12.0,
        "_moe_decode_w2_kernel": 6.5,
        "span": 21.0,
        "gaps": 2.5,
    }
    results.write(tmp_path / "b.json", dict(head, variant="base"), rows({"default": 29.0}, base_k))
    results.write(
        tmp_path / "s.json",
        dict(head, variant="series"),
        rows({"default": 21.0, "decode_off": 29.0}, series_k),
    )
    from benchmarks import moe_decode_report

    argv = [
        "moe_decode_report.py",
        str(tmp_path / "b.json"),
        str(tmp_path / "s.json"),
        "--out",
        str(tmp_path / "r"),
    ]
    old_argv, sys.argv = sys.argv, argv
    try:
        assert moe_decode_report.main() == 0
    finally:
        sys.argv = old_argv
    md = (tmp_path / "r.md").read_text()
    assert "## Where the time goes" in md
    assert (
        "| v0.21.0 | qwen3-30b-a3b | static | 1 | default | 29.0 | 15.2 | "
        "fused_moe_kernel 11.2, topk_sum 2.5 |"
    ) in md
    assert (
        "| series | qwen3-30b-a3b | static | 1 | default | 21.0 | 2.5 | "
        "_moe_decode_w13_kernel 12.0, _moe_decode_w2_kernel 6.5 |"
    ) in md
    # the series' decode_off row has no profile: no line for it
    assert "| series | qwen3-30b-a3b | static | 1 | decode_off |" not in md

    results.write(tmp_path / "b.json", dict(head, variant="base"), rows({"default": 29.0}, None))
    results.write(
        tmp_path / "s.json",
        dict(head, variant="series"),
        rows({"default": 21.0, "decode_off": 29.0}, None),
    )
    old_argv, sys.argv = sys.argv, argv
    try:
        assert moe_decode_report.main() == 0
    finally:
        sys.argv = old_argv
    assert "Where the time goes" not in (tmp_path / "r.md").read_text()


def test_moe_decode_report_of_a_series_run_alone(tmp_path):
    """With one result file (a session that ran the series tree alone) the report leaves out
    the v0.21.0 columns instead of borrowing another session's, keeps the series-vs-without-0005
    ratio, and plots the one-launch variant where the run has it; three files are refused."""
    head = {
        "bench": "moe-decode",
        "command": "bench --one-kernel",
        "gpu": "NVIDIA H200",
        "time": "t",
        "clocks": "c",
        "tree": {"head": "abc"},
        "read_bandwidth_Bps": 4.31e12,
    }
    rows = [
        results.Row("moe-decode", "qwen3-30b-a3b", "fp8_per_tensor_static", m, v, us, us - 1,
                    us + 1, 37756928, pct, {})
        for m, v, us, pct in (
            (1, "default", 21.8, 40.3),
            (1, "decode_off", 30.6, 28.6),
            (1, "one_kernel", 22.8, 38.4),
            (16, "default", 124.7, 72.9),
            (16, "decode_off", 124.3, 73.2),
        )
    ]  # fmt: skip
    results.write(tmp_path / "s.json", dict(head, variant="series"), rows)
    from benchmarks import moe_decode_report

    def run(*files):
        argv = ["moe_decode_report.py", *map(str, files), "--out", str(tmp_path / "r")]
        old_argv, sys.argv = sys.argv, argv
        try:
            return moe_decode_report.main()
        finally:
            sys.argv = old_argv

    assert run(tmp_path / "s.json") == 0
    md = (tmp_path / "r.md").read_text()
    assert "- base: not run in this session" in md
    assert "v0.21.0 us" not in md and "series / v0.21.0" not in md
    assert (
        "| qwen3-30b-a3b | static | 1 | 30.6 (29.6-31.6), 29% | 21.8 (20.8-22.8), 40% | 1.404x |"
        in md
    )
    assert (tmp_path / "r.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        run(tmp_path / "s.json", tmp_path / "s.json", tmp_path / "s.json")


def test_warmup_enumeration_measures_the_series_walk_on_cpu(tmp_path):
    """benchmarks/warmup_enumeration.py times the v0.21.0 line's patch 0004 variant walk (its
    tree: the main line's or a kept line's) on a mocked H200, writes a harness file, and
    renders it; the walk finds
    the swapped decode variant and the large-batch one, so more than one variant."""
    walk = "vllm/model_executor/warmup/fused_moe_warmup.py"  # the v0.21.0 line's patch 4
    trees = [ROOT / "vllm", *sorted((ROOT / ".vseries" / "lines").glob("*/vllm"))]
    tree = next((t for t in trees if (t / walk).exists()), None)
    if tree is None:
        pytest.skip(f"no line of the series is set up with {walk} (scripts/setup.sh)")
    out = tmp_path / "w.json"
    cmd = [sys.executable, str(BENCH / "warmup_enumeration.py"), "--variant", "series",
           "--out", str(out), "--shapes", "qwen3-30b-a3b", "--max-tokens", "64", "1024",
           "--reps", "2"]  # fmt: skip
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    if tree != ROOT / "vllm":  # a kept line's tree (the main line's series moved it onto the
        # JIT warm-up framework); the workspace first: a vLLM checkout has a benchmarks package
        # of its own, and the workspace's vllm/ folder (no __init__.py) yields to the tree's;
        # the line's own packages after it, as its contract runs have them
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(tree), *line_site(tree.parent.name)])
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    head, rows = results.load(out)
    assert head["bench"] == "warmup-enumeration" and "mocked SM90 H200" in head["host"]
    assert [r["m"] for r in rows] == [64, 1024]
    assert all(r["us_min"] <= r["us"] <= r["us_max"] for r in rows)
    # more batch sizes can only add variants
    assert 1 < rows[0]["variants"] <= rows[1]["variants"]
    rep = subprocess.run(
        [sys.executable, str(BENCH / "warmup_enumeration.py"), "--report", str(out),
         "--out", str(tmp_path / "r")], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr[-2000:]
    md = (tmp_path / "r.md").read_text()
    assert f"| qwen3-30b-a3b | 1024 | {rows[1]['us'] / 1e6:.3f} " in md
    assert (tmp_path / "r.png").stat().st_size > 0


def test_moe_decode_anatomy_fits_fixed_cost_and_rate():
    """The anatomy benchmark grows one kernel's K with its grid fixed and fits
    us = fixed + MB / rate per (shape, scale kind, kernel, routing)."""
    from benchmarks import moe_decode_anatomy as anat

    qwen3 = shapes.MOE_SHAPES["qwen3-30b-a3b"]
    # w13 grows the hidden size (its K), w2 the intermediate size; the other one stays
    assert anat.sized(qwen3, "w13", 0.5) == (1024, 768)
    assert anat.sized(qwen3, "w2", 0.75) == (2048, 576)
    assert anat.sized(shapes.MOE_SHAPES["dsv3-tp8"], "w2", 0.25) == (7168, 64)
    assert max(anat.FACTORS) <= 1.0  # never past the model's own K (see FACTORS)
    assert anat.kernel_bytes("w13", 8, 2048, 768) == 8 * 2 * 768 * 2048
    # 4 us fixed, 2000 GB/s (0.5 us per MB), plus noise that cancels in pairs
    pts = [(mb, 4.0 + mb / 2.0 + d) for mb in (5.0, 10.0, 20.0) for d in (0.1, -0.1)]
    fixed, rate = anat.fit(pts)
    assert abs(fixed - 4.0) < 1e-9 and abs(rate - 2000.0) < 1e-6
    with pytest.raises(ValueError, match="two sizes"):
        anat.fit([(5.0, 7.0), (5.0, 7.2)])
    rows = [
        dict(shape="q", dtype="fp8_per_tensor_static", kernel="w2", routing="hot",
             bytes=int(mb * 1e6), us=1.0 + mb / 4.0)
        for mb in (2.0, 4.0, 8.0)
    ] + [dict(shape="q", dtype="fp8_per_tensor_static", kernel="w2", routing="hot",
              bytes=1, us=None)]  # fmt: skip
    (got,) = anat.fits(rows)
    assert (got["fixed_us"], got["rate_GBps"], got["points"]) == (1.0, 4000.0, 3)


def test_moe_decode_report_anatomy_table():
    """The report's anatomy section: one row per fit, the rate also as % of the read
    bandwidth measured in the same run, HBM and L2 rows named as such."""
    from benchmarks import moe_decode_report

    head = {
        "read_bandwidth_Bps": 4.0e12,
        "fits": [
            dict(shape="q", dtype="fp8_per_tensor_static", kernel="w2", routing="hot",
                 fixed_us=4.35, rate_GBps=4961.7, points=4),
            dict(shape="q", dtype="fp8_per_tensor_dynamic", kernel="w13", routing="cycled",
                 fixed_us=3.82, rate_GBps=3000.0, points=4),
        ],
    }  # fmt: skip
    lines = moe_decode_report.anatomy_table(head)
    assert lines[2] == "| q | dynamic | w13 | HBM (8 routings cycled) | 3.8 | 3000 | 75% |"
    assert lines[3] == "| q | static | w2 | L2 (one routing) | 4.3 | 4962 | 124% |"
    assert len(lines) == 4


@pytest.mark.parametrize(
    "ktrees, benched",
    [("series", ["series"]), ("base series", ["base", "series"])],
)
def test_kernels_phase_runs_each_tree_once(tmp_path, ktrees, benched):
    """benchmarks/h200/kernels.sh with KTREES of one tree runs each step for that tree once
    (round 11 ran it with an empty tree name as well); with no budget every step is skipped,
    so nothing needs a GPU."""
    env = dict(os.environ, OUT=str(tmp_path), KTREES=ktrees, KERNELS_BUDGET="0")
    p = subprocess.run(
        ["bash", str(BENCH / "h200" / "kernels.sh")],
        cwd=BENCH.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = p.stdout + p.stderr
    skipped = [line for line in out.splitlines() if line.startswith("!!! skipped (budget)")]
    bench = [
        line.split("--variant ")[1].split()[0] for line in skipped if "bench_moe_decode" in line
    ]
    audit = [line.split("--variant ")[1].split()[0] for line in skipped if "compile_audit" in line]
    assert bench == benched, out
    assert sorted(audit) == sorted(benched), out
    assert "--variant  " not in out and "vllm-tests-.xml" not in out
    assert "kernels phase done" in out


def test_fp8_oracle_labels_flashinfer_without_its_autotune():
    """bench_fp8_oracle.py --no-autotune times FlashInfer at its default tactics (vLLM
    v0.21.0 at -O2) under a label of its own, so that report.py can set it beside the autotuned
    run of another process; the other backends keep their labels."""
    from benchmarks import bench_fp8_oracle as b

    assert b.row_label("flashinfer_cutlass", "patched") == "flashinfer_cutlass"
    assert b.row_label("flashinfer_cutlass", "patched", autotune=False) == (
        "flashinfer_cutlass untuned"
    )
    assert b.row_label("flashinfer_cutlass", "base", autotune=False) == (
        "flashinfer_cutlass untuned (base)"
    )
    assert b.row_label("triton", "patched", autotune=False) == "triton"
    assert b.row_label("triton", "base") == "triton (base)"
    p = subprocess.run(
        [sys.executable, str(BENCH / "bench_fp8_oracle.py"), "--help"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0 and "--no-autotune" in p.stdout


def test_backends_report_puts_flashinfer_beside_triton_and_the_series(tmp_path):
    """moe_backends_report: per (shape, scales, M) v0.34.0's TRITON and FLASHINFER_CUTLASS
    layers beside the series'; the speed-up is against what the oracle picks by default
    (FLASHINFER_CUTLASS for static, TRITON for dynamic scales)."""
    from benchmarks import moe_backends_report as mbr

    def row(variant, dtype, m, us, pct):
        return results.Row("moe_layer", "qwen3-30b-a3b", dtype, m, variant, us, us, us, 1, pct)

    head = {"bench": "moe_layer", "gpu": "NVIDIA H200", "read_bandwidth_Bps": 4.3e12}
    results.write(tmp_path / "b.json", {**head, "variant": "base"},
                  [row("default", "static", 1, 25.0, 30), row("flashinfer", "static", 1, 40.0, 20),
                   row("default", "dynamic", 1, 36.0, 24)])  # fmt: skip
    results.write(tmp_path / "s.json", {**head, "variant": "series"},
                  [row("default", "static", 1, 20.0, 40), row("default", "dynamic", 1, 20.0, 42),
                   row("decode16", "dynamic", 1, 20.0, 42)])  # fmt: skip
    text, points = mbr.table(mbr.load([tmp_path / "b.json"]), mbr.load([tmp_path / "s.json"]))
    static = next(ln for ln in text.splitlines() if "| static | 1 |" in ln)
    dynamic = next(ln for ln in text.splitlines() if "| dynamic | 1 |" in ln)
    # static: default is FlashInfer (40 us): 2.00x; against TRITON (25 us): 1.25x
    assert "| 25.0, 30% | 40.0, 20% | 20.0, 40% | 2.00x | 1.25x | - |" in static
    # dynamic: no FlashInfer layer; default is TRITON (36 us): 1.80x twice
    assert "| 36.0, 24% | - | 20.0, 42% | 1.80x | 1.80x | 20.0, 42% |" in dynamic
    assert {p["dtype"]: p["flashinfer"] for p in points} == {"static": 20, "dynamic": None}
    # a static row whose FLASHINFER_CUTLASS run failed has no default figure, not TRITON's
    base = {k: v for k, v in mbr.load([tmp_path / "b.json"]).items() if k[3] != "flashinfer"}
    text, _ = mbr.table(base, mbr.load([tmp_path / "s.json"]))
    static = next(ln for ln in text.splitlines() if "| static | 1 |" in ln)
    assert "| 25.0, 30% | - | 20.0, 40% | - | 1.25x | - |" in static


def test_backends_report_adds_the_split_by_batch_column_where_it_ran(tmp_path):
    """A series run with ``decode16m`` (--decode16-split-by-batch) gets its own column; one
    without keeps the table as it was."""
    from benchmarks import moe_backends_report as mbr

    def row(variant, us):
        return results.Row("moe_layer", "dsv3-tp8", "dynamic", 4, variant, us, us, us, 1, 50)

    head = {"bench": "moe_layer", "gpu": "NVIDIA H200", "read_bandwidth_Bps": 4.3e12}
    results.write(tmp_path / "b.json", {**head, "variant": "base"}, [row("default", 73.0)])
    rows = [row("default", 73.0), row("decode16", 80.0), row("decode16m", 66.0)]
    results.write(tmp_path / "s.json", {**head, "variant": "series"}, rows)
    text, points = mbr.table(mbr.load([tmp_path / "b.json"]), mbr.load([tmp_path / "s.json"]))
    assert text.splitlines()[0].endswith(
        "| series, decode path to 16 tokens | the same, split-K by batch |"
    )
    assert "| 80.0, 50% | 66.0, 50% |" in text and points[0]["decode16m"] == 50


@pytest.mark.slow  # imports vLLM
def test_split_by_batch_agrees_at_one_token_and_stops_splitting_a_full_gpu():
    """decode_split.by_batch: at one token the patch's own config; on DeepSeek-V3 TP8 (top-8,
    hidden 7168, intermediate 256, 132 SMs) the patch splits GEMM1's K four ways at every M,
    the batch rule not from 3 tokens on (24 x 8 = 192 programs already fill the SMs)."""
    fd = pytest.importorskip("vllm.model_executor.layers.fused_moe.fused_moe_decode")
    from benchmarks import decode_split

    for m, want in ((1, 4), (2, 2), (3, 1), (16, 1)):  # 2 tokens: 16 x 8 = 128 programs
        patch = fd.get_decode_config(m, 8, 7168, 256, 132)
        mine = decode_split.by_batch(patch, m, 8, 7168, 256, 132)
        assert (patch["SPLIT_K1"], mine["SPLIT_K1"]) == (4, want)
        assert (mine == patch) == (m == 1)
    # Qwen3-30B-A3B (top-8, hidden 2048, intermediate 768): 8 x 24 tiles fill 132 SMs alone
    q = fd.get_decode_config(4, 8, 2048, 768, 132)
    assert decode_split.by_batch(q, 4, 8, 2048, 768, 132) == q


def test_report_page_says_where_the_runs_ran_and_how_the_page_was_made(tmp_path):
    """report_page: the layer reports' shared command line, first sentence and page."""
    from benchmarks import report_page

    head = {"gpu": "NVIDIA H200", "clocks": "1980 MHz", "torch": "2.14.0", "triton": "3.8.0"}
    results.write(tmp_path / "s2.json", {**head, "read_bandwidth_Bps": 1e12}, [])
    results.write(tmp_path / "s1.json", {**head, "read_bandwidth_Bps": 4.376e12}, [])
    series = [str(tmp_path / "s2.json"), str(tmp_path / "s1.json")]
    ap = report_page.parser("What the report shows.\n\n    python benchmarks/x.py ...")
    assert ap.description == "What the report shows."
    a = ap.parse_args(["--base", "b.json", "--series", *series, "--out", str(tmp_path / "x")])
    found = report_page.series_header(a)  # the first series file by name: s1
    assert report_page.ran("1 run of v0.34.0 and 2 of the series", found) == (
        "1 run of v0.34.0 and 2 of the series, one NVIDIA H200, torch 2.14.0, Triton "
        "3.8.0; read bandwidth 4.38 TB/s measured in the same run."
    )
    assert "one NVIDIA H200 (clocks 1980 MHz), torch" in report_page.ran("r", found, True)
    md = report_page.page(a, "/any/benchmarks/moe_layer_report.py", "Title", "Intro.", "| t |")
    assert md == (
        "# Title\n\nIntro.\n\n| t |\n\n![plot](x.png)\n\nMade by: `see benchmarks/results/"
        f"README.md`; table: `python benchmarks/moe_layer_report.py --base b.json --series "
        f"{' '.join(series)} --out {tmp_path / 'x'}`\n"
    )
    (tmp_path / "notes.md").write_text("- A note.\n\n")
    a = ap.parse_args(
        ["--base", "b.json", "--series", *series, "--out", str(tmp_path / "x"),
         "--notes", str(tmp_path / "notes.md"), "--command", "bash moved.sh"]
    )  # fmt: skip
    md = report_page.page(a, "moe_backends_report.py", "Title", "Intro.", "| t |")
    assert "![plot](x.png)\n\n- A note.\n\nMade by: `bash moved.sh`; table: `python " in md
    drawn = []
    report_page.write(a, md, drawn.append)
    assert (tmp_path / "x.md").read_text() == md and drawn == [tmp_path / "x.png"]


@pytest.mark.parametrize("script", ["moe_layer_report", "moe_backends_report"])
def test_layer_reports_write_their_page_and_plot(script, tmp_path):
    def row(variant, dtype, m, us):
        return results.Row("moe_layer", "qwen3-30b-a3b", dtype, m, variant, us, us, us, 1, 40.0)

    head = {"bench": "moe_layer", "gpu": "NVIDIA H200", "clocks": "1980 MHz", "torch": "2.14.0"}
    head |= {"triton": "3.8.0", "read_bandwidth_Bps": 4.3e12}
    for tree, us in (("base", 30.0), ("series", 20.0)):
        rows = [row("default", d, m, us * m) for d in ("static", "dynamic") for m in (1, 2)]
        results.write(tmp_path / f"{tree}.json", {**head, "variant": tree}, rows)
    out = tmp_path / "page"
    p = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{script}", "--base", str(tmp_path / "base.json"),
         "--series", str(tmp_path / "series.json"), "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# FP8 MoE layer on v0.34.0: ") and out.with_suffix(".png").stat().st_size
    first = md.split("\n\n")[1]
    assert first.startswith("1 run") and "one NVIDIA H200" in first
    assert "read bandwidth 4.30 TB/s measured in the same run. The layer as" in first
    assert md.endswith(f"table: `python benchmarks/{script}.py --base {tmp_path / 'base.json'} "
                       f"--series {tmp_path / 'series.json'} --out {out}`\n")  # fmt: skip


@pytest.mark.slow  # imports vLLM's FP8 oracle: 6 s of CPU on a loaded 2-core host
def test_layer_benchmark_names_its_classes_in_the_series_tree():
    """bench_moe_layer's header names the experts classes it can time, from ``candidates``'
    (class, backend) pairs: the series' decode backend's classes, then TRITON's. On the H200
    (2026-12-05) the header read ``c.__name__`` of each pair and every run stopped before its
    first row; this runs the same code on the CPU against the series tree in the venv."""
    from vllm.model_executor.layers.fused_moe.oracle import fp8

    from benchmarks import bench_moe_layer as b

    pairs = b.candidates()
    names = b.class_names()
    assert names == [c.__name__ for c, _ in pairs] and all(isinstance(n, str) for n in names)
    backends = [be for _, be in pairs]
    assert backends[-1] == "TRITON" and "TritonExperts" in names
    # the series' decode backend comes first when the tree has one
    if "TRITON_FP8_DECODE" in fp8.Fp8MoeBackend.__members__:
        assert backends[0] == "TRITON_FP8_DECODE" and names[0] != "TritonExperts"


def test_the_pr_body_snippet_is_the_upstream_script():
    """0004's message carries benchmarks/upstream/time_fused_experts_ep.py (from its imports
    on, indented as a code block, single blank lines: `git am` folds a run of them, so a
    message with two would change at every refresh) for a reviewer to rerun: the two must
    not drift apart."""
    script = (ROOT / "benchmarks/upstream/time_fused_experts_ep.py").read_text()
    code = re.sub(r"\n{3,}", "\n\n", script[script.index("import functools") :])
    block = "\n".join(f"    {line}" if line else "" for line in code.splitlines())
    [patch] = (ROOT / "patches").glob("0004-*.patch")
    assert block in patch.read_text()


def test_fp8_quant_benchmark_times_both_quantized_inputs_of_a_layer():
    """The two inputs a MoE layer quantizes at M tokens: the hidden states (M x hidden) and
    the intermediate rows (M * top-k x intermediate), from the shape's one record."""
    from benchmarks import bench_fp8_quant, shapes

    for name, (_, topk, hidden, inter) in shapes.MOE_SHAPES.items():
        assert bench_fp8_quant.sites(name, 3) == {"a1": (3, hidden), "a2": (3 * topk, inter)}
    assert bench_fp8_quant.sites("qwen3-30b-a3b", 1) == {"a1": (1, 2048), "a2": (8, 768)}


def test_fp8_quant_benchmark_holds_a_form_to_the_cuda_op_bytes_and_scale():
    """``equal`` / ``equal_one_block``: every FP8 byte and the scale as v0.34.0's op gives
    them (one flipped bit or another scale is a difference); no ``--one-block``, no arm."""
    import torch

    from benchmarks import bench_fp8_quant

    q = torch.tensor([[1.0, -2.0, 448.0, 0.0]]).to(torch.float8_e4m3fn)
    s = torch.ones(1)
    flipped = q.clone()
    flipped.view(torch.uint8)[0, 0] ^= 1
    assert bench_fp8_quant.same((q, s), (q.clone(), s.clone()))
    assert not bench_fp8_quant.same((q, s), (flipped, s))
    assert not bench_fp8_quant.same((q, s), (q, s * 2))
    assert bench_fp8_quant.one_block(None) is None


def test_fp8_quant_benchmark_judges_a_form_on_its_own_row_only():
    """A case's ``equal`` / ``equal_one_block`` land on the row of the form they judge, not on
    every arm's row: counting the rows that hold a judgment counts each case once."""
    from benchmarks import bench_fp8_quant

    extra = {"site": "a1", "rows": 1, "cols": 2048, "equal": True, "equal_one_block": False}
    got = {arm: bench_fp8_quant.row_extra(extra, arm)
           for arm in ("cuda", "static", "one_program", "one_block")}  # fmt: skip
    case = {"site": "a1", "rows": 1, "cols": 2048}
    assert got["cuda"] == got["static"] == case
    assert got["one_program"] == {**case, "equal": True}
    assert got["one_block"] == {**case, "equal_one_block": False}
    assert "equal" in extra and "equal_one_block" in extra  # the case's own fields untouched


def _upstream_tuner_functions() -> dict:
    """``get_configs_compute_bound`` and ``prune_xpu_search_space`` as the pinned tree's
    ``benchmarks/kernels/benchmark_moe.py`` defines them, run on this host (its module imports
    Ray, which the workspace does not install): their source, with vLLM's platform (not ROCm,
    not XPU: the CUDA space) and Triton's ``next_power_of_2``."""
    import ast
    import itertools

    import triton
    from vllm.platforms import current_platform

    src = (ROOT / "vllm/benchmarks/kernels/benchmark_moe.py").read_text()
    wanted = {"get_configs_compute_bound", "prune_xpu_search_space"}
    defs = [n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {d.name for d in defs} == wanted
    ns = {"current_platform": current_platform, "product": itertools.product, "triton": triton,
          "BenchmarkConfig": dict}  # fmt: skip
    exec(compile(ast.Module(body=defs, type_ignores=[]), "benchmark_moe.py", "exec"), ns)
    return ns


def test_tune_prunes_the_search_space_as_upstream_prunes_xpu():
    """tune_fused_moe times what upstream's own rule keeps (tiles no taller than the rows one
    expert receives), for every shape and batch: the decode-batch space of a 128-expert top-8
    layer is BLOCK_SIZE_M = 16, 384 of the 1920 CUDA configurations."""
    from types import SimpleNamespace

    from benchmarks import tune_fused_moe as t

    up = _upstream_tuner_functions()
    tuner = SimpleNamespace(**{k: up[k] for k in ("get_configs_compute_bound",
                                                  "prune_xpu_search_space")})  # fmt: skip
    space = up["get_configs_compute_bound"](False, None)
    assert len(space) == 1920
    for experts, topk, _, _ in shapes.MOE_SHAPES.values():
        for batches in ([1], [1, 2, 3, 4], [1, 2, 3, 4, 8, 16], [64], [512]):
            want = up["prune_xpu_search_space"](max(batches), space, topk, experts)
            assert t.search_space(tuner, batches, topk, experts) == want, (experts, batches)
    qwen = t.search_space(tuner, list(t.BATCHES), 8, 128)
    assert len(qwen) == 384 and {c["BLOCK_SIZE_M"] for c in qwen} == {16}
    assert t.search_space(tuner, [1], 8, 128, prune=False) == space


def test_tune_refuses_a_tree_without_vllms_tuner(tmp_path):
    """Run outside a vLLM tree (no benchmarks/kernels/benchmark_moe.py) it says where to run
    it and exits 2, before it needs Ray or a GPU."""
    p = subprocess.run(
        [sys.executable, "-P", "-m", "benchmarks.tune_fused_moe", "--shape", "qwen3-30b-a3b",
         "--save-dir", str(tmp_path), "--out", str(tmp_path / "t.json")],
        capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert p.returncode == 2, p.stderr[-2000:]
    assert "benchmark_moe.py: run from a vLLM tree" in p.stderr
    assert not list(tmp_path.iterdir())


def test_tune_report_sets_0003_beside_the_tuned_baseline(tmp_path):
    """tune_report.py: the tuner's two configurations per batch, then the layer of the three
    trees with the speed-ups per turn (tuned against v0.34.0, the series against tuned)."""
    from benchmarks import tune_report

    cfg = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
           "num_warps": 4, "num_stages": 4}  # fmt: skip
    best = {**cfg, "BLOCK_SIZE_N": 32, "num_stages": 5}
    rows = [results.Row("tune_fused_moe", "qwen3-30b-a3b", "fp8_w8a8", 1, v, us, None, None,
                        0, None, {"config": c}) for v, us, c in
            (("default", 30.0, cfg), ("tuned", 24.0, best))]  # fmt: skip
    results.write(tmp_path / "tune.json", {"bench": "tune_fused_moe", "variant": "tuned"}, rows)
    files = {}
    for tree, us in (("base", 25.0), ("tuned", 20.0), ("series", 16.0)):
        files[tree] = []
        for r, scale in enumerate((1.0, 1.1), 1):
            p = tmp_path / f"moe_layer-t-{tree}-r{r}.json"
            row = results.Row("moe_layer", "qwen3-30b-a3b", "static", 1, "default", us * scale,
                              us, us * 1.2, 10_000_000, 100 * 8.5 / (us * scale))  # fmt: skip
            head = {"bench": "moe_layer", "variant": tree, "gpu": "NVIDIA H200", "clocks": "x",
                    "torch": "2.14.0", "triton": "3.8.0", "read_bandwidth_Bps": 4.3e12}  # fmt: skip
            results.write(p, head, [row])
            files[tree].append(str(p))
    out = tmp_path / "page"
    assert tune_report.main(["--tune", str(tmp_path / "tune.json"), "--base", *files["base"],
                             "--tuned", *files["tuned"], "--series", *files["series"],
                             "--out", str(out)]) == 0  # fmt: skip
    md = (tmp_path / "page.md").read_text()
    assert "| 1 | 30.0 | 16x64x128 g1 w4 s4 | 24.0 | 16x32x128 g1 w4 s5 | 1.25x |" in md
    assert (
        "| qwen3-30b-a3b | static | 1 | 26.2 (25.0-27.5) | 21.0 (20.0-22.0) | "
        "16.8 (16.0-17.6) | 1.25x (1.25x-1.25x) | 1.25x (1.25x-1.25x) | 41% -> 51% |"
    ) in md
    assert "2 runs each of v0.34.0, v0.34.0 with the tuned file and the series" in md
    assert f"--tuned {' '.join(files['tuned'])} --tune {tmp_path / 'tune.json'} --out" in md
    assert (tmp_path / "page.png").stat().st_size > 0


def test_fp8_quant_sweep_needs_the_one_block_build(tmp_path):
    """--sweep times the one-block kernel across its limit: without its library there is
    nothing to sweep, and the command says which option is missing before touching a GPU."""
    p = subprocess.run(
        [sys.executable, str(BENCH / "bench_fp8_quant.py"), "--variant", "base",
         "--out", str(tmp_path / "r.json"), "--sweep"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert p.returncode == 2 and "give --one-block SO" in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "r.json").exists()
