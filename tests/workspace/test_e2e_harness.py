"""CPU tests of the end-to-end serving harness (benchmarks/e2e, issue 11).

What runs here: model directories and the tokenizer, the intermediate trees (on a synthetic
repo), schedules, results files, log parsing against v0.21.0's message formats (and a check
that each format is still in the pinned source), the Triton compile hook driven through
Triton's own ``JITFunction._call_hook``, server command / environment / memory plan, process
group stop, the report from synthetic results, and the runner's dry run and resume. Marked
slow (vLLM import, 15-40 s each on 2 cores): vLLM v0.21.0's own parsers accept every command
line the harness builds and sample the workloads with the local tokenizer; the in-process
bench client runs vLLM's ``vllm bench serve`` code against a stand-in HTTP server; and the
whole runner runs on that stand-in. The stand-in (STANDIN below) is not vLLM: it answers the
three endpoints the runner and vLLM's bench client use and prints v0.21.0-format log lines,
so that what is tested is the harness and vLLM's real client code. Nothing here needs a GPU.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import git, make_patch

from benchmarks import gpu, shapes
from benchmarks.e2e import (
    commands,
    compare,
    compile_hook,
    compiles,
    logparse,
    memory,
    models,
    names,
    plan,
    records,
    report,
    schedule,
    servers,
    state,
)
from benchmarks.e2e import serve as runner
from vseries import results

ROOT = Path(__file__).resolve().parents[2]


def _source_of(tag: str) -> tuple[Path, str] | None:
    """The checkout and commit of release ``tag`` in this workspace: the main line's vllm/ when
    the pin (upstream.toml) is that release, else a kept line's tree (lines/<tag>/), read from
    its own pin; None when neither is materialised."""
    from vseries import pin as pinmod

    for pin_file, tree in (
        (ROOT / "upstream.toml", ROOT / "vllm"),
        (ROOT / "lines" / tag / "upstream.toml", ROOT / ".vseries" / "lines" / tag / "vllm"),
    ):
        if pin_file.exists() and (tree / ".git").exists():
            pin = pinmod.load(pin_file)
            if pin.tag == tag:
                return tree, pin.commit
    return None


def _has(mod: str) -> bool:
    try:
        __import__(mod)
        return True
    except Exception:
        return False


needs_tokenizers = pytest.mark.skipif(
    not _has("tokenizers"), reason="the 'tokenizers' package is not installed (vLLM brings it)"
)
needs_vllm = pytest.mark.skipif(
    not (ROOT / "vllm" / "vllm" / "__init__.py").exists() or not _has("vllm.version"),
    reason="vLLM (scripts/setup.sh) is not installed in this environment",
)
needs_triton = pytest.mark.skipif(not _has("triton.knobs"), reason="Triton is not installed")


def _installed_vllm() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return ""


# The harness drives vLLM's CLI, datasets and config code of the release whose logs it reads;
# against another release these tests would test that release, not the harness.
needs_harness_release = pytest.mark.skipif(
    not _installed_vllm().startswith(logparse.LOG_FORMATS[1:]),
    reason=f"the e2e harness drives vLLM {logparse.LOG_FORMATS} (logparse.LOG_FORMATS); the "
    f"installed vLLM is {_installed_vllm() or 'absent'}: the harness serves the kept line; its "
    "port to the main line is open work (docs/ROADMAP.md)",
)


# ----------------------------------------------------------------------------- models


@pytest.fixture(scope="module")
def tok_json():
    pytest.importorskip("tokenizers", reason="the 'tokenizers' package is not installed")
    return models.train_tokenizer()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tok_json) -> Path:
    return models.write_model(
        tmp_path_factory.mktemp("models"), "qwen3-30b-a3b", "fp8static", 2, tok_json
    )


def test_model_configs():
    q = models.model_config("qwen3-30b-a3b", "fp8static", 24)
    assert q["num_hidden_layers"] == 24 and q["max_window_layers"] == 24
    assert q["quantization_config"] == {"quant_method": "fp8", "activation_scheme": "static"}
    assert q["architectures"] == ["Qwen3MoeForCausalLM"] and q["num_experts"] == 128
    m = models.model_config("mixtral-8x7b", "fp8dyn")
    assert "quantization_config" not in m
    assert m["architectures"] == ["MixtralForCausalLM"]
    want = {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
        "rope_theta": 1e6,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-5,
        "sliding_window": None,
    }
    assert {k: m[k] for k in want} == want
    assert models.dir_name("mixtral-8x7b", "fp8dyn", 32) == "mixtral-8x7b-fp8dyn-L32"
    with pytest.raises(ValueError):
        models.model_config("mixtral-8x7b", "fp8dyn", 33)
    with pytest.raises(ValueError):
        models.model_config("llama", "fp8dyn")
    # the base config is not modified by a reduced copy
    assert shapes.get("qwen3-30b-a3b").config["num_hidden_layers"] == 48


@needs_tokenizers
def test_model_dir_is_deterministic(tmp_path, tok_json):
    a = models.write_model(tmp_path / "a", "mixtral-8x7b", "fp8static", 4, tok_json)
    b = models.write_model(tmp_path / "b", "mixtral-8x7b", "fp8static", 4, tok_json)
    assert a.name == "mixtral-8x7b-fp8static-L4"
    files = sorted(p.name for p in a.iterdir())
    assert files == ["VSERIES_MODEL.json", "config.json", "tokenizer.json", "tokenizer_config.json"]
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    man = models.read_manifest(a)
    assert man["layers"] == 4 and man["serve_args"] == ["--quantization", "fp8"]
    tc = json.loads((a / "tokenizer_config.json").read_text())
    assert tc["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (tc["bos_token"], tc["eos_token"]) == ("<s>", "</s>")
    tok = json.loads(tok_json)
    assert len(tok["model"]["vocab"]) == 32000
    assert [t["content"] for t in tok["added_tokens"]] == ["<unk>", "<s>", "</s>"]
    # re-writing leaves the files alone
    mtime = (a / "tokenizer.json").stat().st_mtime_ns
    models.write_model(tmp_path / "a", "mixtral-8x7b", "fp8static", 4, tok_json)
    assert (a / "tokenizer.json").stat().st_mtime_ns == mtime


@pytest.mark.slow
@needs_tokenizers
def test_tokenizer_retrained_is_identical(tok_json):
    assert models.train_tokenizer() == tok_json


@pytest.mark.slow
def test_model_dir_loads_with_transformers(model_dir, tmp_path, tok_json):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    assert len(tok) == 32000 and tok.vocab_size == 32000
    assert (tok.bos_token_id, tok.eos_token_id) == (1, 2)
    assert tok.num_special_tokens_to_add() == 0
    text = "bakiro tosu, 1234!"
    assert tok.decode(tok.encode(text)) == text
    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    assert cfg.model_type == "qwen3_moe" and cfg.num_hidden_layers == 2
    mix = models.write_model(tmp_path, "mixtral-8x7b", "fp8dyn", None, tok_json)
    cfg = transformers.AutoConfig.from_pretrained(mix)
    assert cfg.model_type == "mixtral" and cfg.num_local_experts == 8


# ----------------------------------------------------------------------------- trees


def test_trees_from_the_series(tiny, tmp_path):
    from benchmarks.e2e import trees

    vdir = tiny / "vllm"
    p1 = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 2\n"), "[P] one")
    p2 = make_patch(vdir, tiny / "patches", lambda r: (r / "a.py").write_text("a = 1\n"), "[P] two")
    (tiny / "patches" / "series").write_text(f"{p1.name}\n{p2.name} contract=tests/x.py\n")
    pin = git(vdir, "rev-parse", "HEAD")

    assert names.patch_count("base", 2) == 0 and names.patch_count("series", 2) == 2
    assert names.patch_count("p1", 2) == 1 and names.patch_count("p1_2", 2) == 2
    assert names.canonical("p1-2") == "p1_2" and names.canonical("p1_1") == "p1"
    with pytest.raises(ValueError):
        names.patch_count("p1_3", 2)
    with pytest.raises(ValueError):
        names.patch_count("p2", 2)

    base = trees.build("base")
    one = trees.build("p1")
    full = trees.build("series")
    assert base == tiny / ".vseries" / "trees" / "base"
    assert git(base, "rev-parse", "HEAD") == pin
    assert (one / "b.py").read_text() == "x = 2\n" and (one / "a.py").read_text() != "a = 1\n"
    assert (full / "a.py").read_text() == "a = 1\n"
    meta = json.loads((full / names.TREE_JSON).read_text())
    assert meta["patches"] == [p1.name, p2.name] and meta["pin"] == pin
    assert meta["head"] == git(full, "rev-parse", "HEAD")
    assert git(full, "log", "--format=%cn", "-1") == "vseries"  # apply's fixed committer
    # idempotent: nothing rebuilt
    head = meta["head"]
    stamp = (full / names.TREE_JSON).stat().st_mtime_ns
    assert trees.build("series") == full
    assert (full / names.TREE_JSON).stat().st_mtime_ns == stamp
    # a changed patch file rebuilds the tree
    p2.write_text(p2.read_text().replace("a = 1", "a = 7"))
    trees.build("series")
    assert (full / "a.py").read_text() == "a = 7\n"
    assert json.loads((full / names.TREE_JSON).read_text())["head"] != head
    # a local change is reset too
    (one / "b.py").write_text("junk\n")
    trees.build("p1")
    assert (one / "b.py").read_text() == "x = 2\n"
    cmd = trees.stage_command({"base": base, "series": full})
    assert "--src base=.vseries/trees/base --src series=.vseries/trees/series" in cmd
    assert "--attention" in cmd and "--deepgemm" not in cmd
    dg = trees.stage_command({"base": base, "series": full}, arch="deepseek-v4")
    assert "stage.py --attention --deepgemm --src base=" in dg


def test_trees_refuse_a_patch_that_does_not_apply(tiny):
    from benchmarks.e2e import trees
    from vseries.errors import SeriesError

    vdir = tiny / "vllm"
    p1 = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 2\n"), "[P] one")
    p1.write_text(p1.read_text().replace("-x = 1", "-x = 9"))
    (tiny / "patches" / "series").write_text(f"{p1.name}\n")
    with pytest.raises(SeriesError, match="does not apply"):
        trees.build("p1")
    assert git(tiny / ".vseries" / "trees" / "p1", "status", "--porcelain") == ""


# ----------------------------------------------------------------------------- schedule


def test_schedule_cells_and_alternation():
    assert schedule.parse_cells("decode:4,prefill:16") == (("decode", 4), ("prefill", 16))
    assert len(schedule.parse_cells("mixed:*")) == 4
    with pytest.raises(ValueError):
        schedule.parse_cells("chat:4")
    runs = schedule.plan(["base", "series"], (("decode", 4), ("prefill", 16)), 3, 0)
    assert len(runs) == 12
    order = [(r.rep, r.workload, r.tree) for r in runs]
    assert order[:4] == [
        (0, "decode", "base"),
        (0, "decode", "series"),
        (0, "prefill", "base"),
        (0, "prefill", "series"),
    ]
    assert order[4:6] == [(1, "decode", "series"), (1, "decode", "base")]  # reversed
    p1 = schedule.plan(["base", "series"], (("decode", 4),), 2, 1)
    assert [r.tree for r in p1] == ["series", "base", "base", "series"]
    # the same prompts for both trees of a repetition; other prompts in other repetitions
    assert schedule.num_prompts(0.1, 5, 16) == 32 and schedule.num_prompts(50, 5, 1) == 250
    assert schedule.calibrated(3.0, [1.0, 5.0, 2.0]) == 2.0
    assert schedule.calibrated(3.0, []) == 3.0


def test_slowness_scales_a_slow_trees_timeout(model_dir, tmp_path):
    """Round 11: every tree of a repetition gets the same prompts, and the FlashInfer trees (4x
    slower at decode) ran past the 4 x cost timeout at mixed c=64. schedule.slowness gives how
    many times slower a tree ran than the fastest tree, the worst over the cells it ran (not
    the median tree: two slow trees of four make the median a slow one); the runner seeds it
    from resumed records and sizes a tree's run at its own rate where it has one."""
    rates = {
        ("base", "decode", 1): [0.53, 0.54],
        ("p1", "decode", 1): [0.53],
        ("p1_2", "decode", 1): [2.16],
        ("series", "decode", 1): [2.32],
        ("series", "mixed", 64): [10.0],
    }
    assert schedule.slowness(rates, "base") == pytest.approx(2.32 / 0.54)  # its median 0.54
    assert schedule.slowness(rates, "p1") == pytest.approx(2.32 / 0.53)
    assert schedule.slowness(rates, "p1_2") == pytest.approx(2.32 / 2.16)
    assert schedule.slowness(rates, "series") == 1.0  # the fastest
    assert schedule.slowness(rates, "nobody") == 1.0

    def record(tree, completed, duration, ok=True, model=None, workload="decode", c=1):
        return {
            "kind": "serve", "ok": ok, "model": model or model_dir.name, "tree": tree,
            "workload": workload, "concurrency": c, "process": 0, "rep": 0,
            "run_id": tree + workload + str(completed),
            "vllm": {"completed": completed, "duration": duration},
        }  # fmt: skip

    resumed = tmp_path / "old.jsonl"
    resumed.write_text(
        "\n".join(
            json.dumps(r)
            for r in (
                record("base", 16, 32.0),
                record("series", 16, 8.0),
                record("series", 16, 80.0, ok=False),  # failed runs do not count
                record("base", 16, 3.2, model="another-model"),  # nor other models
                record("series", 600, 60.0, workload="mixed", c=64),
            )
        )
        + "\n"
    )
    p = plan.parse(
        ["--model", str(model_dir), "--trees", "base", "series", "--out", str(tmp_path),
         "--quick", "--dry-run", "--resume", str(resumed)]
    )  # fmt: skip
    st = state.State.start(p)
    assert st.sizing.rates == {
        ("base", "decode", 1): [0.5],
        ("series", "decode", 1): [2.0],
        ("series", "mixed", 64): [10.0],
    }
    assert schedule.slowness(st.sizing.rates, "base") == pytest.approx(4.0)
    # prompts are sized for the fastest tree (series, 2.0 req/s), so every run lasts at least
    # --target-s; without runs of a cell, the schedule's estimate
    assert st.sizing.rate("decode", 1) == 2.0 and st.sizing.rate("mixed", 64) == 10.0
    assert st.sizing.rate("prefill", 16) == schedule.est_request_rate(
        p.model.shape.cost, p.model.depth, schedule.WORKLOADS["prefill"], 16
    )
    # base has not run mixed c=64: its run is sized at the cell's rate / 4 (series: its own)
    base_mixed = schedule.Run("base", "mixed", 64, 0, 0)
    series_mixed = schedule.Run("series", "mixed", 64, 0, 0)
    n = st.sizing.prompts("mixed", 64)
    assert st.sizing.run_cost(series_mixed) == pytest.approx(n / 10.0 + schedule.RUN_OVERHEAD_S)
    assert st.sizing.run_cost(base_mixed) == pytest.approx(
        n / (st.sizing.rate("mixed", 64) / 4.0) + schedule.RUN_OVERHEAD_S
    )
    # base's decode runs: its own rate
    base_decode = schedule.Run("base", "decode", 1, 0, 0)
    assert st.sizing.run_cost(base_decode) == pytest.approx(
        st.sizing.prompts("decode", 1) / 0.5 + schedule.RUN_OVERHEAD_S
    )


def test_first_observed_tree_slow_does_not_size_short_runs(model_dir, tmp_path):
    """Round 12: the only mixed c=64 run on record was the base's (FlashInfer, ~4x slower
    than the Triton trees at decode), and the next repetition was sized at its rate: 128
    prompts, 3-s runs for the series. Until every tree has run a cell, an observed tree's
    rate counts at its speed scaled by its slowness elsewhere."""

    def record(tree, completed, duration, workload, c):
        return {
            "kind": "serve", "ok": True, "model": model_dir.name, "tree": tree,
            "workload": workload, "concurrency": c, "process": 0, "rep": 0,
            "run_id": f"{tree}-{workload}-{completed}-{duration}",
            "vllm": {"completed": completed, "duration": duration},
        }  # fmt: skip

    resumed = tmp_path / "old.jsonl"
    rows = [
        record("base", 16, 32.0, "decode", 1),  # 0.5 req/s
        record("series", 16, 8.0, "decode", 1),  # 2.0 req/s: base is 4x slower
        record("base", 733, 64.6, "mixed", 64),  # 11.3 req/s, the only mixed run
    ]
    resumed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = plan.parse(
        ["--model", str(model_dir), "--trees", "base", "series", "--out", str(tmp_path),
         "--quick", "--dry-run", "--resume", str(resumed), "--target-s", "10"]
    )  # fmt: skip
    st = state.State.start(p)
    base_mixed = 733 / 64.6
    assert st.sizing.rate("mixed", 64) == pytest.approx(base_mixed * 4.0)
    assert st.sizing.prompts("mixed", 64) >= int(base_mixed * 4.0 * 10) - 1
    # once every tree of the session has run the cell: the fastest one's own median
    rows.append(record("series", 600, 12.0, "mixed", 64))
    resumed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert state.State.start(p).sizing.rate("mixed", 64) == pytest.approx(50.0)


def test_no_time_kept_for_a_process_that_cannot_start(model_dir, tmp_path):
    """Round 12: a process stopped its later repetitions with 110 s left, keeping 403 s for
    later processes of which the next needed 168 s; none could start. Time is kept only for
    the later processes that fit, in order."""
    p = plan.parse(
        ["--model", str(model_dir), "--trees", "base", "series", "--out", str(tmp_path),
         "--quick", "--dry-run", "--processes", "3"]
    )  # fmt: skip
    st = state.State.start(p)
    later = [(p, st.todo(p)) for p in (1, 2)]
    needs = [st.sizing.process_need(r, b, 2) for _, (r, b) in later]
    assert needs[0] > 0 and needs[1] > 0
    assert st.sizing.reserve_for_later(later, needs[0] - 1, 2) == 0.0
    assert st.sizing.reserve_for_later(later, needs[0] + 1, 2) == pytest.approx(needs[0])
    assert st.sizing.reserve_for_later(later, sum(needs) + 1, 2) == pytest.approx(sum(needs))
    assert st.sizing.reserve_for_later([], 1000.0, 2) == 0.0


def test_workload_ranges():
    d, p, m = (schedule.WORKLOADS[k] for k in ("decode", "prefill", "mixed"))
    assert d.input_range() == (128, 128) and d.output_range() == (128, 256)
    assert p.input_range() == (1024, 2048) and p.output_range() == (16, 16)
    assert m.input_range() == (384, 640) and m.output_range() == (96, 160)
    args = d.bench_args()
    assert json.loads(args[args.index("--random-range-ratio") + 1]) == {
        "input": 0.0,
        "output": 0.3333,
    }
    assert schedule.max_model_len(schedule.PRESETS["full"].cells) == 2560
    # est. rate is positive and prefill-bound at high concurrency
    cost = shapes.get("qwen3-30b-a3b").cost
    r1 = schedule.est_request_rate(cost, 1.0, p, 1)
    r64 = schedule.est_request_rate(cost, 1.0, p, 64)
    assert 0 < r1 < r64 <= 1 / (p.input_len * 0.02e-3) + 1e-9


# ----------------------------------------------------------------------------- results


def test_results_append_load_resume(tmp_path):
    f = tmp_path / "r.jsonl"
    base = {
        "kind": "serve",
        "model": "m",
        "workload": "decode",
        "concurrency": 4,
        "process": 0,
        "rep": 0,
    }
    results.append_line(f, {**base, "run_id": "a", "tree": "base", "ok": True})
    results.append_line(f, {**base, "run_id": "b", "tree": "series", "ok": False})
    results.append_line(
        f, {"kind": "probe", "run_id": "c", "model": "m", "tree": "base", "process": 0, "ok": True}
    )
    with open(f, "a") as fh:
        fh.write('{"kind": "serve", "run_id": "torn"')  # a process killed mid-line
    g = tmp_path / "g.jsonl"
    shutil.copy(f, g)  # a merged copy repeats every record
    recs = results.read_lines([f, g, tmp_path / "missing.jsonl"])
    assert [r["run_id"] for r in recs] == ["a", "b", "c"]
    done = records.done_keys(records.read([f, g, tmp_path / "missing.jsonl"]))
    assert ("serve", "m", "base", "decode", 4, 0, 0) in done
    assert ("serve", "m", "series", "decode", 4, 0, 0) not in done  # failed: run again
    assert ("probe", "m", "base", 0) in done


# ----------------------------------------------------------------------------- log parsing

# Lines as vLLM v0.21.0 prints them (vllm/logger.py _FORMAT, the "(name pid=N) " prefix of
# child processes from vllm/utils/system_utils.py); messages from the pinned sources named in
# logparse.py, with made-up values.
EC, API = "(EngineCore_DP0 pid=4242) ", "(APIServer pid=4200) "


def _line(prefix: str, level: str, hms: str, src: str, msg: str) -> str:
    return f"{prefix}{level} 12-01 {hms} [{src}] {msg}"


SAMPLE_LOG = (
    "\n".join(
        [
            _line("", "INFO", "10:10:01", "utils.py:253", "non-default args: {'port': 8100}"),
            _line(
                EC,
                "INFO",
                "10:10:30",
                "v1/worker/gpu_model_runner.py:4960",
                "Model loading took 29.21 GiB memory and 12.345678 seconds",
            ),
            _line(
                EC,
                "INFO",
                "10:10:31",
                "model_executor/.../oracle/fp8.py:327",
                "Using FLASHINFER_CUTLASS Fp8 MoE backend out of potential backends: ['AITER', "
                "'FLASHINFER_TRTLLM', 'FLASHINFER_CUTLASS', 'DEEPGEMM', 'TRITON', 'MARLIN'].",
            ),
            _line(
                EC,
                "INFO",
                "10:10:40",
                "compilation/backends.py:1149",
                "Dynamo bytecode transform time: 6.12 s",
            ),
            _line(
                EC,
                "INFO",
                "10:10:58",
                "compilation/backends.py:394",
                "Compiling a graph for compile range (1, 8192) takes 17.50 s",
            ),
            _line(
                EC,
                "INFO",
                "10:10:59",
                "compilation/monitor.py:48",
                "torch.compile took 25.31 s in total",
            ),
            _line(
                EC,
                "INFO",
                "10:11:00",
                "v1/core/kv_cache_utils.py:1710",
                "GPU KV cache size: 39,936 tokens",
            ),
            _line(
                EC,
                "INFO",
                "10:11:01",
                "v1/worker/gpu_worker.py:602",
                "Compile and warming up model for size 8192",
            ),
            _line(
                EC,
                "INFO",
                "10:11:09",
                "model_executor/warmup/kernel_warmup.py:69",
                "Warming up FlashInfer attention.",
            ),
            _line(
                EC,
                "INFO",
                "10:11:20",
                "model_executor/warmup/kernel_warmup.py:52",
                "Triton fused-MoE warmup: 4608 layer calls over 1..8192 tokens in 3.25 s "
                "(VLLM_TRITON_MOE_WARMUP=skip to skip).",
            ),
            _line(
                EC,
                "INFO",
                "10:11:24",
                "v1/worker/gpu_model_runner.py:6244",
                "Graph capturing finished in 14 secs, took 0.52 GiB",
            ),
            _line(
                EC,
                "INFO",
                "10:11:25",
                "triton_utils/jit_monitor.py:54",
                "Kernel JIT monitor activated — Triton JIT compilations during inference will be "
                "logged as warnings.",
            ),
            _line(
                EC,
                "INFO",
                "10:11:25",
                "v1/engine/core.py:298",
                "init engine (profile, create kv cache, warmup model) took 54.90 s "
                "(compilation: 25.31 s)",
            ),
            _line(
                API,
                "INFO",
                "10:11:27",
                "entrypoints/openai/api_server.py:617",
                "Starting vLLM server on http://127.0.0.1:8100",
            ),
            _line(
                EC,
                "WARNING",
                "10:12:03",
                "triton_utils/jit_monitor.py:103",
                "Triton kernel JIT compilation during inference: fused_moe_kernel. This causes a "
                "latency spike; consider extending warmup to cover this shape/config.",
            ),
            EC + "Triton autotuning for function _w8a8_kernel,",
            _line(
                EC,
                "ERROR",
                "10:13:00",
                "v1/engine/core.py:1100",
                "EngineCore encountered a fatal error.",
            ),
        ]
    )
    + "\n"
)
SERIES_BACKEND = (
    "(EngineCore_DP0 pid=77) INFO 12-01 10:10:31 [model_executor/.../oracle/fp8.py:328] "
    "Using TRITON Fp8 MoE backend (SM90 per-tensor FP8 MoE without expert parallelism prefers "
    "TRITON over FLASHINFER_CUTLASS; set --moe-backend to override) out of potential backends: "
    "['TRITON', 'FLASHINFER_CUTLASS']."
)


def test_logparse_sample_lines():
    p = logparse.parse(SAMPLE_LOG)
    assert (p["model_load_gib"], p["model_load_s"]) == (29.21, 12.345678)
    assert p["dynamo_s"] == 6.12 and p["compile_range_s"] == 17.5
    assert p["torch_compile_s"] == 25.31
    assert (p["graph_capture_s"], p["graph_capture_gib"]) == (14.0, 0.52)
    assert p["init_engine_s"] == 54.9 and p["kv_cache_tokens"] == 39936
    assert p["moe_backends"] == ["FLASHINFER_CUTLASS"] and p["moe_backend_reasons"] == [""]
    assert logparse.backend(p) == "FLASHINFER_CUTLASS"
    assert p["jit_monitor_kernels"] == ["fused_moe_kernel"] and p["jit_monitor_active"]
    assert p["autotune_kernels"] == ["_w8a8_kernel"]
    assert (p["moe_warmup_calls"], p["moe_warmup_s"]) == (4608, 3.25)
    assert p["warmup_count"] == 3 and p["warmup_span_s"] == 19.0  # 10:11:01 .. 10:11:20
    assert p["warmup_lines"][0].startswith("INFO 12-01 10:11:01 [v1/worker/gpu_worker.py:602]")
    assert len(p["errors"]) == 1 and "fatal error" in p["errors"][0]
    s = logparse.parse(SERIES_BACKEND + "\n\x1b[32mINFO\x1b[0m " + SERIES_BACKEND[25:])
    assert s["moe_backends"] == ["TRITON"]
    assert s["moe_backend_reasons"][0].startswith("SM90 per-tensor FP8 MoE")
    assert logparse.parse("nothing here\n")["moe_backends"] == []
    t = logparse.timestamp(SAMPLE_LOG.splitlines()[1], year=2026)
    assert time.strftime("%m-%d %H:%M:%S", time.localtime(t)) == "12-01 10:10:30"


# (source file at the pin, template as written there) for every pattern logparse matches
TEMPLATES = [
    ("vllm/v1/worker/gpu_model_runner.py", '"Model loading took %s GiB memory and %.6f seconds"'),
    (
        "vllm/v1/worker/gpu_model_runner.py",
        '"Graph capturing finished in %.0f secs, took %.2f GiB"',
    ),
    ("vllm/compilation/backends.py", '"Dynamo bytecode transform time: %.2f s"'),
    ("vllm/compilation/backends.py", '"Compiling a graph for compile range %s takes %.2f s"'),
    ("vllm/compilation/monitor.py", '"torch.compile took %.2f s in total"'),
    (
        "vllm/v1/engine/core.py",
        '"init engine (profile, create kv cache, warmup model) took %.2f s"',
    ),
    ("vllm/v1/core/kv_cache_utils.py", '"GPU KV cache size: %s tokens"'),
    (
        "vllm/model_executor/layers/fused_moe/oracle/fp8.py",
        'f"Using {backend.value} Fp8 MoE backend out "',
    ),
    (
        "vllm/model_executor/layers/fused_moe/oracle/fp8.py",
        'f"of potential backends: {available_backend_strs}."',
    ),
    ("vllm/triton_utils/jit_monitor.py", '"Triton kernel JIT compilation during inference: %s. "'),
    ("vllm/triton_utils/jit_monitor.py", '"Kernel JIT monitor activated'),
    ("vllm/v1/worker/gpu_worker.py", '"Compile and warming up model for size %d"'),
    ("vllm/model_executor/warmup/kernel_warmup.py", '"Warming up FlashInfer attention."'),
    ("vllm/model_executor/model_loader/default_loader.py", '"Loading weights took %.2f seconds"'),
    # compile_hook.py reads these fields
    ("vllm/forward_context.py", "_forward_context: ForwardContext | None = None"),
    ("vllm/forward_context.py", "    batch_descriptor: BatchDescriptor | None = None"),
    ("vllm/forward_context.py", "    num_tokens: int\n"),
    ("vllm/v1/attention/backends/flash_attn.py", "    num_actual_tokens: int"),
    # servers.py relies on these
    (
        "vllm/v1/worker/gpu_worker.py",
        "if kv_cache_memory_bytes := self.cache_config.kv_cache_memory_bytes:",
    ),
    ("vllm/v1/worker/utils.py", "if init_snapshot.free_memory < requested_memory:"),
]


@pytest.mark.skipif(
    _source_of(logparse.LOG_FORMATS) is None,
    reason=f"no checkout of {logparse.LOG_FORMATS} here (main line or lines/; scripts/setup.sh)",
)
def test_templates_are_in_the_pinned_source():
    """Every log template the harness parses is in the source of the release whose logs it
    reads (logparse.LOG_FORMATS), found through the pins (the main line's, or a kept line's)."""
    tree, commit = _source_of(logparse.LOG_FORMATS)
    for path, template in TEMPLATES:
        assert template in git(tree, "show", f"{commit}:{path}"), (path, template)
    # the series' own warm-up line (patch 0004), while that line's series has it
    line = ROOT / "lines" / logparse.LOG_FORMATS / "patches"
    patches = line if line.is_dir() else ROOT / "patches"
    warm = [p for p in patches.glob("*.patch") if "fused-MoE warmup" in p.read_text()]
    for p in warm:
        assert '"Triton fused-MoE warmup: %d layer calls over 1..%d tokens in %.2f s "' in (
            p.read_text()
        ), p.name


@needs_triton
def test_triton_autotune_print_format():
    import triton.runtime.autotuner as at

    assert (
        "Triton autotuning for function {self.base_fn.__name__},\\n"
        in Path(at.__file__).read_text()
    )


# ----------------------------------------------------------------------------- compile hook

DRIVE_HOOKS = textwrap.dedent("""
    import inspect, json, os, sys, time
    import triton, triton.language as tl
    from triton import knobs
    from triton.backends.nvidia.compiler import CUDAOptions
    from triton.runtime.jit import JITFunction

    @triton.jit
    def fused_moe_kernel(a_ptr, num_tokens, BLOCK_SIZE_M: tl.constexpr):
        pass

    opts = CUDAOptions()
    sig = {"a_ptr": "*fp8e4nv", "num_tokens": "i32", "BLOCK_SIZE_M": "constexpr"}
    spec = "[('*fp8e4nv', 'D'), ('i32', ''), ('constexpr', 16)]"
    # exactly as JITFunction._do_compile calls them (triton/runtime/jit.py): Triton 3.8 passes
    # a key tuple (its string, the argument types) and the target; 3.6 the string alone
    if "target" in inspect.signature(JITFunction._call_hook).parameters:
        from triton.backends.compiler import GPUTarget
        key = (spec + str(opts), ("*fp8e4nv", "i32", "constexpr"))
        args = (key, sig, GPUTarget("cuda", 90, 32), 0, {(2,): 16}, opts, [{}], False)
    else:
        args = (spec + str(opts), sig, 0, {(2,): 16}, opts, [{}], False)
    skip = fused_moe_kernel._call_hook(knobs.runtime.jit_cache_hook, *args)
    time.sleep(0.02)
    fused_moe_kernel._call_hook(knobs.runtime.jit_post_compile_hook, *args)
    pre = getattr(knobs.runtime.jit_cache_hook, "__qualname__", None)
    print(json.dumps({"skip": skip, "pre": pre}))
""")


@needs_triton
def test_compile_hook_as_sitecustomize(tmp_path):
    hook = compiles.install_hook(tmp_path)
    assert (hook / "sitecustomize.py").read_text() == (
        ROOT / "benchmarks" / "e2e" / "compile_hook.py"
    ).read_text()
    logs = tmp_path / "compiles"
    logs.mkdir()
    env = {**os.environ, "PYTHONPATH": str(hook), "VSERIES_COMPILE_LOG_DIR": str(logs), "RANK": "3"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tcache")
    driver = tmp_path / "drive.py"  # Triton wants @jit functions in a file
    driver.write_text(DRIVE_HOOKS)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, str(driver)], env=env, capture_output=True, text=True, timeout=600
    )
    wall_ms = (time.perf_counter() - t0) * 1e3
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["skip"] is None  # a truthy pre-hook value would make Triton skip the compile
    assert info["pre"] == "make_hooks.<locals>.pre"
    (f,) = list(logs.iterdir())
    (rec,) = [json.loads(x) for x in f.read_text().splitlines()]
    assert rec["kernel"] == "fused_moe_kernel" and rec["module"] == "__main__"
    assert rec["spec"] == "[('*fp8e4nv', 'D'), ('i32', ''), ('constexpr', 16)]"
    assert rec["constants"] == {"(2,)": 16} and rec["num_warps"] == 4
    # in milliseconds, pre- to post-hook: the driver sleeps 20 ms between them, and the
    # whole run bounds it (on any host: no fixed upper limit)
    assert 15 <= rec["duration_ms"] <= wall_ms and rec["rank"] == 3
    assert rec["fc_num_tokens"] is None  # no vLLM forward in progress
    assert rec["triton_cache_dir"] == str(tmp_path / "tcache")  # where the cache was looked up
    # without the variable nothing is installed
    env.pop("VSERIES_COMPILE_LOG_DIR")
    out = subprocess.run(
        [sys.executable, str(driver)], env=env, capture_output=True, text=True, timeout=600
    )
    assert json.loads(out.stdout.strip().splitlines()[-1])["pre"] is None, out.stderr


def test_compile_hook_chains_earlier_hooks(tmp_path):
    calls = []

    def prev_pre(**kw):
        calls.append(("pre", kw["key"]))
        return False

    def prev_post(**kw):
        calls.append(("post", kw["key"]))

    pre, post = compile_hook.make_hooks(str(tmp_path / "c.jsonl"), prev_pre, prev_post)
    fn = type("Info", (), {"name": "k", "module": "m", "jit_function": object()})()
    assert pre(key="K", fn=fn, compile={}, is_manual_warmup=False) is False
    post(key="K", fn=fn, compile={"constants": {(1,): "fp8"}}, is_manual_warmup=True)
    assert calls == [("pre", "K"), ("post", "K")]
    rec = json.loads((tmp_path / "c.jsonl").read_text())
    assert rec["warmup"] and rec["constants"] == {"(1,)": "fp8"} and rec["spec"] == "K"
    assert compile_hook.spec("[('i32', '')]CUDAOptions(num_warps=4)") == "[('i32', '')]"


# ----------------------------------------------------------------------------- servers


def test_memory_plan_and_commands(tmp_path):
    q = models.model_config("qwen3-30b-a3b", "fp8static")
    qw = shapes.get("qwen3-30b-a3b").weight_bytes
    assert 28 * memory.GIB < qw(q) < 30 * memory.GIB
    m = models.model_config("mixtral-8x7b", "fp8static")
    mw = shapes.get("mixtral-8x7b").weight_bytes
    assert 43 * memory.GIB < mw(m) < 46 * memory.GIB
    assert memory.kv_bytes_per_token(q) == 48 * 2 * 4 * 128 * 2
    kv = memory.kv_cache_bytes(q, 36000)
    assert kv % (256 << 20) == 0 and kv >= 36000 * 98304
    two = memory.memory_plan(qw(q), 2, 1, ["0"], kv)
    assert two["fits"] and two["share"] == 0.45 and two["servers_per_gpu"] == 2
    # the share passes vLLM's free-memory check however far the other server has got
    assert two["per_server_bytes"] <= two["share"] * gpu.H200_BYTES
    assert not memory.memory_plan(qw(q), 4, 1, ["0"], kv)["fits"]
    half = models.model_config("qwen3-30b-a3b", "fp8static", 24)
    assert memory.memory_plan(qw(half), 4, 1, ["0"], memory.kv_cache_bytes(half, 36000))["fits"]
    assert not memory.memory_plan(mw(m), 2, 1, ["0"], memory.kv_cache_bytes(m, 150000))["fits"]
    # tensor parallel: disjoint groups while GPUs last, then shared
    assert memory.assign_gpus(2, 2, list("0123")) == [["0", "1"], ["2", "3"]]
    assert memory.assign_gpus(3, 2, list("0123")) == [["0", "1"], ["2", "3"], ["0", "1"]]
    assert memory.assign_gpus(2, 1, ["0"]) == [["0"], ["0"]]
    with pytest.raises(ValueError):
        memory.assign_gpus(1, 2, ["0"])
    tp = memory.memory_plan(qw(q), 4, 2, list("0123"), kv)
    assert tp["servers_per_gpu"] == 2 and tp["share"] == 0.45
    cmd = servers.server_command(
        "python3",
        Path("/m"),
        8101,
        quant_args=["--quantization", "fp8"],
        max_model_len=2560,
        max_num_seqs=64,
        max_num_batched_tokens=8192,
        share=0.45,
        kv_bytes=kv,
        tp=2,
        capture_sizes=[1, 2, 4],
    )
    assert cmd[:5] == ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "/m"]
    for flag, val in [
        ("--port", "8101"),
        ("--host", "127.0.0.1"),
        ("--load-format", "dummy"),
        ("--gpu-memory-utilization", "0.45"),
        ("--kv-cache-memory-bytes", str(kv)),
        ("--tensor-parallel-size", "2"),
        ("--compilation-config", '{"cudagraph_capture_sizes": [1, 2, 4]}'),
    ]:
        assert cmd[cmd.index(flag) + 1] == val
    assert "--no-enable-prefix-caching" in cmd
    env = servers.server_env(
        {"PATH": "/bin", "VLLM_USE_DEEP_GEMM": "1"},
        pythonpath=[tmp_path / "hook", "/root/site", "/root/vllm-base"],
        compile_dir=tmp_path / "c",
        gpus=["2", "3"],
        extra={"VLLM_USE_FLASHINFER_MOE_FP8": "0"},
        model_env=models.model_env("qwen3-30b-a3b"),
    )
    assert env["PYTHONPATH"] == f"{tmp_path / 'hook'}:/root/site:/root/vllm-base"
    assert env["VLLM_USE_DEEP_GEMM"] == "0" and env["NCCL_NVLS_ENABLE"] == "0"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["VLLM_USE_FLASHINFER_MOE_FP8"] == "0"
    assert env["VSERIES_COMPILE_LOG_DIR"] == str(tmp_path / "c")
    rows = gpu.parse_clocks("0, 1980, 3201, 41, 120.52\n1, [N/A], 3201, 40, 95.1\n")
    assert rows[0] == {
        "index": 0.0,
        "clocks_sm": 1980.0,
        "clocks_mem": 3201.0,
        "temperature_gpu": 41.0,
        "power_draw": 120.52,
    }
    assert rows[1]["clocks_sm"] is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gone(pid: int) -> bool:
    """The process has ended (a zombie whose reaper has not run yet counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_server_process_group_start_ready_stop(tmp_path):
    port = _free_port()
    # a parent that serves /health and has a child of its own (as vllm serve has EngineCore)
    code = textwrap.dedent(f"""
        import http.server, subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print("child", child.pid, flush=True)
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers()
            def log_message(self, *a):
                pass
        http.server.HTTPServer(("127.0.0.1", {port}), H).serve_forever()
    """)
    s = servers.Server("base", port, [sys.executable, "-c", code], dict(os.environ), tmp_path)
    s.start()
    deadline = time.time() + 600  # a hang guard: ready in about a second
    while not s.check_ready() and time.time() < deadline:
        time.sleep(0.2)
    assert s.t_ready and s.startup_s() is not None and s.exited() is None
    child = int(re.search(r"child (\d+)", s.log_text())[1])
    s.stop(grace_s=5)
    assert s.exited() is not None
    assert _gone(child) and not servers.group_alive(s.proc.pid)
    assert not servers.health(port, timeout=0.5)
    assert json.loads((tmp_path / "command.json").read_text())["cmd"][0] == sys.executable


# ----------------------------------------------------------------------------- report


def synthetic_results(path: Path, session: str = "s1") -> None:
    """Two trees, two processes x three repetitions: series clearly faster in decode output
    throughput (ranges apart), the same in prefill TTFT (ranges overlap)."""
    common = {
        "session": session,
        "model": "qwen3-30b-a3b-fp8static-L48",
        "layers": 48,
        "tp": 1,
        "note": "",
    }
    recs = [
        {
            "kind": "session",
            "run_id": f"{session}-s",
            "argv": ["serve.py", "--quick"],
            "gpus": ["0"],
            "trees": {
                "base": {"dir": "/root/vllm-base", "head": "9da56fd", "patches": []},
                "series": {
                    "dir": "/root/vllm-series",
                    "head": "a6cf721",
                    "patches": ["1", "2", "3"],
                },
            },
            "server_cmd_example": ["python3", "-m", "vllm.entrypoints.cli.main", "serve"],
            "memory_plan": "memory plan: ... fits",
            **common,
        }
    ]
    i = 0
    for p in range(2):
        for t in ("base", "series"):
            inst = f"{session}-{t}-p{p}"
            recs.append(
                {
                    "kind": "startup",
                    "run_id": f"{session}-st{p}{t}",
                    "ok": True,
                    "tree": t,
                    "process": p,
                    "instance": inst,
                    "startup_s": 100 + 10 * p,
                    "backend": "FLASHINFER_CUTLASS" if t == "base" else "TRITON",
                    "fallback": False,
                    "phases": {
                        "model_load_s": 12.0,
                        "torch_compile_s": 25.0,
                        "graph_capture_s": 14.0,
                        "init_engine_s": 55.0,
                    },
                    **common,
                }
            )
            after = (
                []
                if t == "series"
                else [
                    {
                        "kernel": "_fused_inv_rope_fp8_quant_per_head",
                        "fc_num_tokens": 129,
                        "duration_ms": 223.0,
                        "phase": "probe len=129 first",
                    }
                ]
            )
            recs.append(
                {
                    "kind": "compiles",
                    "run_id": f"{session}-c{p}{t}",
                    "ok": True,
                    "tree": t,
                    "process": p,
                    "instance": inst,
                    "compiles_after_ready": len(after),
                    "compiles_before_ready": 40,
                    "after_ready": after,
                    "jit_monitor_kernels": [k["kernel"] for k in after],
                    **common,
                }
            )
            recs.append(
                {
                    "kind": "probe",
                    "run_id": f"{session}-pr{p}{t}",
                    "ok": True,
                    "tree": t,
                    "process": p,
                    "instance": inst,
                    "lengths": [
                        {"len": 129, "first_ms": 800.0 if t == "base" else 40.0, "again_ms": 33.0}
                    ],
                    **common,
                }
            )
            for r in range(3):
                for w, c in (("decode", 4), ("prefill", 16)):
                    i += 1
                    tput = (1000 if t == "base" else 1100) + 10 * r + p
                    recs.append(
                        {
                            "kind": "serve",
                            "run_id": f"{session}-r{i}",
                            "ok": True,
                            "tree": t,
                            "process": p,
                            "rep": r,
                            "instance": inst,
                            "workload": w,
                            "concurrency": c,
                            "clocks_before": [
                                {
                                    "clocks_sm": 1980.0,
                                    "clocks_mem": 3201.0,
                                    "temperature_gpu": 40.0 + r,
                                    "power_draw": 150.0,
                                }
                            ],
                            "clocks_after": [
                                {
                                    "clocks_sm": 1755.0,
                                    "clocks_mem": 3201.0,
                                    "temperature_gpu": 50.0,
                                    "power_draw": 600.0,
                                }
                            ],
                            "vllm": {
                                "output_throughput": tput,
                                "request_throughput": tput / 100,
                                "median_ttft_ms": 50.0 + r * 10 - (t == "series"),
                                "p99_ttft_ms": 90.0,
                                "median_tpot_ms": 8.0,
                                "p99_tpot_ms": 9.0,
                                "median_itl_ms": 8.0,
                                "p99_itl_ms": 12.0,
                                "duration": 6.0 + r,
                            },
                            "num_prompts": 20,
                            **common,
                        }
                    )
    for rec in recs:
        results.append_line(path, rec)


def test_report_from_synthetic_results(tmp_path):
    f = tmp_path / "res.jsonl"
    synthetic_results(f)
    g = tmp_path / "copy.jsonl"
    shutil.copy(f, g)  # a second copy, as a merged file from another session would repeat
    out = tmp_path / "e2e.md"
    text = report.build([f, g], "base", out, "python benchmarks/e2e/report.py res.jsonl")
    assert out.read_text() == text and out.with_suffix(".png").stat().st_size > 10_000
    assert compare.RULE in text
    row = next(line for line in text.splitlines() if "| decode | 4 | output tok/s |" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] == "1010 (1000-1021) n=6/2p"
    assert cells[6].startswith("1.099 (1.") and cells[8] == "better"
    assert cells[7].endswith(", p=0.0312") or cells[7].startswith("6/0")
    ttft = next(line for line in text.splitlines() if "| prefill | 16 | TTFT p50 ms |" in line)
    # overlapping ranges, but 1 ms better in all 6 back-to-back pairs: the sign test calls it
    assert ttft.rstrip(" |").endswith("| 6/0, p=0.0312 | better (sign test)")
    assert "_fused_inv_rope_fp8_quant_per_head: 2 [129] (223 ms)" in text
    assert (
        "| qwen3-30b-a3b-fp8static-L48 | series | 2 | 0.00 (0.00-0.00) |" in text
        or "| series | 2 | 0 (0-0)" in text
    )
    assert "FLASHINFER_CUTLASS" in text and "clocks_sm 1755-1980 MHz" in text
    assert "| 129 | 800.0 (800.0-800.0) | 33.0 (33.0-33.0) | 40.0 (40.0-40.0) |" in text
    assert "`serve.py --quick`" in text
    assert "| decode | 4 | 7.0 (6.0-8.0) | 20 (20-20) |" in text
    assert "## Failures (first 10)\n\nNone." in text


def test_compare_rule_and_orientation():
    ref = [(10.0, ("s", 0, 0), "a"), (11.0, ("s", 0, 1), "a")]
    faster = [(12.0, ("s", 0, 0), "b"), (13.0, ("s", 0, 1), "b")]
    c = compare.compare(ref, faster, higher=True)
    assert c["verdict"] == "better" and c["paired"] and c["n_pairs"] == 2
    assert c["ratio"][1] == pytest.approx(13 / 11) and c["ratio"][2] == pytest.approx(1.2)
    lat = compare.compare(ref, faster, higher=False)  # the same numbers as latencies: worse
    assert lat["verdict"] == "worse" and lat["ratio"][0] < 1
    unpaired = compare.compare(ref, [(10.5, ("t", 0, 0), "c")], higher=True)
    assert not unpaired["paired"] and unpaired["verdict"] == "="


def test_sign_test_over_paired_runs():
    """Overlapping ranges, but every pair one way: 5 of 5 is shown (p = 0.0625), not called;
    6 of 6 (p = 0.03125) is called; a 4:2 split is not."""
    assert compare.sign_test_p(5, 0) == pytest.approx(0.0625)
    assert compare.sign_test_p(0, 6) == pytest.approx(0.03125)
    assert compare.sign_test_p(3, 3) == 1.0 and compare.sign_test_p(0, 0) == 1.0

    def runs(vals):
        return [(v, ("s", 0, i), "x") for i, v in enumerate(vals)]

    ref = [70.0, 72.0, 69.0, 90.0, 71.0, 88.0]
    slower = [v * 1.1 for v in ref]  # latencies: every pair worse, ranges overlap
    five = compare.compare(runs(ref[:5]), runs(slower[:5]), higher=False)
    assert (five["wins"], five["losses"]) == (0, 5) and five["verdict"] == "="
    six = compare.compare(runs(ref), runs(slower), higher=False)
    assert six["verdict"] == "worse (sign test)"
    mixed = compare.compare(runs(ref), runs(slower[:4] + [60.0, 70.0]), higher=False)
    assert (mixed["wins"], mixed["losses"]) == (2, 4) and mixed["verdict"] == "="


# ----------------------------------------------------------------------------- runner


def fake_tree(path: Path, name: str, patches: list[str]) -> Path:
    """A tree folder with only its VSERIES_TREE.json (at the top: a vllm/ folder without
    __init__.py would shadow the installed vLLM as a namespace package)."""
    path.mkdir(parents=True)
    (path / "VSERIES_TREE.json").write_text(
        json.dumps({"name": name, "head": "ab" * 20, "patches": patches})
    )
    return path


def test_dry_run_prints_every_command_and_resumes(tmp_path, model_dir, capsys):
    base = fake_tree(tmp_path / "vllm-base", "base", [])
    ser = fake_tree(tmp_path / "vllm-series", "series", ["0001", "0002", "0003"])
    argv = [
        "--model",
        str(model_dir),
        "--trees",
        "base",
        "series",
        "--tree-root",
        str(tmp_path),
        "--out",
        str(tmp_path / "out"),
        "--quick",
        "--dry-run",
        "--tree-env",
        "base:VLLM_USE_FLASHINFER_MOE_FP8=0",
    ]
    assert runner.main(argv) == 0
    out = capsys.readouterr().out
    runs = [line for line in out.splitlines() if line.startswith("[run ")]
    assert len(runs) == 2 * 3 * 2 * 2  # processes x reps x cells x trees
    assert sum(line.startswith("[server base]") for line in out.splitlines()) == 2
    assert f"PYTHONPATH=WORK/hook:/root/site:{base}" in out and str(ser) in out
    assert "VLLM_USE_FLASHINFER_MOE_FP8=0" in out.split("[server series]")[0]
    assert "--gpu-memory-utilization 0.45" in out and "--kv-cache-memory-bytes" in out
    assert '--random-range-ratio \'{"input": 0.0, "output": 0.3333}\'' in out
    assert "[probe base]" in out and "nvidia-smi --query-gpu=" in out
    # a results file with process 0 done: only process 1 is left
    res = tmp_path / "out" / "results.jsonl"
    for r in schedule.plan(["base", "series"], schedule.PRESETS["quick"].cells, 2, 0):
        # reps 0 and 1 (--min-reps 2) done, rep 2 not: process 0 is complete enough
        results.append_line(
            res,
            {
                "kind": "serve",
                "run_id": f"{r}",
                "ok": True,
                "model": model_dir.name,
                "tree": r.tree,
                "workload": r.workload,
                "concurrency": r.concurrency,
                "process": 0,
                "rep": r.rep,
            },
        )
    for t in ("base", "series"):
        results.append_line(
            res,
            {
                "kind": "probe",
                "run_id": f"p{t}",
                "ok": True,
                "model": model_dir.name,
                "tree": t,
                "process": 0,
            },
        )
    assert runner.main(argv) == 0
    out = capsys.readouterr().out
    assert "--- process 0" not in out and "--- process 1" in out
    assert len([line for line in out.splitlines() if line.startswith("[run ")]) == 12
    # offline: one vllm bench throughput per tree and workload
    assert runner.main([*argv, "--offline-throughput"]) == 0
    out = capsys.readouterr().out
    assert out.count("bench throughput") == 4 and "--random-range-ratio 0.3333" in out
    # a plan that does not fit is refused: five full-depth Qwen3 servers on one H200
    full = models.write_model(
        tmp_path, "qwen3-30b-a3b", "fp8dyn", None, (model_dir / "tokenizer.json").read_text()
    )
    assert (
        runner.main(
            ["--model", str(full), "--trees", *"abcde", "--out", str(tmp_path / "o"), "--dry-run"]
        )
        == 2
    )
    assert "DOES NOT FIT" in capsys.readouterr().err


def test_budget_keeps_room_for_later_processes(model_dir, tmp_path):
    p = plan.parse(
        [
            "--model",
            str(model_dir),
            "--trees",
            "base",
            "series",
            "--out",
            str(tmp_path),
            "--quick",
            "--dry-run",
        ]
    )
    st = state.State.start(p)
    runs, probes = st.todo(1)
    need = st.sizing.process_need(runs, probes, 2)
    first_two = sum(st.sizing.run_cost(r) for r in runs if r.rep < 2)
    assert need == pytest.approx(
        p.startup_estimate_s + st.sizing.probe_cost(2) + first_two + schedule.STOP_S
    )
    assert 8 * 5 < first_two < 8 * 15  # 8 runs of ~9 s
    b = schedule.Budget(100)
    assert b.fits(60) and not b.fits(80)  # 30 s are always kept for the stop


# ----------------------------------------------------------------------------- slow: vLLM


@pytest.mark.slow
@needs_vllm
@needs_harness_release
def test_vllm_accepts_the_commands(model_dir, tmp_path, tok_json):
    """vLLM v0.21.0's own parsers take the server, bench and offline command lines, its
    config code accepts the model directories with --quantization fp8, and its random
    dataset samples the workloads with the local tokenizer."""
    from vllm.benchmarks.datasets import get_samples
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.tokenizers import get_tokenizer
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from vllm.benchmarks import serve as bench_serve
    from vllm.benchmarks import throughput

    dyn = models.write_model(tmp_path, "mixtral-8x7b", "fp8dyn", 2, tok_json)
    p = plan.parse(
        [
            "--model",
            str(model_dir),
            "--trees",
            "base",
            "series",
            "--out",
            str(tmp_path),
            "--quick",
            "--dry-run",
        ]
    )
    st = state.State.start(p)
    for d in (model_dir, dyn):
        cmd = commands.server_cmd(p, 8100)
        cmd[4] = str(d)
        args = make_arg_parser(FlexibleArgumentParser()).parse_args(cmd[4:])
        assert args.model_tag == str(d) and args.kv_cache_memory_bytes == p.kv_bytes
        assert args.enable_prefix_caching is False and args.gpu_memory_utilization == 0.45
        assert args.compilation_config.cudagraph_capture_sizes == [1, 2, 4, 8, 16, 32, 64]
        args.model = args.model_tag
        mc = EngineArgs.from_cli_args(args).create_model_config()
        assert mc.quantization == "fp8" and mc.max_model_len == p.max_model_len
    tok = get_tokenizer(str(model_dir))
    for run in schedule.plan(["base"], schedule.PRESETS["full"].cells[::4], 1, 0):
        ap = FlexibleArgumentParser()
        bench_serve.add_cli_args(ap)
        args = ap.parse_args(commands.bench_argv(p, "base", 8100, run, st.sizing.prompts_for(run)))
        args.num_prompts = 6
        reqs = get_samples(args, tok)
        lo, hi = schedule.WORKLOADS[run.workload].input_range()
        olo, ohi = schedule.WORKLOADS[run.workload].output_range()
        assert len(reqs) == 6
        assert all(
            lo - 8 <= r.prompt_len <= hi + 8 and olo <= r.expected_output_len <= ohi for r in reqs
        ), [(r.prompt_len, r.expected_output_len) for r in reqs]
        assert all(r.prompt_len + r.expected_output_len <= p.max_model_len for r in reqs)
    for w in schedule.WORKLOADS:
        ap = FlexibleArgumentParser()
        throughput.add_cli_args(ap)
        argv = commands.offline_argv(p, w, tmp_path / "t.json")
        assert argv[2:5] == ["vllm.entrypoints.cli.main", "bench", "throughput"]
        args = ap.parse_args(argv[5:])
        args.num_prompts = 4
        throughput.validate_args(args)
        reqs = throughput.get_requests(args, tok)
        assert len(reqs) == 4 and args.load_format == "dummy" and args.quantization == "fp8"


@pytest.mark.slow
@needs_vllm
def test_compile_hook_reads_the_vllm_forward_context():
    from types import SimpleNamespace

    from vllm.forward_context import BatchDescriptor, ForwardContext, override_forward_context

    ctx = ForwardContext(
        no_compile_layers={},
        attn_metadata={"model.layers.0.self_attn.attn": SimpleNamespace(num_actual_tokens=129)},
        slot_mapping={},
        batch_descriptor=BatchDescriptor(num_tokens=136),
    )
    assert compile_hook._forward_info()["fc_num_tokens"] is None
    with override_forward_context(ctx):
        info = compile_hook._forward_info()
    assert info == {"fc_num_tokens": 136, "fc_num_actual_tokens": 129, "fc_cudagraph_mode": "NONE"}


# The stand-in server: not vLLM (see the module docstring).
STANDIN = textwrap.dedent('''
    """Stand-in for `vllm serve` in the CPU tests (NOT vLLM)."""
    import argparse, asyncio, json, os, sys, time
    from aiohttp import web

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--port", type=int)
    a, _ = ap.parse_known_args()
    pid = os.getpid()

    def log(level, src, msg):
        print(f"(EngineCore_DP0 pid={pid}) {level} {time.strftime('%m-%d %H:%M:%S')} "
              f"[{src}] {msg}", flush=True)

    backend = "FLASHINFER_CUTLASS" if os.environ.get("STANDIN_TREE") == "base" else "TRITON"
    log("INFO", "v1/worker/gpu_model_runner.py:4960",
        "Model loading took 29.21 GiB memory and 1.234567 seconds")
    log("INFO", "model_executor/.../oracle/fp8.py:327",
        f"Using {backend} Fp8 MoE backend out of potential backends: ['{backend}'].")
    log("INFO", "compilation/monitor.py:48", "torch.compile took 0.50 s in total")
    log("INFO", "v1/worker/gpu_worker.py:602", "Compile and warming up model for size 8192")
    log("INFO", "v1/worker/gpu_model_runner.py:6244",
        "Graph capturing finished in 1 secs, took 0.52 GiB")
    log("INFO", "v1/engine/core.py:298",
        "init engine (profile, create kv cache, warmup model) took 1.50 s")
    time.sleep(1.0)
    seen = set()

    import triton
    import triton.language as tl
    from triton import knobs
    from triton.backends.nvidia.compiler import CUDAOptions

    @triton.jit
    def _fused_inv_rope_fp8_quant_per_head(x_ptr, n, BLOCK: tl.constexpr):
        pass

    def compile_once(n):
        # drive the Triton hooks sitecustomize installed, as Triton's JIT would
        o = CUDAOptions()
        for hook in (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook):
            _fused_inv_rope_fp8_quant_per_head._call_hook(
                hook, f"[('i32', '{n}')]" + str(o), {"n": "i32"}, 0, {}, o, [{}], False)
        log("WARNING", "triton_utils/jit_monitor.py:103",
            "Triton kernel JIT compilation during inference: _fused_inv_rope_fp8_quant_per_head. "
            "This causes a latency spike; consider extending warmup to cover this shape/config.")

    async def health(request):
        return web.Response(text="")

    async def models(request):
        return web.json_response({"object": "list", "data": [{"id": a.model, "object": "model"}]})

    async def completions(request):
        body = await request.json()
        prompt = body["prompt"]
        n = len(prompt) if isinstance(prompt, list) else max(1, len(prompt.split()))
        # base "compiles" once per new token-id prompt length > 100 (the probe's)
        if isinstance(prompt, list) and n > 100 and n not in seen and \
                os.environ.get("STANDIN_TREE") == "base":
            seen.add(n)
            compile_once(n)
        max_tokens = int(body.get("max_tokens") or 16)
        if not body.get("stream"):
            return web.json_response({"choices": [{"text": "x", "index": 0}],
                                      "usage": {"prompt_tokens": n, "completion_tokens": 1}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(0.002)
        for i in range(max_tokens):
            chunk = {"choices": [{"text": " t", "index": 0}]}
            await resp.write(f"data: {json.dumps(chunk)}\\n\\n".encode())
            await asyncio.sleep(0.0005)
        usage = {"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": max_tokens}}
        await resp.write(f"data: {json.dumps(usage)}\\n\\ndata: [DONE]\\n\\n".encode())
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    log("INFO", "entrypoints/openai/api_server.py:617",
        f"Starting vLLM server on 127.0.0.1:{a.port}")
    web.run_app(app, host="127.0.0.1", port=a.port, print=None)
''')


STANDIN_OFFLINE = textwrap.dedent('''
    """Stand-in for `vllm bench throughput` in the CPU tests (NOT vLLM)."""
    import argparse, json, os, time

    ap = argparse.ArgumentParser()
    ap.add_argument("--output-json")
    ap.add_argument("--num-prompts", type=int)
    a, _ = ap.parse_known_args()
    print(f"(EngineCore_DP0 pid={os.getpid()}) INFO 12-01 10:10:31 [oracle/fp8.py:327] Using "
          "TRITON Fp8 MoE backend out of potential backends: ['TRITON'].", flush=True)
    time.sleep(0.2)
    print("Throughput: 12.50 requests/s, 5000.00 total tokens/s, 1600.00 output tokens/s")
    json.dump({"elapsed_time": a.num_prompts / 12.5, "num_requests": a.num_prompts,
               "total_num_tokens": 400 * a.num_prompts, "requests_per_second": 12.5,
               "tokens_per_second": 5000.0}, open(a.output_json, "w"))
''')


def standin_python(tmp_path: Path) -> Path:
    """An interpreter wrapper: 'python -m vllm.entrypoints.cli.main serve ...' runs the
    stand-in server, '... bench throughput ...' the offline stand-in, anything else (the bench
    client, 'bench serve') the real interpreter."""
    (tmp_path / "standin.py").write_text(STANDIN)
    (tmp_path / "standin_offline.py").write_text(STANDIN_OFFLINE)
    wrapper = tmp_path / "python"
    wrapper.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = -m ] && [ "$2" = vllm.entrypoints.cli.main ] && [ "$3" = serve ]; then
          shift 3
          exec {sys.executable} {tmp_path / "standin.py"} "$@"
        fi
        if [ "$1" = -m ] && [ "$2" = vllm.entrypoints.cli.main ] && [ "$4" = throughput ]; then
          shift 4
          exec {sys.executable} {tmp_path / "standin_offline.py"} "$@"
        fi
        exec {sys.executable} "$@"
    """)
    )
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.slow
def test_offline_runs_on_a_stand_in(tmp_path, model_dir):
    """--offline-throughput: one process per tree and workload, alternating, parsed back."""
    py = standin_python(tmp_path)
    fake_tree(tmp_path / "vllm-base", "base", [])
    fake_tree(tmp_path / "vllm-series", "series", ["1"])
    out = tmp_path / "out"
    argv = [
        "--model",
        str(model_dir),
        "--trees",
        "base",
        "series",
        "--tree-root",
        str(tmp_path),
        "--site",
        "",
        "--python",
        str(py),
        "--out",
        str(out),
        "--cells",
        "decode:1,prefill:1",
        "--reps",
        "2",
        "--offline-throughput",
        "--offline-prompts",
        "50",
        "--startup-estimate-s",
        "1",
        "--budget-s",
        "200",
    ]
    assert runner.main(argv) == 0
    off = [r for r in results.read_lines([out / "results.jsonl"]) if r["kind"] == "offline"]
    assert [(r["rep"], r["workload"], r["tree"]) for r in off] == [
        (0, "decode", "base"),
        (0, "decode", "series"),
        (0, "prefill", "base"),
        (0, "prefill", "series"),
        (1, "decode", "series"),
        (1, "decode", "base"),
        (1, "prefill", "series"),
        (1, "prefill", "base"),
    ]
    assert all(r["ok"] and r["backend"] == "TRITON" for r in off)
    assert off[0]["vllm"]["requests_per_second"] == 12.5
    assert off[0]["vllm"]["output_tokens_per_second"] == 1600.0
    assert "--random-range-ratio" in off[0]["cmd"] and off[0]["num_prompts"] == 50
    assert runner.main(argv) == 0  # resumed: nothing left
    assert (
        len([r for r in results.read_lines([out / "results.jsonl"]) if r["kind"] == "offline"]) == 8
    )
    text = report.build([out / "results.jsonl"], "base", tmp_path / "e2e.md", "report")
    assert "| decode | 0 | offline output tok/s |" in text


@pytest.mark.slow
@needs_vllm
@needs_triton
@needs_harness_release
def test_runner_end_to_end_on_a_stand_in_server(tmp_path, model_dir):
    """serve.py against the stand-in: start, ready, probe, alternating runs through the real
    in-process vLLM bench client, compile logs, stop, records; then resume and report."""
    pytest.importorskip("aiohttp")
    py = standin_python(tmp_path)
    fake_tree(tmp_path / "vllm-base", "base", [])
    fake_tree(tmp_path / "vllm-series", "series", ["1", "2", "3"])
    out = tmp_path / "out"
    argv = [
        "--model",
        str(model_dir),
        "--trees",
        "base",
        "series",
        "--tree-root",
        str(tmp_path),
        "--site",
        "",
        "--python",
        str(py),
        "--out",
        str(out),
        "--cells",
        "decode:1,prefill:4",
        "--reps",
        "2",
        "--processes",
        "2",
        "--target-s",
        "0.5",
        "--probe-lengths",
        "3,129",
        "--budget-s",
        "3000",  # far past what the run takes on any host: the budget decides nothing here
        "--startup-estimate-s",
        "10",
        "--port-base",
        str(_free_port_pair()),
        "--tree-env",
        "base:STANDIN_TREE=base",
        "--tree-env",
        "series:STANDIN_TREE=series",
        "--expect-backend",
        "base=FLASHINFER_CUTLASS",
        "--expect-backend",
        "series=TRITON",
        "--note",
        "stand-in server (test)",
    ]
    assert runner.main(argv) == 0
    recs = results.read_lines([out / "results.jsonl"])
    kinds = [r["kind"] for r in recs]
    assert kinds.count("startup") == 4 and kinds.count("compiles") == 4
    assert kinds.count("probe") == 4 and kinds[0] == "session"
    serve = [r for r in recs if r["kind"] == "serve"]
    assert len(serve) == 2 * 2 * 2 * 2, [r.get("error") for r in serve if not r["ok"]]
    assert all(r["ok"] for r in serve), [r.get("error") for r in serve]
    assert all(r["vllm"]["completed"] == r["num_prompts"] for r in serve)
    assert all(r["vllm"]["output_throughput"] > 0 and "median_ttft_ms" in r["vllm"] for r in serve)
    assert {r["tree_head"] for r in serve} == {"ab" * 20}
    assert [r["tree"] for r in serve if r["process"] == 0 and r["workload"] == "decode"] == [
        "base",
        "series",
        "series",
        "base",
    ]
    st = {(r["tree"], r["process"]): r for r in recs if r["kind"] == "startup"}
    assert st[("base", 0)]["backend"] == "FLASHINFER_CUTLASS" and not st[("base", 0)]["fallback"]
    assert st[("series", 1)]["backend"] == "TRITON" and st[("series", 1)]["startup_s"] > 0.5
    assert st[("base", 0)]["phases"]["init_engine_s"] == 1.5
    comp = {(r["tree"], r["process"]): r for r in recs if r["kind"] == "compiles"}
    base0 = comp[("base", 0)]
    assert base0["compiles_after_ready"] == 1 and comp[("series", 0)]["compiles_after_ready"] == 0
    first = base0["after_ready"][0]
    assert first["kernel"] == "_fused_inv_rope_fp8_quant_per_head"
    assert first["phase"] == "probe len=129 first" and first["spec"] == "[('i32', '129')]"
    assert base0["jit_monitor_kernels"] == ["_fused_inv_rope_fp8_quant_per_head"]
    probe = next(r for r in recs if r["kind"] == "probe" and r["tree"] == "base")
    assert [x["len"] for x in probe["lengths"]] == [3, 129]
    assert all(x["first_ms"] > 0 and x["again_ms"] > 0 for x in probe["lengths"])
    assert list((out / "logs" / model_dir.name).glob("*.log.txt"))
    assert list((out / "compiles" / model_dir.name).glob("*base-p0.jsonl"))
    # everything done: a second call starts nothing
    assert runner.main(argv) == 0
    assert len(results.read_lines([out / "results.jsonl"])) == len(recs) + 1  # one session record
    text = report.build([out / "results.jsonl"], "base", tmp_path / "e2e.md", "report")
    assert "stand-in server (test)" in text and "| decode | 1 | output tok/s |" in text


def _free_port_pair() -> int:
    for _ in range(50):
        p = _free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 1))
                return p
            except OSError:
                continue
    raise RuntimeError("no two free ports")


@pytest.mark.slow
@needs_vllm
def test_bench_subprocess_fallback(tmp_path, model_dir):
    """--bench-subprocess: one 'vllm bench serve' process per run (the fallback when the
    in-process client fails), on the stand-in."""
    pytest.importorskip("aiohttp")
    py = standin_python(tmp_path)
    fake_tree(tmp_path / "vllm-base", "base", [])
    fake_tree(tmp_path / "vllm-series", "series", ["1"])
    out = tmp_path / "out"
    argv = [
        "--model",
        str(model_dir),
        "--trees",
        "base",
        "series",
        "--tree-root",
        str(tmp_path),
        "--site",
        "",
        "--python",
        str(py),
        "--out",
        str(out),
        "--cells",
        "decode:1",
        "--reps",
        "1",
        "--processes",
        "1",
        "--target-s",
        "0.5",
        "--probe-lengths",
        "",
        "--budget-s",
        "3000",  # far past what the run takes on any host: the budget decides nothing here
        "--startup-estimate-s",
        "10",
        "--port-base",
        str(_free_port_pair()),
        "--bench-subprocess",
    ]
    assert runner.main(argv) == 0
    serve = [r for r in results.read_lines([out / "results.jsonl"]) if r["kind"] == "serve"]
    assert len(serve) == 2 and all(r["ok"] for r in serve), [r.get("error") for r in serve]
    assert serve[0]["vllm"]["completed"] == serve[0]["num_prompts"]


def test_budget_too_small_starts_nothing(tmp_path, model_dir, capsys):
    fake_tree(tmp_path / "vllm-base", "base", [])
    out = tmp_path / "out"
    argv = [
        "--model",
        str(model_dir),
        "--trees",
        "base",
        "--tree-root",
        str(tmp_path),
        "--out",
        str(out),
        "--quick",
        "--budget-s",
        "100",
        "--startup-estimate-s",
        "180",
        "--bench-subprocess",
    ]
    assert runner.main(argv) == 0  # refused before any server started: the records say so
    assert "a process needs" in capsys.readouterr().out
    recs = results.read_lines([out / "results.jsonl"])
    assert [r["kind"] for r in recs] == ["session"]


@needs_tokenizers
def test_host_script_dry_run(tmp_path):
    """benchmarks/e2e/host.sh as run.sh e2e calls it, with the host's folders moved under
    tmp_path and serve.py in --dry-run: the arguments it assembles, the stand-in label."""
    root = tmp_path / "root"
    for name, patches in (("base", []), ("series", ["1", "2", "3"])):
        (root / f"vllm-{name}" / "vllm").mkdir(parents=True)
        (root / f"vllm-{name}" / "vllm" / "VSERIES_TREE.json").write_text(
            json.dumps({"name": name, "head": "cd" * 20, "patches": patches})
        )
    env = {
        **os.environ,
        "TREE_ROOT": str(root),
        "STAGE_DIR": str(tmp_path / "stage"),
        "E2E_DIR": str(tmp_path / "e2e"),
        "SITE": str(tmp_path / "site"),
        "PYTHON": sys.executable,
        "LAYERS": "2",
        "EXTRA": "--dry-run",
        "LIMIT": "300",
    }
    p = subprocess.run(
        ["bash", "benchmarks/e2e/host.sh", str(tmp_path / "r")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "=== e2e: qwen3-30b-a3b fp8static 2, trees base series, budget" in out
    base_line = next(x for x in out.splitlines() if x.startswith("[server base]"))
    ser_line = next(x for x in out.splitlines() if x.startswith("[server series]"))
    assert "VLLM_USE_FLASHINFER_MOE_FP8=0" in base_line
    assert "VLLM_USE_FLASHINFER_MOE_FP8" not in ser_line
    assert f"VLLM_CACHE_ROOT={tmp_path / 'e2e' / 'vllm-cache' / 'base'}" in base_line
    assert "qwen3-30b-a3b-fp8static-L2" in base_line and "--quantization fp8" in base_line
    assert (tmp_path / "r" / "models.txt").read_text().strip().endswith("-L2")
    assert len([x for x in out.splitlines() if x.startswith("[run ")]) == 24


# ----------------------------------------------------------------------------- DeepSeek-V4


def test_deepseek_v4_config_and_flavours():
    """The reduced-depth DeepSeek-V4 config: default 4 layers covering the three attention
    layer types, V4-Flash widths, block FP8 with scale_fmt; fp8block only for this arch."""
    c = models.model_config("deepseek-v4", "fp8block")
    assert c["num_hidden_layers"] == 4 and c["model_type"] == "deepseek_v4"
    assert c["architectures"] == ["DeepseekV4ForCausalLM"]
    # one entry per layer (vLLM indexes compress_ratios[layer_id]) plus the MTP layer's
    assert c["compress_ratios"] == [0, 0, 4, 128, 0]
    assert {0, 4, 128} <= set(c["compress_ratios"][:4])  # SWA-only, C4A (indexer), C128A
    q = c["quantization_config"]
    assert q["quant_method"] == "fp8" and q["weight_block_size"] == [128, 128]
    assert q["activation_scheme"] == "dynamic" and q["scale_fmt"] == "ue8m0"
    assert c["expert_dtype"] == "fp8"  # not V4-Flash's fp4: dummy MXFP4 weights are garbage
    want = {
        "hidden_size": 4096,
        "vocab_size": 129280,
        "num_attention_heads": 64,
        "head_dim": 512,
        "qk_rope_head_dim": 64,
        "q_lora_rank": 1024,
        "o_lora_rank": 1024,
        "o_groups": 8,
        "n_routed_experts": 256,
        "num_experts_per_tok": 6,
        "moe_intermediate_size": 2048,
        "index_topk": 512,
        "hc_mult": 4,
        "sliding_window": 128,
    }
    assert {k: c[k] for k in want} == want
    full = shapes.get("deepseek-v4").config
    assert full["num_hidden_layers"] == 43 and len(full["compress_ratios"]) == 44
    assert full["compress_ratios"][:4] == [0, 0, 4, 128] and full["compress_ratios"][-2:] == [4, 0]
    two = models.model_config("deepseek-v4", "fp8block", 2)
    assert two["compress_ratios"] == [0, 0, 0] and two["num_hidden_layers"] == 2
    assert shapes.get("deepseek-v4").config["num_hidden_layers"] == 43  # not modified
    assert models.dir_name("deepseek-v4", "fp8block", 4) == "deepseek-v4-fp8block-L4"
    # the per-tensor flavours are refused for deepseek-v4 and fp8block for the others
    for flavour in ("fp8dyn", "fp8static"):
        with pytest.raises(ValueError, match="not valid for deepseek-v4.*valid: fp8block"):
            models.model_config("deepseek-v4", flavour)
        with pytest.raises(ValueError, match="not valid for deepseek-v4"):
            models.serve_args("deepseek-v4", flavour)
    for arch in ("qwen3-30b-a3b", "mixtral-8x7b"):
        with pytest.raises(ValueError, match=f"'fp8block' is not valid for {arch}"):
            models.model_config(arch, "fp8block")
    with pytest.raises(ValueError, match="1..43"):
        models.model_config("deepseek-v4", "fp8block", 44)
    assert models.serve_args("deepseek-v4", "fp8block") == [
        "--kv-cache-dtype",
        "fp8",
        "--no-enable-prefix-caching",
    ]
    # the CLI refuses the pair before training a tokenizer, with the reason
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/e2e/models.py"), "--out", "/nonexistent"]
        + ["--arch", "deepseek-v4", "--flavour", "fp8static"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 2 and "not valid for deepseek-v4" in p.stderr, p.stderr
    # weights of 4 layers (block FP8 experts): ~28.5 GB, two servers fit one H200
    assert 26 * memory.GIB < shapes.get("deepseek-v4").weight_bytes(c) < 27 * memory.GIB


def test_one_record_per_arch(tmp_path):
    """Every part reads a model shape from its record (benchmarks/shapes.py): the MoE layer the
    kernel benchmarks time is the served config's, and an architecture without a record is
    an error that says where to add one and how to write the directory again, not another
    model's figures."""
    for name, shape in shapes.SERVED.items():
        c = shape.config
        experts = c.get("num_experts") or c.get("num_local_experts") or c.get("n_routed_experts")
        inter = c.get("moe_intermediate_size") or c["intermediate_size"]
        assert shape.moe == (experts, c["num_experts_per_tok"], c["hidden_size"], inter), name
        assert shape.cost is not None and set(shape.flavours) <= set(models.FLAVOURS), name
    # the kernel benchmarks' default shapes are the records' (a new record joins them unless
    # kernel_bench=False); the three of the published tables stay among them
    assert {n: s.moe for n, s in shapes.SHAPES.items() if s.kernel_bench} == shapes.MOE_SHAPES
    assert {"qwen3-30b-a3b", "dsv3-tp8", "mixtral-8x7b"} <= set(shapes.MOE_SHAPES)
    with pytest.raises(ValueError, match="unknown arch 'dsv3'"):
        models.model_config("dsv3", "fp8static")  # no such record
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}))
    with pytest.raises(ValueError, match="unknown arch 'qwen3_moe'.*benchmarks.e2e.models"):
        plan.Model.read(old)


def test_the_tree_name_rule_is_one_for_shell_and_python(tmp_path):
    """names.host_dir and benchmarks/h200/lib.sh's tree_dir give the same folder."""
    p = subprocess.run(
        ["bash", "-c", ". benchmarks/h200/lib.sh && tree_dir p1_2"],
        cwd=ROOT,
        env={**os.environ, "TREE_ROOT": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert p.stdout.strip() == str(names.host_dir(tmp_path, "p1_2")), p.stderr
    assert names.patches_of("p1_2", tmp_path / "nowhere") == 2
    assert names.patches_of("series", tmp_path / "nowhere") is None  # all of them


def test_model_env_is_per_model(tmp_path):
    """VLLM_USE_DEEP_GEMM=0 is the per-tensor models' setting, not every server's: DeepSeek-V4
    needs DeepGEMM on, even when the host's environment says 0."""
    assert "VLLM_USE_DEEP_GEMM" not in servers.ENV_ALWAYS
    for arch in ("qwen3-30b-a3b", "mixtral-8x7b"):
        assert models.model_env(arch) == {"VLLM_USE_DEEP_GEMM": "0"}
    v4 = models.model_env("deepseek-v4")
    assert v4["VLLM_USE_DEEP_GEMM"] == "1" and v4["VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER"] == "0"
    env = servers.server_env(
        {"VLLM_USE_DEEP_GEMM": "0"},
        pythonpath=["/root/site"],
        compile_dir=None,
        gpus=None,
        model_env=v4,
    )
    assert env["VLLM_USE_DEEP_GEMM"] == "1" and env["NCCL_NVLS_ENABLE"] == "0"
    # a directory written before the manifest had "env": by its arch; unknown: the old default
    dsv4 = shapes.get("deepseek-v4")
    assert plan.model_env_of({}, dsv4) == v4
    assert plan.model_env_of({"env": {"A": "1"}}, dsv4) == {"A": "1"}
    # an architecture without a record is an error, not another model's settings
    with pytest.raises(ValueError, match="unknown arch 'qwen3_moe'.*benchmarks/shapes.py"):
        shapes.get("qwen3_moe", served=True)


def test_deepseek_v4_probe_lengths():
    """The probe for deepseek-v4 meets the inv-RoPE kernel's one new JIT key in the base tree
    and nothing else that changes with the length: every length in one 64-token bucket (mHC
    n_splits), above the CUDA-graph capture sizes (eager, exact token count), some with
    L = 13..15 (mod 16) (num_tokens not divisible by 16, align4(num_tokens) divisible), none of
    them first (the first request of the bucket pays its tilelang / DeepGEMM JIT)."""
    lengths = shapes.get("deepseek-v4").probe_lengths
    assert lengths == (968, 1000, 1021, 1022, 1023, 973, 1008)
    assert shapes.get("qwen3-30b-a3b").probe_lengths == shapes.PROBE_LENGTHS
    assert len(set(lengths)) == len(lengths) >= 4
    assert len({-(-n // 64) for n in lengths}) == 1  # cdiv(L, 64): one mHC bucket
    raw = plan.parser().parse_args(["--model", "m", "--trees", "b", "--out", "o"]).capture_sizes
    capture = [int(x) for x in raw.split(",")]
    assert min(lengths) > max(capture)

    def key(n: int) -> tuple:  # Triton's integer specialisation: == 1, % 16 == 0
        return tuple("1" if v == 1 else "16" if v % 16 == 0 else "-" for v in (n, -(-n // 4) * 4))

    startup = {key(n) for n in [*capture, 8192]}  # captured sizes and the profile run
    new = [n for n in lengths if key(n) not in startup]
    assert {n % 16 for n in new} == {13, 14, 15} and key(new[0]) == ("-", "16")
    assert key(lengths[0]) in startup and key(lengths[1]) in startup  # primer, control
    assert max(lengths) + 1 <= shapes.get("deepseek-v4").max_model_len


def test_deepseek_v4_dry_run(tmp_path, tok_json, capsys):
    """serve.py on a deepseek-v4 directory: its engine arguments, environment, probe lengths
    and --max-model-len from VSERIES_MODEL.json; a per-tensor model keeps DeepGEMM off."""
    d = models.write_model(tmp_path / "m", "deepseek-v4", "fp8block", None, tok_json)
    assert d.name == "deepseek-v4-fp8block-L4"
    man = models.read_manifest(d)
    assert man["env"]["VLLM_USE_DEEP_GEMM"] == "1" and man["max_model_len"] == 16384
    fake_tree(tmp_path / "vllm-base", "base", [])
    fake_tree(tmp_path / "vllm-series", "series", ["1", "2", "3"])
    argv = ["--model", str(d), "--trees", "base", "series", "--tree-root", str(tmp_path)]
    argv += ["--out", str(tmp_path / "out"), "--quick", "--dry-run"]
    assert runner.main(argv) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("[server base]"))
    assert "VLLM_USE_DEEP_GEMM=1" in line and "VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER=0" in line
    assert "--kv-cache-dtype fp8" in line and "--max-model-len 16384" in line
    assert line.count("--no-enable-prefix-caching") == 1 and "--quantization" not in line
    assert "[968, 1000, 1021, 1022, 1023, 973, 1008]" in out
    assert runner.main([*argv, "--offline-throughput"]) == 0
    off = capsys.readouterr().out
    assert off.count("--no-enable-prefix-caching") == off.count("bench throughput") == 4
    assert "--kv-cache-dtype fp8" in off and "VLLM_USE_DEEP_GEMM=1" in off
    q = models.write_model(tmp_path / "m", "qwen3-30b-a3b", "fp8static", 2, tok_json)
    argv[1] = str(q)
    assert runner.main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("[server base]"))
    assert "VLLM_USE_DEEP_GEMM=0" in line and "--kv-cache-dtype" not in line
    assert "--max-model-len 2560" in line


@needs_tokenizers
def test_host_script_deepseek_v4(tmp_path):
    """host.sh MODEL=deepseek-v4: a clear early error naming what to stage when tilelang /
    DeepGEMM / FlashMLA are missing; with them (stand-in files), FLAVOUR fp8block and
    DeepGEMM on in the servers' environment."""
    root, site = tmp_path / "root", tmp_path / "site"
    for name, patches in (("base", []), ("series", ["1", "2", "3"])):
        (root / f"vllm-{name}" / "vllm").mkdir(parents=True)
        (root / f"vllm-{name}" / "vllm" / "VSERIES_TREE.json").write_text(
            json.dumps({"name": name, "head": "cd" * 20, "patches": patches})
        )
    env = {
        **os.environ,
        "TREE_ROOT": str(root),
        "STAGE_DIR": str(tmp_path / "stage"),
        "E2E_DIR": str(tmp_path / "e2e"),
        "SITE": str(site),
        "PYTHON": sys.executable,
        "MODEL": "deepseek-v4",
        "EXTRA": "--dry-run",
        "LIMIT": "300",
    }

    def host(**kw):
        return subprocess.run(
            ["bash", "benchmarks/e2e/host.sh", str(tmp_path / "r")],
            cwd=ROOT,
            env={**env, **kw},
            capture_output=True,
            text=True,
            timeout=600,
        )

    p = host()
    assert p.returncode == 1, p.stdout + p.stderr
    assert "MODEL=deepseek-v4 needs what is not staged" in p.stdout
    for what in ("tilelang in", "z3-solver", "apache-tvm-ffi 0.1.9", "DeepGEMM in", "FlashMLA in"):
        assert what in p.stdout, what
    assert "--attention --deepgemm" in p.stdout and "host-wheels-dsv4.txt" in p.stdout
    assert "=== e2e" not in p.stdout  # nothing started
    # the wheel list it names exists and pins what the report found necessary
    wl = (ROOT / "benchmarks/h200/host-wheels-dsv4.txt").read_text().split()
    assert {"tilelang==0.1.9", "z3-solver==4.15.4.0", "apache-tvm-ffi==0.1.9"} <= set(wl)
    # stand-ins for the staged packages and kernels
    for d in ("tilelang", "z3", "ml_dtypes", "apache_tvm_ffi-0.1.9.dist-info"):
        (site / d).mkdir(parents=True)
    (site / "ml_dtypes" / "__init__.py").write_text("")
    for t in ("base", "series"):
        v = root / f"vllm-{t}" / "vllm"
        (v / "third_party" / "deep_gemm").mkdir(parents=True)
        (v / "third_party" / "deep_gemm" / "_C.cpython-312-x86_64-linux-gnu.so").write_text("")
        (v / "_flashmla_C.abi3.so").write_text("")
    p = host()
    assert p.returncode == 0, p.stdout + p.stderr
    assert "=== e2e: deepseek-v4 fp8block default depth, trees base series" in p.stdout
    lines = [x for x in p.stdout.splitlines() if x.startswith("[server ")]
    assert lines and all("VLLM_USE_DEEP_GEMM=1" in x for x in lines)
    assert all("--kv-cache-dtype fp8" in x and "deepseek-v4-fp8block-L4" in x for x in lines)
    # a per-tensor flavour is refused with the reason
    p = host(FLAVOUR="fp8static")
    assert p.returncode == 1 and "not valid for deepseek-v4" in p.stdout, p.stdout


@pytest.mark.slow
@needs_vllm
@needs_harness_release
def test_vllm_reads_the_deepseek_v4_config(tmp_path, tok_json):
    """vLLM v0.21.0's own CLI parser and config code on the deepseek-v4 directory and the
    server command the runner builds: DeepseekV4ForCausalLM, block FP8 as deepseek_v4_fp8,
    MLA with head size 512, fp8 KV cache, no prefix caching, --max-model-len 16384, the
    deepseek_v4 tokenizer mode around the local tokenizer, and every field its model code
    reads (deepseek_v4.py, deepseek_v4_attention.py) present."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.model_executor.layers.quantization import get_quantization_config
    from vllm.tokenizers import get_tokenizer
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    d = models.write_model(tmp_path, "deepseek-v4", "fp8block", None, tok_json)
    p = plan.parse(
        ["--model", str(d), "--trees", "base", "series", "--out", str(tmp_path / "o")]
        + ["--quick", "--dry-run"]
    )
    cmd = commands.server_cmd(p, 8100)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(cmd[4:])
    assert args.kv_cache_dtype == "fp8" and args.enable_prefix_caching is False
    args.model = args.model_tag
    mc = EngineArgs.from_cli_args(args).create_model_config()
    assert mc.architectures == ["DeepseekV4ForCausalLM"]
    assert mc.quantization == "deepseek_v4_fp8" and mc.max_model_len == 16384
    assert mc.use_mla and mc.get_head_size() == 512 and mc.tokenizer_mode == "deepseek_v4"
    hf = mc.hf_config
    assert hf.quantization_config["scale_fmt"] == "ue8m0" and hf.expert_dtype == "fp8"
    assert len(hf.compress_ratios) >= hf.num_hidden_layers == 4
    read = [
        "num_attention_heads",
        "q_lora_rank",
        "o_lora_rank",
        "head_dim",
        "qk_rope_head_dim",
        "o_groups",
        "sliding_window",
        "rms_norm_eps",
        "max_position_embeddings",
        "rope_theta",
        "compress_rope_theta",
        "index_topk",
        "index_n_heads",
        "index_head_dim",
        "routed_scaling_factor",
        "hidden_size",
        "n_routed_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "swiglu_limit",
        "norm_topk_prob",
        "scoring_func",
        "num_hash_layers",
        "topk_method",
        "n_shared_experts",
        "hidden_act",
        "vocab_size",
        "hc_mult",
        "hc_sinkhorn_iters",
        "hc_eps",
    ]
    assert [k for k in read if getattr(hf, k, None) is None] == []
    rope = hf.rope_parameters
    assert rope["rope_type"] == "yarn" and rope["factor"] == 16
    qc = get_quantization_config("deepseek_v4_fp8").from_config(hf.quantization_config)
    assert qc.weight_block_size == [128, 128] and qc.is_checkpoint_fp8_serialized
    tok = get_tokenizer(str(d), tokenizer_mode=mc.tokenizer_mode)
    text = "bakiro tosu, 1234!"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


@pytest.mark.slow
def test_sigterm_stops_the_servers(tmp_path, model_dir):
    """`timeout` sends SIGTERM to serve.py only; the servers live in their own sessions, so
    serve.py must stop them itself (a warm host would otherwise keep them, their ports and
    their GPU memory). Also: a busy preferred port is replaced by a free one."""
    pytest.importorskip("aiohttp")
    py = standin_python(tmp_path)
    fake_tree(tmp_path / "vllm-base", "base", [])
    out = tmp_path / "out"
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    argv = [
        sys.executable,
        str(ROOT / "benchmarks" / "e2e" / "serve.py"),
        "--model",
        str(model_dir),
        "--trees",
        "base",
        "--tree-root",
        str(tmp_path),
        "--site",
        "",
        "--python",
        str(py),
        "--out",
        str(out),
        "--cells",
        "decode:1",
        "--reps",
        "1",
        "--processes",
        "1",
        "--probe-lengths",
        "3",
        "--bench-subprocess",
        "--port-base",
        str(port),
        "--budget-s",
        "300",
        "--startup-estimate-s",
        "5",
    ]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 600  # a hang guard: the probe comes in seconds
    while time.time() < deadline:
        recs = results.read_lines([out / "results.jsonl"])
        if any(r["kind"] == "probe" for r in recs):
            break
        time.sleep(0.2)
    start = next(r for r in recs if r["kind"] == "startup")
    assert start["ok"] and f"--port {port} " not in " ".join(start["server_cmd"]) + " "
    p.send_signal(15)
    text = p.communicate(timeout=600)[0]
    assert p.returncode == 3, text
    assert "terminated: servers stopped" in text
    pid = int(re.search(r"server pid (\d+)", text)[1])
    assert not servers.group_alive(pid) and _gone(pid)
    recs = results.read_lines([out / "results.jsonl"])
    assert [r["kind"] for r in recs if r["kind"] == "compiles"] == ["compiles"]
    busy.close()
