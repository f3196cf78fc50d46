"""The served-decode benchmark's host-side parts (``benchmarks/served``), on the CPU: the turns
that keep engine processes from measuring at once, the trace summary of decode steps, and the
report that lists every process and predicts the saving from the layer table."""

import inspect
import json
import multiprocessing as mp
import subprocess
import time

import hypothesis
import pytest

from benchmarks.served import engine, fit, report, trace, turns


def _worker(folder, index, count, rounds, log):
    t = turns.Turns(folder, index, count, poll_s=0.005)
    t.join()
    t.wait_all(30)
    for r in range(rounds):
        t.take(timeout_s=60)
        start = time.monotonic()
        time.sleep(0.02)
        with open(log, "a") as f:
            f.write(json.dumps([index, r, start, time.monotonic()]) + "\n")
        t.give(finished=r == rounds - 1)


def _crasher(folder, index, count):
    t = turns.Turns(folder, index, count, poll_s=0.005)
    t.join()
    t.wait_all(30)
    t.take(timeout_s=60)  # holds the turn and dies without giving it


@pytest.mark.slow
def test_turns_never_overlap_and_alternate(tmp_path):
    log = tmp_path / "log"
    ctx = mp.get_context("fork")
    ps = [ctx.Process(target=_worker, args=(tmp_path, i, 3, 4, log)) for i in range(3)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(60)
    assert all(p.exitcode == 0 for p in ps)
    runs = sorted(json.loads(x) for x in log.read_text().splitlines())
    runs.sort(key=lambda r: r[2])
    assert len(runs) == 12
    for a, b in zip(runs, runs[1:], strict=False):
        assert a[3] <= b[2], "two processes measured at once"
    order = [r[0] for r in runs]
    # round robin from whichever process joined first: every window of three holds all
    # three, and the cycle repeats
    assert len(set(order[:3])) == 3, order
    assert all(order[i + 3] == order[i] for i in range(len(order) - 3)), order


@pytest.mark.slow
def test_a_holder_that_dies_is_skipped(tmp_path):
    log = tmp_path / "log"
    ctx = mp.get_context("fork")
    dead = ctx.Process(target=_crasher, args=(tmp_path, 0, 2))
    live = ctx.Process(target=_worker, args=(tmp_path, 1, 2, 2, log))
    dead.start()
    time.sleep(0.2)  # the crasher joins first and holds the first turn
    live.start()
    dead.join(30)
    live.join(30)
    assert live.exitcode == 0
    assert len(log.read_text().splitlines()) == 2


def test_turns_give_to_the_next_live_process_in_index_order(tmp_path):
    a = turns.Turns(tmp_path, 0, 2)
    a.join()
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["turn"] == 0
    # process 1 "joined" with a pid that is alive (this one): the turn goes to it
    with a._state() as s:  # noqa: SLF001  (the test plays a second process)
        s["joined"]["1"] = s["joined"]["0"]
    a.give()
    assert json.loads((tmp_path / "state.json").read_text())["turn"] == 1
    with a._state() as s:  # noqa: SLF001
        s["done"].append(1)
    a.take(timeout_s=1)  # 1 is done: 0 takes the turn back


def test_schedule_and_reps():
    reps = engine.reps_per_batch("1:2,4:2,8:1,16:1")
    assert reps == {1: 2, 4: 2, 8: 1, 16: 1}
    assert engine.schedule(reps) == [(1, 0), (4, 0), (8, 0), (16, 0), (1, 1), (4, 1)]


def test_log_lines_name_the_backend():
    text = "\n".join(
        [
            "INFO 12-04 [fp8.py:612] Using FLASHINFER_CUTLASS Fp8 MoE backend (first supported "
            "backend in priority order) out of potential backends: ['FLASHINFER_CUTLASS'].",
            "INFO noise",
            "INFO [kernel_warmup.py] Autotuning FlashInfer ops",
        ]
    )
    lines = engine.log_lines(text)
    assert len(lines) == 2
    assert engine.BACKEND.search(lines[0]).group(1) == "FLASHINFER_CUTLASS"


def test_a_compile_while_serving_keeps_its_binding_in_the_record():
    """With ``jit_monitor_verbose`` vLLM's JIT monitor logs a compile after the warm-up with
    its constexprs, signature and key; the record keeps that line whole (on the H200,
    2026-12-05, the series compiled ``_masked_amax_scale_kernel`` while serving and the name
    alone did not say which specialisation the warm-up missed)."""
    detail = "constexprs={HAS_MASK: True}; signature={num_rows: i32}; key=" + "x" * 900
    text = (
        "WARNING [jit_monitor.py:143] Triton kernel JIT compilation during inference: "
        f"_masked_amax_scale_kernel. {detail}\nINFO [fp8.py:1] Using TRITON Fp8 MoE backend"
    )
    jit, backend = engine.log_lines(text)
    assert jit.endswith("x" * 900) and len(backend) < 400


def test_the_engine_asks_only_for_what_the_pins_engine_args_have(
    pin, pristine, tmp_path, monkeypatch
):
    """Every keyword the served engine gives ``LLM`` is a field of the pin's ``EngineArgs``
    (read from the real source at the pin), the JIT monitor's verbose mode among them."""
    import argparse
    import ast
    import sys
    import types

    given: dict = {}
    fake = types.ModuleType("vllm")
    fake.LLM = lambda **kw: given.update(kw)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    args = argparse.Namespace(
        moe_backend="triton_fp8_decode", output_len=1024, max_batched_tokens=2048, kv_gib=2,
        gpu_share=0.14,
    )  # fmt: skip
    engine.build_llm(args, tmp_path, str(tmp_path))
    src = subprocess.run(
        ["git", "-C", str(pristine), "show", f"{pin.commit}:vllm/engine/arg_utils.py"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    cls = next(
        n
        for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.ClassDef) and n.name == "EngineArgs"
    )
    fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}
    assert set(given) <= fields, set(given) - fields
    assert given["jit_monitor_verbose"] is True and given["moe_backend"] == "triton_fp8_decode"


def test_a_record_is_written_with_its_backend_before_the_trace(tmp_path):
    """The engine writes its record as soon as its timings are in (``run``'s ``save``), with
    the backend its output names, and again at the end: on the H200 (2026-12-05) a process
    stopped by the wave's time limit during its trace lost timings it had printed."""
    import argparse

    log, out = tmp_path / "p.log", tmp_path / "p.json"
    log.write_text("INFO [fp8.py:612] Using TRITON_FP8_DECODE Fp8 MoE backend out of x\n")
    args = argparse.Namespace(log=log, out=out)
    engine.write_record(args, {"name": "p", "tpot_ms": {"1": [2.0]}})
    rec = json.loads(out.read_text())
    assert rec["tpot_ms"] == {"1": [2.0]} and rec["backend"] == "TRITON_FP8_DECODE"
    assert "save" in inspect.signature(engine.run).parameters


def _kernel(name, ts, dur, corr):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}  # fmt: skip


def _launch(ts, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": ts, "dur": 5,
            "args": {"correlation": corr}}  # fmt: skip


def _decode_trace(steps=4, period=100.0, graphs=1):
    """Steps of ``period`` us: ``graphs`` graph replays of attention + MoE kernels (60 us
    busy in all), then an eager sampler kernel (5 us); the rest idle."""
    ev, corr = [], 0
    for s in range(steps):
        t0 = s * period
        for g in range(graphs):
            corr += 1
            ev.append(_launch(t0 - 10 + g, corr))
            base = t0 + g * 60 / graphs
            ev.append(_kernel("flash_fwd_kernel", base, 20 / graphs, corr))
            ev.append(_kernel("_moe_decode_w13_kernel", base + 20 / graphs, 25 / graphs, corr))
            ev.append(_kernel("_moe_decode_w2_kernel", base + 45 / graphs, 15 / graphs, corr))
        ev.append(_kernel("argmax_kernel", t0 + 70, 5, 10_000 + s))
    return ev


@pytest.mark.parametrize("graphs", [1, 3])
def test_trace_splits_steps_and_finds_the_idle_gpu(graphs):
    s = trace.summarise(_decode_trace(graphs=graphs), decode_steps=4)
    assert s["steps"] == 3  # the last step has no end
    assert s["period_us"] == 100.0
    assert s["busy_us"] == pytest.approx(65.0)
    assert s["idle_us"] == pytest.approx(35.0)
    assert s["moe_us"] == pytest.approx(40.0)
    assert s["eager_us"] == pytest.approx(5.0)  # the sampler, outside the graphs
    assert s["host_lead_us"] == pytest.approx(10.0)  # launched 10 us before it ran
    assert s["launches_per_step"] == {
        "_moe_decode_w13_kernel": graphs, "_moe_decode_w2_kernel": graphs,
    }  # fmt: skip


def test_trace_of_a_folder_reads_gzip(tmp_path):
    import gzip

    p = tmp_path / "w0.pt.trace.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": _decode_trace()}).encode()))
    s = trace.summarise_folder(tmp_path, decode_steps=4)
    assert s["file"] == p.name and s["steps"] == 3


@pytest.mark.parametrize("gz", [False, True])
def test_a_kept_trace_is_the_whole_file_gzipped(tmp_path, gz):
    """--trace-keep copies the summarised trace file out of the profiler's folder as
    <name>-bs<batch>.pt.trace.json.gz (gzipped when the profiler wrote plain JSON), and
    the copy summarises as the original does."""
    import gzip

    raw = json.dumps({"traceEvents": _decode_trace()}).encode()
    src = tmp_path / "prof" / "worker"
    src.mkdir(parents=True)
    name = "w0.pt.trace.json" + (".gz" if gz else "")
    (src / name).write_bytes(gzip.compress(raw) if gz else raw)
    kept = engine.keep_trace(tmp_path / "prof", name, tmp_path / "keep", "Lsd6-bs1")
    assert kept == "Lsd6-bs1.pt.trace.json.gz"
    assert gzip.decompress((tmp_path / "keep" / kept).read_bytes()) == raw
    a = trace.summarise_folder(tmp_path / "keep", decode_steps=4)
    b = trace.summarise_folder(tmp_path / "prof", decode_steps=4)
    assert {k: v for k, v in a.items() if k not in ("file", "bytes")} == {
        k: v for k, v in b.items() if k not in ("file", "bytes")
    }


def _record(tmp_path, name, tree, flavour, tpot, tokens, layers=24, moe_backend="auto"):
    r = {
        "name": name, "tree": tree, "flavour": flavour, "moe_backend": moe_backend,
        "backend": "TRITON", "startup_s": 80.0, "layers": layers,
        "tpot_ms": {"1": tpot, "4": [x + 0.5 for x in tpot]}, "tokens": tokens,
    }  # fmt: skip
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(r))
    return p


def test_report_lists_every_process_and_predicts_from_the_layer_table(tmp_path):
    """Each series arm against v0.34.0's default: the series' decode backend (asked for, the
    wheel's process pooled with the tree's) predicted from the layer table's ``default``
    variant of the series, the series' ``auto`` from its ``general`` one."""
    toks = [[1, 2, 3], [4, 5, 6]]
    dec = {"moe_backend": "triton_fp8_decode"}
    paths = [
        _record(tmp_path, "b1", "base", "fp8dyn", [2.10, 2.12], toks),
        _record(tmp_path, "b2", "base", "fp8dyn", [2.20, 2.30], toks),
        _record(tmp_path, "s1", "series", "fp8dyn", [1.90, 1.95], toks, **dec),
        _record(tmp_path, "w1", "wheel", "fp8dyn", [1.95, 1.97], [[1, 2, 3], [4, 9, 6]], **dec),
        _record(tmp_path, "a1", "series", "fp8dyn", [2.12, 2.14], toks),
    ]
    layer = tmp_path / "layer.json"

    def lrow(tree, m, us, variant="default"):
        return {"bench": "moe_layer", "shape": "qwen3-30b-a3b", "dtype": "dynamic", "m": m,
                "variant": variant, "us": us}  # fmt: skip

    layer.write_text(
        json.dumps(
            {"header": {"variant": "base"}, "rows": [lrow("base", 1, 36.5), lrow("base", 4, 60.0)]}
        )
    )
    layer2 = tmp_path / "layer2.json"
    layer2.write_text(
        json.dumps(
            {
                "header": {"variant": "series"},
                "rows": [
                    lrow("series", 1, 20.5),
                    lrow("series", 4, 58.0),
                    lrow("series", 1, 35.5, "general"),
                ],  # fmt: skip
            }
        )
    )
    text, slim = report.build(paths, [layer, layer2], "qwen3-30b-a3b")
    lines = text.splitlines()
    assert sum(ln.startswith(("| b1", "| b2", "| s1", "| w1", "| a1")) for ln in lines) == 5
    assert "| 2.110 (2.100-2.120) |" in text  # a process: its median and range
    assert "1/2 (first at [None, 1])" in text  # the wheel's second continuation differs
    row = next(ln for ln in lines if ln.startswith("| fp8dyn | 1 |") and "triton_fp8_decode" in ln)
    # base: median of the process medians (2.11, 2.25) = 2.18; decode (1.925, 1.96) = 1.9425
    assert "2.180 (2.110-2.250), n=2" in row and "1.942 (1.925-1.960), n=2" in row
    # predicted: 24 layers x (36.5 - 20.5) us = 0.384 ms; saved 0.2375 ms -> 62%
    assert "| 0.384 | 62% |" in row and row.endswith("| 2 of 2 | - |")  # no wave known
    auto = next(ln for ln in lines if ln.startswith("| fp8dyn | 1 |") and "| series |" in ln)
    # the series' auto (2.13): 24 x (36.5 - 35.5) us = 0.024 ms predicted, 0.05 saved
    assert "| 2.130 (2.130-2.130), n=1 |" in auto and "| 0.024 | 208% | 0 of 1 |" in auto
    assert all("tokens" not in r for r in slim)


def test_a_wave_is_held_to_its_own_machines_layer_table(tmp_path):
    """Records in ``<round>/served/`` beside that round's ``moe_layer-*.json``: each wave's
    saving against the prediction of the layer table measured on the same machine; a round
    without one adds no row."""
    toks = [[1, 2, 3]]
    dec = {"moe_backend": "triton_fp8_decode"}
    here, other = tmp_path / "r5" / "served", tmp_path / "r4" / "served"
    here.mkdir(parents=True)
    other.mkdir(parents=True)
    paths = []
    for d, tag in ((here, "5"), (other, "4")):
        paths.append(_record(d, f"Lbd{tag}", "base", "fp8dyn", [4.17], toks, layers=48))
        paths.append(_record(d, f"Lsd{tag}", "series", "fp8dyn", [3.54], toks, layers=48, **dec))
    for p in paths:
        r = json.loads(p.read_text())
        p.write_text(json.dumps({**r, "wave_id": p.parent.parent.name}))

    def lfile(variant, us, run="r1"):
        rows = [{"bench": "moe_layer", "shape": "qwen3-30b-a3b", "dtype": "dynamic", "m": 1,
                 "variant": "default", "us": us}]  # fmt: skip
        (tmp_path / "r5" / f"moe_layer-{variant}-{run}.json").write_text(
            json.dumps({"header": {"variant": variant}, "rows": rows})
        )

    lfile("base", 36.0)
    # two runs of the series' layer: their median, 21.9 us; 48 x 14.1 us = 0.677 ms
    # predicted; saved 0.630 ms -> 93%
    lfile("series", 21.1)
    lfile("series", 22.7, "r2")
    text, _ = report.build(paths, [], "qwen3-30b-a3b")
    rows = [ln for ln in text.splitlines() if ln.startswith(("| r4 ", "| r5 "))]
    assert len(rows) == 1, rows
    assert rows[0].startswith("| r5 | r5 | fp8dyn | 1 |")
    assert rows[0].endswith("| 4.170 | 3.540 | 0.630 | 0.677 | 93% |")


def test_report_holds_a_continuation_to_every_base_process(tmp_path):
    """Dummy weights leave near-ties that two v0.34.0 processes break differently: a series
    continuation equal to another base process's counts as equal; one that no base process
    made does not, and a base process whose form no other base process made shows it."""
    dec = {"moe_backend": "triton_fp8_decode"}
    paths = [
        _record(tmp_path, "b1", "base", "fp8dyn", [2.1], [[1, 2, 3], [4, 5, 6]]),
        _record(tmp_path, "b2", "base", "fp8dyn", [2.1], [[1, 2, 7], [4, 5, 6]]),
        _record(tmp_path, "b3", "base", "fp8dyn", [2.1], [[1, 2, 7], [4, 5, 6]]),
        _record(tmp_path, "s1", "series", "fp8dyn", [1.9], [[1, 2, 7], [4, 5, 6]], **dec),
        _record(tmp_path, "s2", "series", "fp8dyn", [1.9], [[1, 8, 3], [4, 5, 6]], **dec),
    ]
    lines = report.build(paths, [], "qwen3-30b-a3b")[0].splitlines()
    cell = {ln.split(" | ")[0][2:]: ln.rstrip(" |").rsplit(" | ", 1)[1] for ln in lines
            if ln.startswith(("| b", "| s")) and " | 80.0 | " in ln}  # fmt: skip
    assert cell["s1"] == "2/2" and cell["b2"] == "2/2" and cell["b3"] == "2/2"
    assert cell["s2"] == "1/2 (first at [1, None])"  # against b1, the first base process
    assert cell["b1"] == "1/2 (first at [2, None])"  # against b2: no other base made its form


def test_report_shows_a_failed_process(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"name": "x", "error": "RuntimeError('boom')"}))
    ok = _record(tmp_path, "b1", "base", "fp8dyn", [2.1], [[1]])
    text, _ = report.build([ok, p], [], "qwen3-30b-a3b")
    assert "| x | - | - | failed: RuntimeError('boom') |" in text


def test_a_report_is_of_one_model(tmp_path):
    """Records of the DeepSeek-V3 TP8 stand-in and of Qwen3-30B-A3B side by side: each report
    lists its own model's processes only (records without an arch are Qwen3-30B-A3B's); a
    model with no record stops the report with the models the records hold."""
    q = _record(tmp_path, "b1", "base", "fp8dyn", [2.1], [[1]])
    d = _record(tmp_path, "Db1", "base", "fp8dyn", [3.1], [[1]])
    d.write_text(json.dumps({**json.loads(d.read_text()), "arch": "dsv3-tp8"}))
    text, _ = report.build([q, d], [], "qwen3-30b-a3b")
    assert "| b1 |" in text and "| Db1 |" not in text
    text, _ = report.build([q, d], [], "dsv3-tp8")
    assert "| Db1 |" in text and "| b1 |" not in text
    with pytest.raises(ValueError, match="mixtral-8x7b: no engine record of it; the records "
                       "hold dsv3-tp8, qwen3-30b-a3b"):  # fmt: skip
        report.build([q, d], [], "mixtral-8x7b")


def test_a_process_marked_gone_completes_the_wave_and_loses_the_turn(tmp_path):
    a = turns.Turns(tmp_path, 0, 2)
    a.join()
    with a._state() as s:  # noqa: SLF001  (process 1 holds the turn, then crashes)
        s["turn"] = 1
    turns.main([str(tmp_path), "--index", "1", "--count", "2"])  # its parent marks it gone
    assert a.wait_all(0.5) == [0, 1]
    a.take(timeout_s=1)


def test_a_backend_asked_for_on_the_base_is_an_arm_of_its_own(tmp_path):
    """v0.34.0 with --moe-backend triton (the rule of #50040 without the series) is compared
    with v0.34.0's default on its own, never pooled into the base's column."""
    toks = [[1, 2, 3]]
    paths = [
        _record(tmp_path, "bs1", "base", "fp8static", [2.10, 2.14], toks),
        _record(tmp_path, "bs2", "base", "fp8static", [2.20, 2.22], toks),
        _record(tmp_path, "ss1", "series", "fp8static", [1.80, 1.82], toks),
        _record(tmp_path, "bt1", "base", "fp8static", [2.30, 2.32], toks),
        _record(tmp_path, "bt2", "base", "fp8static", [2.40, 2.42], toks),
    ]
    for p in paths[3:]:
        p.write_text(json.dumps({**json.loads(p.read_text()), "moe_backend": "triton"}))
    text, _ = report.build(paths, [], "qwen3-30b-a3b")
    lines = text.splitlines()
    main = next(ln for ln in lines if ln.startswith("| fp8static | 1 | 2."))
    assert "2.165 (2.120-2.210), n=2" in main  # bs1 and bs2 only
    row = next(ln for ln in lines if "| base --moe-backend triton |" in ln and "| 1 |" in ln)
    assert "2.165 (2.120-2.210), n=2 | base --moe-backend triton | 2.360 (2.310-2.410), n=2" in row
    assert "| 0.917x | 0 of 2 |" in row


def test_against_holds_the_series_to_triton_untuned_and_tuned(tmp_path):
    """0003 against TRITON asked for on v0.34.0, untuned and with a tuned configuration file
    (tree ``tuned``): a table per reference arm, pairs per wave, the prediction from each
    reference's own layer rows, and the continuations held to the first reference's."""
    toks = [[1, 2, 3]]
    tri, dec = {"moe_backend": "triton"}, {"moe_backend": "triton_fp8_decode"}
    paths = [
        _record(tmp_path, "t1", "tuned", "fp8static", [3.57], toks, layers=48, **tri),
        _record(tmp_path, "s1", "series", "fp8static", [3.39], toks, layers=48, **dec),
        _record(tmp_path, "s2", "series", "fp8static", [3.40], [[1, 9, 3]], layers=48, **dec),
        _record(tmp_path, "b2", "base", "fp8static", [3.59], toks, layers=48, **tri),
    ]
    for p, w in zip(paths, ("29", "29", "30", "30"), strict=True):
        p.write_text(json.dumps({**json.loads(p.read_text()), "wave_id": w}))
    rows = {"base": 27.9, "tuned": 27.8, "series": 22.3}
    layers = []
    for tree, us in rows.items():
        f = tmp_path / f"moe_layer-t-{tree}.json"
        row = {"bench": "moe_layer", "shape": "qwen3-30b-a3b", "dtype": "static", "m": 1,
               "variant": "default", "us": us}  # fmt: skip
        f.write_text(json.dumps({"header": {"variant": tree}, "rows": [row]}))
        layers.append(f)
    refs = ("tuned --moe-backend triton", "base --moe-backend triton")
    text = report.build(paths, layers, "qwen3-30b-a3b", None, refs)[0]
    lines = text.splitlines()
    assert "| greedy continuations equal to a tuned --moe-backend triton process's |" in text
    assert next(ln for ln in lines if ln.startswith("| s2 |")).endswith("| 0/1 (first at [1]) |")
    tuned, base = (
        next(ln for ln in lines if ln.startswith("| fp8static | 1 | ") and ln.count(r) == 1)
        for r in ("| 3.570 (3.570-3.570), n=1 |", "| 3.590 (3.590-3.590), n=1 |")
    )
    # tuned: 3.570 / median(3.39, 3.40) = 1.052x; 48 x (27.8 - 22.3) us = 0.264 ms predicted;
    # only wave 29 holds the tuned process
    assert "| 1.052x | 0.175 | 0.264 | 66% | 2 of 2 | 29: 1.053x (1 v 1) |" in tuned
    # untuned: 3.590 / 3.395 = 1.057x; 48 x (27.9 - 22.3) us = 0.269 ms
    assert "| 1.057x | 0.195 | 0.269 | 73% | 2 of 2 | 30: 1.056x (1 v 1) |" in base
    assert text.index("tuned --moe-backend triton TPOT ms") < text.index(
        "base --moe-backend triton TPOT ms"
    )


def test_arms_holds_a_candidate_tree_to_v0340(tmp_path):
    """A candidate change to v0.34.0 served as a tree of its own (the one-launch FP8
    quantization, waves 25, 26 and 35-38): ``arms`` names it, it is held to v0.34.0's default
    and predicted from its own layer rows (TRITON with dynamic scales on both), and the series'
    arms are left out."""
    toks = [[1, 2, 3]]
    q = "cfp8-quant-one-program"
    paths = [
        _record(tmp_path, "q1", q, "fp8dyn", [3.80], toks, layers=48),
        _record(tmp_path, "b1", "base", "fp8dyn", [4.00], toks, layers=48),
        _record(
            tmp_path,
            "s1",
            "series",
            "fp8dyn",
            [3.50],
            toks,
            layers=48,
            moe_backend="triton_fp8_decode",
        ),  # fmt: skip
    ]
    layers = []
    for tree, us in (("base", 36.5), (q, 31.9)):
        f = tmp_path / f"moe_layer-q-{tree}.json"
        row = {"bench": "moe_layer", "shape": "qwen3-30b-a3b", "dtype": "dynamic", "m": 1,
               "variant": "default", "us": us}  # fmt: skip
        f.write_text(json.dumps({"header": {"variant": tree}, "rows": [row]}))
        layers.append(f)
    text = report.build(paths, layers, "qwen3-30b-a3b", None, held=(q,))[0]
    row = next(ln for ln in text.splitlines() if ln.startswith("| fp8dyn | 1 | "))
    # 4.00 / 3.80 = 1.053x; 48 x (36.5 - 31.9) us = 0.221 ms predicted; 0.200 / 0.221 = 91%
    assert f"| {q} | 3.800 (3.800-3.800), n=1 | 1.053x | 0.200 | 0.221 | 91% | 1 of 1 |" in row
    assert "| fp8dyn | 1 | 4.000 (4.000-4.000), n=1 | series" not in text
    # without ``arms``: the series' arm, as before
    assert (
        "| series --moe-backend triton_fp8_decode |"
        in report.build(paths, layers, "qwen3-30b-a3b")[0]
    )


def test_report_compares_the_arms_inside_each_wave(tmp_path):
    """Processes started together (one wave) share the host's conditions; waves do not (on the
    H200, 2026-12-05, a second wave ran batch 1 about 0.3 ms slower in every arm). The report
    gives default / arm per wave, the wave read from the record or, for older records, from
    moved.sh's log."""
    toks = [[1, 2, 3]]
    dec = {"moe_backend": "triton_fp8_decode"}
    paths = [
        _record(tmp_path, "b1", "base", "fp8dyn", [2.10], toks),
        _record(tmp_path, "s1", "series", "fp8dyn", [2.00], toks, **dec),
        _record(tmp_path, "b2", "base", "fp8dyn", [2.50], toks),
        _record(tmp_path, "s2", "series", "fp8dyn", [2.40], toks, **dec),
    ]
    log = "\n".join(
        [
            "=== wave 1: 2 engines, 300s, at 19s: b1:base:fp8dyn:trace s1:series:fp8dyn::x",
            "engine 0 of wave 1 ended at 270s",
            "=== wave 2: 2 engines, 255s, at 320s: b2:base:fp8dyn s2:series:fp8dyn::x",
        ]
    )
    waves = report.waves_from_log(log)
    assert waves == {"b1": "1", "s1": "1", "b2": "2", "s2": "2"}
    text, _ = report.build(paths, [], "qwen3-30b-a3b", waves)
    row = next(ln for ln in text.splitlines() if ln.startswith("| fp8dyn | 1 |"))
    # pooled: base (2.1, 2.5) against (2.0, 2.4): 1 of 2 beats every base process; per wave
    # 2.1 / 2.0 = 1.050x and 2.5 / 2.4 = 1.042x
    assert "| 1 of 2 |" in row and row.endswith("| 1: 1.050x (1 v 1), 2: 1.042x (1 v 1) |")
    # a record that names its wave needs no log
    rec = json.loads(paths[0].read_text())
    assert report.wave_of({**rec, "wave_id": "7"}, waves) == "7"


def test_report_sets_the_graphs_saving_beside_the_tpot_saving(tmp_path):
    """A traced process's replayed graph (GPU timeline) beside its TPOT measured without the
    profiler: where the series' graph is shorter by what the layer table predicts and TPOT
    falls by less, the step's time outside the graph grew (the GPU waits for the host). Figures
    of bd1 and sd1 on the H200 (2026-12-05, batch 1, dynamic scales)."""
    toks = [[1, 2, 3]]
    dec = {"moe_backend": "triton_fp8_decode"}
    b = _record(tmp_path, "bd1", "base", "fp8dyn", [2.0956, 2.1717], toks)
    s = _record(tmp_path, "sd1", "series", "fp8dyn", [1.9724, 2.0264], toks, **dec)
    untraced = _record(tmp_path, "bd2", "base", "fp8dyn", [2.3], toks)
    for p, graph, moe in ((b, 2008.24, 696.28), (s, 1593.74, 616.45)):
        rec = json.loads(p.read_text())
        step = {"steps": 46, "graph_us": graph, "moe_us": moe, "period_us": 3000.0,
                "busy_us": 1800.0, "idle_us": 1200.0, "kernels_per_step": 380.0,
                "launches_per_step": {}, "longest_kernels_us": {}}  # fmt: skip
        p.write_text(json.dumps({**rec, "trace": {"1": step}}))
    layer = tmp_path / "layer.json"
    rows = [
        {"shape": "qwen3-30b-a3b", "dtype": "dynamic", "m": 1, "variant": "default", "us": us}
        for us in (36.5,)
    ]
    layer.write_text(json.dumps({"header": {"variant": "base"}, "rows": rows}))
    layer2 = tmp_path / "layer2.json"
    layer2.write_text(
        json.dumps({"header": {"variant": "series"}, "rows": [{**rows[0], "us": 20.3}]})
    )
    text, _ = report.build([b, s, untraced], [layer, layer2], "qwen3-30b-a3b")
    lines = text.splitlines()
    # TPOT - graph span: 2133.65 - 2008.24 = 125 us (base), 1999.4 - 1593.74 = 406 us (series)
    assert any(
        ln.startswith("| bd1 |") and ln.endswith("| 2008 | 696 | 2.134 | 125 |") for ln in lines
    )
    assert any(
        ln.startswith("| sd1 |") and ln.endswith("| 1594 | 616 | 1.999 | 406 |") for ln in lines
    )
    row = next(ln for ln in lines if "| bd1 v sd1 |" in ln)
    # graph 2008 - 1594 = 414 us; predicted 24 x (36.5 - 20.3) = 389 us; TPOT 2133.65 -
    # 1999.4 = 134 us, 32% of the graph's saving; bd2 has no trace and is left out
    assert row == (
        "| fp8dyn | 1 | series --moe-backend triton_fp8_decode | bd1 v sd1 | 2008 | 1594 | 414 "
        "| 389 | 134 | 32% |"
    )


def test_a_wave_that_does_not_fit_runs_in_parts_that_keep_its_pairs():
    """Six 24-layer engines (about 20 GiB each) fit on an H200 (141 GiB) together, not on an
    H100 (80 GiB): there the wave runs in two parts of three, each with both trees; four
    48-layer engines run in two parts of a pair each on either GPU."""
    six = [
        f"{t}{i}:{tree}:fp8dyn" for i in (1, 2, 3) for t, tree in (("b", "base"), ("s", "series"))
    ]
    assert fit.parts(six, fit.USABLE * 143771 / 1024, 2, "qwen3-30b-a3b") == [six]
    a, b = fit.parts(six, fit.USABLE * 81559 / 1024, 2, "qwen3-30b-a3b")
    assert (a, b) == (six[:3], six[3:])
    deep = ["b:base:fp8dyn:trace::48", "s:series:fp8dyn:trace:x:48", "c:base:fp8static:::48",
            "t:series:fp8static::x:48"]  # fmt: skip
    for mib in (143771, 81559):
        assert fit.parts(deep, fit.USABLE * mib / 1024, 2, "qwen3-30b-a3b") == [deep[:2], deep[2:]]
    with pytest.raises(SystemExit, match="needs about 34 GiB, the GPU has 30 GiB"):
        fit.parts(deep, 30, 2, "qwen3-30b-a3b")


def test_fit_names_the_parts_for_served_sh(capsys):
    specs = ["b:base:fp8dyn", "s:series:fp8dyn"]
    fit.main(["--gpu-mib", "143771", "3", *specs])
    assert capsys.readouterr().out.splitlines() == ["3 b:base:fp8dyn s:series:fp8dyn"]
    fit.main(["--gpu-mib", "40000", "3", *specs])
    out = capsys.readouterr()
    assert out.out.splitlines() == ["3a b:base:fp8dyn", "3b s:series:fp8dyn"]
    assert "runs in 2 parts" in out.err


def test_a_spec_names_its_model_and_the_stand_in_pairs_fit_an_h100(capsys):
    """The seventh field of a spec is its model (a record of benchmarks/shapes.py): the
    DeepSeek-V3 TP8 stand-in at 16 layers (about 27 GiB) runs as a pair on an H100 and at 24
    layers (about 38 GiB) does not; a model that is not served stops fit with its name."""
    pair16 = ["b:base:fp8static:::16:dsv3-tp8", "s:series:fp8static::x:16:dsv3-tp8"]
    pair24 = [s.replace(":16:", ":24:") for s in pair16]
    h100 = fit.USABLE * 81559 / 1024
    assert 25 < fit.spec_need(pair16[0], 2, "qwen3-30b-a3b") < 30
    assert fit.parts(pair16, h100, 2, "qwen3-30b-a3b") == [pair16]
    assert fit.parts(pair24, h100, 2, "qwen3-30b-a3b") == [pair24[:1], pair24[1:]]
    # the same spec without the field is Qwen3-30B-A3B's (a different footprint)
    assert fit.spec_need("b:base:fp8static:::16", 2, "qwen3-30b-a3b") < 20
    with pytest.raises(SystemExit, match="fit: spec 'b:base:fp8static:::16:nope'.*unknown arch"):
        fit.parts(["b:base:fp8static:::16:nope"], h100, 2, "qwen3-30b-a3b")
    with pytest.raises(SystemExit, match="fit: spec .*expected name:tree:flavour"):
        fit.parts(["b:base:fp8static:::16:dsv3-tp8:x"], h100, 2, "qwen3-30b-a3b")


def test_the_stand_in_is_one_rank_of_deepseek_v3_tp8():
    """The served DeepSeek-V3 TP8 record: its MoE layer is the kernel benchmarks' shape, the
    vocabulary one rank's share, and the engine's prompts stay inside it (the others' prompts
    are unchanged)."""
    from benchmarks import shapes
    from benchmarks.e2e import models

    cfg = models.model_config("dsv3-tp8", "fp8dyn")
    assert cfg["num_hidden_layers"] == 16 and cfg["num_attention_heads"] == 128 // 8
    assert cfg["vocab_size"] == 129280 // 8 and shapes.get("dsv3-tp8").moe == (256, 8, 7168, 256)
    ids = [t for p in engine.prompts(16, 32, seed=1, vocab=cfg["vocab_size"]) for t in p]
    assert max(ids) < cfg["vocab_size"]
    assert engine.prompts(4, 32, seed=1) == engine.prompts(4, 32, seed=1, vocab=151936)


def test_the_engine_asks_for_its_footprints_share_of_the_gpu():
    import argparse

    args = argparse.Namespace(
        gpu_share=None, gpu_mib=81559, arch="qwen3-30b-a3b", flavour="fp8dyn", layers=48, kv_gib=2
    )
    need = fit.footprint_gib("qwen3-30b-a3b", "fp8dyn", 48, 2)
    assert 30 < need < 40 and engine.gpu_share(args) == round(need * 1024 / 81559, 3)
    assert engine.gpu_share(argparse.Namespace(gpu_share=0.2)) == 0.2


@hypothesis.given(
    hypothesis.strategies.lists(
        hypothesis.strategies.text(alphabet="abdfsx8:4 ", max_size=24), min_size=1, max_size=4
    )
)
def test_a_bad_spec_stops_fit_with_what_is_wrong(specs):
    """Whatever the specs, fit either cuts them into parts that hold each spec once, in order,
    or stops with a message that starts with "fit:" (no traceback in moved.sh's log)."""
    try:
        cut = fit.parts(specs, 129.0, 2, "qwen3-30b-a3b")
    except SystemExit as exc:
        assert str(exc).startswith("fit: ")
    else:
        assert [s for part in cut for s in part] == specs
