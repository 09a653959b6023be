"""DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY on the CUDA backend (Triton kernels), bit for bit against the CPU
backend on the same inputs: every type combination, scale form, zero-point presence, batch broadcasting, strided
and in-place operands, ties and saturation, and K long enough to overflow int32.

Without a GPU the kernels run under Triton's interpreter on small shapes; DMLOPS_TEST_GPU=1 runs the same tests on
the GPU with the real compiler, plus the large shapes at the end of this file. The Gluon kernel for Hopper
(qmatmul_hopper) does not run under the interpreter: its tests need a GPU of compute capability 9.0.
"""

import gc
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("triton")  # the CUDA backend's kernels

import dmlops  # noqa: E402
from dmlops import (DataType, Device, QuantizedLinearMatrixMultiplyOperatorDesc, TensorDesc, TensorFlags,  # noqa: E402
                    ValidationError)
from dmlops.backends.cuda import qmatmul  # noqa: E402
from dmlops.ops.quantized_matmul import NAME as QMM  # noqa: E402
from dmlops.ops.quantized_matmul import requantize  # noqa: E402

import reference  # noqa: E402
from checks import rejects  # noqa: E402
from conftest import ON_GPU, examples  # noqa: E402
from test_quantized_matmul import random_data  # noqa: E402
from strategies import random_scales  # noqa: E402

TYPES = [np.int8, np.uint8]
OUTPUT_TYPES = {np.int8: DataType.INT8, np.uint8: DataType.UINT8}
MAX_SIZE = 300 if ON_GPU else 40


def on_device(array, device, layout=None):
    """A torch tensor with array's values on ``device``: contiguous, or laid out as ``layout`` says — "transposed"
    (the last two dimensions swapped in memory), "padded" (rows longer than their data) or "offset" (an odd byte
    offset, which the kernel's tensor memory accelerator cannot read in place)."""
    tensor = torch.from_numpy(np.ascontiguousarray(array)).to(device)
    if layout == "transposed":
        return tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "padded":
        padded = torch.zeros(tensor.shape[:-1] + (tensor.shape[-1] + 13,), dtype=tensor.dtype, device=device)
        padded[..., :tensor.shape[-1]] = tensor
        return padded[..., :tensor.shape[-1]]
    if layout == "offset":
        flat = torch.zeros(tensor.numel() + 1, dtype=tensor.dtype, device=device)
        flat[1:] = tensor.reshape(-1)
        return flat[1:].view(tensor.shape)
    return tensor


def poisoned_out(rng, shape, dtype, device):
    """An output view inside a larger buffer of random bytes, its rows padded: (view, whole buffer)."""
    buffer = torch.from_numpy(rng.integers(0, 256, shape[:-1] + (shape[-1] + 5,), dtype=np.uint8)).to(device)
    return buffer.view(torch.int8 if dtype == np.int8 else torch.uint8)[..., :shape[-1]], buffer


def run_both(args, output_type, device, *, layouts=(None, None), rng):
    """The CUDA backend's result (written into a poisoned strided view) and the CPU backend's, as NumPy arrays;
    checks that no byte around the output view changed."""
    expected = dmlops.quantized_linear_matmul(*args, output_dtype=output_type)
    torch_args = [None if x is None else on_device(x, device) for x in args]
    torch_args[0] = on_device(args[0], device, layouts[0])
    torch_args[3] = on_device(args[3], device, layouts[1])
    out, buffer = poisoned_out(rng, expected.shape, output_type, device)
    before = buffer.clone()
    result = dmlops.quantized_linear_matmul(*torch_args, out=out, backend="cuda")
    assert result is out
    outside = torch.ones_like(buffer, dtype=torch.bool)
    outside[..., :expected.shape[-1]] = False
    assert torch.equal(buffer[outside], before[outside]), "bytes outside the output were written"
    return out.cpu().numpy(), expected


@st.composite
def cases(draw, rows=st.integers(1, MAX_SIZE)):
    m, n, k = draw(rows), draw(st.integers(1, MAX_SIZE)), draw(st.integers(1, MAX_SIZE))
    a_batch = tuple(draw(st.integers(1, 2)) for _ in range(draw(st.integers(0, 2))))
    b_batch = tuple(size if draw(st.booleans()) else 1 for size in a_batch)  # broadcast some batch dimensions
    a_type, b_type, out_type = (draw(st.sampled_from(TYPES)) for _ in range(3))
    row_scales = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())  # a per row, b per column, out per row
    zero_points = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    layouts = (draw(st.sampled_from([None, "padded", "offset"])),
               draw(st.sampled_from([None, "transposed", "padded", "offset"])))
    return (m, n, k, a_batch, b_batch, a_type, b_type, out_type, row_scales, zero_points, layouts,
            draw(st.integers(0, 2**32 - 1)))


def exact(args, output_type):
    """tests/reference.py's result for the array API's arguments (per-row vectors become {M, 1})."""
    a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero = args

    def per_row(x):
        return None if x is None else np.reshape(x, (-1, 1))
    return reference.quantized_matmul(a, per_row(a_scale), per_row(a_zero), b, b_scale, b_zero, per_row(out_scale),
                                      per_row(out_zero), output_type)


def check_case(case, device):
    """One drawn case: the CUDA backend's result equals the CPU backend's."""
    m, n, k, a_batch, b_batch, a_type, b_type, out_type, row_scales, zero_points, layouts, seed = case
    rng = np.random.default_rng(seed)
    a, b = random_data(rng, a_type, a_batch + (m, k)), random_data(rng, b_type, b_batch + (k, n))
    a_scale, b_scale, out_scale = random_scales(rng, k, *(count if per else 1 for count, per in
                                                          zip((m, n, m), row_scales)))
    a_zero, b_zero, out_zero = (random_data(rng, dtype, count) if present else None for dtype, count, present in
                                zip((a_type, b_type, out_type), (m, n, 1), zero_points))
    args = (a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero)
    got, expected = run_both(args, out_type, device, layouts=layouts, rng=rng)
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=examples(40 if ON_GPU else 30), deadline=None)
@given(case=cases())
def test_matches_cpu_backend(case, torch_device):
    check_case(case, torch_device)


def on_hopper():
    return ON_GPU and torch.cuda.get_device_capability() == (9, 0)


hopper_only = pytest.mark.skipif(not on_hopper(), reason="the Gluon kernel needs a compiled run on sm_90")


@hopper_only
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_wgmma_kernel_matches_cpu_backend(case, monkeypatch):
    """The same cases through the Gluon kernel, whatever their shape."""
    monkeypatch.setattr(qmatmul, "choose_config", lambda *args: qmatmul.WGMMA_LARGE)
    check_case(case, "cuda")


@hopper_only
@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases(), programs=st.integers(1, 3))
def test_wgmma_programs_walk_many_tiles(case, programs, monkeypatch):
    """The Gluon kernel's programs each walking several tiles (as many SMs as ``programs``): a tile's loads are
    issued during the one before it, and its column terms replace that tile's in shared memory."""
    monkeypatch.setattr(qmatmul, "choose_config", lambda *args: qmatmul.WGMMA_LARGE)
    monkeypatch.setattr(qmatmul, "_sm_count", lambda device: programs)
    check_case(case, "cuda")


def test_long_k_takes_the_gluon_kernel_where_its_tiles_fill_the_waves():
    # 256 tiles of 128 × 256 on 132 SMs: two waves, the second 0.94 full; 128 tiles: one wave, 0.97 full; 64
    # tiles: half a wave.
    assert qmatmul.choose_config(1, 2048, 4096, 8192, 132, wgmma_in_flight=True) is qmatmul.WGMMA_LARGE
    assert qmatmul.choose_config(1, 1024, 8192, 21760, 132, wgmma_in_flight=True) is qmatmul.WGMMA_LARGE
    assert qmatmul.choose_config(1, 1024, 4096, 11008, 132, wgmma_in_flight=True) is qmatmul.WGMMA_LARGE
    assert not qmatmul.choose_config(1, 512, 4096, 11008, 132, wgmma_in_flight=True).gluon
    assert qmatmul.choose_config(1, 2048, 4096, 8192, 132) is qmatmul.MEDIUM  # no Gluon: LARGE takes two waves
    assert qmatmul.choose_config(1, 8192, 8192, 8192, 132) is qmatmul.LARGE
    assert qmatmul.choose_config(1, 4096, 4096, 4096, 132, wgmma_in_flight=True) is qmatmul.PAIRED


CONFIGS = {"large": qmatmul.LARGE, "medium": qmatmul.MEDIUM, "paired": qmatmul.PAIRED, "long_k": qmatmul.LONG_K,
           **{f"narrow_{config.block_n}": config for config in qmatmul.NARROW}, "wgmma_large": qmatmul.WGMMA_LARGE,
           "wgmma_wide": qmatmul.Config(128, 256, 128, num_warps=8, num_stages=4, epilogue_n=64, gluon=True)}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_every_config(config, torch_device, monkeypatch):
    """Each tile configuration (the shape classes pick among them) on the same kernel code, called directly;
    persistent ones as on a GPU of one SM, so that each program walks several tiles, across both batches."""
    if config.gluon and not on_hopper():
        pytest.skip("the Gluon kernel needs a compiled run on sm_90")
    if config.programs_per_sm:
        monkeypatch.setattr(qmatmul, "_sm_count", lambda device: 1)
    rng = np.random.default_rng(7)
    batches, m, n, k = 2, 150, 300, 270
    a, b = random_data(rng, np.uint8, (batches, 1, m, k)), random_data(rng, np.int8, (1, 1, k, n))
    a_scale, b_scale, out_scale = random_scales(rng, k, m, n, 1)
    a_zero, b_zero, out_zero = random_data(rng, np.uint8, m), random_data(rng, np.int8, n), np.int8([5])
    expected = dmlops.quantized_linear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero,
                                              output_dtype=np.int8)
    tensors = [torch.from_numpy(x).to(torch_device) for x in (a, a_scale, a_zero, b, b_scale, b_zero, out_scale)]
    tensors[3] = tensors[3].expand(batches, 1, k, n)  # broadcast batch: stride 0
    tensors[6] = tensors[6].expand(m)  # per tensor: a vector of M with stride 0
    out_zero = torch.from_numpy(out_zero).to(torch_device).expand(m)
    out, _ = poisoned_out(rng, (batches, 1, m, n), np.int8, torch_device)
    qmatmul.quantized_linear_matmul(*tensors, out_zero, out, config=config)
    np.testing.assert_array_equal(out.cpu().numpy(), expected)


@pytest.mark.parametrize("out_type", TYPES)
def test_ties_round_half_to_even(out_type, torch_device):
    """acc·0.5 lands on every half integer of the output range: each must round to the even neighbour."""
    rng = np.random.default_rng(1)
    m, n, k = 16, 24, 3
    a = random_data(rng, np.int8, (m, k)) // 4
    b = random_data(rng, np.int8, (k, n)) // 4
    a_scale, b_scale, out_scale = np.float32(0.5), np.float32(1.0), np.float32(1.0)
    out_zero = np.array([100 if out_type == np.uint8 else 3], dtype=out_type)
    args = (a, a_scale, None, b, b_scale, None, out_scale, out_zero)
    got, expected = run_both(args, out_type, torch_device, rng=rng)
    acc = a.astype(np.int64) @ b.astype(np.int64)
    assert (acc % 2 == 1).sum() > m * n // 4, "too few ties to test"
    low, high = (0, 255) if out_type == np.uint8 else (-128, 127)
    np.testing.assert_array_equal(got, np.clip(np.rint(acc * 0.5) + out_zero.astype(np.int64), low, high))
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("multiplier", [1e30, 1e-30, -1.5e-3, 3.0])
def test_saturation_and_extreme_multipliers(multiplier, torch_device):
    """Huge multipliers saturate, tiny ones leave the zero point, negative scales flip the sign."""
    rng = np.random.default_rng(2)
    a, b = random_data(rng, np.uint8, (20, 50)), random_data(rng, np.int8, (50, 30))
    a_scale = np.float32(np.sqrt(abs(multiplier)))
    b_scale = np.float32(np.copysign(np.sqrt(abs(multiplier)), multiplier))
    args = (a, a_scale, np.uint8(131), b, b_scale, np.int8(-7), np.float32(1.0), np.uint8(77))
    got, expected = run_both(args, np.uint8, torch_device, rng=rng)
    np.testing.assert_array_equal(got, expected)


def test_k_beyond_int32_accumulation(torch_device, monkeypatch):
    """K·128·128 > 2^31: the kernel adds int32 partial products of K_SLICE-long slices of K in float64. Under the
    interpreter the same slicing runs with a short K_SLICE (the real K takes minutes there); on the GPU one int32
    sum over all of K would overflow. test_large_shapes adds zero points."""
    if not ON_GPU:
        monkeypatch.setattr(qmatmul, "K_SLICE", 512)
    rng = np.random.default_rng(3)
    k = 2 * qmatmul.K_SLICE + 12345 if ON_GPU else 3 * qmatmul.K_SLICE + 77
    # Values near −128 make every product about +16000.
    a = rng.integers(-128, -124, (3, k), dtype=np.int8)
    b = rng.integers(-128, -124, (k, 2), dtype=np.int8)
    assert not ON_GPU or (a.astype(np.int64) @ b.astype(np.int64)).min() > 2**31
    args = (a, np.float32(1e-7), None, b, np.float32(1e-2), None, np.float32(0.5), np.int8(-100))
    got, expected = run_both(args, np.int8, torch_device, layouts=(None, "transposed"), rng=rng)
    np.testing.assert_array_equal(got, expected)


def test_owned_by_dml_b_is_packed_once(torch_device):
    """An OWNED_BY_DML B is repacked at initialize; its buffer may change afterwards; the packing leaves with the
    operator."""
    rng = np.random.default_rng(4)
    m, n, k = 9, 33, 70
    column = TensorDesc(DataType.FLOAT32, (1, n))
    scalar, zero = TensorDesc(DataType.FLOAT32, (1, 1)), TensorDesc(DataType.UINT8, (1, 1))
    desc = QuantizedLinearMatrixMultiplyOperatorDesc(
        TensorDesc(DataType.UINT8, (m, k)), scalar, zero,
        TensorDesc(DataType.INT8, (k, n), flags=TensorFlags.OWNED_BY_DML), column, None, scalar, zero,
        TensorDesc(DataType.UINT8, (m, n)))
    a_scale, b_scale, out_scale = random_scales(rng, k, 1, n, 1)
    b = random_data(rng, np.int8, (k, n))

    def buffer(values):
        """The bytes of ``values``, padded to a multiple of 4 as DirectML buffers are."""
        data = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
        return np.concatenate([data, np.zeros(-len(data) % 4, np.uint8)])

    def bindings(a, b):
        return [a, buffer(a_scale), buffer(np.uint8([140])), b, buffer(b_scale), None, buffer(out_scale),
                buffer(np.uint8([120]))]

    ops = {name: Device(name).compile_operator(desc) for name in ("cpu", "cuda")}
    on = {"cpu": lambda x: x, "cuda": lambda x: None if x is None else torch.from_numpy(x).to(torch_device)}
    b_buffers = {name: on[name](buffer(b)) for name in ops}
    for name in ops:
        ops[name].initialize([b_buffers[name] if i == 3 else None for i in range(8)])
    packing = weakref.ref(ops["cuda"]._persistent["b_tensor"].operand.rows)
    b_buffers["cuda"].fill_(0)
    for _ in range(2):
        a = buffer(random_data(rng, np.uint8, (m, k)))
        outs = {"cpu": buffer(np.zeros((m, n), np.uint8)),
                "cuda": torch.from_numpy(rng.integers(0, 256, len(buffer(np.zeros((m, n), np.uint8))),
                                                      dtype=np.uint8)).to(torch_device)}
        for name in ops:
            ops[name].execute([on[name](x) for x in bindings(a, None)], [outs[name]])
        np.testing.assert_array_equal(outs["cuda"].cpu().numpy()[:m * n], outs["cpu"][:m * n])
    del ops
    gc.collect()
    assert packing() is None


def test_k_major_b_is_read_in_place(torch_device, monkeypatch):
    """B already int8 with stride 1 on K needs no repacking; row-major B and uint8 B are repacked."""
    packs = []
    real = qmatmul._prepare_kernel

    class Spy:
        params = getattr(real, "params", None)  # what a kept launch reads of a compiled kernel

        def __getitem__(self, grid):
            def launch(*args, PACK, **kwargs):
                packs.append(PACK)
                return real[grid](*args, PACK=PACK, **kwargs)
            return launch

    monkeypatch.setattr(qmatmul, "_prepare_kernel", Spy())
    rng = np.random.default_rng(5)
    a = random_data(rng, np.int8, (8, 64))
    for b_type, layout, repacked in ((np.int8, "transposed", False), (np.int8, None, True),
                                     (np.uint8, "transposed", True)):
        packs.clear()
        b = random_data(rng, b_type, (64, 24))
        args = (a, np.float32(0.01), None, b, np.float32(0.02), None, np.float32(0.5), None)
        got, expected = run_both(args, np.int8, torch_device, layouts=(None, layout), rng=rng)
        np.testing.assert_array_equal(got, expected)
        assert any(packs) == repacked, (b_type, layout, packs)


def test_rejections(torch_device):
    rng = np.random.default_rng(6)
    a = on_device(random_data(rng, np.int8, (4, 8)), torch_device)
    b = on_device(random_data(rng, np.int8, (8, 4)), torch_device)
    with pytest.raises(ValidationError, match="a_tensor"):
        dmlops.quantized_linear_matmul(a.to(torch.int16), 0.1, None, b, 0.1, None, 1.0, None, backend="cuda")


@pytest.mark.parametrize("m", [300, 3])  # the tile kernel; the split-K kernel, K split among its programs
def test_bad_scales_are_reported_by_check_errors(m, torch_device, monkeypatch):
    """A zero, NaN or infinite scale is found on the device, without waiting for it, and reported by the next
    check_errors, naming each bad field once; a vector's bad value is found wherever it lies."""
    monkeypatch.setattr(qmatmul, "FEW_ROWS", SPLIT_SMALL)
    rng = np.random.default_rng(7)
    k, n = 96, 260
    a = on_device(random_data(rng, np.int8, (m, k)), torch_device)
    b = on_device(random_data(rng, np.int8, (k, n)), torch_device)
    dmlops.check_errors()
    row_scales = torch.full((m,), 0.5, device=torch_device)
    row_scales[m - 3] = float("inf")
    column_scales = torch.full((n,), 0.5, device=torch_device)
    column_scales[n - 1] = float("nan")
    for a_scale, b_scale, out_scale, fields in [
            (0.1, 0.1, 0.0, ["output_scale_tensor"]), (0.1, column_scales, 1.0, ["b_scale_tensor"]),
            (row_scales, 0.1, -0.0, ["a_scale_tensor", "output_scale_tensor"])]:
        dmlops.quantized_linear_matmul(a, a_scale, None, b, b_scale, None, out_scale, None, backend="cuda")
        rejects([QMM, "finite and non-zero", *fields], dmlops.check_errors)
        dmlops.check_errors()  # cleared
    dmlops.quantized_linear_matmul(a, 0.1, None, b, 0.1, None, 1.0, None, backend="cuda")
    dmlops.check_errors()


# -- few rows: K split among programs --------------------------------------------------------------------------

FEW_ROWS = [1, 2, 5, 16]
# Blocks small enough, and programs per SM many enough, that K splits into ranges of one BLOCK_K step each, and
# N into several column blocks: the partials meet through the atomic additions and the ticket.
SPLIT_SMALL = qmatmul.Config(16, 16, 32, num_warps=4, num_stages=2, split_k=64)


def test_few_rows_choose_the_split_k_kernel():
    for m in FEW_ROWS:
        assert qmatmul.choose_config(1, m, 4096, 4096, 132) is qmatmul.FEW_ROWS
        assert qmatmul.choose_config(64, m, 11008, 4096, 132, wgmma_in_flight=True) is qmatmul.FEW_ROWS
        assert qmatmul.choose_config(1, m, 4096, qmatmul.K_SLICE + 1, 132) is qmatmul.LONG_K  # int32 would overflow
    assert not qmatmul.choose_config(1, 17, 4096, 4096, 132).split_k


@settings(max_examples=examples(40 if ON_GPU else 15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases(rows=st.sampled_from(FEW_ROWS)))
def test_split_k_matches_cpu_backend(case, torch_device, monkeypatch):
    """The drawn cases (layouts, batches, parameter forms) with few rows, K split into one-step ranges."""
    monkeypatch.setattr(qmatmul, "FEW_ROWS", SPLIT_SMALL)
    check_case(case, torch_device)


# Every combination of types, each with parameters per row and column and with parameters per tensor and zero points
# absent, the row counts taking turns.
TYPE_CASES = [(a, b, out, zero_points, FEW_ROWS[i % len(FEW_ROWS)]) for i, (a, b, out) in
              enumerate((a, b, out) for a in TYPES for b in TYPES for out in TYPES) for zero_points in (True, False)]


@pytest.mark.parametrize("a_type, b_type, out_type, zero_points, m", TYPE_CASES, ids=[
    f"{np.dtype(a).name}-{np.dtype(b).name}-{np.dtype(out).name}-{'zero_points' if zero else 'none'}-m{m}"
    for a, b, out, zero, m in TYPE_CASES])
def test_split_k_every_type_and_parameter_form(a_type, b_type, out_type, zero_points, m, torch_device, monkeypatch):
    """Against the exact reference, the output poisoned; N and K not multiples of the blocks."""
    monkeypatch.setattr(qmatmul, "FEW_ROWS", SPLIT_SMALL)
    rng = np.random.default_rng([m, np.dtype(a_type).num, np.dtype(b_type).num, np.dtype(out_type).num, zero_points])
    n, k = 21, 70
    a, b = random_data(rng, a_type, (m, k)), random_data(rng, b_type, (k, n))
    scales = random_scales(rng, k, *((m, n, m) if zero_points else (1, 1, 1)))
    zeros = [random_data(rng, dtype, count) if zero_points else None
             for dtype, count in zip((a_type, b_type, out_type), (m, n, m))]
    args = (a, scales[0], zeros[0], b, scales[1], zeros[1], scales[2], zeros[2])
    got, expected = run_both(args, out_type, torch_device, rng=rng)
    np.testing.assert_array_equal(got, exact(args, out_type))
    np.testing.assert_array_equal(got, expected)


def test_split_k_workspace_is_left_clean(torch_device, monkeypatch):
    """Calls in a row share the workspace: each must find it zero, so each must leave it zero, whatever the shape
    and tile size of the call before; batches, and more rows than a tile holds (as the benchmark's candidates may
    run), included."""
    monkeypatch.setattr(qmatmul, "_SPLIT_K_WORKSPACES", {})
    rng = np.random.default_rng(8)
    for config, batch, (m, n, k) in [
            (SPLIT_SMALL, (2,), (5, 40, 130)), (SPLIT_SMALL, (2,), (5, 40, 130)), (SPLIT_SMALL, (), (20, 20, 70)),
            (qmatmul.Config(16, 32, 64, num_warps=4, num_stages=2, split_k=64), (1, 2), (3, 70, 200))]:
        monkeypatch.setattr(qmatmul, "FEW_ROWS", config)
        a, b = random_data(rng, np.uint8, batch + (m, k)), random_data(rng, np.uint8, (k, n))
        args = (a, np.float32(0.02), np.uint8(3), b, np.float32(0.01), random_data(rng, np.uint8, n),
                np.float32(0.5 * np.sqrt(k)), np.uint8(128))
        got, _ = run_both(args, np.uint8, torch_device, rng=rng)
        np.testing.assert_array_equal(got, exact(args, np.uint8))
        (workspace,) = qmatmul._SPLIT_K_WORKSPACES.values()
        assert all(not kept.any() for kept in workspace), "the workspace was left dirty"


@pytest.mark.parametrize("m, k, b_type, b_zero, kernel", [
    (2, 90, np.uint8, True, "_split_k_kernel"),  # folds A's row sums into its partial sums: any zb'
    (33, 96, np.int8, False, "_qmatmul_kernel"),  # zb' = 0: no row sums of A; rows of 96 bytes: A read in place
])
def test_one_launch_with_b_persisted(m, k, b_type, b_zero, kernel, torch_device, monkeypatch):
    """With B packed once (OWNED_BY_DML), a call launches one kernel: A is read where it lies, and the column terms
    are computed in the kernel."""
    launches = []
    launch = qmatmul.launch

    def counted(kept, site, kernel, *arguments, **options):
        launches.append(kernel.fn.__name__)
        return launch(kept, site, kernel, *arguments, **options)

    monkeypatch.setattr(qmatmul, "launch", counted)
    monkeypatch.setattr(qmatmul, "FEW_ROWS", SPLIT_SMALL)
    rng = np.random.default_rng(9)
    n = 24
    a, b = random_data(rng, np.uint8, (m, k)), random_data(rng, b_type, (k, n))
    a_scale, b_scale, out_scale = random_scales(rng, k, m, n, m)
    args = (a, a_scale, random_data(rng, np.uint8, m), b, b_scale, random_data(rng, b_type, n) if b_zero else None,
            out_scale, None)
    tensors = [None if x is None else torch.from_numpy(x).to(torch_device) for x in args]
    tensors[0] = tensors[0][None, None]  # as the operator passes them: {1, 1, M, K}
    tensors[3] = qmatmul.persist_b(tensors[3][None, None])  # packed here, read by the call from the handle
    out, _ = poisoned_out(rng, (1, 1, m, n), np.int8, torch_device)
    launches.clear()
    qmatmul.quantized_linear_matmul(*tensors, out)
    assert launches == [kernel]
    np.testing.assert_array_equal(out.cpu().numpy()[0, 0], exact(args, np.int8))


@pytest.mark.parametrize("m", [3, 33])  # the split-K kernel, the tile kernel
def test_persisted_bs_of_one_layout_each_give_their_own_result(m, torch_device, monkeypatch, launcher_calls):
    """Two persisted Bs of one layout alternating through one prepared run (``prepare_quantized_linear_matmul``):
    after the first call, every call replays its launches (the launcher is not called again), each on the packing
    of the B it is given."""
    monkeypatch.setattr(qmatmul, "FEW_ROWS", SPLIT_SMALL)
    rng = np.random.default_rng(12)
    n, k = 24, 70
    bs = [random_data(rng, np.int8, (k, n)) for _ in range(2)]
    persisted = [qmatmul.persist_b(torch.from_numpy(b).to(torch_device)[None, None]) for b in bs]
    fields = QuantizedLinearMatrixMultiplyOperatorDesc.input_fields + ("output_tensor",)

    def call(run, which):
        """run on fresh A, scales and zero points with B number ``which``; checks the output."""
        a_scale, b_scale, out_scale = random_scales(rng, k, m, n, m)
        args = (random_data(rng, np.uint8, (m, k)), a_scale, random_data(rng, np.uint8, m), bs[which], b_scale,
                None, out_scale, random_data(rng, np.int8, m))
        views = dict(zip(fields, [None if x is None else torch.from_numpy(x).to(torch_device) for x in args]))
        views["a_tensor"] = views["a_tensor"][None, None]
        views["b_tensor"] = persisted[which]
        views["output_tensor"], _ = poisoned_out(rng, (1, 1, m, n), np.int8, torch_device)
        result = run(*views.values())
        np.testing.assert_array_equal(views["output_tensor"].cpu().numpy()[0, 0], exact(args, np.int8))
        return result

    run = call(lambda *arrays: qmatmul.prepare_quantized_linear_matmul(arrays, list), 0)
    for which in (1, 0, 1, 1):
        call(run, which)
    assert len(launcher_calls) == 1


def test_a_freed_persisted_b_frees_its_packing(torch_device):
    """Nothing but the ``PersistedB`` holds its packing: it goes when the handle goes."""
    rng = np.random.default_rng(13)
    m, n, k = 5, 24, 70
    a, b = random_data(rng, np.int8, (m, k)), random_data(rng, np.uint8, (k, n))
    a_scale, b_scale, out_scale = random_scales(rng, k, m, n, m)
    args = (a, a_scale, None, b, b_scale, random_data(rng, np.uint8, n), out_scale, None)
    tensors = [None if x is None else torch.from_numpy(x).to(torch_device) for x in args]
    tensors[0] = tensors[0][None, None]
    tensors[3] = qmatmul.persist_b(tensors[3][None, None])
    packing = [weakref.ref(tensors[3].operand.rows), weakref.ref(tensors[3].operand.sums)]
    out, _ = poisoned_out(rng, (1, 1, m, n), np.int8, torch_device)
    qmatmul.quantized_linear_matmul(*tensors, out)
    np.testing.assert_array_equal(out.cpu().numpy()[0, 0], exact(args, np.int8))
    del tensors
    gc.collect()
    assert [ref() for ref in packing] == [None, None]


def test_both_tile_kernels_take_the_same_parameters():
    """qmatmul's kernel and the Gluon one of qmatmul_hopper take one list of arguments (``_tile_arguments``): their
    parameters must be the same, in the same order (the Gluon kernel runs on Hopper only)."""
    import inspect

    from dmlops.backends.cuda import qmatmul_hopper

    def parameters(kernel):
        return [name for name, parameter in inspect.signature(kernel.fn).parameters.items()
                if "constexpr" not in str(parameter.annotation)]

    assert parameters(qmatmul_hopper._qmatmul_kernel) == parameters(qmatmul._qmatmul_kernel)


# -- on the GPU only: large shapes, long K, determinism, devices --------------------------------------------------

gpu_only = pytest.mark.skipif(not ON_GPU, reason="needs a GPU (DMLOPS_TEST_GPU=1)")


def exact_reference(a, a_zero, b, b_zero, scales, out_zero, output_type):
    """requantize() of the exact accumulator, computed as a float64 product on the GPU: exact, since every
    partial sum is an integer below 2^53."""
    shifted = [torch.from_numpy(x.astype(np.float64) - (0 if z is None else z.astype(np.float64))).cuda()
               for x, z in ((a, a_zero), (b, b_zero))]
    acc = (shifted[0] @ shifted[1]).cpu().numpy()
    zero = 0 if out_zero is None else out_zero.astype(np.float64)
    return requantize(acc, *scales, zero, OUTPUT_TYPES[output_type])


@gpu_only
@pytest.mark.parametrize("m, n, k, a_type, b_type", [
    (2048, 2048, 2048, np.uint8, np.int8), (1000, 3000, 777, np.int8, np.uint8), (16, 11008, 4096, np.uint8, np.int8),
    (300, 4096, 11008, np.int8, np.int8), (4096, 512, 65536, np.uint8, np.uint8), (64, 64, 300000, np.int8, np.int8),
    (1, 4096, 4096, np.uint8, np.uint8), (5, 300, 20000, np.int8, np.uint8), (4000, 4100, 8200, np.uint8, np.int8),
])
def test_large_shapes(m, n, k, a_type, b_type):
    """The shapes in the configuration the backend chooses: M ≤ 16 the split-K kernel, K split (40 ways for
    (5, 300, 20000) on 132 SMs); the last is the Gluon kernel's on sm_90."""
    rng = np.random.default_rng(m + n + k)
    a, b = random_data(rng, a_type, (m, k)), random_data(rng, b_type, (k, n))
    a_zero, b_zero = random_data(rng, a_type, (m, 1)), random_data(rng, b_type, (1, n))
    out_zero = random_data(rng, np.uint8, (1, 1))
    a_scale, b_scale, out_scale = random_scales(rng, k, (m, 1), (1, n), (1, 1))
    expected = exact_reference(a, a_zero, b, b_zero, (a_scale, b_scale, out_scale), out_zero, np.uint8)
    args = [torch.from_numpy(x).cuda() for x in (a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero)]
    first = dmlops.quantized_linear_matmul(*args)  # CUDA tensors choose the CUDA backend
    assert first.is_cuda
    np.testing.assert_array_equal(first.cpu().numpy(), expected)
    again = dmlops.quantized_linear_matmul(*args)
    assert torch.equal(first, again), "not deterministic"


@hopper_only
@pytest.mark.parametrize("m, n, k, a_type, b_type", [
    (2048, 2048, 2048, np.uint8, np.int8), (1000, 3000, 777, np.int8, np.uint8), (16, 11008, 4096, np.uint8, np.int8),
    (4096, 512, 65536, np.uint8, np.uint8),
])
def test_wgmma_kernel_large_shapes(m, n, k, a_type, b_type, monkeypatch):
    monkeypatch.setattr(qmatmul, "choose_config", lambda *args: qmatmul.WGMMA_LARGE)
    monkeypatch.setattr(dmlops.core.plans, "_plans", {})  # plans of these layouts ran other configurations
    test_large_shapes(m, n, k, a_type, b_type)


@gpu_only
def test_tensors_on_other_devices_are_rejected():
    a = torch.zeros((4, 8), dtype=torch.int8, device="cuda")
    b = torch.zeros((8, 4), dtype=torch.int8)
    with pytest.raises(ValidationError):
        qmatmul.quantized_linear_matmul(a[None, None], torch.ones(4, device="cuda"), None, b[None, None],
                                        torch.ones(4), None, torch.ones(4, device="cuda"), None,
                                        torch.empty((1, 1, 4, 4), dtype=torch.int8, device="cuda"))
