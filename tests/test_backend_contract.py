"""The backend contract: the built-in backends implement all of it, and a backend registered from outside dmlops
(tests/toy_backend.py, a class and one registration) runs through every front-end: the array API, Dask's chunks,
torch.ops.dmlops, the operator API and the DxDispatch runner. The conformance suite runs it too (its BACKENDS)."""

from __future__ import annotations

import importlib.util
import io
import json

import numpy as np
import pytest

import dmlops
from dmlops.core import registry

import toy_backend
from checks import rejects


@pytest.mark.parametrize("name", ["cpu", "cuda"])
def test_builtin_backends_implement_the_contract(name):
    if name == "cuda":
        pytest.importorskip("triton")
    backend = registry.backend(name)
    assert isinstance(backend, registry.Backend) and not type(backend).__abstractmethods__
    assert backend.name == name


def test_an_unknown_backend_is_named():
    rejects(["Device.backend", "'nowhere'", "cpu"], lambda: dmlops.Device("nowhere"))
    rejects(["Device.backend", "'nowhere'"], lambda: dmlops.cumulative_sum(np.ones(3, np.float32), 0,
                                                                           backend="nowhere"))


def test_a_backend_missing_a_method_cannot_be_made():
    class Partial(registry.Backend):
        pass

    with pytest.raises(TypeError, match="abstract"):
        Partial()


def calls(monkeypatch):
    """Counts of the toy backend's lowerings run."""
    counts = {"cumulative": 0, "quantized_linear_matmul": 0}
    for primitive in counts:
        original = getattr(toy_backend.ToyBackend, f"prepare_{primitive}")

        def counted(self, *args, primitive=primitive, original=original):
            counts[primitive] += 1
            return original(self, *args)

        monkeypatch.setattr(toy_backend.ToyBackend, f"prepare_{primitive}", counted)
    return counts


def test_array_api_and_dask_on_a_registered_backend(monkeypatch):
    counts = calls(monkeypatch)
    rng = np.random.default_rng(0)
    x = rng.integers(-50, 50, (5, 7)).astype(np.int32)
    np.testing.assert_array_equal(dmlops.cumulative_sum(x, 1, reverse=True, backend="toy"),
                                  np.cumsum(x[:, ::-1], 1)[:, ::-1])
    a = rng.integers(0, 256, (3, 9), dtype=np.uint8)
    b = rng.integers(-128, 128, (9, 4), dtype=np.int8)
    expected = dmlops.quantized_linear_matmul(a, 0.5, np.uint8(3), b, 0.25, None, 2.0, np.uint8(7))
    got = dmlops.quantized_linear_matmul(a, 0.5, np.uint8(3), b, 0.25, None, 2.0, np.uint8(7), backend="toy")
    np.testing.assert_array_equal(got, expected)
    assert counts == {"cumulative": 1, "quantized_linear_matmul": 1}
    if importlib.util.find_spec("dask") is not None:
        import dask.array as da

        lazy = dmlops.cumulative_product(da.from_array(x % 3 + 1, chunks=(2, 3)), 1, backend="toy")
        np.testing.assert_array_equal(lazy.compute(scheduler="sync"), np.cumprod(x % 3 + 1, 1))
        assert counts["cumulative"] > 1


def test_operator_api_and_dispatch_on_a_registered_backend(monkeypatch, tmp_path, capsys):
    counts = calls(monkeypatch)
    tensor = dmlops.TensorDesc(dmlops.DataType.FLOAT32, [2, 3])
    op = dmlops.Device("toy").compile_operator(dmlops.CumulativeSummationOperatorDesc(tensor, tensor, 1))
    out = np.full(6, np.nan, np.float32)
    op.execute([np.arange(6, dtype=np.float32)], [out])
    op.execute([np.arange(6, dtype=np.float32)], [out])
    np.testing.assert_array_equal(out, [0, 1, 3, 3, 7, 12])
    assert counts["cumulative"] == 1  # the second execution ran the plan of the first
    from dmlops.dispatch import read_model, run_model

    model = {"resources": {"In": {"initialValuesDataType": "FLOAT32", "initialValues": [2, 4, 8, 3]},
                           "Out": {"initialValuesDataType": "FLOAT32", "initialValues": {"valueCount": 4,
                                                                                         "value": 0}}},
             "dispatchables": {"product": {"type": "DML_OPERATOR_CUMULATIVE_PRODUCT",
                                           "desc": {"InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 1, 4]},
                                                    "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 1, 4]},
                                                    "Axis": 3, "AxisDirection": "DML_AXIS_DIRECTION_INCREASING",
                                                    "HasExclusiveProduct": False}}},
             "commands": [{"type": "dispatch", "dispatchable": "product", "bindings": {"InputTensor": "In",
                                                                                        "OutputTensor": "Out"}},
                          {"type": "print", "resource": "Out"}]}
    path = tmp_path / "model.json"
    path.write_text(json.dumps(model))
    printed = io.StringIO()
    run_model(read_model(path), backend="toy", out=printed)
    assert "Resource 'Out': 2, 8, 64, 192" in printed.getvalue()
    from dmlops import cli
    from dmlops.core.host import cpu_name

    # the command line too, timed: the contract's defaults say where it runs (the host) and that it has no GPU clock
    assert cli.main(["dispatch", str(path), "--backend", "toy", "-i", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Running on '{cpu_name()}'" and lines[1].endswith("ms median (CPU)")
    assert lines[2] == "Resource 'Out': 2, 8, 64, 192"


def test_where_a_backend_runs_by_default():
    """A backend with nothing to say runs on the host's processor, under its name, with no clock of its own."""
    from dmlops.core.host import cpu_name, system_memory

    toy = registry.backend("toy")
    host = registry.ComputeDevice("toy", cpu_name(), "toy", False, system_memory())
    assert (toy.devices(), toy.device(), toy.timing_events()) == ([host], host, None)
    assert toy.description() == cpu_name()
    toy.use(host)
    assert registry.backend("cpu").devices()[0].id == "cpu"
    assert registry.default() == "cpu" and registry.built_in() == ("cpu", "cuda")
    assert "toy" in registry.names() and "toy" not in registry.built_in()


def test_the_cuda_backend_says_where_it_runs(monkeypatch):
    """Its GPUs as PyTorch sees them; without one, the CPU under Triton's interpreter, else why it cannot run."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from dmlops.dispatch import devices

    cuda = registry.backend("cuda")
    if torch.cuda.is_available():
        assert [device.id for device in cuda.devices()] == [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        assert cuda.timing_events() is not None
        return
    assert cuda.devices() == [] and cuda.timing_events() is None
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert cuda.device().name.endswith("(Triton's interpreter)") and not cuda.device().is_gpu
    assert devices.choose(None, "cuda").id == "cuda"
    monkeypatch.delenv("TRITON_INTERPRET")
    rejects(["--backend cuda", "PyTorch sees no CUDA GPU here"], lambda: devices.choose(None, "cuda"))


def test_the_cuda_backend_copies_host_arrays():
    """What the runner uploads and what ONNX nodes hand it: copies, numbers too; written back to the host."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    cuda = registry.backend("cuda")
    host = np.random.default_rng(1).integers(0, 256, 16, dtype=np.uint8)
    host.flags.writeable = False
    buffer = cuda.from_host(host)
    assert isinstance(buffer, torch.Tensor) and buffer.data_ptr() != host.ctypes.data
    np.testing.assert_array_equal(cuda.to_host(buffer), host)
    assert cuda.from_host(np.float32(2.5)).item() == 2.5


def test_torch_operators_on_a_registered_backend(monkeypatch):
    """A backend that claims CPU torch tensors runs torch.ops.dmlops on them."""
    torch = pytest.importorskip("torch")
    import dmlops.torch  # noqa: F401  (registers torch.ops.dmlops)
    from dmlops.core import plans

    counts = calls(monkeypatch)
    registry.register("toy-torch", toy_backend.ToyBackend,
                      claims=lambda value: plans.is_torch_tensor(value) and value.device.type == "cpu")
    plans.forget()
    try:
        x = torch.arange(1, 7, dtype=torch.float32).reshape(2, 3)
        assert torch.equal(torch.ops.dmlops.cumulative_sum(x, 1, False, True), torch.tensor([[0., 1, 3], [0, 4, 9]]))
        assert counts["cumulative"] == 1
    finally:
        registry.unregister("toy-torch")
        plans.forget()
