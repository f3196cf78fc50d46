"""The report tools on bad input: a missing, empty, truncated or foreign file, a selector
that matches nothing, a swapped pair of trees, an impossible number. Each stops with a usage
error (exit 2) that names what is wrong, before it writes anything; none shows a traceback
or prints a table of empty cells with exit 0."""

import json
import shutil

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks import moe_layer_report, report
from benchmarks.e2e import models
from benchmarks.e2e import report as e2e_report
from benchmarks.served import fit
from benchmarks.served import report as served_report
from vseries import upstream

RAW = ROOT / "benchmarks" / "results" / "raw"
LAYER = RAW / "h200-2026-12-04"
SERVED = sorted((RAW / "h200-2026-12-05" / "served").glob("*.json"))
E2E = RAW / "round9" / "e2e-call1" / "e2e" / "results.jsonl"


def stops(main, argv, capsys) -> str:
    """main(argv) must exit 2; its stderr."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_e2e_report_refuses_a_missing_or_empty_input_before_overwriting_its_table(tmp_path, capsys):
    """A mistyped file name replaced the committed e2e.md with an empty report (exit 0)."""
    out = tmp_path / "e2e.md"
    out.write_text("the committed table\n")
    err = stops(e2e_report.main, [str(tmp_path / "nonexist.jsonl"), "--out", str(out)], capsys)
    assert "no such file" in err and "nonexist.jsonl" in err
    (tmp_path / "notes.txt").write_text("not JSON lines\n")
    assert "no records" in stops(
        e2e_report.main, [str(tmp_path / "notes.txt"), "--out", str(out)], capsys
    )
    err = stops(e2e_report.main, [str(E2E), "--ref", "basee", "--out", str(out)], capsys)
    assert "--ref basee" in err and "present: " in err and "base" in err
    assert out.read_text() == "the committed table\n"


def test_layer_report_refuses_a_swapped_pair(tmp_path, capsys):
    err = stops(
        moe_layer_report.main,
        ["--base", str(LAYER / "moe_layer-series-r1.json"), "--series",
         str(LAYER / "moe_layer-base-r1.json"), "--out", str(tmp_path / "ml")],
        capsys,
    )  # fmt: skip
    assert "swap the files of --base and --series" in err
    assert not list(tmp_path.iterdir())


def test_selectors_that_match_nothing_are_named_with_what_is_there(tmp_path, capsys):
    a, b = LAYER / "moe_layer-base-r1.json", LAYER / "moe_layer-series-r1.json"
    err = stops(
        report.main, [str(a), str(b), "--ref", "basee", "--out", str(tmp_path / "r")], capsys
    )
    assert "--ref basee" in err and "present: decode16, default" in err
    err = stops(
        served_report.main,
        [*map(str, SERVED), "--layer", str(a), "--shape", "qwen3-30b"],
        capsys,
    )
    assert "--shape qwen3-30b" in err and "qwen3-30b-a3b" in err


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "no such file"),
        ("", "empty"),
        ('{"name": "bd1", "tree": "ba', "not JSON"),
        ("[1, 2]", "not a served engine's record"),
        ('{"foo": 1}', "not a served engine's record (no name, tree, flavour"),
    ],
)
def test_served_report_names_a_bad_record(tmp_path, capsys, content, said):
    p = tmp_path / "rec.json"
    if content is not None:
        p.write_text(content)
    assert said in stops(served_report.main, [str(SERVED[0]), str(p)], capsys)


def test_served_report_refuses_a_record_given_as_layer_rows(capsys):
    err = stops(served_report.main, [str(SERVED[0]), "--layer", str(SERVED[1])], capsys)
    assert "not a result file" in err or "not a bench_moe_layer result file" in err


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=200))
def test_served_report_stops_cleanly_on_any_bytes(tmp_path_factory, data):
    """Whatever a torn or foreign file holds: exit 2 with its name, never a traceback."""
    p = tmp_path_factory.mktemp("rec") / "rec.json"
    p.write_bytes(data)
    try:
        rec = json.loads(data)
    except ValueError:
        rec = None
    need = served_report.RECORD_KEYS[:1] if isinstance(rec, dict) and "error" in rec else None
    if isinstance(rec, dict) and all(k in rec for k in need or served_report.RECORD_KEYS):
        return  # a record after all (hypothesis seldom finds one)
    with pytest.raises(SystemExit) as e:
        served_report.main([str(p)])
    assert e.value.code == 2


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--gpu-mib", "nan"], "--gpu-mib nan"),
        (["--gpu-mib", "-1"], "--gpu-mib -1"),
        (["--gpu-mib", "81559", "--kv-gib", "-100"], "--kv-gib -100"),
    ],
)
def test_fit_refuses_impossible_numbers(capsys, argv, said):
    assert said in stops(fit.main, [*argv, "3", "bd4:base:fp8dyn", "sd4:series:fp8dyn"], capsys)


def test_models_checks_every_depth_before_writing_any(tmp_path, capsys):
    """--layers 40 wrote the Qwen3 models, then stopped with a traceback at Mixtral's 32."""
    err = stops(models.main, ["--out", str(tmp_path / "m"), "--layers", "40"], capsys)
    assert "--layers 40" in err and "mixtral-8x7b has 1..32 layers" in err
    assert not (tmp_path / "m").exists() or not list((tmp_path / "m").iterdir())


def test_upstream_checks_trees_and_selection_before_running(tmp_path, capsys):
    """--base that does not exist was found only after the patched run (minutes on a GPU
    host), and a selection without path was a KeyError."""
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    err = stops(
        upstream.main, ["--patched", str(tree), "--base", str(tmp_path / "nonexistent")], capsys
    )
    assert "--base" in err and "not a vLLM tree" in err
    sel = tmp_path / "sel.toml"
    sel.write_text('[[select]]\npatch = "0003"\n')
    err = stops(upstream.main, ["--patched", str(tree), "--select", str(sel)], capsys)
    assert "[[select]] 1 needs patch and path" in err
    sel.write_text('[select]\npatch = "0003"\npath = "tests/x.py"\n')
    err = stops(upstream.main, ["--patched", str(tree), "--select", str(sel)], capsys)
    assert "[[select]] tables (two brackets)" in err
    shutil.copy(ROOT / "tests" / "upstream.toml", sel)
    assert upstream.main(["--patched", str(tree), "--select", str(sel), "--only", "zzz"]) == 5
    assert "the selections: " in capsys.readouterr().err


def test_a_misspelt_bench_name_is_caught_and_the_series_names_none():
    """bench=served_v034 left the figures out of the PR body without a word; prs now lists it
    among the PR's problems with the names there are. The series' own names all match."""
    from vseries import series
    from vseries.prs import results as pr_results

    found = ROOT / "benchmarks" / "results"
    typo, known = pr_results.unmatched(found, [("served_v034", None), ("served_v0.34.0", None)])
    assert typo == ["served_v034"] and "served_v0.34.0" in known
    for e in series.load():
        if "bench" in e.options:
            assert pr_results.unmatched(found, pr_results.bench_names(e.options))[0] == [], e.name


def test_served_report_takes_a_failed_process_s_record(tmp_path, capsys):
    """A process that failed leaves only its name and error: the input check must let it
    through, so that the table lists it as failed."""
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"name": "x", "error": "RuntimeError('boom')"}))
    assert served_report.main([str(SERVED[0]), str(p)]) == 0
    assert "| x | - | - | failed: RuntimeError('boom') |" in capsys.readouterr().out
