#!/usr/bin/env python3
"""Draws PREFIX.png from the PREFIX.json that `ferrotx bench ... --sweep PREFIX` writes
(the command itself draws PREFIX.svg without dependencies; this draws the PNG with
matplotlib: `pip install matplotlib`).

Usage: python3 scripts/plot_sweep.py PREFIX.json [MORE.json ...]
"""

import json
import os
import sys


def main():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for path in sys.argv[1:]:
        with open(path) as f:
            sweep = json.load(f)
        points = sweep["points"]
        xs = [p["throughput_per_s"] / 1e3 for p in points]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        ax.plot(xs, [p["p50_us"] for p in points], marker="o", label="median")
        ax.plot(xs, [p["p99_us"] for p in points], marker="o", label="99th percentile")
        for p, x in zip(points, xs):
            ax.annotate(str(p["coroutines"]), (x, p["p50_us"]), textcoords="offset points",
                        xytext=(4, -10), fontsize=8)
        ax.set_xlabel("committed transactions per second (thousands)")
        ax.set_ylabel("latency (us, log scale)")
        ax.set_yscale("log")
        ax.set_title(sweep["title"], fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        out = os.path.splitext(path)[0] + ".png"
        fig.savefig(out, dpi=120)
        print("wrote", out)


if __name__ == "__main__":
    main()
