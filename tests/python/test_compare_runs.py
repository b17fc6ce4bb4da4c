"""bench/compare_runs.py on two small synthetic decode_bench.py runs (no torch needed)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("compare_runs", REPO / "bench" / "compare_runs.py")
compare_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_runs)


def _row(ctx: int, batch: int, dtype: str, step: float, over: float, ok: bool = True) -> dict:
    times = {s: {"median_us": step / 2 if s != "step" else step} for s in compare_runs.STAGES}
    return {"ctx": ctx, "B": batch, "qlen": 1, "ragged": False, "dtype": dtype, "times": times,
            "step_over_target": over, "check": {"ok": ok, "label": "ok" if ok else "bad"}}


def _write(path: pathlib.Path, rows: list) -> str:
    path.write_text(json.dumps({"rows": rows}))
    return str(path)


def test_within_tolerance_and_target_changes(tmp_path, capsys) -> None:
    old = _write(tmp_path / "old.json", [_row(8192, 1, "bf16", 20.0, 1.01),
                                         _row(131072, 64, "fp8", 300.0, 0.99),
                                         _row(524288, 1, "bf16", 60.0, 2.0)])
    new = _write(tmp_path / "new.json", [_row(8192, 1, "bf16", 19.6, 0.99),
                                         _row(131072, 64, "fp8", 306.0, 1.01)])
    assert compare_runs.main([old, new]) == 0
    out = capsys.readouterr().out
    assert "2 configurations in both runs (1 only in OLD, 0 only in NEW)" in out
    assert "| bf16 | 0.980 (0.980-0.980)" in out
    assert "| fp8 | 1.020 (1.020-1.020)" in out
    assert "within the step target: 1 (OLD) -> 1 (NEW)" in out
    assert "8K x 1 x 1 uniform bf16: step / target 1.010 -> 0.990" in out
    assert "128K x 64 x 1 uniform fp8: step / target 0.990 -> 1.010" in out
    assert out.rstrip().endswith("none")


def test_outside_tolerance_and_failed_check_exit_1(tmp_path, capsys) -> None:
    old = _write(tmp_path / "old.json", [_row(8192, 1, "bf16", 20.0, 1.5),
                                         _row(8192, 4, "bf16", 30.0, 1.5)])
    new = _write(tmp_path / "new.json", [_row(8192, 1, "bf16", 22.0, 1.6),
                                         _row(8192, 4, "bf16", 30.0, 1.5, ok=False)])
    assert compare_runs.main([old, new, "--tolerance", "0.05"]) == 1
    out = capsys.readouterr().out
    assert "8K x 1 x 1 uniform bf16: 20.0 -> 22.0 us (1.100)" in out
    assert "8K x 4 x 1 uniform bf16: CHECK failed in NEW (bad)" in out
    # A looser tolerance still fails on the CHECK.
    assert compare_runs.main([old, new, "--tolerance", "0.2"]) == 1


def test_bad_arguments_exit_2_naming_them(tmp_path, capsys) -> None:
    good = _write(tmp_path / "good.json", [_row(8192, 1, "bf16", 20.0, 1.5)])
    missing = str(tmp_path / "missing.json")
    assert compare_runs.main([missing, good]) == 2
    assert f"compare_runs: {missing}: cannot read it" in capsys.readouterr().err
    not_json = tmp_path / "not.json"
    not_json.write_text("{")
    assert compare_runs.main([good, str(not_json)]) == 2
    assert f"{not_json}: not JSON" in capsys.readouterr().err
    foreign = _write(tmp_path / "foreign.json", [{"ctx": 8192}])
    assert compare_runs.main([good, foreign]) == 2
    assert f"{foreign}: not a decode_bench.py result (missing 'times')" in capsys.readouterr().err
    no_times = dict(_row(8192, 1, "bf16", 20.0, 1.5), times={})
    partial = _write(tmp_path / "partial.json", [no_times])
    assert compare_runs.main([good, partial]) == 2
    assert f"{partial}: not a decode_bench.py result (missing 'insert')" in capsys.readouterr().err
    try:
        compare_runs.main([good, good, "--tolerance", "-1"])
    except SystemExit as e:
        assert e.code == 2
    assert "--tolerance must be at least 0, got -1.0" in capsys.readouterr().err


def test_gzipped_records(tmp_path, capsys) -> None:
    rows = [_row(8192, 1, "bf16", 20.0, 1.01)]
    plain = _write(tmp_path / "old.json", rows)
    packed = tmp_path / "new.json.gz"
    with gzip.open(packed, "wt") as f:
        f.write(json.dumps({"rows": rows}))
    assert compare_runs.main([plain, str(packed)]) == 0
    assert "1 configurations in both runs" in capsys.readouterr().out
