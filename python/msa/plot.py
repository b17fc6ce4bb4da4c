"""Plots of an ``msa run --report`` file (schema ``msa-run-report/1``), with matplotlib.

``python -m msa plot run.json -o run.png`` (or ``.svg``), which ``msa report run.json --plot
run.png`` calls. The panels:

* step time on a log axis against the run clock, steps with prefill rows apart from decode-only
  steps (a prefill step takes seconds, a decode step milliseconds);
* the time per stage, with the stage names of the report and in the order of the text summary
  (the indexer and attention split into their decode and prefill rows);
* throughput over the run: output tokens/s and processed rows/s (prefill + decode);
* with ``--compare-dense``: time per stage of the sparse and the dense run side by side, with
  both speed-ups, and the relative error of every sampled row against exact dense attention.

Needs matplotlib (``pip install "msa-attention[plot]"``); drawing uses the Agg backend, so no
display is needed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import tempfile
from typing import Any, Sequence

SCHEMA = "msa-run-report/1"
FORMATS = (".png", ".svg")

PREFILL_COLOR = "#e6550d"
DECODE_COLOR = "#3182bd"
SPARSE_COLOR = "#756bb1"
DENSE_COLOR = "#969696"

# The stage order of the text summary (`msa report`): model work first. indexer_topk and attention
# (decode and prefill rows together) are the stages of reports written before the indexer and
# attention were split by row kind; a stage not listed here follows in the report's order.
STAGE_ORDER = ("insert", "indexer_decode", "indexer_prefill", "attention_decode",
               "attention_prefill", "indexer_topk", "attention", "metadata", "activations",
               "readback")


class ReportError(ValueError):
    """The file is not an msa run report with every field the plots read."""


def _field(obj: Any, path: str) -> Any:
    """obj at the dotted path (array elements by index), or ReportError naming the path."""
    value = obj
    done = []
    for part in path.split("."):
        done.append(part)
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise ReportError(f"not an msa run report: '{'.'.join(done)}' is missing")
    return value


def _number(obj: Any, path: str, nullable: bool = False) -> float:
    value = _field(obj, path)
    if value is None and nullable:  # the report writes NaN and infinities as null
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ReportError(f"not an msa run report: '{path}' is not a number")
    return float(value)


def _typed(obj: Any, path: str, kind: type, name: str) -> Any:
    value = _field(obj, path)
    if not isinstance(value, kind):
        raise ReportError(f"not an msa run report: '{path}' is not {name}")
    return value


def check_report(report: Any) -> None:
    """Raises ReportError naming the first missing or mistyped field the plots read."""
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        raise ReportError(f"not an msa run report: 'schema' is not \"{SCHEMA}\"")
    for path in ("model.preset", "backend", "device", "summary.wall_s"):
        _field(report, path)
    for name in _typed(report, "summary.stage_ms", dict, "an object"):
        _number(report, f"summary.stage_ms.{name}")
    for i in range(len(_typed(report, "steps", list, "an array"))):
        for key in ("start_s", "latency_ms", "prefill_tokens", "decode_tokens", "output_tokens"):
            _number(report, f"steps.{i}.{key}")
    if "compare_dense" in report:
        for path in ("speedup", "attention_speedup", "fidelity.rows_sampled"):
            _number(report, f"compare_dense.{path}")
        for name in _typed(report, "compare_dense.dense.stage_ms", dict, "an object"):
            _number(report, f"compare_dense.dense.stage_ms.{name}")
        samples = _typed(report, "compare_dense.fidelity.samples", list, "an array")
        for i in range(len(samples)):
            _number(report, f"compare_dense.fidelity.samples.{i}.position")
            _number(report, f"compare_dense.fidelity.samples.{i}.rel_error", nullable=True)


def _pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    # Text stays text in SVG files (searchable, smaller) instead of paths.
    matplotlib.rcParams["svg.fonttype"] = "none"
    import matplotlib.pyplot as plt

    return plt


def _plot_step_times(ax, steps: list) -> None:
    prefill = [s for s in steps if s["prefill_tokens"] > 0]
    decode = [s for s in steps if s["prefill_tokens"] == 0]
    for group, color, label in ((prefill, PREFILL_COLOR, "with prefill rows"),
                                (decode, DECODE_COLOR, "decode only")):
        ax.scatter([s["start_s"] for s in group], [s["latency_ms"] for s in group], s=10,
                   color=color, alpha=0.75, label=f"{label} ({len(group)})")
    ax.set_yscale("log")
    ax.set_xlabel("run time (s)")
    ax.set_ylabel("step time (ms, log)")
    ax.set_title("Step time")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=8)


def _stage_names(stages: dict) -> list[str]:
    """The stages of a report's stage_ms in the order of STAGE_ORDER."""
    return [n for n in STAGE_ORDER if n in stages] + [n for n in stages if n not in STAGE_ORDER]


def _plot_stages(ax, stages: dict) -> None:
    names = _stage_names(stages)
    values = [float(stages[n] or 0.0) for n in names]
    total = sum(values)
    y = list(range(len(names)))
    ax.barh(y, values, color=SPARSE_COLOR)
    ax.set_yticks(y, names)
    ax.invert_yaxis()  # first stage on top, as in the text summary
    for i, v in enumerate(values):
        share = 100.0 * v / total if total > 0 else 0.0
        ax.annotate(f" {v:.1f} ms ({share:.1f}%)", (v, i), va="center", fontsize=8)
    ax.set_xlabel("milliseconds (whole run)")
    ax.set_title("Time per stage")
    ax.set_xlim(0, max(values + [1e-3]) * 1.45)


def _plot_throughput(ax, steps: list, wall_s: float) -> None:
    end = max([wall_s] + [s["start_s"] + s["latency_ms"] / 1e3 for s in steps])
    bins = 40
    width = end / bins if end > 0 else 1.0
    output = [0.0] * bins
    processed = [0.0] * bins
    # A step's tokens are spread over its duration, so a long prefill step raises the rate of
    # every bin it spans instead of one bin at its end.
    for s in steps:
        start, stop = s["start_s"], s["start_s"] + s["latency_ms"] / 1e3
        duration = stop - start
        first = min(bins - 1, int(start / width))
        last = min(bins - 1, int(stop / width))
        for i in range(first, last + 1):
            share = 1.0
            if duration > 0:
                share = (min(stop, (i + 1) * width) - max(start, i * width)) / duration
            output[i] += share * s["output_tokens"]
            processed[i] += share * (s["prefill_tokens"] + s["decode_tokens"])
    centers = [(i + 0.5) * width for i in range(bins)]
    ax.plot(centers, [t / width for t in processed], color=PREFILL_COLOR, marker=".",
            label="processed rows/s (prefill + decode)")
    ax.plot(centers, [t / width for t in output], color=DECODE_COLOR, marker=".",
            label="output tokens/s")
    ax.set_yscale("log", nonpositive="mask")  # idle bins (before arrivals) are left out
    ax.set_xlabel("run time (s)")
    ax.set_ylabel(f"tokens/s (log; bins of {width:.2g} s)")
    ax.set_title("Throughput")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=8)


def _plot_dense_speed(ax, stages: dict, dense_stages: dict, compare: dict) -> None:
    names = [n for n in _stage_names(stages)
             if (stages.get(n) or 0) > 0 or (dense_stages.get(n) or 0) > 0]
    y = list(range(len(names)))
    h = 0.4
    ax.barh([i - h / 2 for i in y], [float(stages.get(n) or 0.0) for n in names], height=h,
            color=SPARSE_COLOR, label="sparse")
    ax.barh([i + h / 2 for i in y], [float(dense_stages.get(n) or 0.0) for n in names], height=h,
            color=DENSE_COLOR, label="dense")
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds (whole run)")
    speedup = compare["speedup"]
    attention = compare["attention_speedup"]
    ax.set_title(f"Sparse vs dense: {speedup:.2f}x per step, {attention:.2f}x in attention")
    ax.legend(loc="best", fontsize=8)


def _plot_fidelity(ax, fidelity: dict) -> None:
    samples = fidelity["samples"]
    ax.set_title("Error vs exact dense attention")
    if not samples:
        ax.text(0.5, 0.5, "no sampled row had a context beyond top-k coverage\n(sparse == dense)",
                ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    errors = [math.nan if s["rel_error"] is None else s["rel_error"] for s in samples]
    ax.scatter([s["position"] for s in samples], errors, s=10, color=SPARSE_COLOR, alpha=0.75,
               label=f"{len(samples)} sampled rows")
    if all(e > 0 for e in errors if not math.isnan(e)):
        ax.set_yscale("log")
    ax.set_xlabel("position of the row (context length)")
    ax.set_ylabel("relative error ||o - o_dense|| / ||o_dense||")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=8)


def _comparison_text(ax, compare: dict) -> None:
    ax.set_axis_off()
    lines = ["Speed-up (dense time / sparse time):",
             f"  {compare['speedup']:.2f}x per step, {compare['attention_speedup']:.2f}x in "
             "attention (sparse: attention + indexer)"]
    errors = sorted(s["rel_error"] for s in compare["fidelity"]["samples"]
                    if s["rel_error"] is not None)
    if errors:
        lines += [f"Relative error of {len(errors)} sampled rows:",
                  f"  median {errors[len(errors) // 2]:.2e}, max {errors[-1]:.2e}"]
    if compare["speedup"] < 1.0:
        lines += ["", "Sparse was slower than dense here: at short contexts the indexer",
                  "costs more than the attention it saves (docs/engine.md gives",
                  "the crossover context length)."]
    ax.text(0.0, 0.5, "\n".join(lines), va="center", fontsize=10, transform=ax.transAxes)


def figure(report: dict):
    """The plots of a run report as a matplotlib Figure (check_report first)."""
    check_report(report)
    plt = _pyplot()
    compare = report.get("compare_dense")
    rows = 2 if compare is not None else 1
    fig, axes = plt.subplots(rows, 3, figsize=(18, 5 * rows), squeeze=False)
    fig.suptitle(f"msa run: {report['model']['preset']}, backend {report['backend']} "
                 f"({report['device']})", fontsize=13)
    steps = report["steps"]
    stages = report["summary"]["stage_ms"]
    _plot_step_times(axes[0][0], steps)
    _plot_stages(axes[0][1], stages)
    _plot_throughput(axes[0][2], steps, float(report["summary"]["wall_s"] or 0.0))
    if compare is not None:
        _plot_dense_speed(axes[1][0], stages, compare["dense"]["stage_ms"], compare)
        _plot_fidelity(axes[1][1], compare["fidelity"])
        _comparison_text(axes[1][2], compare)
    fig.tight_layout()
    return fig


def save(report: dict, path: str | pathlib.Path) -> None:
    """Writes the plots to path; the format (PNG or SVG) follows its extension. The file is
    written beside path under a temporary name and renamed over it, so a failure never leaves
    a partial file."""
    target = pathlib.Path(path)
    suffix = target.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"'{path}': the output must end in .png or .svg")
    fig = figure(report)
    try:
        fd, tmp = tempfile.mkstemp(prefix=target.name + ".tmp.", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                fig.savefig(f, format=suffix[1:], dpi=110)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
    finally:
        _pyplot().close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """``plot REPORT -o OUT``: 0 written, 2 bad arguments or input, 3 matplotlib missing."""
    parser = argparse.ArgumentParser(
        prog="python -m msa plot",
        description="Draw the plots of an `msa run --report` file (PNG or SVG by extension).")
    parser.add_argument("report", help="report written by `msa run --report FILE.json`")
    parser.add_argument("-o", "--output", required=True, help="FILE.png or FILE.svg")
    args = parser.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("msa plot: matplotlib is not installed for this Python (" + sys.executable +
              "); install it with `pip install matplotlib` or `pip install "
              "\"msa-attention[plot]\"`", file=sys.stderr)
        return 3
    if pathlib.Path(args.output).suffix.lower() not in FORMATS:
        print(f"msa plot: '{args.output}': the output must end in .png or .svg", file=sys.stderr)
        return 2
    try:
        report = json.loads(pathlib.Path(args.report).read_text())
    except OSError as e:
        print(f"msa plot: cannot read '{args.report}': {e.strerror}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"msa plot: '{args.report}' is not JSON: {e}", file=sys.stderr)
        return 2
    try:
        save(report, args.output)
    except ReportError as e:
        print(f"msa plot: {args.report}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"msa plot: cannot write '{args.output}': {e.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}")
    return 0
