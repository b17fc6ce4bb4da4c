"""msa.plot (`python -m msa plot`, `msa report --plot`) on synthetic and real run reports, drawn
with matplotlib's Agg backend."""

from __future__ import annotations

import copy
import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the msa Python tests need it")
pytest.importorskip(
    "msa", reason="the msa package is not built: pip install --no-build-isolation ./python")

from msa import plot  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
# The stages in the order `msa run` writes them; the plots (as the text summary) list them in
# SUMMARY_ORDER.
STAGES = {"activations": 4.0, "metadata": 3.0, "insert": 12.0, "indexer_decode": 10.0,
          "indexer_prefill": 20.0, "attention_decode": 15.0, "attention_prefill": 35.0,
          "readback": 5.0}
SUMMARY_ORDER = ["insert", "indexer_decode", "indexer_prefill", "attention_decode",
                 "attention_prefill", "metadata", "activations", "readback"]
# A --compare-dense report written before the indexer and attention stages were split by row kind.
UNSPLIT_REPORT = REPO / "tests/engine/data/unsplit_stages_report.json"


def _step(i: int, prefill: int, decode: int, latency_ms: float) -> dict:
    return {"step": i, "start_s": 0.1 * i, "tokens": prefill + decode, "decode_requests": decode,
            "prefill_requests": int(prefill > 0), "decode_tokens": decode,
            "prefill_tokens": prefill, "output_tokens": decode + int(prefill > 0),
            "max_context": 100 + i, "latency_ms": latency_ms, "kv_blocks_used": 4,
            "stage_ms": dict(STAGES)}


def _report() -> dict:
    steps = [_step(0, 512, 0, 2500.0), _step(1, 256, 2, 1200.0)]
    steps += [_step(i, 0, 3, 4.0 + i) for i in range(2, 12)]
    return {
        "schema": "msa-run-report/1", "backend": "cpu", "device": "CPU, 2 threads",
        "model": {"preset": "default"},
        "summary": {"wall_s": 4.0, "stage_ms": dict(STAGES)},
        "steps": steps,
    }


def _compared(speedup: float) -> dict:
    report = _report()
    report["compare_dense"] = {
        "dense": {"stage_ms": {**STAGES, "indexer_decode": 0.0, "indexer_prefill": 0.0,
                               "attention_decode": 30.0, "attention_prefill": 90.0}},
        "speedup": speedup, "attention_speedup": 1.5,
        "fidelity": {"rows_sampled": 3, "samples": [
            {"layer": 1, "position": 300, "rel_error": 0.02, "selected_mass": 0.97},
            {"layer": 2, "position": 420, "rel_error": 0.05, "selected_mass": 0.93},
            {"layer": 1, "position": 500, "rel_error": 0.01, "selected_mass": 0.99}]},
    }
    return report


def _titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes]


def _axis(fig, title: str):
    return next(ax for ax in fig.axes if ax.get_title().startswith(title))


def test_panels_of_a_run() -> None:
    fig = plot.figure(_report())
    try:
        assert _titles(fig) == ["Step time", "Time per stage", "Throughput"]
        steps = _axis(fig, "Step time")
        assert steps.get_yscale() == "log"
        labels = [t.get_text() for t in steps.get_legend().get_texts()]
        assert labels == ["with prefill rows (2)", "decode only (10)"]
        stage_axis = _axis(fig, "Time per stage")
        assert [t.get_text() for t in stage_axis.get_yticklabels()] == SUMMARY_ORDER
        assert [round(p.get_width(), 6) for p in stage_axis.patches] == [
            STAGES[n] for n in SUMMARY_ORDER]
        throughput = _axis(fig, "Throughput")
        lines = {line.get_label(): line for line in throughput.get_lines()}
        assert set(lines) == {"processed rows/s (prefill + decode)", "output tokens/s"}
        # Every token of every step is in one bin: the rates integrate back to the totals.
        width = lines["output tokens/s"].get_xdata()[0] * 2
        total_out = sum(s["output_tokens"] for s in _report()["steps"])
        assert sum(lines["output tokens/s"].get_ydata()) * width == pytest.approx(total_out)
    finally:
        plot._pyplot().close(fig)


def test_dense_comparison_panels() -> None:
    fig = plot.figure(_compared(speedup=1.8))
    try:
        speed = _axis(fig, "Sparse vs dense")
        assert speed.get_title() == "Sparse vs dense: 1.80x per step, 1.50x in attention"
        assert [t.get_text() for t in speed.get_legend().get_texts()] == ["sparse", "dense"]
        assert [t.get_text() for t in speed.get_yticklabels()] == SUMMARY_ORDER
        fidelity = _axis(fig, "Error vs exact dense attention")
        assert fidelity.get_yscale() == "log"
        offsets = fidelity.collections[0].get_offsets()
        assert [tuple(p) for p in offsets] == [(300, 0.02), (420, 0.05), (500, 0.01)]
        assert not any("slower" in t.get_text() for ax in fig.axes for t in ax.texts)
    finally:
        plot._pyplot().close(fig)
    slower = plot.figure(_compared(speedup=0.8))
    try:
        notes = [t.get_text() for ax in slower.axes for t in ax.texts]
        assert any("Sparse was slower than dense" in n for n in notes), notes
    finally:
        plot._pyplot().close(slower)


def _tick_labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_yticklabels()]


def test_report_with_unsplit_stages() -> None:
    """A report from before the split shows its indexer_topk and attention stages as they are, in
    the text summary's order, and a stage the plots do not know after them."""
    report = json.loads(UNSPLIT_REPORT.read_text())
    report["summary"]["stage_ms"]["future_stage"] = 1.0
    fig = plot.figure(report)
    try:
        assert len(_titles(fig)) == 6
        assert _tick_labels(_axis(fig, "Time per stage")) == [
            "insert", "indexer_topk", "attention", "metadata", "activations", "readback",
            "future_stage"]
        stages = report["summary"]["stage_ms"]
        widths = [p.get_width() for p in _axis(fig, "Time per stage").patches]
        assert widths[1:3] == [stages["indexer_topk"], stages["attention"]]
        assert _tick_labels(_axis(fig, "Sparse vs dense")) == [
            "insert", "indexer_topk", "attention", "metadata", "activations", "readback",
            "future_stage"]
    finally:
        plot._pyplot().close(fig)


def test_png_and_svg_by_extension(tmp_path) -> None:
    png, svg = tmp_path / "run.png", tmp_path / "run.svg"
    plot.save(_compared(speedup=0.8), png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plot.save(_report(), svg)
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    for name in ["Step time", "Throughput", *STAGES]:
        assert name in text  # svg.fonttype "none": text stays text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.png", "run.svg"]
    with pytest.raises(ValueError, match="must end in .png or .svg"):
        plot.save(_report(), tmp_path / "run.pdf")


def test_bad_input_exits_2_naming_the_problem(tmp_path, capsys) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_report()))
    assert plot.main([str(good), "-o", str(tmp_path / "x.pdf")]) == 2
    assert "must end in .png or .svg" in capsys.readouterr().err
    assert plot.main([str(tmp_path / "missing.json"), "-o", str(tmp_path / "x.png")]) == 2
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{\"schema\": ")
    assert plot.main([str(tmp_path / "bad.json"), "-o", str(tmp_path / "x.png")]) == 2
    assert "is not JSON" in capsys.readouterr().err
    broken = _report()
    del broken["steps"][3]["latency_ms"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    assert plot.main([str(tmp_path / "broken.json"), "-o", str(tmp_path / "x.png")]) == 2
    assert "'steps.3.latency_ms' is missing" in capsys.readouterr().err
    other = copy.deepcopy(_report())
    other["schema"] = "something-else"
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert plot.main([str(tmp_path / "other.json"), "-o", str(tmp_path / "x.png")]) == 2
    assert "'schema' is not \"msa-run-report/1\"" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
    assert plot.main([str(good), "-o", str(tmp_path / "x.png")]) == 0
    assert (tmp_path / "x.png").stat().st_size > 1000


def test_python_dash_m_msa_plot(tmp_path) -> None:
    report = tmp_path / "run.json"
    report.write_text(json.dumps(_report()))
    out = tmp_path / "run.svg"
    done = subprocess.run([sys.executable, "-m", "msa", "plot", str(report), "-o", str(out)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote {out}\n"
    assert "<svg" in out.read_text()


MSA_CLI = os.environ.get("MSA_CLI", "")


@pytest.mark.skipif(not os.access(MSA_CLI, os.X_OK),
                    reason="MSA_CLI names no msa program (scripts/test.sh sets it)")
def test_msa_report_plot_draws_a_real_run(tmp_path) -> None:
    report = tmp_path / "run.json"
    run = subprocess.run(
        [MSA_CLI, "run", "--config", str(REPO / "tests/engine/data/small_config.json"),
         "--tp", "1", "--threads", "2", "--seed", "5", "--requests", "2", "--prompt-len", "100:160",
         "--output-len", "2:4", "--compare-dense", "--quiet", "--report", str(report)],
        capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    out = tmp_path / "run.png"
    env = {**os.environ, "MSA_PYTHON": sys.executable}
    drawn = subprocess.run([MSA_CLI, "report", str(report), "--plot", str(out)], env=env,
                           capture_output=True, text=True, check=False)
    assert drawn.returncode == 0, drawn.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = plot.figure(json.loads(report.read_text()))
    try:
        assert len(_titles(fig)) == 6 and "Error vs exact dense attention" in _titles(fig)
        # The program writes the stages the plots (and the text summary) know.
        assert _tick_labels(_axis(fig, "Time per stage")) == SUMMARY_ORDER
    finally:
        plot._pyplot().close(fig)
