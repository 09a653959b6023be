"""benchmarks/eager_plots.py draws its two figures from a recorded run (matplotlib is the bench extra's)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_figures_from_the_recorded_run(tmp_path):
    pytest.importorskip("matplotlib")
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import eager_plots
    finally:
        sys.path.remove(str(BENCHMARKS))
    record = json.loads((BENCHMARKS / "eager_h100.json").read_text())
    paths = eager_plots.draw(record, tmp_path)
    assert [path.name for path in paths] == ["eager_cost.png", "eager_throughput.png"]
    assert all(path.read_bytes().startswith(b"\x89PNG") for path in paths)
    record["int8_peak_tops"] = None  # a device without a known peak: the bandwidth limit alone
    assert len(eager_plots.draw(record, tmp_path)) == 2


def test_the_recorded_run_names_what_it_measured():
    record = json.loads((BENCHMARKS / "eager_h100.json").read_text())
    assert {"device", "date", "versions", "copy_bandwidth_tb_s", "bare_launch_us", "int8_peak_tops"} <= set(record)
    assert (BENCHMARKS / "eager_cost.png").exists() and (BENCHMARKS / "eager_throughput.png").exists()
