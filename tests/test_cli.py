"""The dmlops command line: every example model prints what the operator pages say, after DxDispatch's `Running on`
line and a dispatch line for each dispatch; every way a run can fail exits with its status and a one-line message
(a traceback only with --traceback)."""

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
from dmlops.dispatch.onnx_models import OnnxOptions
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
    "onnx_model.json":
        "Resource 'Sums': 2, 3, 6, 11, 3, 11, 18, 21\n"
        "Resource 'Products': 30, 15, 15, 5, 504, 168, 21, 3\n"
        "Resource 'Y': 228, 83, 196, 255, 30, 255\n",
    "image_cumulative_product.json":
        "Resource 'Out': 1, 1, 1, 1, 0.501961, 0.251965, 0.501961, 0.251965, 0.2, 0.04, 0.2, 0.04\n"
        "Resource 'Out' written to '{output_dir}/row_products.png'\n",
    "strided_in_place_cumulative_sum.json":
        "Resource 'X': 2, 1, 3, 5, -1, -1, 3, 8, 7, 3, -1, -1, 9, 6, 2, 4, -1, -1\n"
        "Resource 'X': 2, 3, 6, 11, -1, -1, 3, 11, 18, 21, -1, -1, 9, 15, 17, 21, -1, -1\n",
}


RUNNING = r"Running on '[^']+'"
DISPATCH = r"Dispatch '[^']+': 1 iterations, \d+\.\d{4} ms median \(CPU\)"


def printed(out: str) -> str:
    """What a run printed after its `Running on` line, without its default dispatch lines (each checked)."""
    lines = out.splitlines(keepends=True)
    assert re.fullmatch(RUNNING, lines[0].rstrip("\n")), lines[0]
    return "".join(line for line in lines[1:] if not re.fullmatch(DISPATCH, line.rstrip("\n")))


def test_every_example_has_its_expected_output():
    assert sorted(path.name for path in EXAMPLES.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_the_operator_pages_results(name, tmp_path, capsys):
    pytest.importorskip({"onnx_model.json": "onnx", "image_cumulative_product.json": "PIL"}.get(name, "numpy"))
    assert cli.main(["dispatch", str(EXAMPLES / name), "--output-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert (printed(captured.out), captured.err) == (EXPECTED[name].format(output_dir=tmp_path.resolve()), "")


def test_the_default_lines_as_dxdispatch_prints_them(capsys):
    """`Running on` the CPU's name, then a dispatch line at each dispatch, in the order of the commands."""
    from dmlops.dispatch.devices import cpu_name

    assert cli.main(["dispatch", str(EXAMPLES / "strided_in_place_cumulative_sum.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Running on '{cpu_name()}'"
    assert lines[1].startswith("Resource 'X': 2, 1, 3")
    assert re.fullmatch(r"Dispatch 'running_sum': 1 iterations, \d+\.\d{4} ms median \(CPU\)", lines[2]), lines[2]
    assert lines[3].startswith("Resource 'X': 2, 3, 6")


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
    assert (result.returncode, printed(result.stdout), result.stderr) == \
        (0, EXPECTED["dml_cumulative_product.json"], "")
    script = Path(sys.executable).parent / "dmlops"
    if script.exists():
        result = subprocess.run([str(script), "dispatch", "examples/dml_cumulative_product.json"], cwd=ROOT,
                                capture_output=True, text=True, timeout=120)
        assert (result.returncode, printed(result.stdout)) == (0, EXPECTED["dml_cumulative_product.json"])


def test_a_bad_model_exits_2_with_one_line_and_no_traceback(tmp_path):
    model = tmp_path / "bad.json"
    model.write_text('{\n  "resources": {\n    "A": {"initialValuesDataType": "FLOAT32" "initialValues": [1]}\n')
    result = run("dispatch", str(model))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"dmlops dispatch: error: {model}: JSON parse error at line 3, column 46: " \
                            f"Expecting ',' delimiter\n"


def test_deeply_nested_json_exits_2(tmp_path, capsys):
    model = tmp_path / "deep.json"
    model.write_text("{" + '"a": {' * 50_000)
    assert cli.main(["dispatch", str(model)]) == 2
    assert capsys.readouterr().err == \
        f"dmlops dispatch: error: {model}: JSON parse error: the values are nested too deeply\n"


def test_traceback_shows_the_traceback(tmp_path):
    model = tmp_path / "bad.json"
    model.write_text("{")
    result = run("dispatch", str(model), "--traceback")
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ModelError" in result.stderr


def test_traceback_raises_in_process(tmp_path):
    model = tmp_path / "bad.json"
    model.write_text("[]")
    with pytest.raises(ModelError, match="expected a JSON object"):
        cli.main(["dispatch", str(model), "--traceback"])


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
    assert f"  NumPy       : {np.__version__} (buffers, the cpu backend)" in lines
    for name in ("Python", "numba", "PyTorch", "Triton", "tqdm", "Dask", "distributed", "Pillow", "ONNX"):
        assert any(line.startswith(f"  {name:11} : ") for line in lines), name
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


def test_without_torch_the_cuda_backend_is_described_and_refused_without_importing_it():
    """NumPy users' --version, -s and --backend cuda where torch cannot be imported: the cuda backend is never
    loaded, and says what to install."""
    script = ("import sys; sys.modules['torch'] = None\n"
              "from dmlops import cli\n"
              "print(cli.version_text().splitlines()[-1]); cli.main(['dispatch', '-s'])\n"
              "print(cli.main(['dispatch', sys.argv[1], '--backend', 'cuda']))\n"
              "print(sorted(name for name in sys.modules if name.startswith(('triton', 'dmlops.backends.cuda'))))\n")
    result = subprocess.run([sys.executable, "-c", script, str(EXAMPLES / "dml_cumulative_product.json")],
                            capture_output=True, text=True, timeout=120)
    lines = result.stdout.splitlines()
    why = "cannot run: PyTorch and Triton are not both installed (in dmlops' folder: pip install '.[cuda]')"
    assert lines[0] == f"  cuda : {why}"
    assert "-Device: cuda" not in result.stdout
    assert lines[-2:] == ["2", "[]"]
    assert result.stderr == f"dmlops dispatch: error: --backend cuda: {why}\n"


def test_a_run_on_the_default_backend_loads_no_other():
    """Picking the CPU's device asks no other backend for its devices: torch is not imported (a second or more)."""
    script = ("import sys\n"
              "from dmlops import cli\n"
              "cli.main(['dispatch', sys.argv[1]])\n"
              "print(sorted(name for name in sys.modules if name.startswith(('torch', 'dmlops.backends.cuda'))))\n")
    result = subprocess.run([sys.executable, "-c", script, str(EXAMPLES / "dml_cumulative_product.json")],
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.splitlines()[-1] == "[]" and result.stderr == ""


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
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [line.split(":")[0] for line in lines[:4]] == \
        ["Dispatch 'horizontal'", "Dispatch 'exclusive'", "Dispatch 'decreasing'", "Dispatch 'vertical'"]
    for line in lines[:4]:
        milliseconds = line.split(": 1 iterations, ")[1].removesuffix(" ms median (CPU)")
        assert float(milliseconds) >= 0 and len(milliseconds.split(".")[1]) == 4


@pytest.mark.parametrize("options, expected", [
    ([], TimingOptions(load_compiled_code=False)),
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
    """``-a cpu -i 20 -v 1``: initialization, then cold and hot CPU statistics (no GPU lines), then
    what the model prints; nothing on standard error, which is no terminal here."""
    assert cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json"), "-a", "cpu", "-i", "20", "-v",
                     "1"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()[1:]
    assert re.fullmatch(rf"Initialize 'cumulative_product': {MS}", lines[0])
    assert lines[1] == "Dispatch 'cumulative_product': 20 iterations"
    assert re.fullmatch(rf"CPU Timings \(Cold\) : 1 samples, {MS} average, {MS} min, {MS} median, {MS} max", lines[2])
    assert re.fullmatch(rf"CPU Timings \(Hot\)  : 19 samples, {MS} average, {MS} min, {MS} median, {MS} max",
                        lines[3])
    assert lines[4:] == EXPECTED["dml_cumulative_product.json"].splitlines()
    assert captured.err == ""
    readme = (ROOT / "README.md").read_text()
    assert "dmlops dispatch examples/dml_cumulative_product.json -a cpu -i 20 -v 1" in readme


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
        timings = {"CPU Timings (Cold) ", "CPU Timings (Hot)  ", "GPU Timings (Cold) ", "GPU Timings (Hot)  "}
        assert timings <= set(kinds)
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

    monkeypatch.setattr("dmlops.backends.cpu.scan.prepare", broken)
    assert cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json")]) == 1
    assert capsys.readouterr().err == \
        "dmlops dispatch: internal error: RuntimeError: broken kernel (--traceback shows the traceback)\n"
    with pytest.raises(RuntimeError, match="broken kernel"):
        cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json"), "--traceback"])


def test_output_dir(tmp_path, capsys):
    model = tmp_path / "model.json"
    text = (EXAMPLES / "dml_cumulative_product.json").read_text()
    model.write_text(text.replace('{ "type": "print", "resource": "Out" }',
                                  '{ "type": "writeFile", "resource": "Out", "targetPath": "out/products.npy" }'))
    out_dir = tmp_path / "results"
    assert cli.main(["dispatch", str(model), "--output-dir", str(out_dir)]) == 0
    target = out_dir / "out" / "products.npy"
    assert printed(capsys.readouterr().out) == f"Resource 'Out' written to '{target.resolve()}'\n"
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
    assert (result.returncode, printed(result.stdout)) == (0, EXPECTED["strided_in_place_cumulative_sum.json"])
    assert os.listdir(tmp_path) == []


@pytest.fixture
def two_gpus(monkeypatch):
    """The devices of a machine with two GPUs."""
    from dmlops.dispatch import devices

    found = [devices.ComputeDevice("cpu", "AMD EPYC 9654 96-Core Processor", "cpu", False, 2**40),
             devices.ComputeDevice("cuda:0", "NVIDIA H100 80GB HBM3", "cuda", True, 85 * 2**30, 0),
             devices.ComputeDevice("cuda:1", "NVIDIA A100-SXM4-40GB", "cuda", True, 40 * 2**30, 1)]
    monkeypatch.setattr(devices, "devices", lambda: found)
    return devices


@pytest.mark.parametrize("adapter, backend, picked", [
    (None, None, "cpu"), ("cpu", None, "cpu"), ("EPYC", None, "cpu"), ("h100", None, "cuda:0"),
    ("NVIDIA", None, "cuda:0"), ("cuda:1", None, "cuda:1"), ("A100", "cuda", "cuda:1"), (None, "cuda", "cuda:0"),
])
def test_adapter_picks_the_first_device_whose_id_or_name_holds_it(two_gpus, adapter, backend, picked):
    assert two_gpus.choose(adapter, backend).id == picked


def test_an_adapter_that_matches_nothing_lists_the_devices(two_gpus):
    with pytest.raises(cli.ValidationError) as info:
        two_gpus.choose("MI300", None)
    assert str(info.value) == ("-a 'MI300' matches no device; the devices here: 'cpu' (AMD EPYC 9654 96-Core "
                               "Processor), 'cuda:0' (NVIDIA H100 80GB HBM3), 'cuda:1' (NVIDIA A100-SXM4-40GB)")
    with pytest.raises(cli.ValidationError, match="-a 'h100' picks cuda:0, which the cpu backend does not run on"):
        two_gpus.choose("h100", "cpu")


def test_adapter_on_the_command_line(capsys):
    from dmlops.dispatch.devices import cpu_name

    assert cli.main(["dispatch", "-a", "CPU", str(EXAMPLES / "dml_cumulative_product.json")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"Running on '{cpu_name()}'"
    assert cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json"), "-a", "no such device"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert re.fullmatch(r"dmlops dispatch: error: -a 'no such device' matches no device; the devices here: "
                        r"'cpu' \(.+\)(, 'cuda:\d+' \(.+\))*\n", captured.err)


def test_show_adapters_and_dependencies(two_gpus, capsys):
    assert cli.main(["dispatch", "-s"]) == 0
    assert capsys.readouterr().out == (
        "AMD EPYC 9654 96-Core Processor\n-Device: cpu\n-GPU: false\n-Memory: 1024.00 GB\n\n"
        "NVIDIA H100 80GB HBM3\n-Device: cuda:0\n-GPU: true\n-Memory: 85.00 GB\n\n"
        "NVIDIA A100-SXM4-40GB\n-Device: cuda:1\n-GPU: true\n-Memory: 40.00 GB\n\n")
    assert cli.main(["dispatch", "--show_dependencies"]) == 0
    assert capsys.readouterr().out == cli.version_text()
    assert "  distributed : " in cli.version_text() and "  Dask        : " in cli.version_text()


def test_show_adapters_of_this_machine(capsys):
    assert cli.main(["dispatch", "-s"]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"(.+\n-Device: (cpu|cuda:\d+)\n-GPU: (true|false)\n-Memory: \d+\.\d\d GB\n\n)+", out)
    assert out.splitlines()[1] == "-Device: cpu"


def test_options_with_no_effect_are_checked_and_noted_in_one_line(capsys):
    assert cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json"), "-q", "compute",
                     "--post_dispatch_barriers", "uav+aliasing", "-d", "-e", "key:1", "-l", "99", "-L", "3"]) == 0
    captured = capsys.readouterr()
    assert printed(captured.out) == EXPECTED["dml_cumulative_product.json"]
    assert captured.err == (
        "dmlops dispatch: note: these options change nothing here: -q (dmlops records no Direct3D command lists); "
        "--post_dispatch_barriers (each dispatch ends before the next starts); -d (dmlops validates every desc and "
        "binding always); -e (the reference evaluator has no session options); -l (the reference evaluator does not "
        "optimize graphs); -L (the reference evaluator does not log)\n")
    assert cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json"), "-c", "gpu", "-o", "capture"]) == 0
    assert capsys.readouterr().err == ("dmlops dispatch: note: -c/-o: dmlops takes no PIX captures (PIX records "
                                       "Direct3D work; dmlops does none)\n")


@pytest.mark.parametrize("options, message", [
    (["-q", "copy"], "argument -q/--queue_type: invalid choice: 'copy'"),
    (["--post_dispatch_barriers", "all"], "argument --post_dispatch_barriers: invalid choice: 'all'"),
    (["-c", "timing"], "argument -c/--pix_capture_type: programmatic timing captures are not supported"),
    (["-c", "cpu"], "argument -c/--pix_capture_type: 'cpu' is not gpu, timing or manual"),
    (["-l", "3"], "argument -l/--onnx_graph_optimization_level: invalid choice: 3"),
    (["-L", "5"], "argument -L/--onnx_logging_level: invalid choice: 5"),
    (["-e", "key"], "argument -e/--onnx_session_config_entry: 'key' is not NAME:VALUE"),
    (["-f", "N"], "argument -f/--onnx_free_dim_name_override: 'N' is not NAME:VALUE"),
    (["-F", "DATA_BATCH:-1"], "argument -F/--onnx_free_dim_denotation_override: '-1' is not a size"),
    (["-b", "x:2,a"], "argument -b/--binding_shape: '2,a' is not a shape"),
])
def test_bad_dxdispatch_options_exit_2(options, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["dispatch", str(EXAMPLES / "dml_cumulative_product.json"), *options])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_onnx_options():
    args = cli.build_parser().parse_args(["dispatch", "m.onnx", "-f", "N:3", "-f", "M:1", "-F", "DATA_BATCH:8",
                                          "-b", "x:2,4", "-b", "y:8", "-p"])
    assert cli.onnx_options(args) == OnnxOptions({"N": 3, "M": 1}, {"DATA_BATCH": 8}, {"x": (2, 4), "y": (8,)}, True)


def test_an_onnx_model_on_the_command_line(capsys):
    pytest.importorskip("onnx")
    model = EXAMPLES / "cumulative_and_quantized.onnx"
    assert cli.main(["dispatch", str(model), "-f", "N:3", "-p", "-i", "3"]) == 0
    out = capsys.readouterr().out
    assert "Input Tensor 'x':\n  Resource  = implicit\n  Data Type = FLOAT\n  Shape     = [3,4]\n" in out
    assert "Output Tensor 'sums':\n  Resource  = implicit\n  Data Type = FLOAT\n  Shape     = [3,4]\n" in out
    assert re.fullmatch(r"Dispatch 'cumulative_and_quantized\.onnx': 3 iterations, \d+\.\d{4} ms median \(CPU\)",
                        out.splitlines()[-1])


def test_huge_counts_are_accepted():
    args = cli.build_parser().parse_args(["dispatch", "m.json", "-i", str(10**30), "-t", str(2**40)])
    assert cli.timing_options(args) == TimingOptions(iterations=10**30, milliseconds_to_run=2**40)


def test_ctrl_c_ends_a_timed_run_with_the_statistics_of_its_iterations():
    """A count too large to finish, ended by Ctrl-C once the progress bar shows on the terminal (the loop runs):
    the statistics of the iterations done, exit status 130, no traceback."""
    pytest.importorskip("tqdm")
    import fcntl
    import pty
    import select
    import signal
    import struct
    import termios
    import time

    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a new one has no columns
    # Python keeps SIGINT ignored where it starts so (as the tests do when run as a shell's background job, whose
    # children inherit that): Ctrl-C is restored as an interactive shell's command would have it.
    interactive = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                   "runpy.run_module('dmlops', run_name='__main__', alter_sys=True)")
    process = subprocess.Popen([sys.executable, "-c", interactive, "dispatch", "examples/dml_cumulative_product.json",
                                "-i", str(10**18), "-v", "1"], cwd=ROOT, stdout=subprocess.PIPE, stderr=terminal,
                               text=True)
    os.close(terminal)
    try:
        seen, deadline = b"", time.monotonic() + 120
        while f"/{10**18}".encode() not in seen:  # the bar: "0/1000000000000000000 [00:01<?, ?it/s]"
            assert time.monotonic() < deadline, seen
            if select.select([controller], [], [], 1)[0]:
                seen += os.read(controller, 4096)
        process.send_signal(signal.SIGINT)
        # read the terminal until the process ends, as a terminal does: a full one would block its last writes
        while process.poll() is None:
            assert time.monotonic() < deadline + 120, seen
            if select.select([controller], [], [], 0.1)[0]:
                try:
                    seen += os.read(controller, 4096)
                except OSError:  # the terminal's other end is closed: the process is ending
                    break
        out, _ = process.communicate(timeout=120)
    finally:
        process.kill()
    while select.select([controller], [], [], 0)[0]:
        try:
            seen += os.read(controller, 4096)
        except OSError:  # the terminal's other end is closed
            break
    os.close(controller)
    assert process.returncode == 130
    assert b"Traceback" not in seen and b"KeyboardInterrupt" not in seen
    lines = out.splitlines()
    assert re.fullmatch(RUNNING, lines[0]) and re.fullmatch(rf"Initialize 'cumulative_product': {MS}", lines[1])
    count = int(re.fullmatch(r"Dispatch 'cumulative_product': (\d+) iterations", lines[2]).group(1))
    assert count > 1
    assert re.fullmatch(rf"CPU Timings \(Cold\) : 1 samples, {MS} average, {MS} min, {MS} median, {MS} max", lines[3])
    assert re.fullmatch(rf"CPU Timings \(Hot\)  : {count - 1} samples, {MS} average, {MS} min, {MS} median, {MS} "
                        rf"max", lines[4])
    assert lines[5:] == []  # the model's later commands do not run
