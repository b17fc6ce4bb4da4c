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
STAGES = {"insert": 12.0, "indexer": 30.0, "attention": 50.0, "metadata": 3.0, "readback": 5.0}


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
        "dense": {"stage_ms": {**STAGES, "indexer": 0.0, "attention": 120.0}},
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
        assert [t.get_text() for t in stage_axis.get_yticklabels()] == list(STAGES)
        assert [round(p.get_width(), 6) for p in stage_axis.patches] == list(STAGES.values())
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
    finally:
        plot._pyplot().close(fig)
