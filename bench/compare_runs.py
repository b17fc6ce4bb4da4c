#!/usr/bin/env python3
"""Compares two decode_bench.py runs (their JSON files) configuration by configuration.

    python3 bench/compare_runs.py OLD.json NEW.json [--tolerance 0.05] [--stage step]

A file may be gzip-compressed (.json.gz, as the records in bench/results are).

Prints, per cache dtype, the ratio NEW / OLD of each stage's median time (median, min and max
over the configurations both runs have), the configurations whose step moved in or out of the
issue's target (1.10 x floor + 8 us), and the configurations whose `--stage` ratio lies outside
1 +- tolerance. The exit status is 1 when there are any of the last kind (or a configuration
failed its CHECK), so "the numbers reproduce within noise" is one command; 0 otherwise; 2 when
an argument is bad (a file that is missing or not a decode_bench.py result, a negative
tolerance), with a message naming it. Between device sessions on the H200 the memory-bound
figures move by about 2-3% (bench/README.md).
"""
import argparse
import gzip
import json
import statistics
import sys
from typing import Dict, List, Tuple

STAGES = ("insert", "index", "attn", "step")
Key = Tuple[int, int, int, bool, str]


def check_row(r: dict) -> None:
    """KeyError or TypeError when a row lacks a field compare() reads."""
    for s in STAGES:
        float(r["times"][s]["median_us"])
    float(r["step_over_target"])
    bool(r["check"]["ok"])


def load(path: str) -> Dict[Key, dict]:
    """The rows of a decode_bench.py JSON file by configuration; ValueError naming the file and
    what is wrong with it otherwise."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            run = json.load(f)
        rows = {}
        for r in run["rows"]:
            check_row(r)
            rows[(r["ctx"], r["B"], r["qlen"], bool(r["ragged"]), r["dtype"])] = r
    except OSError as e:
        raise ValueError(f"{path}: cannot read it ({e.strerror})") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from e
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a decode_bench.py result (missing {e})") from e
    return rows


def median_us(row: dict, stage: str) -> float:
    return row["times"][stage]["median_us"]


def name(k: Key) -> str:
    ctx, b, qlen, ragged, dtype = k
    return f"{ctx // 1024}K x {b} x {qlen} {'ragged' if ragged else 'uniform'} {dtype}"


def compare(old: Dict[Key, dict], new: Dict[Key, dict], tolerance: float,
            stage: str) -> Tuple[List[str], int]:
    """Report lines and the number of configurations outside the tolerance or failing CHECK."""
    common = sorted(set(old) & set(new))
    lines = [f"{len(common)} configurations in both runs"
             f" ({len(old) - len(common)} only in OLD, {len(new) - len(common)} only in NEW)",
             "", "| dtype | " + " | ".join(STAGES) + " |", "|---|" + "---|" * len(STAGES)]
    for dtype in sorted({k[4] for k in common}):
        cells = []
        for s in STAGES:
            ratios = [median_us(new[k], s) / median_us(old[k], s) for k in common if k[4] == dtype]
            cells.append(f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
        lines.append(f"| {dtype} | " + " | ".join(cells) + " |")
    within_old = sum(1 for k in common if old[k]["step_over_target"] <= 1.0)
    within_new = sum(1 for k in common if new[k]["step_over_target"] <= 1.0)
    lines += ["", f"within the step target: {within_old} (OLD) -> {within_new} (NEW)"]
    for k in common:
        was, now = old[k]["step_over_target"], new[k]["step_over_target"]
        if (was <= 1.0) != (now <= 1.0):
            lines.append(f"  {name(k)}: step / target {was:.3f} -> {now:.3f}")
    bad = 0
    lines += ["", f"{stage} outside 1 +- {tolerance:g}:"]
    for k in common:
        ratio = median_us(new[k], stage) / median_us(old[k], stage)
        if abs(ratio - 1.0) > tolerance:
            bad += 1
            lines.append(f"  {name(k)}: {median_us(old[k], stage):.1f} -> "
                         f"{median_us(new[k], stage):.1f} us ({ratio:.3f})")
    failed = [k for k in common if not new[k]["check"]["ok"]]
    for k in failed:
        lines.append(f"  {name(k)}: CHECK failed in NEW ({new[k]['check'].get('label', '')})")
    if bad == 0 and not failed:
        lines.append("  none")
    return lines, bad + len(failed)


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old", help="decode_bench.json of the reference run")
    p.add_argument("new", help="decode_bench.json of the run to check")
    p.add_argument("--tolerance", type=float, default=0.05,
                   help="largest |NEW / OLD - 1| counted as noise (default 0.05)")
    p.add_argument("--stage", choices=STAGES, default="step",
                   help="stage whose ratio is held to the tolerance (default step)")
    a = p.parse_args(argv)
    if not a.tolerance >= 0:
        p.error(f"--tolerance must be at least 0, got {a.tolerance}")
    try:
        old, new = load(a.old), load(a.new)
    except ValueError as e:
        print(f"compare_runs: {e}", file=sys.stderr)
        return 2
    lines, bad = compare(old, new, a.tolerance, a.stage)
    print("\n".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
