"""benchmarks/decode_sweep.py: the grid it reads, the configuration it puts in place of the
patch's, and the table it prints (the GPU run itself is the benchmark's)."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import decode_sweep as ds
from vseries import results


def test_grid_items_become_every_combination_with_a_label_each():
    grid = ds.parse_grid(["SPLIT_K1=1,2,4", "num_stages=3,5"])
    assert grid == {"SPLIT_K1": (1, 2, 4), "num_stages": (3, 5)}
    combos = ds.overrides(grid)
    assert len(combos) == 6 and combos[0] == {"SPLIT_K1": 1, "num_stages": 3}
    assert len({ds.label(o) for o in combos}) == 6
    assert ds.label({}) == "patch" and ds.label(combos[-1]) == "SPLIT_K1=4,num_stages=5"
    assert len(ds.overrides(ds.GRID)) == 18  # the default: what the docstring says


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("split_k1=2", "KEY one of"),
        ("SPLIT_K1", "KEY one of"),
        ("SPLIT_K1=", "KEY one of"),
        ("SPLIT_K1=2,x", "integers"),
        ("num_stages=0", "positive"),
        ("PDL=2", "0 or 1"),
    ],
)
def test_a_bad_grid_item_is_named_with_what_it_should_be(item, says):
    with pytest.raises(argparse.ArgumentTypeError, match=says) as e:
        ds.parse_grid([item])
    assert repr(item) in str(e.value)


@given(st.lists(st.text(max_size=20), max_size=4))
def test_any_grid_text_parses_or_is_refused_with_a_usage_error(items):
    try:
        grid = ds.parse_grid(items)
    except argparse.ArgumentTypeError:
        return
    assert set(grid) <= set(ds.KEYS)
    assert all(v >= (0 if k in ds.SWITCHES else 1) for k, vs in grid.items() for v in vs)


def test_a_candidates_switches_take_0_and_1():
    grid = ds.parse_grid(["PDL=0,1", "PREFETCH=0"])
    assert ds.overrides(grid) == [{"PDL": 0, "PREFETCH": 0}, {"PDL": 1, "PREFETCH": 0}]


def test_the_command_line_refuses_what_it_cannot_run(capsys):
    for argv, says in (
        (["--out", "x.json"], "--variant and --out"),
        (["--variant", "series", "--out", "x.json", "--batches", "17"], "1 to 16 tokens"),
        (["--variant", "series", "--out", "x.json", "--grid", "BLOCK_M=16"], "KEY one of"),
    ):
        with pytest.raises(SystemExit) as e:
            ds.main(argv)
        assert e.value.code == 2 and says in capsys.readouterr().err


def test_a_run_without_a_gpu_says_where_it_runs(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: the sweep would run")
    assert ds.main(["--variant", "series", "--out", str(tmp_path / "s.json")]) == 2
    assert "moved.sh phase sweep" in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()


def _row(variant, us, m=1, err=0.01):
    return results.Row(ds.BENCH, "qwen3-30b-a3b", "static", m, variant, us, us - 0.5, us + 0.5,
                       40_000_000, 40_000_000 / (us * 1e-6) / 4.3e12 * 100,
                       extra={"rel_err": err})  # fmt: skip


def test_report_puts_the_patch_first_then_the_fastest_and_names_failures(tmp_path):
    head = {"bench": ds.BENCH, "variant": "series", "gpu": "NVIDIA H200"}
    rows = [
        _row("patch", 20.0),
        _row("SPLIT_K1=2", 16.0),
        _row("SPLIT_K1=4", 18.0),
        _row("SPLIT_K1=1", 21.0),
        _row("SPLIT_K1=8", 25.0),
        results.failed(ds.BENCH, "qwen3-30b-a3b", "static", 1, "num_stages=6", "out of smem"),
    ]
    results.write(tmp_path / "s.json", head, rows)
    lines = ds.report(str(tmp_path / "s.json")).splitlines()
    assert lines[0].startswith("NVIDIA H200, tree series")
    table = [ln for ln in lines if ln.startswith("| qwen3")]
    assert [ln.split(" | ")[3] for ln in table[:4]] == [
        "patch", "SPLIT_K1=2", "SPLIT_K1=4", "SPLIT_K1=1"
    ]  # fmt: skip
    assert table[1].endswith("| 1.25x |") and "SPLIT_K1=8" not in "\n".join(lines)
    assert "failed: num_stages=6" in table[-1]


def test_report_of_several_runs_gives_each_configuration_s_median_and_the_runs_range(tmp_path):
    head = {"bench": ds.BENCH, "variant": "c0003-pdl", "gpu": "NVIDIA H100 80GB HBM3"}
    runs = [(20.0, 18.0), (21.0, 18.5), (20.5, 30.0)]  # (patch, PDL=1) per run
    paths = []
    for i, (patch, pdl) in enumerate(runs):
        results.write(tmp_path / f"r{i}.json", head, [_row("patch", patch), _row("PDL=1", pdl)])
        paths.append(str(tmp_path / f"r{i}.json"))
    lines = ds.report(paths).splitlines()
    assert "median of 3 runs' medians" in lines[0]
    table = [ln.split(" | ") for ln in lines if ln.startswith("| qwen3")]
    assert [(c[3], c[4]) for c in table] == [
        ("patch", "20.5 (20.0-21.0)"), ("PDL=1", "18.5 (18.0-30.0)")
    ]  # fmt: skip
    assert table[1][-1] == f"{20.5 / 18.5:.2f}x |"
    # one file: the run's own replays' range, as before
    one = ds.report(paths[:1]).splitlines()
    assert "(19.5-20.5)" in next(ln for ln in one if "| patch |" in ln)


def test_report_refuses_a_file_that_is_not_this_benchmark_s(tmp_path):
    with pytest.raises(SystemExit, match="no such file"):
        ds.report(str(tmp_path / "missing.json"))
    results.write(
        tmp_path / "layer.json",
        {"bench": "moe_layer"},
        [results.Row("moe_layer", "qwen3-30b-a3b", "static", 1, "default", 20.0, 20.0, 20.0)],
    )
    with pytest.raises(SystemExit, match="has no decode_sweep rows"):
        ds.report(str(tmp_path / "layer.json"))


@pytest.mark.slow  # imports vLLM
def test_the_override_replaces_only_its_keys_and_is_undone_after():
    d = pytest.importorskip("vllm.model_executor.layers.fused_moe.experts.triton_fp8_decode_moe")
    patch_rule, patch_max = d.get_decode_config, d.FP8_DECODE_MAX_TOKENS
    before = patch_rule(1, 8, 2048, 768, 132)
    with ds.decode_config({"SPLIT_K1": 2, "num_stages": 3}, up_to=16):
        inside = d.get_decode_config(1, 8, 2048, 768, 132)
        assert d.FP8_DECODE_MAX_TOKENS == 16
    assert inside == {**before, "SPLIT_K1": 2, "num_stages": 3} and inside != before
    assert d.get_decode_config is patch_rule
    assert patch_max == d.FP8_DECODE_MAX_TOKENS
