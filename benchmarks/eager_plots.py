"""The figures of benchmarks/eager.py, one per question, drawn from a record of its measurements (JSON):

- eager_cost.png: what an eager call costs against the peers' (µs per call from Python; lower is better);
- eager_throughput.png: what it reaches against the peers and the hardware's limit (GB/s of a scan against the
  copy bandwidth, TOPS of a quantized matmul against the roofline of the dense int8 peak and the copy bandwidth;
  higher is better).

``benchmarks/eager.py --plot DIR`` draws them from its own run (and ``--record FILE`` keeps the numbers); this
script redraws them from a recorded run, no GPU needed:

    python benchmarks/eager_plots.py benchmarks/eager_h200.json --out benchmarks

Record: {"device", "date", "versions", "copy_bandwidth_tb_s", "bare_launch_us", "int8_peak_tops",
"scans": [{"bytes", "shape", "us": {name: µs}}], "qmatmul": [{"m", "k", "n", "us": {name: µs}, "graph_us"}]}.
matplotlib is the ``bench`` extra's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# What each measured name is, as the figures label it.
LABELS = {
    "dmlops": "dmlops",
    "dmlops rev+excl": "dmlops, reverse + exclusive",
    "torch.cumsum": "torch.cumsum",
    "torch rev+excl": "torch, reverse + exclusive (flip, cumsum, flip, subtract)",
    "cupy.cumsum": "cupy.cumsum",
    "dmlops prepared": "dmlops, B prepared once",
    "dmlops B each call": "dmlops, B given at every call",
    "dmlops plain B": "dmlops, B given at every call",
    "dmlops compiled": "dmlops in torch.compile (reduce-overhead)",
    "torch bf16": "torch bfloat16 matmul, B dequantized once",
    "torch._int_mm": "torch._int_mm + requantization",
    "torch fp16": "torch float16 matmul, B dequantized once",
}
BELOW = {"fontsize": 7, "loc": "upper center", "bbox_to_anchor": (0.5, -0.14)}  # legends under their plots
PLOTTED_KN = (4096, 4096)  # the quantized matmul's panels: one weight shape, M from 1 to 4096


def draw(record: dict, directory) -> list[Path]:
    """Write eager_cost.png and eager_throughput.png into ``directory``; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory = Path(directory)
    where = f"{record['device']}, {record['date']}; {record['versions']}"
    scans = record["scans"]
    nbytes = [row["bytes"] for row in scans]
    k, n = PLOTTED_KN
    qmms = sorted({row["m"]: row for row in record["qmatmul"] if (row["k"], row["n"]) == PLOTTED_KN}.values(),
                  key=lambda row: row["m"])  # one row an M (eager.py's 4096³ is an M = 4096 row too)
    rows_m = [row["m"] for row in qmms]
    copy = record["copy_bandwidth_tb_s"] * 1e12
    paths = []

    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 6.5))
    figure.suptitle(f"What an eager call from Python costs: µs per call, lower is better\n{where}", fontsize=10)
    for name in scans[0]["us"]:
        left.plot(nbytes, [row["us"][name] for row in scans], marker="o", label=LABELS[name])
    left.axhline(record["bare_launch_us"], color="k", linestyle=":",
                 label=f"a bare one-block Triton launch ({record['bare_launch_us']:.1f} µs)")
    left.set(xscale="log", yscale="log", xlabel="tensor size, bytes (float32, rows of up to 1024)",
             ylabel="µs per call (lower is better)", title="Cumulative sum along the last axis")
    left.legend(**BELOW)
    for name in qmms[0]["us"]:
        right.plot(rows_m, [row["us"][name] for row in qmms], marker="o", label=LABELS[name])
    graphs = [(row["m"], row["graph_us"]) for row in qmms if row.get("graph_us")]
    if graphs:
        right.plot(*zip(*graphs), "k*", markersize=10, label="dmlops, B prepared, replayed in a CUDA graph")
    right.set(xscale="log", yscale="log", xlabel="M, rows of A", ylabel="µs per call (lower is better)",
              title=f"Quantized matmul, M × {k} × {n}, uint8 A, int8 B, uint8 output")
    right.legend(**BELOW)
    figure.tight_layout()
    paths.append(directory / "eager_cost.png")
    figure.savefig(paths[-1], dpi=110)
    plt.close(figure)

    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 6.5))
    figure.suptitle(f"What eager calls reach against the hardware's limit: higher is better\n{where}", fontsize=10)
    for name in scans[0]["us"]:
        left.plot(nbytes, [2 * b / (row["us"][name] * 1e-6) / 1e9 for b, row in zip(nbytes, scans)], marker="o",
                  label=LABELS[name])
    left.axhline(copy / 1e9, color="k", linestyle="--",
                 label=f"limit: the device's copy bandwidth ({record['copy_bandwidth_tb_s']:.2f} TB/s) from DRAM; "
                       f"a tensor of tens of MiB and its output stay in L2 between calls, above it")
    left.set(xscale="log", yscale="log", xlabel="tensor size, bytes (float32, rows of up to 1024)",
             ylabel="GB/s read + written (higher is better)", title="Cumulative sum along the last axis")
    left.legend(**BELOW)
    for name in qmms[0]["us"]:
        right.plot(rows_m, [2 * m * k * n / (row["us"][name] * 1e-6) / 1e12 for m, row in zip(rows_m, qmms)],
                   marker="o", label=LABELS[name])
    peak = record["int8_peak_tops"]  # None for a device eager.py has no peak for: the bandwidth limit alone
    roofline = [min(peak or float("inf"), 2 * m * k * n / ((m * k + k * n + m * n) / copy) / 1e12) for m in rows_m]
    right.plot(rows_m, roofline, "k--",
               label=(f"limit: dense int8 peak ({peak:.0f} TOPS) or " if peak else "limit: ")
               + "reading A, B once and writing the output at copy bandwidth")
    right.set(xscale="log", yscale="log", xlabel="M, rows of A", ylabel="TOPS, 2·M·K·N / time (higher is better)",
              title=f"Quantized matmul, M × {k} × {n}, eager")
    right.legend(**BELOW)
    figure.tight_layout()
    paths.append(directory / "eager_throughput.png")
    figure.savefig(paths[-1], dpi=110)
    plt.close(figure)
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", help="a JSON record of benchmarks/eager.py's measurements")
    parser.add_argument("--out", default=".", help="the folder the figures go to")
    args = parser.parse_args()
    for path in draw(json.loads(Path(args.record).read_text()), args.out):
        print(path)


if __name__ == "__main__":
    main()
