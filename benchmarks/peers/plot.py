"""Plots the peer benchmark's summary (run by benchmarks/peers.py in a matplotlib venv).

Usage: plot.py RESULTS_JSON OUT_PNG LABELS_JSON
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main() -> None:
    results_path, out, labels_json = sys.argv[1:4]
    with open(results_path) as f:
        res = json.load(f)
    labels = json.loads(labels_json)
    summary, info = res["summary"], res["info"]
    systems = list(summary)
    names = [labels[s].replace(" ", "\n", 1) for s in systems]
    colors = ["#d62728" if s == "cdc_sink" else "#7f7f7f" for s in systems]
    panels = [
        (
            "apply + commit, k events/s\n(median micro-batch; log scale)",
            [summary[s]["apply_median_events_per_s"] / 1e3 for s in systems],
            True,
        ),
        ("bulk load, k rows/s", [summary[s]["load_rows_per_s"] / 1e3 for s in systems], False),
        (
            "cold read of an older version, s\n(DuckDB: latest, no time travel)",
            [summary[s]["read_s"] for s in systems],
            False,
        ),
        (
            "on disk after the run, MB (log scale)",
            [summary[s]["disk_bytes"] / 1e6 for s in systems],
            True,
        ),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for ax, (title, values, log) in zip(axes.flat, panels, strict=True):
        bars = ax.bar(names, values, color=colors)
        if log:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
        for b, v in zip(bars, values, strict=True):
            ax.annotate(
                f"{v:,.3g}",
                (b.get_x() + b.get_width() / 2, v),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    fig.suptitle(
        f"{info['rows']:,} rows x 20 columns, {info['batches']} micro-batches of "
        f"{info['batch_events']:,} events (90% 2-column updates, 5% inserts, 5% "
        f"deletes); median of {info['repeats']} interleaved repeats",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main()
