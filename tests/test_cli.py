"""The dmlops command line: every example model prints what the operator pages say, and every way a run can fail
exits with its status and a one-line message (a traceback only with --debug)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dmlops import cli
from dmlops.dispatch import ModelError
from dmlops.dispatch.timing import TimingOptions

from conftest import ON_GPU

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# What each example prints; the cumulative results are the tables of the operator pages.
EXPECTED = {
    "dml_cumulative_product.json": "Resource 'Out': 2, 8, 64, 192\n",
    "cumulative_summation_examples.json":
        "Resource 'HorizontalSums': 2, 3, 6, 11, 3, 11, 18, 21, 9, 15, 17, 21\n"
        "Resource 'ExclusiveSums': 0, 2, 3, 6, 0, 3, 11, 18, 0, 9, 15, 17\n"
        "Resource 'DecreasingSums': 11, 9, 8, 5, 21, 18, 10, 3, 21, 12, 6, 4\n"
        "Resource 'VerticalSums': 2, 1, 3, 5, 5, 9, 10, 8, 14, 15, 12, 12\n",
    "cumulative_product_examples.json":
        "Resource 'HorizontalProducts': 2, 2, 6, 30, 3, 24, 168, 504, 9, 54, 108, 432\n"
        "Resource 'ExclusiveProducts': 1, 2, 2, 6, 1, 3, 24, 168, 1, 9, 54, 108\n"
        "Resource 'DecreasingProducts': 30, 15, 15, 5, 504, 168, 21, 3, 432, 48, 8, 4\n"
        "Resource 'VerticalProducts': 2, 1, 3, 5, 6, 8, 21, 15, 54, 48, 42, 60\n",
    "quantized_matmul_per_row_per_column.json": "Resource 'Output': 7, 113, 98, 108, 255, 102\n",
    "strided_in_place_cumulative_sum.json":
        "Resource 'X': 2, 1, 3, 5, -1, -1, 3, 8, 7, 3, -1, -1, 9, 6, 2, 4, -1, -1\n"
        "Resource 'X': 2, 3, 6, 11, -1, -1, 3, 11, 18, 21, -1, -1, 9, 15, 17, 21, -1, -1\n",
}


def test_every_example_has_its_expected_output():
    assert sorted(path.name for path in EXAMPLES.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_the_operator_pages_results(name, capsys):
    assert cli.main(["dispatch", str(EXAMPLES / name)]) == 0
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (EXPECTED[name], "")


def test_quantized_example_matches_the_reference():
    """The printed matmul is the float64 requantization of the exact integer products."""
    import numpy as np

    import reference

    model = json.loads("\n".join(line for line in (EXAMPLES / "quantized_matmul_per_row_per_column.json")
                                 .read_text().splitlines() if not line.startswith("//")))
    values = {name: resource["initialValues"] for name, resource in model["resources"].items()}
    expected = reference.quantized_matmul(
        np.array(values["A"], np.int8).reshape(3, 4), np.array(values["AScale"]).reshape(3, 1),
        np.array(values["AZeroPoint"], np.int8).reshape(3, 1), np.array(values["B"], np.uint8).reshape(4, 2),
        np.array(values["BScale"]), np.array(values["BZeroPoint"], np.uint8), values["OutputScale"][0],
        values["OutputZeroPoint"][0], np.uint8)
    assert EXPECTED["quantized_matmul_per_row_per_column.json"] == \
        f"Resource 'Output': {', '.join(str(v) for v in expected.ravel())}\n"


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "dmlops", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_python_m_dmlops_and_the_console_script():
    result = run("dispatch", "examples/dml_cumulative_product.json")
    assert (result.returncode, result.stdout, result.stderr) == (0, EXPECTED["dml_cumulative_product.json"], "")
    script = Path(sys.executable).parent / "dmlops"
    if script.exists():
        result = subprocess.run([str(script), "dispatch", "examples/dml_cumulative_product.json"], cwd=ROOT,
                                capture_output=True, text=True, timeout=120)
        assert (result.returncode, result.stdout) == (0, EXPECTED["dml_cumulative_product.json"])


def test_a_bad_model_exits_2_with_one_line_and_no_traceback(tmp_path):
    model = tmp_path / "bad.json"
    model.write_text('{\n  "resources": {\n    "A": {"initialValuesDataType": "FLOAT32" "initialValues": [1]}\n')
    result = run("dispatch", str(model))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"dmlops dispatch: error: {model}: JSON parse error at line 3, column 46: " \
                            f"Expecting ',' delimiter\n"


def test_debug_shows_the_traceback(tmp_path):
    model = tmp_path / "bad.json"
    model.write_text("{")
    result = run("dispatch", str(model), "--debug")
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ModelError" in result.stderr


def test_debug_raises_in_process(tmp_path):
    model = tmp_path / "bad.json"
    model.write_text("[]")
    with pytest.raises(ModelError, match="expected a JSON object"):
        cli.main(["dispatch", str(model), "--debug"])


@pytest.mark.parametrize("args, message", [
    (["dispatch"], "the following arguments are required: MODEL.json"),
    ([], "the following arguments are required: COMMAND"),
    (["run", "x.json"], "invalid choice: 'run'"),
    (["dispatch", "x.json", "--backend", "tpu"], "invalid choice: 'tpu'"),
    (["dispatch", "x.json", "--feature-level", "7_0"], "feature level '7_0' is not one of 1_0"),
    (["dispatch", "x.json", "--max-bytes", "-1"], "'-1' is not a number of bytes"),
])
def test_bad_options_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_version_lists_dependencies_and_backends(capsys):
    """As DxDispatch's -S and -s: the versions of what dmlops runs with, and where each backend runs."""
    import numpy as np

    import dmlops

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"dmlops {dmlops.__version__}"
    assert f"  NumPy    : {np.__version__} (buffers, the cpu backend)" in lines
    for name in ("Python", "numba", "PyTorch", "Triton", "tqdm"):
        assert any(line.startswith(f"  {name:8} : ") for line in lines), name
    numba = importlib.util.find_spec("numba") is not None
    assert lines[-3:-1] == ["Backends:", "  cpu  : NumPy, numba" if numba else "  cpu  : NumPy"]
    assert lines[-1].startswith("  cuda : ")


def test_version_names_the_gpu_or_why_the_cuda_backend_cannot_run(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "NVIDIA H100 80GB HBM3")
    assert f"  cuda : NVIDIA H100 80GB HBM3 (CUDA {torch.version.cuda})\n" in cli.version_text()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert cli.version_text().endswith("  cuda : cannot run: PyTorch sees no CUDA GPU\n")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "  cuda : Triton's interpreter, on the CPU" in cli.version_text()
    monkeypatch.setattr(cli.importlib.util, "find_spec", lambda name: None)
    assert cli.version_text().endswith("  cuda : cannot run: PyTorch and Triton are not both installed "
                         "(in dmlops' folder: pip install '.[cuda]')\n")


def test_missing_model_file(tmp_path, capsys):
    assert cli.main(["dispatch", str(tmp_path / "none.json")]) == 2
    assert "none.json: cannot read the model" in capsys.readouterr().err


def test_a_folder_is_not_a_model(tmp_path, capsys):
    assert cli.main(["dispatch", str(tmp_path)]) == 2
    assert "a model is a JSON file, not a folder" in capsys.readouterr().err


def test_feature_level_applies(capsys):
    """Cumulative product came in feature level 3_1."""
    assert cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json"), "--feature-level", "3_0"]) == 2
    assert capsys.readouterr().err == (
        f"dmlops dispatch: error: {EXAMPLES / 'dml_cumulative_product.json'}: dispatchable 'cumulative_product': "
        f"DML_OPERATOR_CUMULATIVE_PRODUCT: the operator was introduced in feature level 3_1; the device's feature "
        f"level is 3_0\n")
    assert cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json"), "--feature-level", "3_1"]) == 0


def test_timing_prints_each_dispatch(capsys):
    assert cli.main(["dispatch", str(EXAMPLES / "cumulative_summation_examples.json"), "--timing"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == \
        ["Dispatch 'horizontal'", "Dispatch 'exclusive'", "Dispatch 'decreasing'", "Dispatch 'vertical'"]
    for line in lines[:4]:
        milliseconds = line.split(": 1 iterations, ")[1].removesuffix(" ms median (CPU)")
        assert float(milliseconds) >= 0 and len(milliseconds.split(".")[1]) == 4


@pytest.mark.parametrize("options, expected", [
    ([], None),
    (["--timing"], TimingOptions()),
    (["-i", "100", "-v", "1"], TimingOptions(iterations=100, verbosity=1)),
    (["--dispatch_iterations", "7", "--dispatch_repeat", "3"], TimingOptions(iterations=7, repeat=3)),
    (["-r", "10"], TimingOptions(repeat=10)),
    (["-t", "0"], TimingOptions(milliseconds_to_run=0)),
    (["--milliseconds_to_run", "500", "-i", "2"], TimingOptions(iterations=2, milliseconds_to_run=500)),
    (["-w", "0"], TimingOptions(warmup_samples=0)),
    (["--warmup_samples", "4"], TimingOptions(warmup_samples=4)),
    (["-v", "0"], TimingOptions()),
    (["--timing_verbosity", "2"], TimingOptions(verbosity=2)),
    (["-I", "15"], TimingOptions(interval_milliseconds=15)),
    (["--dispatch_interval", "0", "--timing"], TimingOptions()),
])
def test_each_timing_option(options, expected):
    """Any timing option, or --timing, turns the timing lines on; each sets its own TimingOptions field."""
    assert cli.timing_options(cli.build_parser().parse_args(["dispatch", "m.json", *options])) == expected


@pytest.mark.parametrize("options, message", [
    (["-i", "-1"], "argument -i/--dispatch_iterations: '-1' is not a count of at least 1"),
    (["-i", "0"], "argument -i/--dispatch_iterations: '0' is not a count of at least 1"),
    (["-i", "1.5"], "argument -i/--dispatch_iterations: '1.5' is not a count of at least 1"),
    (["-r", "0"], "argument -r/--dispatch_repeat: '0' is not a count of at least 1"),
    (["--dispatch_repeat", "two"], "argument -r/--dispatch_repeat: 'two' is not a count of at least 1"),
    (["-t", "-5"], "argument -t/--milliseconds_to_run: '-5' is not a number of milliseconds"),
    (["-w", "1e3"], "argument -w/--warmup_samples: '1e3' is not a count"),
    (["-v", "3"], "argument -v/--timing_verbosity: '3' is not 0, 1 or 2"),
    (["-v", "-1"], "argument -v/--timing_verbosity: '-1' is not 0, 1 or 2"),
    (["-I", "0.5"], "argument -I/--dispatch_interval: '0.5' is not a number of milliseconds"),
    (["-i"], "argument -i/--dispatch_iterations: expected one argument"),
])
def test_bad_timing_options_exit_2_with_one_line(options, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json"), *options])
    assert exit_info.value.code == 2
    assert capsys.readouterr() == ("", f"dmlops dispatch: error: {message}\n")


def test_a_bad_option_has_no_traceback():
    result = run("dispatch", "examples/dml_cumulative_product.json", "-r", "0")
    assert (result.returncode, result.stdout, result.stderr) == \
        (2, "", "dmlops dispatch: error: argument -r/--dispatch_repeat: '0' is not a count of at least 1\n")


MS = r"\d+\.\d{4} ms"


def test_a_timed_run_as_the_readme_shows_it(capsys):
    """``-i 20 -v 1`` on the cpu backend: initialization, then cold and hot CPU statistics (no GPU lines), then
    what the model prints; nothing on standard error, which is no terminal here."""
    assert cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json"), "-i", "20", "-v", "1"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert re.fullmatch(rf"Initialize 'cumulative_product': {MS}", lines[0])
    assert lines[1] == "Dispatch 'cumulative_product': 20 iterations"
    assert re.fullmatch(rf"CPU Timings \(Cold\) : 1 samples, {MS} average, {MS} min, {MS} median, {MS} max", lines[2])
    assert re.fullmatch(rf"CPU Timings \(Hot\)  : 19 samples, {MS} average, {MS} min, {MS} median, {MS} max",
                        lines[3])
    assert lines[4:] == EXPECTED["dml_cumulative_product.json"].splitlines()
    assert captured.err == ""
    readme = (ROOT / "README.md").read_text()
    assert "dmlops dispatch examples/dml_cumulative_product.json -i 20 -v 1" in readme


def test_cuda_backend_timing_has_a_gpu_part_only_on_a_gpu(capsys):
    """Under Triton's interpreter there is no GPU clock: the lines are the cpu backend's; on a GPU, CUDA events add
    the GPU lines and each iteration's GPU time."""
    pytest.importorskip("torch")
    from dmlops.dispatch import read_model, run_model

    run_model(read_model(EXAMPLES / "dml_cumulative_product.json"), backend="cuda",
              timing=TimingOptions(iterations=2, repeat=2, verbosity=2))
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "Dispatch 'cumulative_product': 2 iterations"
    kinds = [line.split(":")[0] for line in lines[2:]]
    if ON_GPU:
        assert {"CPU Timings (Cold) ", "CPU Timings (Hot)  ", "GPU Timings (Cold) ", "GPU Timings (Hot)  "} <= set(kinds)
        iterations = [line for line in lines if line.startswith("iteration ")]
        assert len(iterations) == 2
        assert all(re.fullmatch(rf"iteration \d: {MS} \(CPU\), \d+\.\d+ ms \(GPU\)", line) for line in iterations)
        return
    assert kinds == ["CPU Timings (Cold) ", "CPU Timings (Hot)  ", "The timings of each iteration", "iteration 0",
                     "iteration 1", "Resource 'Out'"]
    assert all(re.fullmatch(rf"iteration \d: {MS} \(CPU\)", line) for line in lines[5:7])


def test_an_internal_error_is_one_line_without_debug(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("broken kernel")

    monkeypatch.setattr("dmlops.backends.cpu.cumulative", broken)
    assert cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json")]) == 1
    assert capsys.readouterr().err == \
        "dmlops dispatch: internal error: RuntimeError: broken kernel (--debug shows the traceback)\n"
    with pytest.raises(RuntimeError, match="broken kernel"):
        cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json"), "--debug"])


def test_output_dir(tmp_path, capsys):
    model = tmp_path / "model.json"
    text = (EXAMPLES / "dml_cumulative_product.json").read_text()
    model.write_text(text.replace('{ "type": "print", "resource": "Out" }',
                                  '{ "type": "writeFile", "resource": "Out", "targetPath": "out/products.npy" }'))
    out_dir = tmp_path / "results"
    assert cli.main(["dispatch", str(model), "--output-dir", str(out_dir)]) == 0
    target = out_dir / "out" / "products.npy"
    assert capsys.readouterr().out == f"Resource 'Out' written to '{target.resolve()}'\n"
    import numpy as np

    assert np.load(target).tolist() == [2, 8, 64, 192]


@pytest.mark.parametrize("name", ["dml_cumulative_product.json", "quantized_matmul_per_row_per_column.json",
                                  "strided_in_place_cumulative_sum.json"])
def test_cuda_backend_prints_the_same(name, capsys):
    """The cuda backend (under Triton's interpreter where there is no GPU) prints what the cpu backend prints."""
    pytest.importorskip("torch")
    from dmlops.dispatch import read_model, run_model

    run_model(read_model(EXAMPLES / name), backend="cuda")
    assert capsys.readouterr().out == EXPECTED[name]


def test_runs_from_any_folder_and_writes_nothing_there(tmp_path):
    result = run("dispatch", str(EXAMPLES / "strided_in_place_cumulative_sum.json"), cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, EXPECTED["strided_in_place_cumulative_sum.json"])
    assert os.listdir(tmp_path) == []
