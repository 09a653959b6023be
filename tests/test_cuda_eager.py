"""Eager calls on the CUDA backend: kept plans on torch tensors, prepared B, no host synchronisation, CUDA graphs.

Without a GPU the kernels run under Triton's interpreter on CPU tensors (``backend="cuda"``); on the GPU
(DMLOPS_TEST_GPU=1) the same tests run with the real compiler, plus those that need the device itself.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")  # the CUDA backend's kernels

import dmlops  # noqa: E402
import reference  # noqa: E402
from checks import assert_cumulative_matches  # noqa: E402
from conftest import ON_GPU  # noqa: E402
from test_quantized_matmul import random_data  # noqa: E402
from strategies import random_scales  # noqa: E402

gpu_only = pytest.mark.skipif(not ON_GPU, reason="needs a GPU (DMLOPS_TEST_GPU=1)")
BACKEND = None if ON_GPU else "cuda"  # CUDA tensors pick the CUDA backend; CPU tensors need it named


def poisoned_like(tensor):
    return torch.full_like(tensor, 77)


@pytest.mark.parametrize("operation", ["sum", "product"])
@pytest.mark.parametrize("reverse, exclusive", [(False, False), (True, True), (True, False)])
def test_repeated_scans_take_kept_launches_with_fresh_values(torch_device, operation, reverse, exclusive):
    """The same layout twice with fresh values (the first call plans, the second runs the kept launch), into a new
    output and into a given poisoned one, then in place; a changed layout in between plans again."""
    rng = np.random.default_rng(1)
    function = dmlops.cumulative_sum if operation == "sum" else dmlops.cumulative_product
    # (under the interpreter lines of 64: its scan of a tile of pairs, for reverse exclusive rows, takes a second
    # for lines of 300)
    row = 300 if ON_GPU else 64
    for shape, axis in [((6, row), 1), ((300, 5), 0), ((6, row), 1), ((2, 3, 70), 1)]:
        for _ in range(2):
            x_values = rng.uniform(0.8, 1.2, shape).astype(np.float32)
            x = torch.from_numpy(x_values.copy()).to(torch_device)
            result = function(x, axis, reverse=reverse, exclusive=exclusive, backend=BACKEND)
            assert_cumulative_matches(result.cpu().numpy(), operation, x_values, axis, reverse, exclusive)
            out = poisoned_like(x)
            assert function(x, axis, reverse=reverse, exclusive=exclusive, out=out, backend=BACKEND) is out
            assert_cumulative_matches(out.cpu().numpy(), operation, x_values, axis, reverse, exclusive)
            function(x, axis, reverse=reverse, exclusive=exclusive, out=x, backend=BACKEND)
            assert_cumulative_matches(x.cpu().numpy(), operation, x_values, axis, reverse, exclusive)


def qmm_case(rng, m, k, n, a_type=np.uint8, b_type=np.int8, out_type=np.uint8, zero_points=True):
    a, b = random_data(rng, a_type, (m, k)), random_data(rng, b_type, (k, n))
    a_zero, b_zero = random_data(rng, a_type, (m, 1)), random_data(rng, b_type, (1, n))
    out_zero = random_data(rng, out_type, (1, 1))
    if not zero_points:
        a_zero = b_zero = None
    scales = random_scales(rng, k, (m, 1), (1, n), (1, 1))
    expected = reference.quantized_matmul(a, scales[0], a_zero, b, scales[1], b_zero, scales[2], out_zero, out_type)
    return (a, scales[0], a_zero, b, scales[1], b_zero, scales[2], out_zero), expected


def as_tensors(arrays, device):
    """The case's arrays as tensors on device: A and B as they are, row and column parameters as vectors."""
    def vector(index, array):
        return array if index in (0, 3) or array.size == 1 else array.reshape(-1)

    return [None if array is None else torch.from_numpy(np.ascontiguousarray(vector(index, array))).to(device)
            for index, array in enumerate(arrays)]


@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize("zero_points", [True, False])
@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
def test_repeated_quantized_matmuls_with_fresh_values(torch_device, prepared, zero_points, b_type):
    """Repeated layouts with fresh values (vectors of row and column parameters, scalars as numbers), B given or
    prepared once, with and without zero points; M of 1 and of several rows. Repeated calls replay the first call's
    launches on their own tensors where they can (``launch.replay``)."""
    rng = np.random.default_rng(2)
    for m, k, n in [(1, 40, 24), (5, 40, 24), (1, 40, 24), (33, 70, 9)]:
        for _ in range(3):
            arrays, expected = qmm_case(rng, m, k, n, b_type=b_type, zero_points=zero_points)
            a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero = as_tensors(arrays, torch_device)
            out_scale, out_zero = float(out_scale.reshape(-1)[0]), int(out_zero.reshape(-1)[0])
            if prepared:
                b = dmlops.prepare_b(b, b_scale, b_zero, backend=BACKEND)
                b_scale = b_zero = None
            result = dmlops.quantized_linear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero,
                                                    output_dtype=torch.uint8, backend=BACKEND)
            np.testing.assert_array_equal(result.cpu().numpy(), expected)


@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
def test_each_prepared_b_of_one_layout_is_its_own(torch_device, b_type):
    """Calls of one layout with every parameter a tensor replay the first call's launches; each call with another
    prepared B must read that B (its packing is not in the memory a replay substitutes)."""
    rng = np.random.default_rng(3)
    for _ in range(3):
        arrays, expected = qmm_case(rng, 9, 3, 4, b_type=b_type, zero_points=False)
        a, a_scale, _, b, b_scale, _, out_scale, out_zero = as_tensors(arrays, torch_device)
        prepared = dmlops.prepare_b(b, b_scale, None, backend=BACKEND)
        result = dmlops.quantized_linear_matmul(a, a_scale, None, prepared, None, None, out_scale, out_zero,
                                                backend=BACKEND)
        np.testing.assert_array_equal(result.cpu().numpy(), expected)


@pytest.mark.parametrize("prepared", [False, True])
def test_one_tensor_for_two_parameters(torch_device, prepared, launcher_calls):
    """One scale tensor for A and the output, one zero-point tensor for both: repeated calls replay the first call's
    launches (the launcher is not called again) while the later calls share them too; the first call that does not
    runs the launcher and makes the replay of every later call, sharing or not; every result exact."""
    rng = np.random.default_rng(5)
    launched = []
    for shared in (True, True, True, False, True, False, False, True):
        arrays, _ = qmm_case(rng, 3, 40, 24)
        a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero = arrays
        scale, zero = a_scale[:1], a_zero[:1]  # per tensor
        if shared:
            out_scale, out_zero = scale, zero
        expected = reference.quantized_matmul(a, scale, zero, b, b_scale, b_zero, out_scale, out_zero, np.uint8)
        a, scale, zero, b, b_scale, b_zero, out_scale, out_zero = as_tensors(
            (a, scale, zero, b, b_scale, b_zero, out_scale, out_zero), torch_device)
        if shared:
            out_scale, out_zero = scale, zero
        if prepared:
            b, b_scale, b_zero = dmlops.prepare_b(b, b_scale, b_zero, backend=BACKEND), None, None
        calls = len(launcher_calls)
        result = dmlops.quantized_linear_matmul(a, scale, zero, b, b_scale, b_zero, out_scale, out_zero,
                                                backend=BACKEND)
        np.testing.assert_array_equal(result.cpu().numpy(), expected)
        launched.append(len(launcher_calls) - calls)
    assert launched == [1, 0, 0, 1, 0, 0, 0, 0]


def test_numpy_numbers_as_parameters(torch_device):
    """NumPy numbers (and arrays) for scales and zero points are copied to the device at each call, the same layout
    again included."""
    rng = np.random.default_rng(4)
    for _ in range(2):
        arrays, expected = qmm_case(rng, 5, 8, 3, a_type=np.int8, out_type=np.int8)
        a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero = arrays
        tensors = as_tensors(arrays, torch_device)
        result = dmlops.quantized_linear_matmul(tensors[0], a_scale, a_zero, tensors[3], b_scale.reshape(-1),
                                                b_zero.reshape(-1), out_scale.reshape(-1)[0], out_zero.reshape(-1)[0],
                                                backend=BACKEND)
        np.testing.assert_array_equal(result.cpu().numpy(), expected)


def test_prepared_b_rejects_its_parameters_twice(torch_device):
    b = torch.zeros(8, 4, dtype=torch.int8, device=torch_device)
    prepared = dmlops.prepare_b(b, 0.5, backend=BACKEND)
    a = torch.ones(2, 8, dtype=torch.int8, device=torch_device)
    with pytest.raises(dmlops.ValidationError, match="b_scale_tensor.*prepared"):
        dmlops.quantized_linear_matmul(a, 0.5, None, prepared, 0.5, None, 1.0, None, backend=BACKEND)
    with pytest.raises(dmlops.ValidationError, match="b_scale_tensor.*expected 1 or 4"):
        dmlops.prepare_b(b, [0.5, 0.5], backend=BACKEND)


# -- on the GPU only -------------------------------------------------------------------------------------------


@gpu_only
def test_no_call_waits_for_the_gpu():
    """Every CUDA entry point under torch.cuda.set_sync_debug_mode("error"): the array API (new and kept plans,
    numbers, tensors, prepared B with few rows and many, out given, in place, one tensor for two parameters and then
    two) and the operator API."""
    rng = np.random.default_rng(3)
    x = torch.randn(64, 1000, device="cuda")
    arrays, _ = qmm_case(rng, 16, 256, 64)
    a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero = as_tensors(arrays, "cuda")
    prepared = dmlops.prepare_b(b, b_scale, b_zero)
    rows = as_tensors(qmm_case(rng, 40, 256, 64)[0], "cuda")[0]  # the tile kernel's (the split-K kernel's: a)
    scale, zero = torch.tensor(0.02, device="cuda"), torch.tensor(3, dtype=torch.uint8, device="cuda")
    other_scale, other_zero = torch.tensor(2.0, device="cuda"), torch.tensor(7, dtype=torch.uint8, device="cuda")
    operator = dmlops.Device("cuda").compile_operator(dmlops.CumulativeSummationOperatorDesc(
        dmlops.TensorDesc(dmlops.DataType.FLOAT32, [64, 1000]), dmlops.TensorDesc(dmlops.DataType.FLOAT32, [64, 1000]),
        axis=1))
    out = torch.empty(64 * 1000 * 4, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            dmlops.cumulative_sum(x, 1)
            dmlops.cumulative_product(x, 0, reverse=True, exclusive=True)
            dmlops.cumulative_sum(x, -1, out=x)
            dmlops.quantized_linear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero)
            dmlops.quantized_linear_matmul(a, 0.02, 3, b, 0.5, None, 2.0, 7, output_dtype=torch.uint8)
            dmlops.quantized_linear_matmul(a, a_scale, a_zero, prepared, None, None, out_scale, out_zero)
            dmlops.quantized_linear_matmul(rows, scale, zero, prepared, None, None, scale, zero)
            dmlops.quantized_linear_matmul(rows, scale, zero, prepared, None, None, other_scale, other_zero)
            operator.execute([x.reshape(-1).view(torch.uint8)], [out])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    dmlops.check_errors()


@gpu_only
def test_calls_captured_in_a_cuda_graph():
    """Kept and new plans captured in a graph, replayed on new values."""
    rng = np.random.default_rng(4)
    x = torch.randn(32, 3000, device="cuda")
    arrays, _ = qmm_case(rng, 8, 512, 128)
    a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero = as_tensors(arrays, "cuda")
    prepared = dmlops.prepare_b(b, b_scale, b_zero)

    def calls():
        return (dmlops.cumulative_sum(x, 1, reverse=True, exclusive=True),
                dmlops.quantized_linear_matmul(a, a_scale, a_zero, prepared, None, None, out_scale, out_zero))

    calls()  # kept plans exist before the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        calls()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scan, product = calls()
    for _ in range(3):
        x.copy_(torch.randn(32, 3000, device="cuda"))
        arrays, expected = qmm_case(rng, 8, 512, 128)
        a.copy_(torch.from_numpy(arrays[0]))
        a_zero.copy_(torch.from_numpy(arrays[2].reshape(-1)))
        a_scale.copy_(torch.from_numpy(arrays[1].reshape(-1)))
        graph.replay()
        assert_cumulative_matches(scan.cpu().numpy(), "sum", x.cpu().numpy(), 1, True, True)
        eager = dmlops.quantized_linear_matmul(a, a_scale, a_zero, prepared, None, None, out_scale, out_zero)
        torch.testing.assert_close(product, eager, rtol=0, atol=0)


def test_kept_launch_parameters_as_slots():
    """dmlops' launcher takes each kernel parameter as an 8-byte slot holding its value in the low bytes: pointers
    as addresses, integers in two's complement, floats as their bits; constants are not parameters; Triton's two
    scratch pointers come after them; a tensor descriptor is a TMA tensor map (encoded over an address kept in a
    slot past the parameters), its shape and its strides; other kinds of parameter keep Triton's launcher."""
    import struct

    from triton.tools.tensor_descriptor import TensorDescriptor

    from dmlops.backends.cuda.launch import TMA, _parameters

    x = torch.arange(4, dtype=torch.float32)
    kinds = ["*fp32", "constexpr", "i32", "i64", "fp32", "*i8"]
    parameters = _parameters(kinds, [x, 7, -3, 1 << 40, 1.5, None], None)
    assert parameters.slots == [x.data_ptr(), 0xFFFF_FFFF_FFFF_FFFD, 1 << 40, np.float32(1.5).view(np.uint32), 0,
                                0, 0]
    assert parameters.parameter_count == 7 and parameters.address_slots == {0: 0, 5: 4}
    assert _parameters(["*fp32", ("i32", "i32")], [x, (1, 2)], None) is None
    assert _parameters(["tensordesc<i8[64, 64]>"], [x], None) is None
    rows = torch.zeros(100, 256, dtype=torch.int8)
    descriptor = TensorDescriptor.from_tensor(rows, [64, 128])
    meta = {"swizzle": 3, "elem_size": 1, "elem_type": 0, "block_size": [64, 128], "fp4_padded": False}
    parameters = _parameters(["*fp32", "tensordesc<i8[64, 128]>", "i32"], [x, descriptor, 5], [meta])
    assert parameters.slots == [x.data_ptr(), 0, 100, 256, 256, 1, 5, 0, 0, rows.data_ptr()]
    assert parameters.parameter_count == 9 and parameters.address_slots == {0: 0, 1: 9}
    (record,) = parameters.tensor_maps
    assert TMA.unpack(record) == (1, 9, 0, 2, 3, 0, 256, 100, 0, 0, 0, 256, 0, 0, 0, 128, 64, 0, 0, 0, 0)
    assert len(record) == TMA.size == 120 and struct.calcsize("<6I5Q4Q6I") == 120


@gpu_only
def test_repeated_scans_launch_through_dmlops_launcher(monkeypatch):
    """A kept scan's launch takes dmlops' launcher where it can be built (the device has Triton's compiler), and
    gives the scan's values; with Triton versions whose internals dmlops does not know, it is never used."""
    from dmlops.backends.cuda import launch

    if not launch.PRIVATE:
        pytest.skip(f"Triton {triton.__version__}: kept launches go through Triton's public launch")
    module = launch._launcher_module()
    assert module is not None
    launched = []
    launch_bytes = module.launch
    monkeypatch.setattr(module, "launch", lambda *args: launched.append(1) or launch_bytes(*args))
    rng = np.random.default_rng(2)
    for _ in range(3):
        values = rng.standard_normal((16, 1001)).astype(np.float32)  # a layout no other test plans
        x = torch.from_numpy(values).cuda()
        result = dmlops.cumulative_sum(x, 1)
        assert_cumulative_matches(result.cpu().numpy(), "sum", values, 1, False, False)
    assert len(launched) == 2  # the calls after the first


@gpu_only
def test_replays_through_the_gluon_kernel_read_each_call_s_a():
    """A layout that takes the Gluon kernel (long K, many tiles, int8 A read in place) replays with each call's own
    A: a replayed call equals the same values run afresh (another layout of A, planned anew)."""
    from dmlops.backends.cuda import qmatmul

    if not qmatmul._wgmma_in_flight(torch.device("cuda")):
        pytest.skip("the Gluon kernel needs sm_90")
    m, k, n = 4096, 4160, 4096
    assert qmatmul.choose_config(1, m, n, k, torch.cuda.get_device_properties(0).multi_processor_count, True).gluon
    generator = torch.Generator(device="cuda").manual_seed(4)
    b = dmlops.prepare_b(torch.randint(-128, 128, (k, n), dtype=torch.int8, device="cuda", generator=generator),
                         torch.rand(n, device="cuda", generator=generator) * 0.01 + 0.001, None)

    def product(a):
        return dmlops.quantized_linear_matmul(a, 0.02, 3, b, None, None, 40.0, 128, output_dtype=torch.uint8)

    for _ in range(3):
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=generator)
        padded = torch.empty((m, k + 64), dtype=torch.int8, device="cuda")[:, :k]
        padded.copy_(a)
        assert torch.equal(product(a), product(padded))


@gpu_only
@pytest.mark.parametrize("m", [1, 16, 128])
@pytest.mark.parametrize("prepared", [False, True])
def test_torch_compile_reduce_overhead_replays_the_quantized_matmul(m, prepared):
    """torch.compile's CUDA graph trees run a warm-up call and then replay a captured graph; nothing that dmlops keeps
    across calls may live in the graph's memory pool. Each replay gives the reference's bits for its own A."""
    import dmlops.torch  # noqa: F401  (registers torch.ops.dmlops)

    rng = np.random.default_rng(m)
    k, n = 256, 192
    arrays, _ = qmm_case(rng, m, k, n)
    a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero = as_tensors(arrays, "cuda")
    weights = dmlops.prepare_b(b, b_scale, b_zero) if prepared else None

    def layer(a):
        if prepared:
            return dmlops.quantized_linear_matmul(a, a_scale, a_zero, weights, None, None, out_scale, out_zero)
        return torch.ops.dmlops.quantized_linear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, out_scale,
                                                        out_zero)

    compiled = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):
        a_values = random_data(rng, np.uint8, (m, k))
        result = compiled(torch.from_numpy(a_values).cuda()).cpu().numpy()
        expected = reference.quantized_matmul(a_values, arrays[1], arrays[2], arrays[3], arrays[4], arrays[5],
                                              arrays[6], arrays[7], np.uint8)
        np.testing.assert_array_equal(result, expected)


@gpu_only
@pytest.mark.parametrize("length", [1000, 70000])
def test_torch_compile_reduce_overhead_replays_scans(length):
    """A short and a long line (whose scan keeps look-back scratch words) under CUDA graph trees."""
    import dmlops.torch  # noqa: F401

    compiled = torch.compile(lambda x: torch.ops.dmlops.cumulative_sum(x, 1, True, True), mode="reduce-overhead",
                             fullgraph=True)
    rng = np.random.default_rng(length)
    for _ in range(4):
        values = rng.standard_normal((4, length)).astype(np.float32)
        result = compiled(torch.from_numpy(values).cuda()).cpu().numpy()
        assert_cumulative_matches(result, "sum", values, 1, True, True)


@gpu_only
def test_first_calls_of_new_layouts_wait_for_nothing():
    """No CUDA call waits for the GPU, first calls of a new layout included (the inputs are made before the check is
    turned on: a copy from the host synchronises)."""
    rng = np.random.default_rng(9)
    arrays, expected = qmm_case(rng, 3, 96, 40)
    tensors = as_tensors(arrays, "cuda")
    x = torch.from_numpy(rng.standard_normal((5, 333)).astype(np.float32)).cuda()
    plain_b = tensors[3].clone()
    torch.cuda.synchronize()
    dmlops.core.plans.forget()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):
            scanned = dmlops.cumulative_product(x, 1, reverse=True)
            result = dmlops.quantized_linear_matmul(*tensors[:3], plain_b, *tensors[4:])
            weights = dmlops.prepare_b(plain_b, tensors[4], tensors[5])
            prepared = dmlops.quantized_linear_matmul(*tensors[:3], weights, None, None, *tensors[6:])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    np.testing.assert_array_equal(result.cpu().numpy(), expected)
    np.testing.assert_array_equal(prepared.cpu().numpy(), expected)
    assert_cumulative_matches(scanned.cpu().numpy(), "product", x.cpu().numpy(), 1, True, False)


@gpu_only
def test_public_launches_give_the_same_bits(monkeypatch):
    """With Triton's public launch (where the private internals' versions are unknown) kept launches and replays
    give the same values."""
    from dmlops.backends.cuda import launch

    monkeypatch.setattr(launch, "PRIVATE", False)
    dmlops.core.plans.forget()
    rng = np.random.default_rng(10)
    for m in (1, 40):
        arrays, expected = qmm_case(rng, m, 128, 72)
        tensors = as_tensors(arrays, "cuda")
        weights = dmlops.prepare_b(tensors[3], tensors[4], tensors[5])
        for _ in range(3):
            np.testing.assert_array_equal(dmlops.quantized_linear_matmul(*tensors).cpu().numpy(), expected)
            np.testing.assert_array_equal(dmlops.quantized_linear_matmul(*tensors[:3], weights, None, None,
                                                                         *tensors[6:]).cpu().numpy(), expected)
    x_values = rng.standard_normal((3, 5000)).astype(np.float32)
    for _ in range(3):
        result = dmlops.cumulative_sum(torch.from_numpy(x_values).cuda(), 1, exclusive=True)
        assert_cumulative_matches(result.cpu().numpy(), "sum", x_values, 1, False, True)
    dmlops.core.plans.forget()


def test_every_kernel_hashes():
    """Triton hashes a kernel with everything it calls before compiling it, and refuses plain Python functions
    among them. Gluon kernels never run under the interpreter (nor does the hash there): hash every kernel in a
    process that compiles."""
    import os
    import subprocess
    import sys

    script = """if True:
        import importlib
        from triton.runtime.jit import JITCallable
        hashed = 0
        for name in ["scan", "qmatmul", "qmatmul_hopper", "qmatmul_tiles", "recurrence"]:
            for value in vars(importlib.import_module("dmlops.backends.cuda." + name)).values():
                if isinstance(value, JITCallable):
                    hashed += bool(value.cache_key)
        print(hashed)
    """
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) > 50
